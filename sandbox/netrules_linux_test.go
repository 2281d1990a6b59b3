package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPrivilegedRulesLoad loads the rendered rule sets with
// iptables-restore in throwaway network namespaces (one standing for the
// sandbox, one for the host), so that the kernel, not only the golden
// files, accepts them. Deleting the namespaces removes every rule; the
// machine's own network and iptables are never touched.
func TestPrivilegedRulesLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (CI runs as root)")
	}
	for _, tool := range []string{"ip", "iptables-restore", "ip6tables-restore", "iptables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing; scripts/test.sh installs iproute2 and iptables", tool)
		}
	}
	p := testPlan(t)
	nsV4, nsV6 := p.NamespaceRules()
	hostV4, hostV6 := p.HostRules()
	for _, tt := range []struct {
		role   string
		v4, v6 string
		args   []string
	}{
		{"sandbox", nsV4, nsV6, nil},
		{"host", hostV4, hostV6, []string{"--noflush"}},
	} {
		ns := fmt.Sprintf("sbxtest-%s-%d", tt.role, os.Getpid())
		run(t, "ip", "netns", "del", ns) // a leftover of an earlier failed run
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
		}
		t.Cleanup(func() { run(t, "ip", "netns", "del", ns) })
		for _, load := range []struct{ tool, doc string }{{"iptables-restore", tt.v4}, {"ip6tables-restore", tt.v6}} {
			cmd := exec.Command("ip", append([]string{"netns", "exec", ns, load.tool}, tt.args...)...)
			cmd.Stdin = strings.NewReader(load.doc)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s rules, %s: %v\n%s\n%s", tt.role, load.tool, err, out, load.doc)
			}
		}
		saved := run(t, "ip", "netns", "exec", ns, "iptables-save")
		if n := strings.Count(saved, "sbx:1a2b3c4d"); n != strings.Count(tt.v4, "sbx:1a2b3c4d") {
			t.Errorf("%s: iptables-save shows %d rules with the comment, the rule set has %d:\n%s", tt.role, n, strings.Count(tt.v4, "sbx:1a2b3c4d"), saved)
		}
	}
}

// run runs a command and returns its output; errors are ignored, for
// cleanup.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}
