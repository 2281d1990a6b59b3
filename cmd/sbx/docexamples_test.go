package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The examples of README.md, SECURITY.md and docs/*.md are checked by
// tests. A fenced block that shows an sbx command (a line that starts,
// after an optional "$ ", "# " or "sudo ", with "sbx COMMAND"), and every
// block tagged yaml, json or sh, is marked by the line just before its
// opening fence:
//
//	<!-- example: run -->             TestDocExamplesRun runs it (below)
//	<!-- example: run; exits 0 1 -->  ... and wants these exit codes, one per command
//	<!-- example: policy NAME -->     a policy file: netpolicy.Parse must take it
//	<!-- example: script NAME -->     a mock LLM script: mockllm.ParseScript must take it
//	<!-- example: file NAME -->       a file the page's later examples use
//	<!-- example: synopsis -->        usage lines: each names a command and its flags
//	<!-- example: not run: REASON --> not run, for REASON (root, a runtime, a cluster, ...)
//
// NAME (optional for policy and script) is the file the block is written
// to in the page's working directory, for the page's run examples, which
// run in order in that directory, after the files of
// cmd/sbx/testdata/docexamples/PAGE/ (PAGE the page's name without .md)
// are copied there.
//
// A run example is a list of commands. When some of its lines start with
// "$ ", those are the commands, and the lines up to the next "$ " are
// what the command prints (stdout and stderr, in the order written; a
// line "..." stands for any number of lines), compared; else every line
// is a command and what it prints is not compared. A line ending in "\"
// goes on on the next. Each runs with sh -c, with the sbx just built
// first on PATH, as the user nobody when the test runs as root, and must
// exit 0, or with the code "exits" gives.
//
// Whatever its mark, every sbx command a block shows, and every `sbx ...`
// of the pages' text, must name a command --help shows and flags it
// takes (TestDocExamplesNameRealCommands).

// docExample is one fenced block of a page and its mark.
type docExample struct {
	page  string // relative to the module, e.g. docs/policy.md
	line  int    // of the opening fence, from 1
	tag   string // the fence's language tag
	kind  string // run, policy, script, file, synopsis, "not run"; "" when unmarked
	arg   string // what follows the kind: the file's name, the exit codes, the reason
	lines []string
}

// exampleMark matches a block's mark.
var exampleMark = regexp.MustCompile(`^<!-- example: (run|policy|script|file|synopsis|not run)(?:[:;]? ?(.*?))? -->$`)

// sbxLine matches a line that shows an sbx command, and captures the
// command from "sbx".
var sbxLine = regexp.MustCompile(`^\s*(?:\$ |# )?(?:sudo )?(?:\S*/)?(sbx [a-z][a-z-]*(?:\s.*)?)$`)

// docPages returns the pages whose examples are checked, relative to the
// module.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(moduleRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		pages[i], _ = filepath.Rel(moduleRoot(t), p)
	}
	return append([]string{"README.md", "SECURITY.md"}, pages...)
}

// readExamples returns the fenced blocks of page, and the problems of
// their marks: a block that needs one and has none, a mark that is not
// before a block, a not run without its reason.
func readExamples(t testing.TB, page string) (examples []docExample, problems []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), page))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	fence := regexp.MustCompile("^(\\s*)```(\\S*)\\s*$")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "<!-- example:") && (i+1 >= len(lines) || !fence.MatchString(lines[i+1])) {
			problems = append(problems, fmt.Sprintf("%s:%d: an example mark not followed by a fenced block", page, i+1))
		}
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		ex := docExample{page: page, line: i + 1, tag: m[2]}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			ex.lines = append(ex.lines, strings.TrimPrefix(lines[i], m[1]))
		}
		if ex.line >= 2 {
			prev := strings.TrimSpace(lines[ex.line-2])
			if mm := exampleMark.FindStringSubmatch(prev); mm != nil {
				ex.kind, ex.arg = mm[1], mm[2]
			} else if strings.HasPrefix(prev, "<!-- example:") {
				problems = append(problems, fmt.Sprintf("%s:%d: %q is not a mark of cmd/sbx/docexamples_test.go", page, ex.line-1, prev))
			}
		}
		switch {
		case ex.kind == "not run" && strings.TrimSpace(ex.arg) == "":
			problems = append(problems, fmt.Sprintf("%s:%d: \"not run\" without its reason", page, ex.line-1))
		case ex.kind == "file" && ex.arg == "":
			problems = append(problems, fmt.Sprintf("%s:%d: \"file\" without its name", page, ex.line-1))
		case ex.kind == "" && needsMark(ex):
			problems = append(problems, fmt.Sprintf("%s:%d: this block shows a command or a file and has no mark (<!-- example: run --> or <!-- example: not run: REASON -->, ...; see cmd/sbx/docexamples_test.go)", page, ex.line))
		}
		examples = append(examples, ex)
	}
	return examples, problems
}

// needsMark reports whether ex must be marked: it is tagged yaml, json or
// sh, or shows an sbx command.
func needsMark(ex docExample) bool {
	switch ex.tag {
	case "yaml", "json", "sh":
		return true
	}
	for _, l := range ex.lines {
		if sbxLine.MatchString(l) {
			return true
		}
	}
	return false
}

// TestDocExamplesMarked: every block of the pages that shows a command or
// a file is marked as run or not run (with the reason), and the policies
// and mock LLM scripts shown parse.
func TestDocExamplesMarked(t *testing.T) {
	checked := 0
	for _, page := range docPages(t) {
		examples, problems := readExamples(t, page)
		for _, p := range problems {
			t.Error(p)
		}
		for _, ex := range examples {
			body := []byte(strings.Join(ex.lines, "\n") + "\n")
			name := ex.page + ":" + fmt.Sprint(ex.line)
			switch ex.kind {
			case "policy":
				checked++
				if _, err := netpolicy.Parse(name, body); err != nil {
					t.Errorf("%s: the policy shown does not parse: %v", name, err)
				}
			case "script":
				checked++
				if _, err := mockllm.ParseScript(name, body); err != nil {
					t.Errorf("%s: the mock LLM script shown does not parse: %v", name, err)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no policy or script example found to check")
	}
}

// commandLines returns the sbx commands ex shows: its "$ " lines (with
// their continuations) when it has any, else its lines that start with an
// sbx command, each from "sbx".
func commandLines(ex docExample) []string {
	var cmds []string
	for _, c := range exampleCommands(ex) {
		if m := sbxLine.FindStringSubmatch(c.cmd); m != nil {
			cmds = append(cmds, m[1])
		}
	}
	return cmds
}

// exampleCommand is one command of an example and what the page shows it
// print.
type exampleCommand struct {
	cmd    string
	output []string // nil when the page shows none
	dollar bool     // the page writes it after "$ "
}

// exampleCommands splits ex into its commands, as the package comment
// says.
func exampleCommands(ex docExample) []exampleCommand {
	dollar := false
	for _, l := range ex.lines {
		if strings.HasPrefix(l, "$ ") {
			dollar = true
		}
	}
	var cmds []exampleCommand
	for i := 0; i < len(ex.lines); i++ {
		l := ex.lines[i]
		if dollar {
			if !strings.HasPrefix(l, "$ ") {
				if len(cmds) > 0 {
					cmds[len(cmds)-1].output = append(cmds[len(cmds)-1].output, l)
				}
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(ex.lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + "\n" + ex.lines[i]
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		cmds = append(cmds, exampleCommand{cmd: l, dollar: dollar})
	}
	return cmds
}

// checkCommandLine reports what is wrong with the sbx command line (from
// "sbx"): a command --help does not show, a word that is not a
// subcommand of a command that only groups others, a flag the command
// does not take. The check ends at the command's own arguments: at "--",
// a shell operator or a comment.
func checkCommandLine(root *cobra.Command, line string) string {
	words := strings.Fields(strings.ReplaceAll(line, "\\\n", " "))
	c := root
	i := 1
	for ; i < len(words); i++ {
		w := words[i]
		if strings.Contains(w, "...") || strings.Contains(w, "|") {
			return "" // a choice of commands, as in sbx policy show|allow ...
		}
		if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
			break
		}
		sub := subcommand(c, w)
		if sub == nil {
			if c == root || isGroup(c) {
				return fmt.Sprintf("%q: %s has no command %s", line, c.CommandPath(), w)
			}
			break
		}
		c = sub
	}
	for ; i < len(words); i++ {
		w := words[i]
		if w == "--" || strings.ContainsAny(w[:1], "|;&>#<") {
			break
		}
		name, ok := strings.CutPrefix(w, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		name = strings.TrimRight(name, ",.)`'\"")
		if name == "help" || !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(name) {
			continue
		}
		if c.Flags().Lookup(name) == nil && c.InheritedFlags().Lookup(name) == nil {
			return fmt.Sprintf("%q: %s has no flag --%s", line, c.CommandPath(), name)
		}
	}
	return ""
}

// subcommand returns c's subcommand name, hidden or not, or nil.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// checkSynopsisFlags reports a synopsis line that says [flags] of a
// command that takes none of its own, or is none.
func checkSynopsisFlags(root *cobra.Command, line string) string {
	if !strings.Contains(line, "[flags]") {
		return ""
	}
	c := root
	for _, w := range strings.Fields(line)[1:] {
		sub := subcommand(c, w)
		if sub == nil {
			break
		}
		c = sub
	}
	if len(docFlags(c)) == 0 {
		return fmt.Sprintf("%q: %s takes no flags but --help", line, c.CommandPath())
	}
	return ""
}

// isGroup reports whether c only groups subcommands (it runs showHelp).
func isGroup(c *cobra.Command) bool {
	return c.HasSubCommands() && c.Runnable() && fmt.Sprintf("%p", c.RunE) == fmt.Sprintf("%p", showHelp)
}

// inlineSbx matches the `sbx ...` code spans of a page's text.
var inlineSbx = regexp.MustCompile("`((?:sudo )?sbx [a-z][^`]*)`")

// TestDocExamplesNameRealCommands: every sbx command the pages show, in
// their blocks and their code spans, names a command that --help shows
// and flags that command takes (a word that follows a command that only
// groups others must be one of them: sbx policy list is not).
func TestDocExamplesNameRealCommands(t *testing.T) {
	root := docRoot()
	checked := 0
	for _, page := range docPages(t) {
		examples, _ := readExamples(t, page)
		for _, ex := range examples {
			if ex.kind == "run" {
				continue // TestDocExamplesRun runs them
			}
			for _, line := range commandLines(ex) {
				checked++
				if p := checkCommandLine(root, line); p != "" {
					t.Errorf("%s:%d: %s", ex.page, ex.line, p)
				}
				if ex.kind == "synopsis" {
					if p := checkSynopsisFlags(root, line); p != "" {
						t.Errorf("%s:%d: %s", ex.page, ex.line, p)
					}
				}
			}
		}
		data, err := os.ReadFile(filepath.Join(moduleRoot(t), page))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			for _, m := range inlineSbx.FindAllStringSubmatch(line, -1) {
				checked++
				if p := checkCommandLine(root, strings.TrimPrefix(m[1], "sudo ")); p != "" {
					t.Errorf("%s:%d: %s", page, n+1, p)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no sbx command found in the pages to check")
	}
}
