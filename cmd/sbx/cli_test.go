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
func runCLI(t testing.TB, args ...string) (stdout, stderr string, code int) {
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

// TestVersionFlag: sbx --version prints what sbx version prints, as
// other tools' --version does, and exits 0.
func TestVersionFlag(t *testing.T) {
	want, _, _ := runCLI(t, "version")
	stdout, stderr, code := runCLI(t, "--version")
	if code != 0 || stderr != "" || stdout != want {
		t.Errorf("sbx --version: got exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	if _, _, code := runCLI(t, "ps", "--version"); code != exitUsage {
		t.Errorf("sbx ps --version: got exit %d, want %d (the flag is sbx's own)", code, exitUsage)
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

// TestBadInvocations runs every command with a bad flag value, a missing
// or extra argument, or flags that do not go together: each is a usage
// error, exit 2, whose message names the flag and the fix. None gets as
// far as needing root or making anything.
func TestBadInvocations(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string // stderr holds it
	}{
		// sbx run: bad flag values exit 2, not sbx's own 125.
		{[]string{"run", "--allow", "https://github.com/", "--", "true"}, "--allow https://github.com/ is a URL, not a pattern; write --allow github.com"},
		{[]string{"run", "--block", "a..test", "--", "true"}, "--block a..test"},
		{[]string{"run", "--intercept", "a.test", "--", "true"}, `--intercept "a.test": want PATTERN=FILE`},
		{[]string{"run", "--default", "maybe", "--", "true"}, `--default "maybe": want allow, block or ask`},
		{[]string{"run", "--allow-private", "10.0.0.1", "--", "true"}, "write --allow-private 10.0.0.1/32"},
		{[]string{"run", "--mock-llm", "api.anthropic.com", "--", "true"}, `--mock-llm "api.anthropic.com": want HOST=SCRIPT`},
		{[]string{"run", "--record-llm", "api.openai.com", "--", "true"}, `--record-llm "api.openai.com": want HOST=SCRIPT`},
		{[]string{"run", "--record-llm", "a.test=" + filepath.Join(dir, "no", "x.yaml"), "--", "true"}, "does not exist; create it"},
		{[]string{"run", "--name", "-x", "--", "true"}, `--name "-x": use 1 to 64 letters`},
		{[]string{"run", "--runtime", "podman", "--", "true"}, `--runtime "podman": want containerd or docker`},
		{[]string{"run", "--runtime", "docker", "--", "true"}, "give --image REF"},
		{[]string{"run", "--image", "alpine", "--rootfs", dir, "--", "true"}, "--image and --rootfs both say what / is"},
		{[]string{"run", "--pull", "sometimes", "--", "true"}, `--pull "sometimes": want never, missing or always`},
		{[]string{"run", "--show", "errors", "--", "true"}, `--show "errors": want all (every decision), blocks (refusals and errors) or none`},
		{[]string{"run", "--quiet", "--show", "blocks", "--", "true"}, "--quiet is --show none, and --show says blocks; give one of them"},
		{[]string{"run", "--memory", "lots", "--", "true"}, `--memory "lots"`},
		{[]string{"run", "--cpus", "-1", "--", "true"}, "--cpus -1: want a number of CPUs"},
		{[]string{"run", "--pids-limit", "-1", "--", "true"}, "--pids-limit -1"},
		{[]string{"run", "--tmp-size", "0", "--", "true"}, `--tmp-size "0"`},
		{[]string{"run", "--cap-add", "NET_ADMIN", "--", "true"}, "--cap-add NET_ADMIN: sbx gives back only"},
		{[]string{"run", "--log-rate", "-1", "--", "true"}, "--log-rate -1"},
		{[]string{"run", "--log-max-size", "big", "--", "true"}, `--log-max-size "big"`},
		{[]string{"run", "--user", "alice", "--", "true"}, `--user "alice": want UID[:GID] in numbers`},
		{[]string{"run", "-w", "work", "--", "true"}, `-w "work": want an absolute path`},
		{[]string{"run", "-e", "=1", "--", "true"}, `-e "=1": want KEY=VAL`},
		{[]string{"run", "-v", "a:b:c:d", "--", "true"}, `-v "a:b:c:d": want SRC:DST`},
		{[]string{"run", "-v", dir + ":data", "--", "true"}, "the destination must be an absolute path"},
		{[]string{"run", "--subnet-pool", "10.0.0.0", "--", "true"}, `--subnet-pool "10.0.0.0" is not a CIDR`},
		{[]string{"run", "--host-dns", "dns.test", "--", "true"}, "--host-dns: DNS server"},
		{[]string{"run", "--resolve", "api.test", "--", "true"}, `--resolve "api.test": want HOST=IP`},
		{[]string{"run", "--cpus", "x", "--", "true"}, `invalid argument "x" for "--cpus" flag`},
		{[]string{"run"}, "no command given"},
		// sbx gateway.
		{[]string{"gateway", "--listen", "3128"}, `--listen "3128": want host:port`},
		{[]string{"gateway", "--api", "localhost"}, `--api "localhost": want host:port`},
		{[]string{"gateway", "--api", "127.0.0.1:0"}, "--api needs --token-file FILE"},
		{[]string{"gateway", "--mock-llm", "x"}, `--mock-llm "x": want HOST=SCRIPT`},
		{[]string{"gateway", "--resolve", "a.test=nowhere"}, `"nowhere" is not an IP address`},
		{[]string{"gateway", "--log-rate", "-5"}, "--log-rate -5"},
		{[]string{"gateway", "--allow", "http://a.test:8080/x"}, "write --allow a.test:8080"},
		{[]string{"gateway", "extra"}, `unknown command "extra" for "sbx gateway"`},
		// sbx policy.
		{[]string{"policy", "check", "--allow", "https://github.com/", "github.com"}, "write --allow github.com"},
		{[]string{"policy", "check", "--method", "GE T", "a.test"}, `--method "GE T" is not an HTTP method`},
		{[]string{"policy", "check", "--sandbox", "x", "--api", "y", "a.test"}, "give --sandbox ID or --api ADDR, not both"},
		{[]string{"policy", "check", "--sandbox", "x", "--policy", "p.yaml", "a.test"}, "give --policy FILE or a running policy"},
		{[]string{"policy", "show"}, "say which sandbox: --sandbox ID"},
		{[]string{"policy", "show", "--api", "127.0.0.1:1"}, "--api needs --token-file FILE"},
		{[]string{"policy", "allow", "--sandbox", "x", "https://api.github.com/"}, "write sbx policy allow api.github.com"},
		{[]string{"policy", "block", "--sandbox", "x", "--position", "-1", "a.test"}, "--position -1: want 0 (first) or more"},
		{[]string{"policy", "allow", "--sandbox", "x", "--id", "a", "b.test", "c.test"}, "--id names one rule"},
		{[]string{"policy", "remove", "--sandbox", "x"}, "give the id of a rule to remove"},
		{[]string{"policy", "replace", "--sandbox", "x"}, "sbx policy replace takes FILE, got 0 arguments"},
		// sbx decisions, ps, stop, gc, image, mock, audit, selftest.
		{[]string{"decisions"}, "say which sandbox: --sandbox ID"},
		{[]string{"decisions", "--since", "-1", "--sandbox", "x"}, `invalid argument "-1" for "--since" flag`},
		{[]string{"ps", "x"}, `"x"`},
		{[]string{"stop"}, "sbx stop takes ID|NAME, got 0 arguments"},
		{[]string{"stop", "--timeout", "-1s", "x"}, "--timeout -1s: want a duration of 0 or more"},
		{[]string{"gc", "now"}, `"now"`},
		{[]string{"image", "import"}, "sbx image import takes FILE, got 0 arguments"},
		{[]string{"image", "export"}, `unknown command "export" for "sbx image"`},
		{[]string{"mock", "expect", "--sandbox", "x"}, "sbx mock expect takes FILE|-, got 0 arguments"},
		{[]string{"mock", "reset", "--sandbox", "x", "--host", "a.test", "--script", "s.yaml"}, "[host script]"},
		{[]string{"mock", "requests", "--api", "127.0.0.1:1"}, "--api needs --token-file FILE"},
		{[]string{"audit", "--format", "pdf", "x.jsonl"}, `--format "pdf"`},
		{[]string{"audit", "--diff", "a.jsonl"}, "--diff compares two logs"},
		{[]string{"selftest", "--runtime", "podman"}, `--runtime "podman": want containerd or docker`},
		{[]string{"selftest", "x"}, `"x"`},
	}
	for _, tt := range tests {
		name := "sbx " + strings.Join(tt.args, " ")
		stdout, stderr, code := runCLI(t, tt.args...)
		if code != exitUsage {
			t.Errorf("%s: got exit %d, want %d (stderr %q)", name, code, exitUsage, stderr)
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: got stderr %q, want it to hold %q", name, stderr, tt.want)
		}
		if stdout != "" {
			t.Errorf("%s: got stdout %q, want none", name, stdout)
		}
	}
}

// TestUnknownFlagSuggestion: an unknown flag is a usage error that names
// the command's nearest flags, long names compared.
func TestUnknownFlagSuggestion(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"run", "--alow", "a.test", "--", "true"}, "unknown flag: --alow; did you mean --allow?"},
		{[]string{"run", "-allow", "a.test", "--", "true"}, "did you mean --allow?"},
		{[]string{"run", "--Quiet", "--", "true"}, "did you mean --quiet?"},
		{[]string{"run", "--inter", "x", "--", "true"}, "did you mean --interactive or --intercept?"},
		{[]string{"policy", "check", "--polcy", "p.yaml", "a.test"}, "did you mean --policy?"},
		{[]string{"decisions", "--folow"}, "did you mean --follow?"},
		{[]string{"decisions", "firstday"}, `sbx decisions takes no argument "firstday": give a sandbox with --sandbox firstday, or a log file with --file firstday`},
		{[]string{"audit", "--sugest", "x.jsonl"}, "did you mean --suggest?"},
		{[]string{"gateway", "--listn", "127.0.0.1:1"}, "did you mean --listen?"},
		{[]string{"stop", "--timout", "1s", "x"}, "did you mean --timeout?"},
		{[]string{"ps", "--state-dri", "x"}, ""}, // hidden flags are not suggested
		{[]string{"ps", "--xyzzy"}, ""},
	}
	for _, tt := range tests {
		name := "sbx " + strings.Join(tt.args, " ")
		_, stderr, code := runCLI(t, tt.args...)
		if code != exitUsage {
			t.Errorf("%s: got exit %d, want %d", name, code, exitUsage)
		}
		if tt.want == "" {
			if strings.Contains(stderr, "did you mean") {
				t.Errorf("%s: got stderr %q, want no suggestion", name, stderr)
			}
			continue
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: got stderr %q, want it to hold %q", name, stderr, tt.want)
		}
	}
}

// TestPolicyCheckHelpInspection: the help of sbx policy check says that
// an inspected host's HTTPS requests are decided by method and path.
func TestPolicyCheckHelpInspection(t *testing.T) {
	stdout, _, _ := runCLI(t, "policy", "check", "--help")
	if strings.Contains(stdout, "sees neither method nor path inside TLS") {
		t.Errorf("help still says the gateway never sees method or path inside TLS:\n%s", stdout)
	}
	for _, want := range []string{"Without TLS inspection the gateway sees only", "decides each HTTPS request in it by its"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help does not hold %q:\n%s", want, stdout)
		}
	}
}
