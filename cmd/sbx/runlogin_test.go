package main

import (
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
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
