package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runCLI runs sbx with args in-process and returns what it printed and its
// exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut strings.Builder
	root := newRootCmd()
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = execute(t.Context(), root)
	return out.String(), errOut.String(), code
}

// writeFile writes content to name in a new temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVersion(t *testing.T) {
	stdout, stderr, code := runCLI(t, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("sbx version: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("sbx version printed %q, want 2 lines", stdout)
	}
	if !strings.HasPrefix(lines[0], "sbx ") || len(lines[0]) == len("sbx ") {
		t.Errorf("first line: got %q, want \"sbx <version>\"", lines[0])
	}
	if want := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH; lines[1] != want {
		t.Errorf("second line: got %q, want %q", lines[1], want)
	}

	if _, _, code := runCLI(t, "version", "extra"); code != exitUsage {
		t.Errorf("sbx version extra: got exit %d, want %d", code, exitUsage)
	}
}

func TestResolveVersion(t *testing.T) {
	setting := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name    string
		version string
		bi      *debug.BuildInfo
		want    string
	}{
		{"ldflags win", "v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}}, "v1.2.3"},
		{"no build info", "dev", nil, "dev"},
		{"module version", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0"},
		{"devel without vcs", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"vcs revision", "dev", &debug.BuildInfo{
			Main:     debug.Module{Version: "(devel)"},
			Settings: setting("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"),
		}, "dev-0123456789ab"},
		{"vcs modified", "dev", &debug.BuildInfo{
			Settings: setting("vcs.modified", "true", "vcs.revision", "abc"),
		}, "dev-abc-dirty"},
	}
	for _, tt := range tests {
		if got := resolveVersion(tt.version, tt.bi); got != tt.want {
			t.Errorf("%s: resolveVersion(%q, ...) = %q, want %q", tt.name, tt.version, got, tt.want)
		}
	}
}

// TestCommandTree checks the cobra conventions of STYLE.md on every
// command: RunE only, an example in the help.
func TestCommandTree(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Run != nil || c.RunE == nil {
			t.Errorf("%s: want RunE and no Run", c.CommandPath())
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: help has no Example", c.CommandPath())
		}
		if c.Args == nil {
			t.Errorf("%s: no Args check; extra arguments would be ignored or not be usage errors", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd()
	if !root.SilenceUsage || !root.SilenceErrors {
		t.Errorf("root: SilenceUsage %v, SilenceErrors %v; want both true", root.SilenceUsage, root.SilenceErrors)
	}
	walk(root)
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr string // a line stderr must hold
	}{
		{[]string{"nosuch"}, `sbx: unknown command "nosuch" for "sbx"`},
		{[]string{"polcy"}, `did you mean "policy"?`},
		{[]string{"policy", "nosuch"}, `sbx: unknown command "nosuch" for "sbx policy"`},
		{[]string{"policy", "validate"}, "sbx: sbx policy validate takes FILE, got 0 arguments"},
		{[]string{"policy", "validate", "a", "b"}, "sbx: sbx policy validate takes FILE, got 2 arguments"},
		{[]string{"policy", "check", "--nosuch", "x"}, "sbx: unknown flag: --nosuch"},
		{[]string{"policy", "check"}, "sbx: run 'sbx policy check --help' for usage"},
	}
	for _, tt := range tests {
		stdout, stderr, code := runCLI(t, tt.args...)
		if code != exitUsage {
			t.Errorf("sbx %s: got exit %d, want %d", strings.Join(tt.args, " "), code, exitUsage)
		}
		if stdout != "" {
			t.Errorf("sbx %s: got stdout %q, want none", strings.Join(tt.args, " "), stdout)
		}
		if !strings.Contains(stderr, tt.wantStderr) {
			t.Errorf("sbx %s: got stderr %q, want it to hold %q", strings.Join(tt.args, " "), stderr, tt.wantStderr)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{}, {"policy"}, {"policy", "check", "--help"}} {
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage:") || !strings.Contains(stdout, "Examples:") {
			t.Errorf("sbx %s: exit %d, stderr %q, stdout %q; want exit 0 and help with examples on stdout",
				strings.Join(args, " "), code, stderr, stdout)
		}
	}
}
