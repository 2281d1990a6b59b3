package sandbox

import (
	"bufio"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/sbx-dev/sbx/gateway"
)

// The capture tests below check docs/network.md and docs/capture.md with capture on:
// a sandbox's network made by SetupNetwork, probed from a thread inside
// its namespace, with a listener (a sink) wherever a probe could land.
// Three sinks stand for the gateway (its proxy port and DNS stub on the
// host end, its transparent listener in the namespace); the others are
// real services the sandbox must never reach: another port of the host
// end, and TCP, UDP, DNS and ICMP in a throwaway upstream namespace that
// the host routes to. Every sink counts what reaches it (an accepted
// connection, a datagram, an echo request), with or without the probe's
// name, so an escape is seen whether or not the probe noticed it.

// The gateway's ports in these tests.
const (
	captureProxyPort = 3128
	captureDNSPort   = DefaultDNSPort
)

// hit is one thing that reached a sink.
type hit struct {
	from   string // the peer's address as the sink saw it
	marker string // the first line the peer sent: a probe's name
	orig   string // for the transparent listener: gateway.OriginalDst of the connection
}

// sink is a listener that records what reaches it and answers with its
// name, so that a probe knows where it landed. It is safe for concurrent
// use.
type sink struct {
	name string
	mu   sync.Mutex
	hits []*hit
}

func (s *sink) add(h *hit) {
	s.mu.Lock()
	s.hits = append(s.hits, h)
	s.mu.Unlock()
}

// saw reports whether something that sent marker reached s.
func (s *sink) saw(marker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hits {
		if h.marker == marker {
			return true
		}
	}
	return false
}

// take returns what reached s since the last take and forgets it.
func (s *sink) take() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hs []hit
	for _, h := range s.hits {
		hs = append(hs, *h)
	}
	s.hits = nil
	return hs
}

// serveStream accepts on ln until ln is closed (when the test ends). A
// connection is recorded as soon as it is accepted (a completed handshake
// counts); then its first line is read as the marker, with the original
// destination when origDst, and the sink's name is written back. Each
// connection's goroutine ends within two seconds (its deadline).
func (s *sink) serveStream(ln net.Listener, origDst bool) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h := &hit{from: c.RemoteAddr().String()}
			s.add(h)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				orig := ""
				if origDst {
					if a, err := gateway.OriginalDst(c); err != nil {
						orig = err.Error()
					} else {
						orig = a.String()
					}
				}
				s.mu.Lock()
				h.marker, h.orig = strings.TrimSpace(line), orig
				s.mu.Unlock()
				io.WriteString(c, s.name+"\n")
			}()
		}
	}()
}

// servePackets records every datagram on pc as a hit and answers it with
// the sink's name, until pc is closed (when the test ends).
func (s *sink) servePackets(pc net.PacketConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.add(&hit{from: from.String(), marker: strings.TrimSpace(string(buf[:n]))})
			pc.WriteTo([]byte(s.name+"\n"), from)
		}
	}()
}

// serveEcho records every ICMP echo request that reaches c's namespace
// (a raw socket sees them all; the kernel answers them), until c is
// closed (when the test ends).
func (s *sink) serveEcho(c *icmp.PacketConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEcho {
				continue
			}
			marker := ""
			if e, ok := m.Body.(*icmp.Echo); ok {
				marker = string(e.Data)
			}
			s.add(&hit{from: from.String(), marker: marker})
		}
	}()
}

// openIn opens a socket with open in network namespace ns (the caller's
// own when ns is netns.None()) and closes it when t ends.
func openIn[T io.Closer](t *testing.T, ns netns.NsHandle, open func() (T, error)) T {
	t.Helper()
	var c T
	fn := func() (err error) {
		c, err = open()
		return err
	}
	var err error
	if ns == netns.None() {
		err = fn()
	} else {
		err = inNetns(ns, fn)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// captureProbe is one attempt from inside the sandbox, and where it must
// land in each state of the rules: the name of a sink, or "" for nowhere
// (refused, dropped, unanswered).
type captureProbe struct {
	name    string
	network string // tcp, udp, tcp6, udp6, or icmp (an echo request)
	addr    string
	// target is the sink listening at addr, reached with no rules at all.
	target string
	// captured is where it lands with the namespace's rules, whatever the
	// host's; hostOnly, with the host's rules alone.
	captured, hostOnly string
	// foreign marks an address outside the test's own namespaces and
	// host ends: probed only while both layers stand, so that a broken
	// layer never sends anything off this machine.
	foreign bool
}

// captureRig is a sandbox network (with capture, or without when made by
// newRig(t, false)), a throwaway upstream beside it, and the sinks.
type captureRig struct {
	capture          bool
	names            Names
	sub              Subnet
	ns               netns.NsHandle // the sandbox's namespace
	upstream         netip.Addr     // in the upstream namespace
	hostTCP, hostUDP netip.AddrPort // other ports of the host end
	sinks            map[string]*sink
}

// newCaptureRig sets up a sandbox network with capture (torn down when t
// ends, also when it fails), an upstream namespace the host routes to,
// and a sink at every address the probes use. The sandbox's host end and
// the upstream's forward (per interface): nothing but the host's rules
// and the namespace's stands between the sandbox and the upstream, as on
// a host with ip_forward on.
func newCaptureRig(t *testing.T) *captureRig {
	t.Helper()
	return newRig(t, true)
}

// newRig is newCaptureRig with capture on or off. Without capture the
// transparent listener and the DNS stub's sinks are there all the same:
// what reaches them then is an escape like any other.
func newRig(t *testing.T, capture bool) *captureRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces, veths and iptables rules (CI runs as root)")
	}
	id, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := NamesFor(id)
	r := &captureRig{capture: capture, names: names, sub: testSubnet(t), sinks: map[string]*sink{}}
	ctx := context.Background()
	t.Cleanup(func() { TeardownNetwork(ctx, names) })
	plan := NetPlan{Names: names, Subnet: r.sub, GatewayPort: captureProxyPort}
	if capture {
		plan.Capture = &Capture{DNSPort: captureDNSPort, TransparentPort: DefaultTransparentPort, PacketGroup: DefaultPacketGroup}
	}
	if err := SetupNetwork(ctx, plan); err != nil {
		t.Fatal(err)
	}
	r.ns, err = netns.GetFromName(names.Netns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ns.Close() })
	upNs, upVeth := r.addUpstream(t)
	for _, dev := range []string{names.HostVeth, upVeth} {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/forwarding", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	sinkFor := func(name string) *sink {
		s := &sink{name: name}
		r.sinks[name] = s
		return s
	}
	tcp := func(addr string) func() (net.Listener, error) {
		return func() (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	udp := func(addr string) func() (net.PacketConn, error) {
		return func() (net.PacketConn, error) { return net.ListenPacket("udp", addr) }
	}
	host, up, none := r.sub.Host, r.upstream, netns.None()
	at := func(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }
	// The gateway's stand-ins.
	sinkFor("proxy").serveStream(openIn(t, none, tcp(at(host, captureProxyPort))), false)
	sinkFor("dns-tcp").serveStream(openIn(t, none, tcp(at(host, captureDNSPort))), false)
	sinkFor("dns-udp").servePackets(openIn(t, none, udp(at(host, captureDNSPort))))
	sinkFor("transparent").serveStream(openIn(t, r.ns, tcp(at(netip.MustParseAddr("127.0.0.1"), DefaultTransparentPort))), true)
	// What the sandbox must never reach.
	ln := openIn(t, none, tcp(at(host, 0)))
	r.hostTCP = netip.MustParseAddrPort(ln.Addr().String())
	sinkFor("host-tcp").serveStream(ln, false)
	pc := openIn(t, none, udp(at(host, 0)))
	r.hostUDP = netip.MustParseAddrPort(pc.LocalAddr().String())
	sinkFor("host-udp").servePackets(pc)
	sinkFor("upstream-tcp").serveStream(openIn(t, upNs, tcp(at(up, 8080))), false)
	sinkFor("upstream-udp").servePackets(openIn(t, upNs, udp(at(up, 8081))))
	sinkFor("upstream-dns-tcp").serveStream(openIn(t, upNs, tcp(at(up, 53))), false)
	sinkFor("upstream-dns-udp").servePackets(openIn(t, upNs, udp(at(up, 53))))
	sinkFor("upstream-icmp").serveEcho(openIn(t, upNs, func() (*icmp.PacketConn, error) { return icmp.ListenPacket("ip4:icmp", "0.0.0.0") }))
	return r
}

// addUpstream makes the upstream: a namespace of the test's own joined to
// the host by a veth, in a /30 picked at random in 10.214.0.0/16 clear of
// the host's addresses, with a route back to the sandbox's /30 through the
// host. It returns the namespace and the host end's name; both go when t
// ends.
func (r *captureRig) addUpstream(t *testing.T) (netns.NsHandle, string) {
	t.Helper()
	ns, _ := testNetns(t, "up")
	var used []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			used = append(used, p.Masked())
		}
	}
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, byte(rand.N(256)), 0}), 24)
	sub, err := UnusedSubnet(pool, used)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := NewID()
	veth := "sbxtu" + id
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: veth}, PeerName: veth + "p", PeerNamespace: netlink.NsFd(ns)}); err != nil {
		t.Fatalf("creating veth %s: %v", veth, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(veth); err == nil {
			netlink.LinkDel(l)
		}
	})
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hostEnd, err := netlink.LinkByName(veth)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := h.LinkByName(veth + "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return netlink.AddrAdd(hostEnd, &netlink.Addr{IPNet: ipNet(sub.Host.AsSlice(), 30)}) },
		func() error { return h.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(sub.Sandbox.AsSlice(), 30)}) },
		func() error { return h.LinkSetUp(peer) },
		func() error { return netlink.LinkSetUp(hostEnd) },
		func() error {
			back := ipNet(r.sub.Prefix.Addr().AsSlice(), r.sub.Prefix.Bits())
			return h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Dst: back, Gw: sub.Host.AsSlice()})
		},
	} {
		if err := step(); err != nil {
			t.Fatalf("setting up the upstream %s: %v", sub.Prefix, err)
		}
	}
	r.upstream = sub.Sandbox
	return ns, veth
}

// probes returns every probe of the rig.
func (r *captureRig) probes() []captureProbe {
	host, up := r.sub.Host, r.upstream
	at := func(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }
	return []captureProbe{
		// The gateway's ports. TCP to the stub's port is redirected like
		// any other but 53 and the proxy's (resolv.conf can name no port:
		// DNS over TCP arrives as port 53).
		{name: "TCP to the proxy port", network: "tcp", addr: at(host, captureProxyPort), target: "proxy", captured: "proxy", hostOnly: "proxy"},
		{name: "UDP to the DNS stub's port", network: "udp", addr: at(host, captureDNSPort), target: "dns-udp", captured: "dns-udp", hostOnly: "dns-udp"},
		{name: "TCP to the DNS stub's port", network: "tcp", addr: at(host, captureDNSPort), target: "dns-tcp", captured: "transparent", hostOnly: "dns-tcp"},
		// The host end's other ports.
		{name: "TCP to another port of the host end", network: "tcp", addr: r.hostTCP.String(), target: "host-tcp", captured: "transparent"},
		{name: "UDP to another port of the host end", network: "udp", addr: r.hostUDP.String(), target: "host-udp"},
		// The upstream.
		{name: "TCP to the upstream", network: "tcp", addr: at(up, 8080), target: "upstream-tcp", captured: "transparent"},
		{name: "UDP to the upstream", network: "udp", addr: at(up, 8081), target: "upstream-udp"},
		{name: "DNS over UDP to the upstream", network: "udp", addr: at(up, 53), target: "upstream-dns-udp", captured: "dns-udp"},
		{name: "DNS over TCP to the upstream", network: "tcp", addr: at(up, 53), target: "upstream-dns-tcp", captured: "dns-tcp"},
		{name: "ICMP echo to the upstream", network: "icmp", addr: at(up, 0), target: "upstream-icmp"},
		// Anywhere else, where nothing of the test listens.
		{name: "DNS over UDP to 10.214.255.53", network: "udp", addr: "10.214.255.53:53", captured: "dns-udp", foreign: true},
		{name: "DNS over TCP to 10.214.255.53", network: "tcp", addr: "10.214.255.53:53", captured: "dns-tcp", foreign: true},
		{name: "TCP to 10.214.255.53", network: "tcp", addr: "10.214.255.53:80", captured: "transparent", foreign: true},
		// IPv6: no address, no route, rules that refuse it.
		{name: "TCP over IPv6", network: "tcp6", addr: "[2001:db8::1]:80"},
		{name: "DNS over IPv6", network: "udp6", addr: "[2001:db8::53]:53"},
		{name: "TCP to an IPv6 link-local address", network: "tcp6", addr: "[fe80::1%" + r.names.InnerVeth + "]:" + "3128"},
	}
}

// attempt makes probe p from the calling thread's namespace and returns
// the name of the sink that answered, or an error.
func attempt(p captureProbe, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	if p.network == "icmp" {
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return "", err
		}
		defer c.Close()
		dst := netip.MustParseAddrPort(p.addr).Addr()
		id := rand.N(1 << 16)
		b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte(p.name)}}).Marshal(nil)
		if err != nil {
			return "", err
		}
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return "", err
		}
		c.SetReadDeadline(deadline)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return "", err
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply || from.String() != dst.String() {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
				return p.target, nil // the kernel of the target answered
			}
		}
	}
	c, err := net.DialTimeout(p.network, p.addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if _, err := io.WriteString(c, p.name+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// probeResult is what one probe from inside got.
type probeResult struct {
	landed  string
	err     error
	elapsed time.Duration
}

// check makes the probes (all but the foreign ones unless withForeign)
// from inside the sandbox's namespace, all at once, and checks that each
// landed where want says; that each sink saw exactly the probes meant for
// it (anything else that reached a sink is an escape); that the
// transparent listener learned the address each probe dialed; and, when
// fast, that what lands nowhere failed within a second.
func (r *captureRig) check(t *testing.T, phase string, want func(captureProbe) string, withForeign, fast bool) {
	t.Helper()
	for _, s := range r.sinks {
		s.take() // what came before this phase
	}
	var ps []captureProbe
	for _, p := range r.probes() {
		if withForeign || !p.foreign {
			ps = append(ps, p)
		}
	}
	results := make([]probeResult, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			start := time.Now()
			err := inNetns(r.ns, func() error {
				var err error
				results[i].landed, err = attempt(p, 2*time.Second)
				return err
			})
			results[i].err, results[i].elapsed = err, time.Since(start)
		})
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // for a datagram or a handshake still on its way to a sink
	byName := map[string]captureProbe{}
	for i, p := range ps {
		byName[p.name] = p
		w, res := want(p), results[i]
		t.Logf("%s: %s: landed %q, err %v, in %v", phase, p.name, res.landed, res.err, res.elapsed.Round(time.Millisecond))
		switch {
		case w == "" && res.landed != "":
			t.Errorf("%s: %s from inside reached %s, want it to reach nothing", phase, p.name, res.landed)
		case w != "" && res.landed != w:
			t.Errorf("%s: %s from inside landed on %q (%v), want %s", phase, p.name, res.landed, res.err, w)
		case w == "" && fast && res.elapsed > time.Second:
			t.Errorf("%s: %s from inside failed after %v (%v), want at once", phase, p.name, res.elapsed, res.err)
		}
	}
	for name, s := range r.sinks {
		for _, h := range s.take() {
			p, ok := byName[h.marker]
			if !ok || want(p) != name {
				t.Errorf("%s: %s was reached from %s by %q: only what is meant for it may reach it", phase, name, h.from, h.marker)
				continue
			}
			if name == "transparent" && h.orig != p.addr {
				t.Errorf("%s: %s: the transparent listener's original destination is %s, want %s", phase, p.name, h.orig, p.addr)
			}
		}
	}
}

// checkControls probes, from the host, every sink that stands for a real
// service: each must answer and count the probe, so that its silence
// towards the sandbox means something.
func (r *captureRig) checkControls(t *testing.T) {
	t.Helper()
	for _, p := range r.probes() {
		if !strings.HasPrefix(p.target, "host-") && !strings.HasPrefix(p.target, "upstream-") {
			continue
		}
		if got, err := attempt(p, 2*time.Second); got != p.target {
			t.Errorf("control: %s from the host landed on %q (%v), want %s", p.name, got, err, p.target)
			continue
		}
		// An echo is answered by the kernel, maybe before the sink has
		// read the request.
		for deadline := time.Now().Add(time.Second); !r.sinks[p.target].saw(p.name); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("control: %s from the host was answered, but %s did not count it", p.name, p.target)
				break
			}
		}
	}
}

// flushNamespaceRules does what a process that rewrote the namespace's
// rules and routes could: every rule of the filter and nat tables (IPv4
// and IPv6) gone and the policies ACCEPT, and a default route through the
// host end (with capture it is there already).
func (r *captureRig) flushNamespaceRules(t *testing.T) {
	t.Helper()
	if !r.capture {
		runIn(t, r.ns, "ip", "route", "add", "default", "via", r.sub.Host.String())
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, args := range [][]string{{"-t", "nat", "-F"}, {"-F"}, {"-P", "INPUT", "ACCEPT"}, {"-P", "OUTPUT", "ACCEPT"}, {"-P", "FORWARD", "ACCEPT"}} {
			runIn(t, r.ns, tool, append([]string{"-w"}, args...)...)
		}
	}
}

// removeHostRules removes the host's chains for the sandbox and the jumps
// to them, as teardown does.
func (r *captureRig) removeHostRules(t *testing.T) {
	t.Helper()
	v4, v6 := HostTeardownRules(r.names)
	for tool, doc := range map[string]string{"iptables-restore": v4, "ip6tables-restore": v6} {
		if err := restore(context.Background(), "", tool, doc); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrivilegedCaptureNetwork sets up a sandbox network with capture and
// checks, from inside, docs/capture.md with the guarantees of docs/network.md standing: TCP to any address
// and port but the proxy's lands on the transparent listener, which learns
// the address dialed; DNS over UDP and TCP to any address lands on the
// stub; UDP, ICMP and IPv6 reach nothing and fail at once; no real
// service (another port of the host end, the upstream's TCP, UDP, DNS and
// ICMP, each shown to answer the host) sees anything; a host process
// reaches neither of the gateway's ports. Then it tears the network down
// and checks that nothing of it is left.
func TestPrivilegedCaptureNetwork(t *testing.T) {
	r := newCaptureRig(t)
	r.checkControls(t)
	r.check(t, "both layers", func(p captureProbe) string { return p.captured }, true, true)

	// The gateway serves its sandbox alone: from the host (lo), the proxy
	// and the stub are refused at once, and nothing reaches them.
	for _, p := range r.probes() {
		if p.target != "proxy" && !strings.HasPrefix(p.target, "dns-") {
			continue
		}
		start := time.Now()
		if got, err := attempt(p, 2*time.Second); got != "" {
			t.Errorf("a host process: %s reached %s, want refused", p.name, got)
		} else if time.Since(start) > time.Second {
			t.Errorf("a host process: %s failed after %v (%v), want at once", p.name, time.Since(start), err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	for _, name := range []string{"proxy", "dns-tcp", "dns-udp"} {
		if hs := r.sinks[name].take(); len(hs) > 0 {
			t.Errorf("a host process reached %s: %+v", name, hs)
		}
	}

	if err := TeardownNetwork(context.Background(), r.names); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	assertNetworkGone(t, r.names)
}

// TestPrivilegedCaptureLayers checks each layer of docs/network.md and
// docs/capture.md (each layer alone) with the other switched off, then with both off:
//
//   - the host's rules alone (the namespace's filter and nat tables
//     flushed, policies ACCEPT: what a process that rewrote them could
//     do) still keep the sandbox to the gateway's proxy and DNS ports:
//     TCP, UDP, DNS and ICMP to the upstream and to the host end's other
//     ports reach nothing, and nothing is forwarded. Failing at once is
//     not promised here (the host drops what it would forward);
//   - the namespace's rules alone (the host's chains and jumps removed)
//     still keep every real service from the sandbox: TCP is redirected
//     to the transparent listener, DNS to the stub, UDP, ICMP and IPv6
//     are refused at once;
//   - with both off, the same probes reach the real services: the
//     escapes the layers stop are real paths, so the probes could have
//     seen one.
func TestPrivilegedCaptureLayers(t *testing.T) {
	for _, tt := range []struct {
		name          string
		off, otherOff func(*captureRig, *testing.T)
		want          func(captureProbe) string
		fast          bool
	}{
		{"host layer alone", (*captureRig).flushNamespaceRules, (*captureRig).removeHostRules,
			func(p captureProbe) string { return p.hostOnly }, false},
		{"namespace layer alone", (*captureRig).removeHostRules, (*captureRig).flushNamespaceRules,
			func(p captureProbe) string { return p.captured }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newCaptureRig(t)
			r.checkControls(t)
			tt.off(r, t)
			r.check(t, tt.name, tt.want, false, tt.fast)
			tt.otherOff(r, t)
			r.check(t, "no layer (the probes can see an escape)", func(p captureProbe) string { return p.target }, false, false)
		})
	}
}
