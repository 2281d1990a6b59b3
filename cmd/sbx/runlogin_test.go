package main

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestLoginHostsNote: sbx run --login says which of the login's hosts
// the policy blocks, with the flags that allow them, and nothing when it
// allows them all.
func TestLoginHostsNote(t *testing.T) {
	tests := []struct {
		name  string
		allow []string
		want  string
	}{
		{"none allowed", nil, "sbx: --login claude: the policy blocks api.anthropic.com, platform.claude.com, console.anthropic.com, which the agent's login needs; allow them (--allow api.anthropic.com --allow platform.claude.com --allow console.anthropic.com)\n"},
		{"the API allowed", []string{"api.anthropic.com"}, "sbx: --login claude: the policy blocks platform.claude.com, console.anthropic.com, which the agent's login needs; allow them (--allow platform.claude.com --allow console.anthropic.com)\n"},
		{"all allowed", []string{"api.anthropic.com", "*.claude.com", "console.anthropic.com"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := netpolicy.FlagPatterns{Allow: tt.allow}.Rules()
			if err != nil {
				t.Fatal(err)
			}
			p, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block, Rules: rules})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			loginHostsNote(&b, "claude", p)
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}

// TestLoginUnreadableWording: an unreadable login's fix fits its cause:
// a file that is not there is made by logging in; one sbx refuses (a
// link, another user's, too big) is named with what sbx reads.
func TestLoginUnreadableWording(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&os.PathError{Op: "open", Path: "/home/u/.claude/.credentials.json", Err: syscall.ENOENT}, "log in with claude on the host first"},
		{errors.New("/home/u/.claude/.credentials.json is over 64 KiB"), "sbx reads only a regular file of that user's, at most 64 KiB, through no link below the home"},
	} {
		_, cli, ok := loginWording(&run.LoginError{Agent: "claude", Problem: run.LoginUnreadable, Err: tc.err})
		if !ok || !strings.Contains(cli, tc.want) {
			t.Errorf("%v: got %q, want it to hold %q", tc.err, cli, tc.want)
		}
	}
}
