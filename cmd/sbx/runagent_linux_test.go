package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrivilegedAgentImpliedAllow: with --agent, a request of the sandbox
// to the agent's API host is allowed by the rule the flag implies, which
// the decision log and the live line name; the user's --block of the host
// wins; with a mock LLM nothing is allowed upstream. The home holds
// nothing of the agent, which sbx says as it starts. The host resolves to
// a namespace of the test's own (nothing listens on its port 80, so an
// allowed request gets the gateway's 502).
func TestPrivilegedAgentImpliedAllow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := sharedDir(t, 1000, 1000, 0o700)
	script := filepath.Join(t.TempDir(), "codex.yaml")
	if _, stderr, code := runCLI(t, "mock", "init", "--agent", "codex", script); code != 0 {
		t.Fatalf("sbx mock init: exit %d: %s", code, stderr)
	}
	ask := `curl -sS -o /dev/null -w '%{http_code}\n' -x "$HTTP_PROXY" "http://$1/"`
	for _, tc := range []struct {
		name, agent, host string
		flags             []string
		action, rule      string
		line              string
	}{
		{"implied", "claude", "api.anthropic.com", nil, "allow", "agent-claude-1",
			"sbx: --agent claude allows agent-claude-1 api.anthropic.com, after your rules"},
		{"codex's second host", "codex", "chatgpt.com", nil, "allow", "agent-codex-2",
			"sbx: --agent codex allows agent-codex-1 api.openai.com, agent-codex-2 chatgpt.com"},
		{"the user's block wins", "claude", "api.anthropic.com", []string{"--block", "api.anthropic.com"}, "block", "r1", ""},
		{"a mock: nothing upstream", "codex", "chatgpt.com", []string{"--mock-llm", "api.openai.com=" + script}, "block", "default",
			"sbx: --agent codex: nothing allowed for it with a mock LLM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "sbx-agent-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			logFile := filepath.Join(dir, "decisions.jsonl")
			args := append([]string{"run", "--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.219.0/24",
				"--log", logFile, "--agent", tc.agent, "--home-dir", home, "--show", "blocks",
				"--resolve", tc.host + "=" + up.Addr, "--allow-private", up.Net}, tc.flags...)
			args = append(args, "--", "sh", "-c", ask, "sh", tc.host)
			stdout, stderr, code := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			var found bool
			for _, r := range readRecords(t, logFile) {
				if r["event"] != "decision" || r["host"] != tc.host {
					continue
				}
				found = true
				if r["action"] != tc.action || r["rule"] != tc.rule {
					t.Errorf("%s: got %v by %v (%v), want %s by %s", tc.host, r["action"], r["rule"], r["reason"], tc.action, tc.rule)
				}
			}
			if !found {
				t.Errorf("no decision for %s in the log; stdout %q, stderr %q", tc.host, stdout, stderr)
			}
			// Allowed: the gateway's 502 (nothing listens on port 80);
			// blocked: its 403.
			if want := map[string]string{"allow": "502\n", "block": "403\n"}[tc.action]; stdout != want {
				t.Errorf("curl's status: got %q, want %q", stdout, want)
			}
			// The home holds nothing of the agent: sbx says so.
			if want := "sbx: --agent " + tc.agent + ": nothing of " + tc.agent + " in the home " + home; !strings.Contains(stderr, want) {
				t.Errorf("stderr: got %q, want a line with %q", stderr, want)
			}
			if tc.line != "" && !strings.Contains(stderr, tc.line) {
				t.Errorf("stderr: got %q, want a line with %q", stderr, tc.line)
			}
		})
	}
}
