package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// docs/cli.md's generated parts are written between these markers: the
// summary of the commands,
//
//	<!-- commands: generated ... -->
//	...
//	<!-- end commands -->
//
// and one flag table per command (or per commands whose flags are the
// same, named together, "sbx policy allow, sbx policy block"):
//
//	<!-- flags: sbx run -->
//	...
//	<!-- end flags -->
//
// Everything else in the page is written by hand. TestCLIDocFlags compares
// them with the command tree; go test ./cmd/sbx -run TestCLIDocFlags
// -update rewrites them.
const (
	commandsBegin = "<!-- commands: generated from the command tree; go test ./cmd/sbx -run TestCLIDocFlags -update rewrites it -->"
	commandsEnd   = "<!-- end commands -->"
	flagsEnd      = "<!-- end flags -->"
)

// flagsBegin matches the line that opens a flag table, naming its
// commands.
var flagsBegin = regexp.MustCompile(`(?m)^<!-- flags: (sbx[a-z, -]*) -->$`)

// visibleCommands returns every command under root that --help shows (not
// hidden, not help itself), root's own included, depth first.
func visibleCommands(root *cobra.Command) []*cobra.Command {
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return cmds
}

// docFlags returns the flags of c that its --help lists as its own (not
// inherited from a parent, not hidden, not --help), sorted by name.
func docFlags(c *cobra.Command) []*pflag.Flag {
	var flags []*pflag.Flag
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			flags = append(flags, f)
		}
	})
	return flags
}

// machineText returns what the usage of c's flag f says about this
// machine, which the generated table leaves out ("" when nothing): the
// defaults of sbx run's limits are this machine's.
func machineText(c *cobra.Command, f *pflag.Flag) string {
	if c.CommandPath() != "sbx run" {
		return ""
	}
	def := sandbox.DefaultLimits()
	switch f.Name {
	case "memory":
		return ", " + formatBytes(def.Memory)
	case "cpus":
		return " (default " + f.DefValue + ")"
	}
	return ""
}

// flagRow renders c's flag f as a row of a flag table: its names with the
// placeholder of its value, and its usage with its default, as --help
// prints them.
func flagRow(c *cobra.Command, f *pflag.Flag) string {
	one := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	one.AddFlag(f)
	line := strings.TrimLeft(one.FlagUsagesWrapped(0), " ")
	names, usage, _ := strings.Cut(line, "  ")
	usage = strings.Join(strings.Fields(usage), " ")
	if m := machineText(c, f); m != "" {
		usage = strings.Replace(usage, m, "", 1)
	}
	cell := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;")
	return fmt.Sprintf("| `%s` | %s |\n", strings.ReplaceAll(names, "|", `\|`), cell.Replace(usage))
}

// renderFlags renders c's flag table.
func renderFlags(c *cobra.Command) string {
	flags := docFlags(c)
	if len(flags) == 0 {
		return "No flags but `-h, --help`.\n"
	}
	var b strings.Builder
	b.WriteString("| flag | meaning |\n|---|---|\n")
	for _, f := range flags {
		b.WriteString(flagRow(c, f))
	}
	return b.String()
}

// renderCommands renders the summary of sbx's commands: each command of
// the root that --help lists, with its short description.
func renderCommands(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| command | what it does |\n|---|---|\n")
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", c.CommandPath(), c.Short)
	}
	return b.String()
}

// docRoot returns the command tree as sbx runs it: with the completion
// command cobra adds when it executes.
func docRoot() *cobra.Command {
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	// The tests keep their sandboxes' logs apart (TestMain); the docs
	// give the default a user gets.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if f.DefValue == logRoot {
					f.DefValue = run.DefaultLogDir
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// findCommand returns the command of root whose path is path ("sbx policy
// allow"), or nil.
func findCommand(root *cobra.Command, path string) *cobra.Command {
	for _, c := range visibleCommands(root) {
		if c.CommandPath() == path {
			return c
		}
	}
	return nil
}

// TestCLIDocFlags: docs/cli.md's summary of commands and its flag tables
// are those the command tree renders (hidden commands and flags left out,
// as --help leaves them), every command with flags of its own has a
// table, and every table names commands that exist; -update rewrites the
// generated parts.
func TestCLIDocFlags(t *testing.T) {
	path := filepath.Join(moduleRoot(t), "docs", "cli.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	root := docRoot()
	// drift is where the doc and the tree differ (-update mends it),
	// problems what -update cannot mend.
	var drift, problems []string
	got, updated, err := generatedSection(doc, commandsBegin, commandsEnd, renderCommands(root))
	if err != nil {
		t.Fatalf("docs/cli.md: %v", err)
	}
	if want := renderCommands(root); got != want {
		drift = append(drift, fmt.Sprintf("the summary of commands differs from the command tree (-doc +sbx):\n%s", lineDiff(got, want)))
	}
	doc = updated

	documented := map[string]bool{}
	var out strings.Builder
	rest := doc
	for {
		loc := flagsBegin.FindStringSubmatchIndex(rest)
		if loc == nil {
			out.WriteString(rest)
			break
		}
		names := strings.Split(rest[loc[2]:loc[3]], ", ")
		out.WriteString(rest[:loc[1]+1])
		body, after, ok := strings.Cut(rest[loc[1]+1:], flagsEnd+"\n")
		if !ok {
			t.Fatalf("docs/cli.md: %q has no %q after it", rest[loc[0]:loc[1]], flagsEnd)
		}
		want, problem := renderSection(root, names)
		if problem != "" {
			problems = append(problems, problem)
			want = body
		} else if body != want {
			drift = append(drift, fmt.Sprintf("the flags of %s differ from the command's (-doc +sbx):\n%s", strings.Join(names, ", "), lineDiff(body, want)))
		}
		for _, n := range names {
			if documented[n] {
				problems = append(problems, fmt.Sprintf("%s has two flag tables", n))
			}
			documented[n] = true
		}
		out.WriteString(want + flagsEnd + "\n")
		rest = after
	}
	for _, c := range visibleCommands(root) {
		if len(docFlags(c)) > 0 && !documented[c.CommandPath()] && !strings.HasPrefix(c.CommandPath(), "sbx completion") {
			problems = append(problems, fmt.Sprintf("%s has flags and no flag table (<!-- flags: %s --> ... %s)", c.CommandPath(), c.CommandPath(), flagsEnd))
		}
	}
	if *update && out.String() != string(data) {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the generated parts of docs/cli.md")
		drift = nil
	}
	for _, p := range append(drift, problems...) {
		t.Errorf("docs/cli.md: %s (go test ./cmd/sbx -run TestCLIDocFlags -update rewrites the generated parts)", p)
	}
}

// renderSection renders the flag table of the commands names, or says why
// it cannot: a command that does not exist, or commands whose flags
// differ.
func renderSection(root *cobra.Command, names []string) (table, problem string) {
	for i, n := range names {
		c := findCommand(root, n)
		if c == nil {
			return "", fmt.Sprintf("a flag table names %s, which is not a command --help shows", n)
		}
		r := renderFlags(c)
		if i > 0 && r != table {
			return "", fmt.Sprintf("the flags of %s and %s differ: give each a table of its own", names[0], n)
		}
		table = r
	}
	return table, ""
}

// lineDiff returns the difference of two texts, line by line.
func lineDiff(doc, code string) string {
	return cmp.Diff(strings.Split(doc, "\n"), strings.Split(code, "\n"))
}
