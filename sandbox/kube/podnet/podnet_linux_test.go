package podnet

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// The test binary is also the shim and the probe, run in the agent
// namespace under other uids: helperEnv names the part it plays.
const (
	helperEnv   = "SBX_PODNET_TEST_HELPER"
	helperArg   = "SBX_PODNET_TEST_ARG"
	agentUID    = 1000
	fastFailure = 500 * time.Millisecond // a refusal takes less
	probeWait   = 3 * time.Second        // an answer takes less
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "shim":
		os.Exit(shimHelper(os.Getenv(helperArg)))
	case "probe":
		os.Exit(probeHelper(os.Getenv(helperArg)))
	}
	os.Exit(m.Run())
}

// shimHelper runs the shim on the default port until SIGTERM, saying
// "ready" on stdout once it listens.
func shimHelper(gw string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", DefaultShimPort))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if err := Shim(ctx, ln, netip.MustParseAddrPort(gw)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// probe is one attempt from the agent namespace.
type probe struct {
	ID      string // also the bytes the attempt sends
	Network string // tcp, udp, ping4, ping6
	Addr    string
}

// probeResult is what an attempt got: the reply (the answering sink's
// name) or an error, and how long it took.
type probeResult struct {
	ID      string
	Reply   string
	Err     string
	Errno   string // the error's errno, by name (ECONNREFUSED), if it has one
	Elapsed time.Duration
}

// probeHelper makes the attempts of the JSON list arg one after the
// other and writes their results as a JSON list on stdout.
func probeHelper(arg string) int {
	var ps []probe
	if err := json.Unmarshal([]byte(arg), &ps); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var rs []probeResult
	for _, p := range ps {
		start := time.Now()
		reply, err := attempt(p)
		r := probeResult{ID: p.ID, Reply: reply, Elapsed: time.Since(start)}
		if err != nil {
			r.Err = err.Error()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				r.Errno = unix.ErrnoName(errno)
			}
		}
		rs = append(rs, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// attempt makes p: a TCP attempt sends its ID and a newline, closes its
// writing side and reads the reply to EOF (so a reply proves half-closes
// went through both ways); a UDP one sends its ID and reads one datagram;
// a ping sends an echo request from an unprivileged ICMP socket.
func attempt(p probe) (string, error) {
	deadline := time.Now().Add(probeWait)
	switch p.Network {
	case "ping4", "ping6":
		return ping(p, deadline)
	}
	c, err := net.DialTimeout(p.Network, p.Addr, probeWait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if _, err := io.WriteString(c, p.ID+"\n"); err != nil {
		return "", err
	}
	if p.Network == "udp" {
		b := make([]byte, 512)
		n, err := c.Read(b)
		return strings.TrimSpace(string(b[:n])), err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err == nil && len(b) == 0 {
		err = errors.New("closed without a reply")
	}
	return strings.TrimSpace(string(b)), err
}

// ping sends one echo request to p.Addr's address from a connected ICMP
// datagram socket (net.ipv4.ping_group_range must admit the caller) and
// returns "echo" when the reply comes.
func ping(p probe, deadline time.Time) (string, error) {
	dst := netip.MustParseAddrPort(p.Addr).Addr()
	family, proto, typ, replyType := unix.AF_INET, unix.IPPROTO_ICMP, icmp.Type(ipv4.ICMPTypeEcho), icmp.Type(ipv4.ICMPTypeEchoReply)
	var sa unix.Sockaddr
	if p.Network == "ping6" {
		family, proto, typ, replyType = unix.AF_INET6, unix.IPPROTO_ICMPV6, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return "", fmt.Errorf("ping socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ping")
	defer f.Close()
	if err := unix.Connect(fd, sa); err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	c, err := net.FilePacketConn(f)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{Seq: 1, Data: []byte(p.ID)}}).Marshal(nil)
	if err != nil {
		return "", err
	}
	if _, err := c.(interface{ Write([]byte) (int, error) }).Write(b); err != nil {
		return "", err
	}
	c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, err := c.(io.Reader).Read(buf)
		if err != nil {
			return "", err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err == nil && m.Type == replyType {
			return "echo", nil
		}
	}
}

// hit is what reached a sink: the bytes a probe sent (its ID) and, for
// the capture port, the destination its handoff header named.
type hit struct {
	marker string
	dst    netip.AddrPort
}

// sink is a listener standing in for the gateway, or a control target; it
// answers every probe with its name.
type sink struct {
	name string
	mu   sync.Mutex
	hits []hit
}

func (s *sink) add(h hit) {
	s.mu.Lock()
	s.hits = append(s.hits, h)
	s.mu.Unlock()
}

// take returns what reached s since the last call.
func (s *sink) take() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hits
	s.hits = nil
	return h
}

// serveStream serves ln until it closes: each connection's handoff
// header (when it starts with one), then a line, then its end (the
// probe's half-close); the answer is the sink's name, and "eof" when the
// end came.
func (s *sink) serveStream(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(probeWait))
				br := bufio.NewReader(c)
				var h hit
				if b, err := br.Peek(6); err == nil && string(b) == "PROXY " {
					if h.dst, err = handoff.Read(br); err != nil {
						h.marker = "bad header: " + err.Error()
						s.add(h)
						return
					}
				}
				line, err := br.ReadString('\n')
				h.marker = strings.TrimSpace(line)
				s.add(h)
				if err != nil {
					return
				}
				reply := s.name
				if rest, err := io.ReadAll(br); err == nil && len(rest) == 0 {
					reply += " eof"
				}
				io.WriteString(c, reply+"\n")
			}()
		}
	}()
}

// servePackets answers every datagram on pc with the sink's name.
func (s *sink) servePackets(pc net.PacketConn) {
	go func() {
		b := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			s.add(hit{marker: strings.TrimSpace(string(b[:n]))})
			pc.WriteTo([]byte(s.name+"\n"), from)
		}
	}()
}

// rig is an agent pod's network namespace joined by a veth to a
// namespace standing in for the rest of the cluster, where the gateway's
// stand-ins and the control targets listen.
type rig struct {
	agentNs, gwNs netns.NsHandle
	agentPath     string         // the agent namespace's bind mount, for nsenter
	gw, gw6       netip.Addr     // the gateway side's addresses
	web           netip.AddrPort // an outside web server
	dns           netip.AddrPort // an outside DNS server
	loop          netip.AddrPort // a listener on the agent namespace's loopback
	inbound       []inboundCase  // attempts from outside to the agent's own addresses
	exe           string         // the test binary, where uids other than root can run it
	sinks         map[string]*sink
}

// inboundCase is an attempt from the gateway's side of the veth to the
// agent namespace: to a listener there (sink, which answers with its
// name) or, for a ping, to the kernel (which answers "echo").
type inboundCase struct {
	name    string
	network string // tcp, udp, ping4
	addr    netip.AddrPort
	sink    string
}

// newRig makes the two namespaces and the listeners, all removed when t
// ends (also when it fails). Nothing in them is routed anywhere else.
func newRig(t *testing.T) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces, a veth and nftables rules, and to run the shim and probes as other uids (CI runs as root)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux) to run the shim and probes in the agent namespace")
	}
	b := make([]byte, 2)
	rand.Read(b)
	id := hex.EncodeToString(b)
	r := &rig{sinks: map[string]*sink{}}
	agentName := "sbxtest-podnet-agent-" + id
	r.agentNs = sandboxtest.NamedNetns(t, agentName)
	r.gwNs = sandboxtest.NamedNetns(t, "sbxtest-podnet-gw-"+id)
	r.agentPath = "/var/run/netns/" + agentName

	x := b[0]
	r.gw = netip.AddrFrom4([4]byte{10, 99, x, 1})
	agent := netip.AddrFrom4([4]byte{10, 99, x, 2})
	r.gw6 = netip.MustParseAddr(fmt.Sprintf("fd00:99:%x::1", x))
	agent6 := netip.MustParseAddr(fmt.Sprintf("fd00:99:%x::2", x))
	r.web = netip.MustParseAddrPort("203.0.113.7:80")
	r.dns = netip.MustParseAddrPort("198.51.100.53:53")

	ha, err := netlink.NewHandleAt(r.agentNs)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	hg, err := netlink.NewHandleAt(r.gwNs)
	if err != nil {
		t.Fatal(err)
	}
	defer hg.Close()
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "gw0",
		PeerNamespace: netlink.NsFd(int(r.gwNs))}); err != nil {
		t.Fatalf("adding the veth: %v", err)
	}
	addAddrs := func(h *netlink.Handle, dev string, prefixes ...netip.Prefix) {
		t.Helper()
		l, err := h.LinkByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prefixes {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
				Flags: unix.IFA_F_NODAD}
			if err := h.AddrAdd(l, a); err != nil {
				t.Fatalf("adding %v to %s: %v", p, dev, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	addAddrs(ha, "eth0", netip.PrefixFrom(agent, 24), netip.PrefixFrom(agent6, 64))
	addAddrs(hg, "gw0", netip.PrefixFrom(r.gw, 24), netip.PrefixFrom(r.gw6, 64))
	// The outside addresses are the gateway side's own: the agent's
	// default route sends them there.
	addAddrs(hg, "lo", netip.PrefixFrom(r.web.Addr(), 32), netip.PrefixFrom(r.dns.Addr(), 32))
	eth0, err := ha.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ha.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: r.gw.AsSlice()}); err != nil {
		t.Fatalf("adding the agent's default route: %v", err)
	}
	// ICMP datagram sockets for every gid, so a probe without
	// capabilities can ping (and the test, from the other side).
	for _, ns := range []netns.NsHandle{r.agentNs, r.gwNs} {
		if err := inNetns(ns, func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
	}

	sinkFor := func(name string) *sink {
		s := &sink{name: name}
		r.sinks[name] = s
		return s
	}
	tcp := func(ns netns.NsHandle, a netip.AddrPort) net.Listener {
		t.Helper()
		var ln net.Listener
		if err := inNetns(ns, func() (err error) { ln, err = net.Listen("tcp", a.String()); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	udp := func(ns netns.NsHandle, a netip.AddrPort) net.PacketConn {
		t.Helper()
		var pc net.PacketConn
		if err := inNetns(ns, func() (err error) { pc, err = net.ListenPacket("udp", a.String()); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		return pc
	}
	at := func(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
	// The gateway's stand-ins.
	sinkFor("proxy").serveStream(tcp(r.gwNs, at(r.gw, DefaultProxyPort)))
	sinkFor("capture").serveStream(tcp(r.gwNs, at(r.gw, DefaultCapturePort)))
	sinkFor("dns-tcp").serveStream(tcp(r.gwNs, at(r.gw, DefaultDNSPort)))
	sinkFor("dns-udp").servePackets(udp(r.gwNs, at(r.gw, DefaultDNSPort)))
	// The controls: what the agent reaches without the rules.
	sinkFor("gw-api").serveStream(tcp(r.gwNs, at(r.gw, 8484)))
	sinkFor("web").serveStream(tcp(r.gwNs, r.web))
	sinkFor("web-udp").servePackets(udp(r.gwNs, at(r.web.Addr(), 9999)))
	sinkFor("outside-dns-tcp").serveStream(tcp(r.gwNs, r.dns))
	sinkFor("outside-dns-udp").servePackets(udp(r.gwNs, r.dns))
	sinkFor("v6-tcp").serveStream(tcp(r.gwNs, at(r.gw6, 80)))
	sinkFor("v6-udp").servePackets(udp(r.gwNs, at(r.gw6, 80)))
	ln := tcp(r.agentNs, netip.MustParseAddrPort("127.0.0.1:0"))
	r.loop = netip.MustParseAddrPort(ln.Addr().String())
	sinkFor("loopback").serveStream(ln)
	// Listeners on the agent's own addresses, for the attempts from
	// outside.
	r.inbound = []inboundCase{
		{name: "TCP to the agent's address", network: "tcp", addr: at(agent, 7000), sink: "agent-inbound-tcp"},
		{name: "UDP to the agent's address", network: "udp", addr: at(agent, 7001), sink: "agent-inbound-udp"},
		{name: "UDP to the agent's IPv6 address", network: "udp", addr: at(agent6, 7001), sink: "agent-inbound-udp6"},
		{name: "ICMP echo to the agent's address", network: "ping4", addr: at(agent, 0), sink: "echo"},
	}
	for _, in := range r.inbound {
		switch in.network {
		case "tcp":
			sinkFor(in.sink).serveStream(tcp(r.agentNs, in.addr))
		case "udp":
			sinkFor(in.sink).servePackets(udp(r.agentNs, in.addr))
		}
	}

	r.exe = shareExecutable(t)
	r.warmUp(t)
	return r
}

// warmUp waits until the agent side reaches the other over IPv4 and IPv6
// (a veth just up may lose the first packets: a probe's first SYN, whose
// retransmission comes a second later), and forgets those attempts.
func (r *rig) warmUp(t *testing.T) {
	t.Helper()
	for _, a := range []netip.AddrPort{r.web, netip.AddrPortFrom(r.gw6, 80)} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if ierr := inNetns(r.agentNs, func() error {
				var c net.Conn
				c, err = net.DialTimeout("tcp", a.String(), 200*time.Millisecond)
				if err == nil {
					c.Close()
				}
				return nil
			}); ierr != nil {
				t.Fatal(ierr)
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent side does not reach %v: %v", a, err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, s := range r.sinks {
		s.take()
	}
}

// inNetns runs fn on a thread in ns.
func inNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// shareExecutable copies the test binary where other uids can run it
// (go test's own directory is private to root), removed when t ends.
func shareExecutable(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbx-podnet-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	exe := filepath.Join(dir, "podnet.test")
	out, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return exe
}

// helper returns the command that runs the test binary as helper part
// with arg, in the agent namespace as uid (and gid) uid.
func (r *rig) helper(part, arg string, uid int) *exec.Cmd {
	// nsenter enters the namespace as root, then takes the uid: a
	// process started as uid could not enter it.
	cmd := exec.Command("nsenter", "--net="+r.agentPath, fmt.Sprintf("--setuid=%d", uid), fmt.Sprintf("--setgid=%d", uid),
		"--", r.exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+part, helperArg+"="+arg)
	return cmd
}

// startShim runs the shim in the agent namespace as the shim's uid until
// t ends.
func (r *rig) startShim(t *testing.T) {
	t.Helper()
	cmd := r.helper("shim", netip.AddrPortFrom(r.gw, DefaultCapturePort).String(), DefaultShimUID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		// The shim writes errors alone: here, only the connections made
		// to it directly.
		for line := range strings.Lines(stderr.String()) {
			if !strings.Contains(line, "was not redirected; closed") {
				t.Errorf("the shim wrote %q; want nothing but the errors of connections not redirected", line)
			}
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("the shim did not start: %q; stderr %q", line, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shim did not say ready within 10s")
	}
}

// probeAs makes the probes from the agent namespace as uid, one after the
// other, and returns their results by ID.
func (r *rig) probeAs(t *testing.T, uid int, ps []probe) map[string]probeResult {
	t.Helper()
	arg, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	cmd := r.helper("probe", string(arg), uid)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probes as uid %d: %v; stderr %q", uid, err, stderr.String())
	}
	var rs []probeResult
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("probes as uid %d: %v in %q", uid, err, out)
	}
	m := map[string]probeResult{}
	for _, res := range rs {
		m[res.ID] = res
	}
	return m
}

// podCase is one attempt from the agent pod and where it must land with
// no rules (control) and with the rules and the shim (ruled): a sink's
// name, or "" for refused at once.
type podCase struct {
	name           string
	uid            int
	network, addr  string
	control, ruled string
	// closedByShim marks the connection the shim closes: it was not
	// refused, but closed once made.
	closedByShim bool
	// dst is the destination the capture stand-in must be handed, when
	// ruled is "capture".
	dst netip.AddrPort
}

func (r *rig) cases() []podCase {
	gw := func(port uint16) string { return netip.AddrPortFrom(r.gw, port).String() }
	gw6 := func(port uint16) string { return netip.AddrPortFrom(r.gw6, port).String() }
	return []podCase{
		{name: "direct TCP to an outside web server", uid: agentUID, network: "tcp", addr: r.web.String(), control: "web", ruled: "capture", dst: r.web},
		{name: "DNS over UDP to an outside server", uid: agentUID, network: "udp", addr: r.dns.String(), control: "outside-dns-udp", ruled: "dns-udp"},
		{name: "DNS over TCP to an outside server", uid: agentUID, network: "tcp", addr: r.dns.String(), control: "outside-dns-tcp", ruled: "dns-tcp"},
		{name: "the gateway's proxy port", uid: agentUID, network: "tcp", addr: gw(DefaultProxyPort), control: "proxy", ruled: "proxy"},
		{name: "the gateway's DNS port over UDP", uid: agentUID, network: "udp", addr: gw(DefaultDNSPort), control: "dns-udp", ruled: "dns-udp"},
		{name: "loopback", uid: agentUID, network: "tcp", addr: r.loop.String(), control: "loopback", ruled: "loopback"},
		// Nothing listens there without the rules; with them, the shim
		// closes a connection that was not redirected to it.
		{name: "the shim's port, not redirected", uid: agentUID, network: "tcp", addr: fmt.Sprintf("127.0.0.1:%d", DefaultShimPort), closedByShim: true},
		{name: "UDP to another port", uid: agentUID, network: "udp", addr: netip.AddrPortFrom(r.web.Addr(), 9999).String(), control: "web-udp"},
		{name: "ICMP echo", uid: agentUID, network: "ping4", addr: netip.AddrPortFrom(r.web.Addr(), 0).String(), control: "echo"},
		{name: "TCP to the gateway's API port", uid: agentUID, network: "tcp", addr: gw(8484), control: "gw-api"},
		{name: "TCP to the gateway's capture port, not as the shim", uid: agentUID, network: "tcp", addr: gw(DefaultCapturePort), control: "capture"},
		{name: "TCP over IPv6", uid: agentUID, network: "tcp", addr: gw6(80), control: "v6-tcp"},
		{name: "UDP over IPv6", uid: agentUID, network: "udp", addr: gw6(80), control: "v6-udp"},
		{name: "ICMPv6 echo", uid: agentUID, network: "ping6", addr: gw6(0), control: "echo"},
		{name: "the shim's uid, direct TCP to an outside web server", uid: DefaultShimUID, network: "tcp", addr: r.web.String(), control: "web"},
		{name: "the shim's uid, the gateway's proxy port", uid: DefaultShimUID, network: "tcp", addr: gw(DefaultProxyPort), control: "proxy"},
		{name: "the shim's uid, DNS over UDP to an outside server", uid: DefaultShimUID, network: "udp", addr: r.dns.String(), control: "outside-dns-udp"},
	}
}

// check makes every case from the agent namespace and checks it landed
// where want says: the answering sink's reply (with "eof" for TCP, so
// half-closes went through), that sink having seen the case's bytes (and,
// for the capture stand-in, the case's destination), and no sink having
// seen anything else; or, for "", an error within fastFailure. It also
// makes the inbound attempts, from the gateway's side: with inboundOpen,
// each must be answered by its sink; without, each must fail and its sink
// see nothing.
func (r *rig) check(t *testing.T, phase string, want func(podCase) string, inboundOpen bool) {
	t.Helper()
	for _, s := range r.sinks {
		s.take()
	}
	cs := r.cases()
	byUID := map[int][]probe{}
	ids := map[string]podCase{}
	for i, c := range cs {
		id := fmt.Sprintf("%s-%d", phase, i)
		ids[id] = c
		byUID[c.uid] = append(byUID[c.uid], probe{ID: id, Network: c.network, Addr: c.addr})
	}
	results := map[string]probeResult{}
	for uid, ps := range byUID {
		for id, res := range r.probeAs(t, uid, ps) {
			results[id] = res
		}
	}
	// Attempts into the agent from its gateway's side of the veth: the
	// pod takes none, whether or not the cluster enforces NetworkPolicy.
	// A dropped attempt takes probeWait: they are made together.
	inboundIDs := map[string]inboundCase{}
	var wg sync.WaitGroup
	for i, in := range r.inbound {
		id := fmt.Sprintf("%s-inbound-%d", phase, i)
		inboundIDs[id] = in
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := dialFrom(r.gwNs, in.network, in.addr, id)
			t.Logf("%s: %s (%s %s from outside): reply %q, error %v", phase, in.name, in.network, in.addr, reply, err)
			wantReply := in.sink
			if in.network == "tcp" {
				wantReply += " eof"
			}
			switch {
			case inboundOpen && (err != nil || reply != wantReply):
				t.Errorf("%s: %s (%s %s from outside): got reply %q, error %v; want reply %q", phase, in.name, in.network, in.addr, reply, err, wantReply)
			case !inboundOpen && err == nil:
				t.Errorf("%s: %s (%s %s from outside): got reply %q; want it to fail: nothing outside may open a connection to the agent", phase, in.name, in.network, in.addr, reply)
			}
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // sinks record before they answer; this is for strays
	seen := map[string][]hit{}
	for name, s := range r.sinks {
		seen[name] = s.take()
	}
	for id, c := range ids {
		res, w := results[id], want(c)
		t.Logf("%s: %s (%s %s as uid %d): reply %q, error %q, after %v", phase, c.name, c.network, c.addr, c.uid, res.Reply, res.Err, res.Elapsed.Round(time.Microsecond))
		switch {
		case w == "":
			if res.Err == "" {
				t.Errorf("%s: %s (%s %s as uid %d): got reply %q, want it refused", phase, c.name, c.network, c.addr, c.uid, res.Reply)
			} else if res.Elapsed >= fastFailure {
				t.Errorf("%s: %s (%s %s as uid %d): refused after %v (%s), want under %v: a refusal must not hang",
					phase, c.name, c.network, c.addr, c.uid, res.Elapsed, res.Err, fastFailure)
			} else if c.network == "tcp" && !c.closedByShim && res.Errno != "ECONNREFUSED" {
				t.Errorf("%s: %s (%s %s as uid %d): refused with %q, want ECONNREFUSED (a TCP reset)", phase, c.name, c.network, c.addr, c.uid, res.Err)
			}
		default:
			wantReply := w
			if c.network == "tcp" {
				wantReply += " eof"
			}
			if res.Err != "" || res.Reply != wantReply {
				t.Errorf("%s: %s (%s %s as uid %d): got reply %q, error %q; want reply %q",
					phase, c.name, c.network, c.addr, c.uid, res.Reply, res.Err, wantReply)
			}
		}
	}
	// Every sink saw exactly the cases meant for it.
	for name, hits := range seen {
		for _, h := range hits {
			c, ok := ids[h.marker]
			switch {
			case inboundIDs[h.marker].sink == name:
				if !inboundOpen {
					t.Errorf("%s: %s (from outside) reached the agent's sink %s; want nothing to come in", phase, inboundIDs[h.marker].name, name)
				}
			case !ok:
				t.Errorf("%s: sink %s got %q, no case's bytes", phase, name, h.marker)
			case want(c) != name:
				t.Errorf("%s: %s (%s %s as uid %d) reached sink %s, want %q", phase, c.name, c.network, c.addr, c.uid, name, want(c))
			case name == "capture" && c.dst.IsValid() && h.dst != c.dst:
				t.Errorf("%s: %s: the capture port was handed destination %v, want %v", phase, c.name, h.dst, c.dst)
			}
		}
	}
	for id, c := range ids {
		if w := want(c); w != "" && w != "echo" && !hasMarker(seen[w], id) {
			t.Errorf("%s: %s (%s %s as uid %d): sink %s did not see its bytes", phase, c.name, c.network, c.addr, c.uid, w)
		}
	}
}

// dialFrom makes an attempt, as a probe does, from namespace ns.
func dialFrom(ns netns.NsHandle, network string, a netip.AddrPort, id string) (string, error) {
	var reply string
	err := inNetns(ns, func() (err error) {
		reply, err = attempt(probe{ID: id, Network: network, Addr: a.String()})
		return err
	})
	return reply, err
}

func hasMarker(hits []hit, m string) bool {
	for _, h := range hits {
		if h.marker == m {
			return true
		}
	}
	return false
}

// TestPrivilegedPodRules shows the in-pod rules and the shim together:
// with them, direct TCP reaches the gateway's capture port with a handoff
// header naming its destination, DNS to anywhere reaches the gateway's
// DNS port, everything else fails at once, and nothing from outside
// (TCP, UDP, ping, from the gateway's side) gets into the agent; without
// them (the control), every one of the same attempts reaches its target,
// so a refusal is the rules' doing, not a missing route or a silent
// listener.
func TestPrivilegedPodRules(t *testing.T) {
	r := newRig(t)
	r.check(t, "control", func(c podCase) string { return c.control }, true)

	if err := inNetns(r.agentNs, func() error { return Install(DefaultRules(r.gw)) }); err != nil {
		t.Fatal(err)
	}
	r.startShim(t)
	r.check(t, "ruled", func(c podCase) string { return c.ruled }, false)

	// Installed again, the rules still hold (replaced, not doubled).
	if err := inNetns(r.agentNs, func() error { return Install(DefaultRules(r.gw)) }); err != nil {
		t.Fatal(err)
	}
	r.check(t, "reinstalled", func(c podCase) string { return c.ruled }, false)
}

var update = flag.Bool("update", false, "rewrite testdata/ruleset.nft with what nft lists")

// TestPrivilegedPodRulesRuleset installs the rules twice in a namespace
// of its own, beside a table of someone else's, and reads them back
// through nftables: one copy of each table, the chains and rules in
// their order (by their comments), the other table untouched; and, where
// nft is installed, the rule set as nft lists it, against
// testdata/ruleset.nft (go test -run TestPrivilegedPodRulesRuleset -update
// rewrites it).
func TestPrivilegedPodRulesRuleset(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace and nftables rules (CI runs as root)")
	}
	b := make([]byte, 2)
	rand.Read(b)
	name := "sbxtest-podnet-rules-" + hex.EncodeToString(b)
	ns := sandboxtest.NamedNetns(t, name)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	other := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "other"})
	c.AddChain(&nftables.Chain{Name: "mine", Table: other})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	rules := DefaultRules(netip.MustParseAddr("10.99.0.1"))
	for i := 0; i < 2; i++ {
		if err := inNetns(ns, func() error { return Install(rules) }); err != nil {
			t.Fatalf("install %d: %v", i+1, err)
		}
	}

	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var gotTables []string
	for _, tb := range tables {
		gotTables = append(gotTables, fmt.Sprintf("%d %s", tb.Family, tb.Name))
	}
	slices.Sort(gotTables)
	wantTables := []string{
		fmt.Sprintf("%d other", nftables.TableFamilyIPv4),
		fmt.Sprintf("%d %s", nftables.TableFamilyIPv4, TableName),
		fmt.Sprintf("%d %s", nftables.TableFamilyIPv6, TableName),
	}
	slices.Sort(wantTables)
	if !slices.Equal(gotTables, wantTables) {
		t.Errorf("tables (family name): got %q, want %q", gotTables, wantTables)
	}

	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, ch := range chains {
		key := fmt.Sprintf("%d %s %s", ch.Table.Family, ch.Table.Name, ch.Name)
		rs, err := c.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		got[key] = []string{}
		for _, r := range rs {
			comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			got[key] = append(got[key], comment)
		}
	}
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6
	want := map[string][]string{
		fmt.Sprintf("%d other mine", v4): {},
		fmt.Sprintf("%d %s nat-output", v4, TableName): {
			"sbx: loopback stays",
			"sbx: the shim's own connections are not captured",
			"sbx: DNS to anywhere goes to the gateway",
			"sbx: DNS to anywhere goes to the gateway",
			"sbx: the gateway's own ports are filtered, not captured",
			"sbx: other TCP goes to the capture shim",
		},
		fmt.Sprintf("%d %s output", v4, TableName): {
			"sbx: loopback",
			"sbx: connections redirected to the shim",
			"sbx: the shim reaches the capture port",
			"sbx: and nothing else",
			"sbx: and nothing else",
			"sbx: the gateway's proxy",
			"sbx: the gateway's DNS",
			"sbx: the gateway's DNS",
			"sbx: the rest fails at once",
			"sbx: the rest fails at once",
		},
		fmt.Sprintf("%d %s input", v4, TableName): {
			"sbx: loopback",
			"sbx: replies to the pod's own connections",
			"sbx: nothing else comes in",
		},
		fmt.Sprintf("%d %s forward", v4, TableName): {"sbx: the pod forwards nothing"},
		fmt.Sprintf("%d %s output", v6, TableName): {
			"sbx: loopback",
			"sbx: the rest fails at once",
			"sbx: the rest fails at once",
		},
		fmt.Sprintf("%d %s input", v6, TableName): {
			"sbx: loopback",
			"sbx: nothing else comes in",
		},
		fmt.Sprintf("%d %s forward", v6, TableName): {"sbx: the pod forwards nothing"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("chains and their rules' comments after two installs (-want +got):\n%s", d)
	}

	if _, err := exec.LookPath("nft"); err != nil {
		t.Log("nft is not installed: the rule set as nft lists it is not checked")
		return
	}
	// nft's wording changes between its versions: the listing is
	// compared only with the version that wrote it (its first line).
	version, err := exec.Command("nft", "--version").Output()
	if err != nil {
		t.Fatalf("nft --version: %v", err)
	}
	listed := []byte("# " + strings.TrimSpace(string(version)) + "\n")
	for _, fam := range []string{"ip", "ip6"} {
		out, err := exec.Command("nsenter", "--net=/var/run/netns/"+name, "nft", "list", "table", fam, TableName).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list table %s %s: %v\n%s", fam, TableName, err, out)
		}
		listed = append(listed, out...)
	}
	golden := filepath.Join("testdata", "ruleset.nft")
	if *update {
		if err := os.WriteFile(golden, listed, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantListed, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	wantVersion, _, _ := strings.Cut(string(wantListed), "\n")
	gotVersion, _, _ := strings.Cut(string(listed), "\n")
	if gotVersion != wantVersion {
		t.Logf("%s was written by %s, this is %s: its listing is not compared (-update rewrites it)", golden, wantVersion[2:], gotVersion[2:])
		return
	}
	if d := cmp.Diff(string(wantListed), string(listed)); d != "" {
		t.Errorf("nft list (-%s +got); rerun with -update if the change is meant:\n%s", golden, d)
	}
}
