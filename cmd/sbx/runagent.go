package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// agentHosts are the API hosts --agent NAME allows, by agent: the fewest
// each agent needs to run with an API key or its login (docs/home.md).
// Everything else it tries (telemetry, updates, git hosts) stays under
// the user's policy.
var agentHosts = map[string][]string{
	"claude": {"api.anthropic.com"},
	"codex":  {"api.openai.com", "chatgpt.com"},
	"gemini": {"generativelanguage.googleapis.com"},
}

// agentRulePrefix starts the id of every rule --agent implies:
// agent-NAME-1, agent-NAME-2, ..., so that a decision names the flag.
const agentRulePrefix = "agent-"

// agentRules are the rules --agent name implies: allow each of its API
// hosts, on the default ports. They come after every rule of the user
// (policyFlags.Implied), so that the user's block or ask of a host wins.
func agentRules(name string) []netpolicy.Rule {
	return agentLoginRules(name, false)
}

// agentLoginRules are agentRules, and with loggedIn (--login name) the
// hosts its login needs too (its token endpoints, login.Hosts), so that
// the agent's refresh is not refused by the default.
func agentLoginRules(name string, loggedIn bool) []netpolicy.Rule {
	hosts := slices.Clone(agentHosts[name])
	if loggedIn {
		for _, h := range login.Hosts(name) {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	var rules []netpolicy.Rule
	for i, host := range hosts {
		rules = append(rules, netpolicy.Rule{
			ID:     fmt.Sprintf("%s%s-%d", agentRulePrefix, name, i+1),
			Host:   host,
			Action: netpolicy.Allow,
		})
	}
	return rules
}

// agentNote is what sbx run says of the rules --agent name implied, or
// of their absence with a mock.
func agentNote(name string, rules []netpolicy.Rule, mocked bool) string {
	if mocked {
		return fmt.Sprintf("--agent %s: nothing allowed for it with a mock LLM: the mock answers the hosts it mocks, the policy decides the rest (%s)", name, strings.Join(agentHosts[name], ", "))
	}
	var ids []string
	for _, r := range rules {
		ids = append(ids, r.ID+" "+r.Host)
	}
	return fmt.Sprintf("--agent %s allows %s, after your rules (a --block of it wins)", name, strings.Join(ids, ", "))
}

// agentMissingNote is what sbx run says when --agent finds nothing of its
// agent in the home: before the command fails with 127, where it looked.
func agentMissingNote(n run.AgentMissing) string {
	var paths []string
	for _, p := range rootfs.Agents[n.Agent] {
		paths = append(paths, "~/"+p)
	}
	return fmt.Sprintf("--agent %s: nothing of %s in the home %s (%s, or an npm -g install in a prefix of the home), so the sandbox shows none of it; install it there, or on the host's /usr",
		n.Agent, n.Agent, n.Home, strings.Join(paths, ", "))
}
