package sandbox

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sandbox -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test ./sandbox -update after checking the change):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func testPlan(t *testing.T) NetPlan {
	t.Helper()
	names, err := NamesFor("1a2b3c4d")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := SubnetAt(netip.MustParseAddr("10.213.0.4"))
	if err != nil {
		t.Fatal(err)
	}
	return NetPlan{Names: names, Subnet: sub, GatewayPort: 3128}
}

func TestNamespaceRulesGolden(t *testing.T) {
	v4, v6 := testPlan(t).NamespaceRules()
	golden(t, "netns-v4.rules", v4)
	golden(t, "netns-v6.rules", v6)
}

func TestCaptureRulesGolden(t *testing.T) {
	p := testPlan(t)
	p.Capture = &Capture{DNSPort: DefaultDNSPort, TransparentPort: DefaultTransparentPort, PacketGroup: DefaultPacketGroup}
	v4, v6 := p.NamespaceRules()
	golden(t, "capture-netns-v4.rules", v4)
	golden(t, "capture-netns-v6.rules", v6)
	v4, v6 = p.HostRules()
	golden(t, "capture-host-v4.rules", v4)
	golden(t, "capture-host-v6.rules", v6)
}

func TestHostRulesGolden(t *testing.T) {
	v4, v6 := testPlan(t).HostRules()
	golden(t, "host-v4.rules", v4)
	golden(t, "host-v6.rules", v6)
}

func TestHostTeardownRulesGolden(t *testing.T) {
	v4, v6 := HostTeardownRules(testPlan(t).Names)
	golden(t, "host-teardown-v4.rules", v4)
	golden(t, "host-teardown-v6.rules", v6)
}

func TestEveryRuleCarriesTheSandboxComment(t *testing.T) {
	p := testPlan(t)
	nv4, nv6 := p.NamespaceRules()
	hv4, hv6 := p.HostRules()
	for _, doc := range []string{nv4, nv6, hv4, hv6} {
		for _, line := range strings.Split(strings.TrimSpace(doc), "\n") {
			if strings.HasPrefix(line, "-") && !strings.Contains(line, "-m comment --comment sbx:1a2b3c4d -j ") {
				t.Errorf("rule without the sandbox comment: %s", line)
			}
		}
	}
}

func TestNamespaceRulesFailClosed(t *testing.T) {
	v4, v6 := testPlan(t).NamespaceRules()
	for _, doc := range []string{v4, v6} {
		for _, chain := range []string{":INPUT DROP", ":FORWARD DROP", ":OUTPUT DROP"} {
			if !strings.Contains(doc, chain) {
				t.Errorf("namespace rules lack %q:\n%s", chain, doc)
			}
		}
	}
	if strings.Contains(v6, "--dport") {
		t.Errorf("IPv6 in the namespace allows a port:\n%s", v6)
	}
}
