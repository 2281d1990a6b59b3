package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
)

// probe is one connection attempt made from inside a sandbox's namespace.
type probe struct {
	Name    string        `json:"name"`
	OK      bool          `json:"ok"`
	Err     string        `json:"err,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

// TestNetworkProbeHelper runs inside the namespace when the test
// binary is started there by TestPrivilegedNetwork; on its own it skips.
func TestNetworkProbeHelper(t *testing.T) {
	gw, other, ifname := os.Getenv("SBX_PROBE_GATEWAY"), os.Getenv("SBX_PROBE_OTHER"), os.Getenv("SBX_PROBE_IF")
	if gw == "" {
		t.Skip("runs only inside a sandbox namespace, started by TestPrivilegedNetwork")
	}
	var probes []probe
	try := func(name string, fn func() error) {
		start := time.Now()
		err := fn()
		p := probe{Name: name, OK: err == nil, Elapsed: time.Since(start)}
		if err != nil {
			p.Err = err.Error()
		}
		probes = append(probes, p)
	}
	timeout := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SBX_PROBE_TIMEOUT")); err == nil {
		timeout = d
	}
	dialRead := func(network, addr string) error {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		_, err = io.ReadFull(c, make([]byte, 2))
		return err
	}
	try("gateway port", func() error { return dialRead("tcp", gw) })
	try("gateway address, other port", func() error { return dialRead("tcp", other) })
	try("another address", func() error { return dialRead("tcp", "192.0.2.1:80") })
	try("udp to the host", func() error {
		host, _, _ := net.SplitHostPort(gw)
		c, err := net.Dial("udp", net.JoinHostPort(host, "53"))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("query")); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 10))
		return err
	})
	try("ipv6 link-local", func() error { return dialRead("tcp6", "[fe80::1%"+ifname+"]:3128") })
	json.NewEncoder(os.Stdout).Encode(probes)
}

// TestPrivilegedNetwork sets up a sandbox network, checks from inside that
// only the gateway's port answers and everything else fails at once, then
// tears it down and checks that nothing of it is left.
func TestPrivilegedNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces, veths and iptables rules (CI runs as root)")
	}
	id, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := NamesFor(id)
	sub := testSubnet(t)
	plan := NetPlan{Names: names, Subnet: sub, GatewayPort: 3128}
	ctx := context.Background()
	t.Cleanup(func() { TeardownNetwork(ctx, names) }) // also when the test fails
	if err := SetupNetwork(ctx, plan); err != nil {
		t.Fatal(err)
	}
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

	// The gateway stands in on the host side of the veth.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(sub.Host, 3128).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	other, err := net.Listen("tcp", netip.AddrPortFrom(sub.Host, 0).String()) // listening, but not the gateway's port
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	probeFromInside := func(timeout string) []probe {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", names.Netns, os.Args[0], "-test.run", "^TestNetworkProbeHelper$", "-test.v")
		cmd.Env = append(os.Environ(),
			"SBX_PROBE_GATEWAY="+netip.AddrPortFrom(sub.Host, 3128).String(),
			"SBX_PROBE_OTHER="+other.Addr().String(),
			"SBX_PROBE_IF="+names.InnerVeth,
			"SBX_PROBE_TIMEOUT="+timeout)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probing from the namespace: %v\n%s", err, out)
		}
		var probes []probe
		start := strings.Index(string(out), "[")
		end := strings.LastIndex(string(out), "]")
		if start < 0 || end < start || json.Unmarshal(out[start:end+1], &probes) != nil {
			t.Fatalf("probe output: %s", out)
		}
		return probes
	}
	// From the host itself (another interface: lo) the gateway's port is
	// refused by the host's rules, though the same listener answers the
	// sandbox below: the gateway serves its sandbox alone. Another port
	// of the address is the host's business.
	if c, err := net.DialTimeout("tcp", netip.AddrPortFrom(sub.Host, 3128).String(), time.Second); err == nil {
		c.Close()
		t.Errorf("a host process reached the gateway's port: the host's rules let in what did not come through %s", names.HostVeth)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a host process dialing the gateway's port: %v, want refused at once", err)
	}
	if c, err := net.DialTimeout("tcp", other.Addr().String(), time.Second); err != nil {
		t.Errorf("a host process dialing another port of the gateway's address: %v, want it reached", err)
	} else {
		c.Close()
	}
	for _, p := range probeFromInside("3s") {
		want := p.Name == "gateway port"
		if p.OK != want {
			t.Errorf("%s from inside: ok=%v (%s), want ok=%v", p.Name, p.OK, p.Err, want)
		}
		if !want && p.Elapsed > time.Second+100*time.Millisecond {
			t.Errorf("%s from inside failed after %v, want under a second", p.Name, p.Elapsed)
		}
		t.Logf("%s: ok=%v err=%q in %v", p.Name, p.OK, p.Err, p.Elapsed)
	}

	// The second layer (docs/network.md): a process that rewrote the
	// namespace's rules and routes (here: rules flushed, policies ACCEPT,
	// a default route through the host) still reaches nothing but the
	// gateway's port, because the host's rules for the veth hold. Failing
	// at once is no longer promised (the host may drop).
	if out, err := exec.Command("ip", "-n", names.Netns, "route", "add", "default", "via", sub.Host.String()).CombinedOutput(); err != nil {
		t.Fatalf("adding a default route in the namespace: %v\n%s", err, out)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, args := range [][]string{{"-P", "OUTPUT", "ACCEPT"}, {"-P", "INPUT", "ACCEPT"}, {"-F"}} {
			if out, err := exec.Command("ip", append([]string{"netns", "exec", names.Netns, tool}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("rewriting the namespace's rules: %v\n%s", err, out)
			}
		}
	}
	for _, p := range probeFromInside("500ms") {
		if want := p.Name == "gateway port"; p.OK != want {
			t.Errorf("with the namespace's rules flushed, %s: ok=%v (%s), want ok=%v", p.Name, p.OK, p.Err, want)
		}
		t.Logf("namespace rules flushed: %s: ok=%v err=%q in %v", p.Name, p.OK, p.Err, p.Elapsed)
	}

	// TeardownNetwork's premise: once the host end is down nothing passes,
	// so the host's rules may go while the veth is still being deleted.
	// Here both layers of rules are gone and the link only down.
	link, err := netlink.LinkByName(names.HostVeth)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		t.Fatal(err)
	}
	v4, v6 := HostTeardownRules(names)
	for tool, doc := range map[string]string{"iptables-restore": v4, "ip6tables-restore": v6} {
		if err := restore(ctx, "", tool, doc); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range probeFromInside("500ms") {
		if p.OK {
			t.Errorf("with the host end down and no rules, %s got through", p.Name)
		}
		t.Logf("host end down, no rules: %s: ok=%v err=%q in %v", p.Name, p.OK, p.Err, p.Elapsed)
	}

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
