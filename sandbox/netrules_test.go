package sandbox

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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

// TestCaptureTakesEveryTCPPort checks the shape of the capture rules, so
// that no port can be left out of capture without a red test (the golden
// file notices too, but its failure says to regenerate it): in the nat
// table's OUTPUT chain, before the rule that redirects TCP to the
// transparent listener, the only rules are the loopback's exemption, the
// DNS stub's two DNATs and the exemption of the gateway's proxy port on
// its own address; and the redirect takes every TCP connection (no port,
// address or other match narrows it).
func TestCaptureTakesEveryTCPPort(t *testing.T) {
	p := testPlan(t)
	p.Capture = &Capture{DNSPort: DefaultDNSPort, TransparentPort: DefaultTransparentPort, PacketGroup: DefaultPacketGroup}
	v4, _ := p.NamespaceRules()
	nat, _, ok := strings.Cut(v4, "*filter")
	if !ok {
		t.Fatalf("no filter table in\n%s", v4)
	}
	comment := " -m comment --comment " + p.Names.Comment
	allowed := []string{
		"-A OUTPUT -o lo -j RETURN",
		fmt.Sprintf("-A OUTPUT -p udp --dport 53 -j DNAT --to-destination %s:%d", p.Subnet.Host, DefaultDNSPort),
		fmt.Sprintf("-A OUTPUT -p tcp --dport 53 -j DNAT --to-destination %s:%d", p.Subnet.Host, DefaultDNSPort),
		fmt.Sprintf("-A OUTPUT -d %s/32 -p tcp --dport %d -j RETURN", p.Subnet.Host, p.GatewayPort),
	}
	redirect := fmt.Sprintf("-A OUTPUT -p tcp -j REDIRECT --to-ports %d", DefaultTransparentPort)
	seen := false
	for _, line := range strings.Split(nat, "\n") {
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		rule := strings.Replace(line, comment, "", 1)
		switch {
		case rule == redirect:
			seen = true
		case seen:
			t.Errorf("a nat rule after the redirect: %q", line)
		case !slices.Contains(allowed, rule):
			t.Errorf("a nat rule before the redirect that is none of the DNS, loopback and proxy-port ones: %q; it would keep connections it matches from capture", line)
		}
	}
	if !seen {
		t.Errorf("no rule %q redirects every TCP connection to the transparent listener:\n%s", redirect, nat)
	}
}
