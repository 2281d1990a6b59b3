package sandbox

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
)

// probe is one connection attempt made from inside a sandbox, as
// testdata/netprobe reports it.
type probe struct {
	Name    string        `json:"name"`
	OK      bool          `json:"ok"`
	Err     string        `json:"err,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

// TestPrivilegedNetwork checks docs/network.md without capture on a
// sandbox network made by SetupNetwork, probed from a thread inside its
// namespace with the capture tests' probes and sinks (a listener wherever
// a probe could land, each counting what reaches it, each shown to answer
// the host first), so that nothing counts as refused because nothing
// listened:
//
//   - both layers: the proxy port is reached and nothing else; every
//     other probe (another port of the host end, TCP, UDP, DNS and ICMP
//     to an upstream the host routes to and forwards for, IPv6) fails at
//     once; a host process (lo) is refused the proxy port;
//   - the namespace's rules alone (the host's chains and jumps removed,
//     on a second network) let through only the proxy port, the rest
//     failing at once;
//   - the host's rules alone (the namespace's rules flushed, policies
//     ACCEPT, a default route through the host end added: what a process
//     that rewrote them could do, guarantee 4) still let through only the
//     proxy port; failing at once is not promised (the host may drop);
//   - no layer (the other layer removed too): the same probes reach the
//     real services, so they could have seen an escape;
//   - the host end down, still no rules: nothing passes (TeardownNetwork's
//     premise, which takes the host end down before the host's rules).
//
// Then it tears the network down and checks that nothing of it is left.
func TestPrivilegedNetwork(t *testing.T) {
	r := newRig(t, false)
	names := r.names
	// The host end has IPv6 off and no IPv6 address (not even link-local)
	// for the sandbox to reach.
	if v, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + names.HostVeth + "/disable_ipv6"); err == nil && strings.TrimSpace(string(v)) != "1" {
		t.Errorf("IPv6 is on at the host end %s", names.HostVeth)
	}
	if host, err := netlink.LinkByName(names.HostVeth); err != nil {
		t.Fatal(err)
	} else if addrs, _ := netlink.AddrList(host, netlink.FAMILY_V6); len(addrs) > 0 {
		t.Errorf("the host end has IPv6 addresses: %v", addrs)
	}
	r.checkControls(t)
	proxyOnly := func(p captureProbe) string {
		if p.target == "proxy" {
			return "proxy"
		}
		return ""
	}
	r.check(t, "both layers", proxyOnly, true, true)

	// The gateway serves its sandbox alone: a host process (lo) is
	// refused its port at once, though the same listener answers the
	// sandbox.
	for _, p := range r.probes() {
		if p.target != "proxy" {
			continue
		}
		start := time.Now()
		if got, err := attempt(p, 2*time.Second); got != "" {
			t.Errorf("a host process reached the gateway's port (%s): the host's rules let in what did not come through %s", got, names.HostVeth)
		} else if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
			t.Errorf("a host process dialing the gateway's port: %v after %v, want refused at once", err, time.Since(start))
		}
	}

	// Each layer alone, on a network of its own, then no layer.
	t.Run("namespace layer alone", func(t *testing.T) {
		r := newRig(t, false)
		r.checkControls(t)
		r.removeHostRules(t)
		r.check(t, "namespace layer alone", proxyOnly, false, true)
		r.flushNamespaceRules(t)
		r.check(t, "no layer (the probes can see an escape)", func(p captureProbe) string { return p.target }, false, false)
	})
	r.flushNamespaceRules(t)
	r.check(t, "host layer alone", proxyOnly, false, false)
	r.removeHostRules(t)
	r.check(t, "no layer (the probes can see an escape)", func(p captureProbe) string { return p.target }, false, false)

	link, err := netlink.LinkByName(names.HostVeth)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		t.Fatal(err)
	}
	r.check(t, "host end down, no rules", func(captureProbe) string { return "" }, false, false)

	ctx := context.Background()
	if err := TeardownNetwork(ctx, names); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if err := TeardownNetwork(ctx, names); err != nil {
		t.Errorf("a second teardown: %v", err)
	}
	assertNetworkGone(t, names)
}

// assertNetworkGone checks that no namespace, veth, chain or rule of the
// sandbox is left.
func assertNetworkGone(t *testing.T, n Names) {
	t.Helper()
	if _, err := os.Stat("/var/run/netns/" + n.Netns); !os.IsNotExist(err) {
		t.Errorf("namespace %s left: %v", n.Netns, err)
	}
	if _, err := netlink.LinkByName(n.HostVeth); err == nil {
		t.Errorf("veth %s left", n.HostVeth)
	}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			t.Fatal(err)
		}
		for _, chain := range []string{"INPUT", "FORWARD"} {
			rules, _ := ipt.List("filter", chain)
			for _, r := range rules {
				if strings.Contains(r, n.Comment) {
					t.Errorf("rule left in %s: %s", chain, r)
				}
			}
		}
		for _, chain := range []string{n.ChainIn, n.ChainGW, n.ChainFwd} {
			if ok, _ := ipt.ChainExists("filter", chain); ok {
				t.Errorf("chain %s left (%v)", chain, proto)
			}
		}
	}

}

// TestPrivilegedFastTeardown checks that the one-step host teardown
// applies to what SetupNetwork made (else teardown would fall back to the
// slow path every time without anyone noticing).
func TestPrivilegedFastTeardown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces, veths and iptables rules (CI runs as root)")
	}
	id, _ := NewID()
	names, _ := NamesFor(id)
	sub := testSubnet(t)
	ctx := context.Background()
	t.Cleanup(func() { TeardownNetwork(ctx, names) })
	if err := SetupNetwork(ctx, NetPlan{Names: names, Subnet: sub, GatewayPort: 3128}); err != nil {
		t.Fatal(err)
	}
	v4, v6 := HostTeardownRules(names)
	if err := restore(ctx, "", "iptables-restore", v4); err != nil {
		t.Errorf("IPv4 fast teardown: %v", err)
	}
	if err := restore(ctx, "", "ip6tables-restore", v6); err != nil {
		t.Errorf("IPv6 fast teardown: %v", err)
	}
	if err := TeardownNetwork(ctx, names); err != nil {
		t.Fatal(err)
	}
	assertNetworkGone(t, names)
}

// TestPrivilegedFailedSetupUndoes makes SetupNetwork fail half-way (its
// veth name is taken) and expects the namespace it had made to be gone.
func TestPrivilegedFailedSetupUndoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces and links (CI runs as root)")
	}
	id, _ := NewID()
	names, _ := NamesFor(id)
	blocker := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: names.HostVeth}, PeerName: "sbxb" + id}
	if err := netlink.LinkAdd(blocker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(blocker) })
	sub := testSubnet(t)
	err := SetupNetwork(context.Background(), NetPlan{Names: names, Subnet: sub, GatewayPort: 3128})
	if err == nil || !strings.Contains(err.Error(), "creating veth") {
		t.Fatalf("SetupNetwork with its veth name taken: %v, want a veth error", err)
	}
	if _, err := os.Stat("/var/run/netns/" + names.Netns); !os.IsNotExist(err) {
		t.Errorf("the namespace of a failed setup is left: %v", err)
	}
	netlink.LinkDel(blocker)
	assertNetworkGone(t, names)
}
