package main

import "github.com/spf13/pflag"

// loginFlag adds --login, which keeps an agent's subscription login
// outside the sandbox (docs/login.md).
func loginFlag(fs *pflag.FlagSet, login *string) {
	fs.StringVar(login, "login", "", "with --rootfs host and --agent `AGENT` (claude or codex): keep the agent's login outside the sandbox: it sees its credential file with placeholders, the gateway puts the token in its API requests and refreshes it, writing the new token back to your file")
}
