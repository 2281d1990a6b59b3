package main

import (
	"os"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAgentImpliedRules: --agent allows its agent's API hosts, by rules
// named for the flag, after every rule of the user: the user's block of
// the host (a flag, the policy file, a catch-all) wins, and a policy that
// mocks the model leaves them out.
func TestAgentImpliedRules(t *testing.T) {
	blockFile := writeFile(t, "block.yaml", "version: 1\nrules:\n  - host: api.openai.com\n    action: block\n")
	askFile := writeFile(t, "ask.yaml", "version: 1\nrules:\n  - host: '*.anthropic.com'\n    action: ask\n")
	mockFile := writeFile(t, "mock.yaml", "version: 1\nrules:\n  - host: api.openai.com\n    action: intercept\n    response: {llm: script.yaml}\n")
	for _, tt := range []struct {
		name   string
		agent  string
		flags  policyFlags
		host   string
		action netpolicy.Action
		rule   string
	}{
		{"claude allowed", "claude", policyFlags{}, "api.anthropic.com", netpolicy.Allow, "agent-claude-1"},
		{"codex's first", "codex", policyFlags{}, "api.openai.com", netpolicy.Allow, "agent-codex-1"},
		{"codex's second", "codex", policyFlags{}, "chatgpt.com", netpolicy.Allow, "agent-codex-2"},
		{"gemini allowed", "gemini", policyFlags{}, "generativelanguage.googleapis.com", netpolicy.Allow, "agent-gemini-1"},
		{"another agent's host", "claude", policyFlags{}, "api.openai.com", netpolicy.Block, netpolicy.RuleDefault},
		{"no agent", "", policyFlags{}, "api.anthropic.com", netpolicy.Block, netpolicy.RuleDefault},
		{"--block wins", "claude", policyFlags{Block: []string{"api.anthropic.com"}}, "api.anthropic.com", netpolicy.Block, "r1"},
		{"--block * wins", "claude", policyFlags{Block: []string{"*"}}, "api.anthropic.com", netpolicy.Block, "r1"},
		{"the file's block wins", "codex", policyFlags{Policy: blockFile}, "api.openai.com", netpolicy.Block, "r1"},
		{"the file's ask wins", "claude", policyFlags{Policy: askFile}, "api.anthropic.com", netpolicy.Ask, "r1"},
		{"--allow comes first", "claude", policyFlags{Allow: []string{"*.anthropic.com"}}, "api.anthropic.com", netpolicy.Allow, "r1"},
		{"a mock in the policy: none", "codex", policyFlags{Policy: mockFile}, "chatgpt.com", netpolicy.Block, netpolicy.RuleDefault},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.flags
			f.Implied = agentRules(tt.agent)
			p, err := f.Build()
			if err != nil {
				t.Fatal(err)
			}
			d := p.Decide(netpolicy.Target{Host: tt.host, Port: 443, Method: "CONNECT"})
			if d.Action != tt.action || d.Rule != tt.rule {
				t.Errorf("CONNECT %s:443: got %s by %s (%s), want %s by %s", tt.host, d.Action, d.Rule, d.Reason, tt.action, tt.rule)
			}
		})
	}
}

// TestAgentHostsDocumented: docs/home.md's table of the hosts --agent
// allows is agentHosts.
func TestAgentHostsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/home.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(data), "<!-- agent hosts:")
	rows := map[string]string{}
	for _, line := range strings.Split(table, "\n")[3:] {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(line, " | ")
		rows[strings.Trim(cells[0], "| `")] = strings.TrimSuffix(cells[1], " |")
	}
	if len(rows) != len(agentHosts) {
		t.Errorf("docs/home.md's table of the hosts --agent allows has %d rows, want %d", len(rows), len(agentHosts))
	}
	for name, hosts := range agentHosts {
		want := "`" + strings.Join(hosts, "`, `") + "`"
		if got := rows[name]; got != want {
			t.Errorf("docs/home.md's row of --agent %s: got %q, want %q", name, got, want)
		}
	}
}

// TestPolicyBlockBeatsAgentRules: sbx policy block, without --position,
// of a running sandbox whose policy ends with the rules --agent implied
// puts the user's rule before them, so it wins as a --block would; with
// no such rules the rule goes last.
func TestPolicyBlockBeatsAgentRules(t *testing.T) {
	user := netpolicy.Rule{ID: "mine", Host: "registry.npmjs.org", Action: netpolicy.Allow}
	api, _ := startAPIGateway(t, netpolicy.Spec{Rules: append([]netpolicy.Rule{user}, agentRules("claude")...)})
	if _, stderr, code := runCLI(t, append(append([]string{"policy", "block", "--id", "nope"}, api...), "api.anthropic.com")...); code != 0 {
		t.Fatalf("sbx policy block: exit %d, %s", code, stderr)
	}
	stdout, stderr, code := runCLI(t, append(append([]string{"policy", "check", "--json"}, api...), "api.anthropic.com")...)
	if code != 0 || !strings.Contains(stdout, `"action":"block","rule":"nope"`) {
		t.Errorf("api.anthropic.com after sbx policy block: exit %d, %s %s; want blocked by rule nope", code, stdout, stderr)
	}
	stdout, _, _ = runCLI(t, append([]string{"policy", "show", "--json"}, api...)...)
	if i, j := strings.Index(stdout, `"id":"nope"`), strings.Index(stdout, `"id":"agent-claude-1"`); i < 0 || j < i || strings.Index(stdout, `"id":"mine"`) > i {
		t.Errorf("rules: got %s, want mine, nope, agent-claude-1 in that order", stdout)
	}

	// Without implied rules, last.
	api, _ = startAPIGateway(t, netpolicy.Spec{Rules: []netpolicy.Rule{user}})
	runCLI(t, append(append([]string{"policy", "block", "--id", "last"}, api...), "a.test")...)
	stdout, _, _ = runCLI(t, append([]string{"policy", "show", "--json"}, api...)...)
	if i, j := strings.Index(stdout, `"id":"mine"`), strings.Index(stdout, `"id":"last"`); i < 0 || j < i {
		t.Errorf("rules: got %s, want mine, last", stdout)
	}
}

// TestAgentLoginRules: with --login of the agent --agent names, the
// login's token endpoints are allowed too, after the user's rules, so
// that the agent's refresh is not refused by the default; without it
// they are not.
func TestAgentLoginRules(t *testing.T) {
	for _, tt := range []struct {
		agent    string
		loggedIn bool
		host     string
		action   netpolicy.Action
	}{
		{"claude", true, "platform.claude.com", netpolicy.Allow},
		{"claude", true, "console.anthropic.com", netpolicy.Allow},
		{"claude", true, "api.anthropic.com", netpolicy.Allow},
		{"claude", false, "platform.claude.com", netpolicy.Block},
		{"codex", true, "auth.openai.com", netpolicy.Allow},
		{"codex", false, "auth.openai.com", netpolicy.Block},
	} {
		f := policyFlags{Implied: agentLoginRules(tt.agent, tt.loggedIn)}
		p, err := f.Build()
		if err != nil {
			t.Fatal(err)
		}
		d := p.Decide(netpolicy.Target{Host: tt.host, Port: 443, Method: "CONNECT"})
		if d.Action != tt.action || tt.action == netpolicy.Allow && !strings.HasPrefix(d.Rule, agentRulePrefix+tt.agent+"-") {
			t.Errorf("--agent %s, login %t: CONNECT %s:443: got %s by %s, want %s by an agent rule", tt.agent, tt.loggedIn, tt.host, d.Action, d.Rule, tt.action)
		}
		var out strings.Builder
		if loginHostsNote(&out, tt.agent, p); tt.loggedIn && out.Len() > 0 {
			t.Errorf("--agent %s --login %s: sbx run says %q, want nothing blocked", tt.agent, tt.agent, out.String())
		}
	}
}
