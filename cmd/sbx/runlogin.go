package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/netpolicy"
)

// loginFlag adds --login, which keeps an agent's subscription login
// outside the sandbox (docs/login.md).
func loginFlag(fs *pflag.FlagSet, login *string) {
	fs.StringVar(login, "login", "", "with --rootfs host and --agent `AGENT` (claude or codex): keep the agent's login outside the sandbox: it sees its credential file with placeholders, the gateway puts the token in its API requests and refreshes it, writing the new token back to your file")
}

// loginHostsNote says on w which of the hosts the login of agent needs
// (its API and token endpoint hosts, login.Hosts) the policy p blocks:
// --login widens no policy, and a refused refresh logs the agent out.
func loginHostsNote(w io.Writer, agent string, p *netpolicy.Policy) {
	if agent == "" || p == nil {
		return
	}
	var blocked []string
	for _, h := range login.Hosts(agent) {
		if p.Verdict(netpolicy.Target{Host: h, Port: 443, Method: "CONNECT"}).Action == netpolicy.Block {
			blocked = append(blocked, h)
		}
	}
	if len(blocked) > 0 {
		fmt.Fprintf(w, "sbx: --login %s: the policy blocks %s, which the agent's login needs; allow them (--allow %s)\n",
			agent, strings.Join(blocked, ", "), strings.Join(blocked, " --allow "))
	}
}
