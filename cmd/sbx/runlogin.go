package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// loginFlag adds --login, which keeps an agent's subscription login
// outside the sandbox (docs/login.md).
func loginFlag(fs *pflag.FlagSet, login *string) {
	fs.StringVar(login, "login", "", "with --rootfs host and --agent `AGENT` (claude or codex; or --home overlay): keep the agent's login outside the sandbox: it sees its credential file with placeholders, the gateway puts the token in its API requests and refreshes it, writing the new token back to your file")
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

// homeAndLogin is homeMode, and checkLogin of the home it gives.
func (o runOptions) homeAndLogin(cmd *cobra.Command, stderr io.Writer) (rootfs.HomeMode, error) {
	home, err := o.homeMode(cmd, stderr)
	if err != nil {
		return "", err
	}
	return home, o.checkLogin(home)
}

// checkLogin refuses, as a usage error naming the flags that fit, a
// --login the other flags cannot keep outside the sandbox.
func (o runOptions) checkLogin(home rootfs.HomeMode) error {
	f := run.RootFS{Image: o.image, Home: home, Agent: o.agent, Login: o.login}
	if o.rootfs != "host" {
		f.Dir = o.rootfs
	}
	if _, cli, ok := loginWording(f.CheckLogin()); ok {
		return &exitError{code: exitUsage, err: errors.New(cli)}
	}
	return nil
}

// loginWording words a *run.LoginError with the flags that fit.
func loginWording(err error) (lib, cli string, ok bool) {
	var e *run.LoginError
	if !errors.As(err, &e) {
		return "", "", false
	}
	a := e.Agent
	fix := map[run.LoginProblem]string{
		run.LoginUnknownAgent:  "want claude or codex",
		run.LoginNotHostLayout: "the login is read from your home, which --rootfs host shows; use --rootfs host with --agent " + a,
		run.LoginHomeRW:        "--home rw shows the credential file itself to the command; use --agent " + a + " (or --home overlay)",
		run.LoginOtherAgent:    "--agent " + e.Other + " shows another agent's files; use --agent " + a,
		run.LoginHomeHidden:    "the agent finds its login in your home, which --home empty hides; add --agent " + a,
	}[e.Problem]
	if e.Problem == run.LoginUnreadable {
		todo := "log in with " + a + " on the host first, as the user the command runs as"
		if !errors.Is(e.Err, fs.ErrNotExist) {
			todo = "sbx reads only a regular file of that user's, at most 64 KiB, through no link below the home: log in with " + a + " on the host again to write it afresh"
		}
		fix = strings.TrimPrefix(e.Error(), "login "+a+": ") + "; " + todo
	}
	return e.Error(), "--login " + a + ": " + fix, true
}
