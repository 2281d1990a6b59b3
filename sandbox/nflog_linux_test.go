package sandbox

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// packetReport returns one nfnetlink_log packet message carrying seq and
// payload, as the kernel sends it.
func packetReport(seq uint32, payload []byte) []byte {
	return appendNetlinkMsg(nil, nfulnlMsgPacket, 0, 0, []byte{unix.AF_INET, 0, 0, 7},
		attr{1, []byte{8, 0, 3, 0}}, // NFULA_PACKET_HDR: IPv4, OUTPUT
		attr{nfulaPayload, payload},
		attr{nfulaSeq, binary.BigEndian.AppendUint32(nil, seq)})
}

// TestPacketLogDispatch checks, without root, how Run turns datagrams
// into packets and counts losses: gaps in the sequence numbers, and one
// for an overrun that no report has shown yet, not counted twice.
func TestPacketLogDispatch(t *testing.T) {
	udp := ipv4Packet(17, "10.0.0.2", "8.8.8.8", ports(40000, 53)...)
	want := Packet{"udp", netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("8.8.8.8:53"), -1}
	var l PacketLog
	var got []Packet
	fn := func(p Packet) { got = append(got, p) }

	// A batch of three, then NLMSG_DONE, as the kernel ends a batch.
	batch := append(append(packetReport(0, udp), packetReport(1, udp)...), packetReport(2, udp)...)
	batch = appendNetlinkMsg(batch, unix.NLMSG_DONE, unix.NLM_F_MULTI, 0, []byte{0, 0, 0, 0})
	l.dispatch(batch, fn)
	if len(got) != 3 || l.Lost() != 0 {
		t.Fatalf("a batch of 3: got %d packets, %d lost; want 3, 0", len(got), l.Lost())
	}
	if diff := cmp.Diff(want, got[0], cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("packet (-want +got):\n%s", diff)
	}

	l.dispatch(packetReport(10, udp), fn) // 3..9 lost
	if l.Lost() != 7 {
		t.Errorf("after a gap of 7: Lost() = %d, want 7", l.Lost())
	}

	// An overrun counts one at once, and the gap that shows it later
	// adds the rest.
	// The reports queued before the overrun come first, without a gap.
	l.lost.Add(1)
	l.credit = true
	l.dispatch(packetReport(11, udp), fn)
	if l.Lost() != 8 {
		t.Errorf("after an overrun: Lost() = %d, want 8", l.Lost())
	}
	l.dispatch(packetReport(16, udp), fn) // 12..15 lost
	if l.Lost() != 11 {
		t.Errorf("after an overrun and a gap of 4: Lost() = %d, want 11", l.Lost())
	}
	l.dispatch(packetReport(18, udp), fn) // 17 lost
	if l.Lost() != 12 {
		t.Errorf("after another gap of 1: Lost() = %d, want 12", l.Lost())
	}

	// Malformed datagrams are skipped, not read past their end.
	l.dispatch(packetReport(19, udp)[:20], fn)
	l.dispatch([]byte{255, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, fn)
	if len(got) != 7 {
		t.Errorf("got %d packets, want 7", len(got))
	}

	report := packetReport(19, udp)
	if n := testing.AllocsPerRun(100, func() {
		l.dispatch(report, func(Packet) {})
		l.nextSeq = 19
	}); n != 0 {
		t.Errorf("dispatch allocates %v times per report, want 0", n)
	}
}

// testNetns makes a network namespace for t alone, named after it, with
// lo up, and removes it when t ends (also before, should a crashed run
// have left one of the same name). It skips t unless run as root. It
// returns the namespace and its path.
func testNetns(t testing.TB, name string) (netns.NsHandle, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and iptables rules (CI runs as root)")
	}
	id, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	name = "sbxtest-" + name + "-" + id
	return sandboxtest.NamedNetns(t, name), "/var/run/netns/" + name
}

// addLink adds a veth pair to ns, both ends in it and up, with the
// given addresses on the first end (IPv6 ones without duplicate address
// detection, so that they are usable at once). Packets routed to its
// subnets go nowhere; the namespace's rules see them first.
func addLink(t testing.TB, ns netns.NsHandle, name string, prefixes ...string) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatalf("adding veth %s: %v", name, err)
	}
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := h.LinkByName(name + "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prefixes {
		a, err := netlink.ParseAddr(p)
		if err != nil {
			t.Fatal(err)
		}
		a.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(link, a); err != nil {
			t.Fatalf("adding %s to %s: %v", p, name, err)
		}
	}
	for _, l := range []netlink.Link{peer, link} {
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}

// runIn runs a command in ns and fails t if it fails.
func runIn(t testing.TB, ns netns.NsHandle, name string, args ...string) {
	t.Helper()
	err := inNetns(ns, func() error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return errors.New(strings.Join(append([]string{name}, args...), " ") + ": " + err.Error() + ": " + string(out))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// socketIn opens a socket in ns; it is closed when t ends.
func socketIn(t testing.TB, ns netns.NsHandle, domain, typ, proto int) int {
	t.Helper()
	fd := -1
	err := inNetns(ns, func() error {
		var err error
		fd, err = unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		return err
	})
	if err != nil {
		t.Fatalf("opening a socket in the test namespace: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

func localPort(t testing.TB, fd int) uint16 {
	t.Helper()
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return uint16(sa.Port)
	case *unix.SockaddrInet6:
		return uint16(sa.Port)
	}
	t.Fatalf("getsockname: %T", sa)
	return 0
}

// sendTo sends b from fd to dst. The namespace's REJECT makes sendto
// fail with EPERM, which is what is expected.
func sendTo(t testing.TB, fd int, b []byte, dst netip.AddrPort) {
	t.Helper()
	if err := unix.Sendto(fd, b, 0, sockaddr(dst)); err != nil && !errors.Is(err, unix.EPERM) {
		t.Fatalf("sending to %v: %v", dst, err)
	}
}

// collector gathers what Run reports.
type collector struct {
	mu      sync.Mutex
	packets []Packet
}

func (c *collector) add(p Packet) {
	c.mu.Lock()
	c.packets = append(c.packets, p)
	c.mu.Unlock()
}

// wait returns the first packet for which match holds, waiting up to 5 s.
func (c *collector) wait(match func(Packet) bool) (Packet, bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		for _, p := range c.packets {
			if match(p) {
				c.mu.Unlock()
				return p, true
			}
		}
		c.mu.Unlock()
	}
	return Packet{}, false
}

// runLog starts l.Run(fn) and, when t ends, closes l and checks that Run
// returned nil within a second.
func runLog(t testing.TB, l *PacketLog, fn func(Packet)) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Run(fn) }()
	t.Cleanup(func() {
		l.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(time.Second):
			t.Errorf("Run did not return within a second of Close")
		}
	})
}

const testNFLOGGroup = 7

// TestPrivilegedPacketLog logs UDP, ICMP and TCP over IPv4, and UDP and
// ICMPv6 over IPv6, from a throwaway namespace whose rules NFLOG and
// REJECT them, and expects each packet reported with its protocol,
// addresses and ports or ICMP type. The packets are sent from sockets
// made in the namespace, to a veth's subnet.
func TestPrivilegedPacketLog(t *testing.T) {
	ns, path := testNetns(t, "nflog")
	addLink(t, ns, "sbxtest0", "192.0.2.1/24", "2001:db8::1/64")
	group := "--nflog-group=7"
	for _, r := range [][]string{
		{"iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "NFLOG", group, "--nflog-size", "128"},
		{"iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "REJECT"},
		{"iptables", "-w", "-A", "OUTPUT", "-p", "icmp", "--icmp-type", "echo-request", "-j", "NFLOG", group},
		{"iptables", "-w", "-A", "OUTPUT", "-p", "icmp", "--icmp-type", "echo-request", "-j", "REJECT"},
		{"iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "--dport", "9", "-j", "NFLOG", group},
		{"iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "--dport", "9", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"ip6tables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "NFLOG", group, "--nflog-size", "128"},
		{"ip6tables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "REJECT"},
		{"ip6tables", "-w", "-A", "OUTPUT", "-p", "ipv6-icmp", "--icmpv6-type", "echo-request", "-j", "NFLOG", group},
		{"ip6tables", "-w", "-A", "OUTPUT", "-p", "ipv6-icmp", "--icmpv6-type", "echo-request", "-j", "REJECT"},
	} {
		runIn(t, ns, r[0], r[1:]...)
	}

	l, err := OpenPacketLog(path, testNFLOGGroup)
	if err != nil {
		t.Fatal(err)
	}
	var c collector
	runLog(t, l, c.add)

	ap := netip.MustParseAddrPort
	udp4 := socketIn(t, ns, unix.AF_INET, unix.SOCK_DGRAM, 0)
	sendTo(t, udp4, []byte("hello"), ap("192.0.2.2:5353"))
	icmp4 := socketIn(t, ns, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	sendTo(t, icmp4, []byte{8, 0, 0xf7, 0xfe, 0, 1, 0, 0}, ap("192.0.2.2:0")) // echo request, checksummed
	tcp4 := socketIn(t, ns, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err := unix.Connect(tcp4, sockaddr(ap("192.0.2.2:9"))); err != nil && !errors.Is(err, unix.EINPROGRESS) && !errors.Is(err, unix.EPERM) {
		t.Fatalf("connecting: %v", err)
	}
	udp6 := socketIn(t, ns, unix.AF_INET6, unix.SOCK_DGRAM, 0)
	sendTo(t, udp6, []byte("hello"), ap("[2001:db8::2]:123"))
	icmp6 := socketIn(t, ns, unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6) // the kernel sums ICMPv6
	sendTo(t, icmp6, []byte{128, 0, 0, 0, 0, 1, 0, 1}, ap("[2001:db8::2]:0"))

	for _, want := range []Packet{
		{"udp", netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), localPort(t, udp4)), ap("192.0.2.2:5353"), -1},
		{"icmp", ap("192.0.2.1:0"), ap("192.0.2.2:0"), 8},
		{"tcp", netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), localPort(t, tcp4)), ap("192.0.2.2:9"), -1},
		{"udp", netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1"), localPort(t, udp6)), ap("[2001:db8::2]:123"), -1},
		{"icmpv6", ap("[2001:db8::1]:0"), ap("[2001:db8::2]:0"), 128},
	} {
		if _, ok := c.wait(func(p Packet) bool { return p == want }); !ok {
			c.mu.Lock()
			t.Errorf("no report of %+v; got %+v", want, c.packets)
			c.mu.Unlock()
		}
	}
	if l.Lost() != 0 {
		t.Errorf("Lost() = %d, want 0", l.Lost())
	}
}

// TestPrivilegedPacketLogFlood sends 100 000 UDP packets through the
// NFLOG rule, then one marker, and expects Run to keep going and every
// packet to be reported or counted lost. Once with a reader that keeps
// up as best it can, once with one that stalls until the flood is over,
// which must lose reports and count them.
func TestPrivilegedPacketLogFlood(t *testing.T) {
	const flood = 100_000
	for _, stall := range []bool{false, true} {
		name := "reading"
		if stall {
			name = "stalled"
		}
		t.Run(name, func(t *testing.T) {
			ns, path := testNetns(t, "flood")
			addLink(t, ns, "sbxtest0", "192.0.2.1/24")
			runIn(t, ns, "iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "NFLOG", "--nflog-group=7", "--nflog-size=128")
			runIn(t, ns, "iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "REJECT")
			l, err := OpenPacketLog(path, testNFLOGGroup)
			if err != nil {
				t.Fatal(err)
			}
			var (
				received atomic.Uint64
				marker   = make(chan struct{})
				sent     = make(chan struct{})
				once     sync.Once
			)
			markerDst := netip.MustParseAddrPort("192.0.2.2:2")
			runLog(t, l, func(p Packet) {
				if stall {
					<-sent
				}
				received.Add(1)
				if p.Dst == markerDst {
					once.Do(func() { close(marker) })
				}
			})

			fd := socketIn(t, ns, unix.AF_INET, unix.SOCK_DGRAM, 0)
			dst := sockaddr(netip.MustParseAddrPort("192.0.2.2:1"))
			start := time.Now()
			for range flood {
				if err := unix.Sendto(fd, []byte("x"), 0, dst); err != nil && !errors.Is(err, unix.EPERM) {
					t.Fatalf("sending: %v", err)
				}
			}
			t.Logf("sent %d packets in %v", flood, time.Since(start))
			close(sent)
			// A marker ends the flood. Reports are dropped whole batches at
			// a time, so the marker too may be lost: it is sent again until
			// one arrives. The first report after the losses shows them.
			markers := 0
			for deadline := time.Now().Add(10 * time.Second); ; {
				sendTo(t, fd, []byte("end"), markerDst)
				markers++
				select {
				case <-marker:
				case <-time.After(100 * time.Millisecond):
					if time.Now().Before(deadline) {
						continue
					}
					t.Fatalf("no marker after the flood was reported within 10 s; %d reports received, %d lost", received.Load(), l.Lost())
				}
				break
			}
			time.Sleep(100 * time.Millisecond) // for a second marker in flight
			got, lost := received.Load(), l.Lost()
			t.Logf("%d reports received, %d lost, of %d packets", got, lost, flood+markers)
			if got == 0 {
				t.Fatal("no report received")
			}
			// Every packet is reported or counted lost; the kernel's rare
			// allocation failures, unnumbered, are allowed for.
			if total := got + lost; total > uint64(flood+markers) || total < flood*99/100 {
				t.Errorf("received + lost = %d, want %d (allowing 1%% under)", total, flood+markers)
			}
			if stall && lost == 0 {
				t.Errorf("a reader stalled through %d packets lost none: the receive buffer cannot hold them all, so losses are not being counted", flood)
			}
		})
	}
}

// TestPrivilegedPacketLogClose checks that Close ends a Run blocked in a
// read at once, that a second listener for a held group gets an error
// that says so, and that Close releases the group.
func TestPrivilegedPacketLogClose(t *testing.T) {
	_, path := testNetns(t, "nflogclose")
	l, err := OpenPacketLog(path, testNFLOGGroup)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := OpenPacketLog(path, testNFLOGGroup); err == nil || !strings.Contains(err.Error(), "another listener") {
		t.Errorf("a second listener for group %d: %v, want an error naming another listener", testNFLOGGroup, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(func(Packet) {}) }()
	time.Sleep(100 * time.Millisecond) // let Run block
	if err := l.Run(func(Packet) {}); err == nil {
		t.Error("a second Run at once: nil error, want one")
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v, want nil", err)
		}
		t.Logf("Run returned %v after Close", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("Run did not return within a second of Close")
	}
	if err := l.Run(func(Packet) {}); err != nil {
		t.Errorf("Run after Close: %v, want nil", err)
	}
	l2, err := OpenPacketLog(path, testNFLOGGroup)
	if err != nil {
		t.Fatalf("listening again after Close: %v", err)
	}
	l2.Close()

	if _, err := OpenPacketLog("/var/run/netns/sbxtest-missing", 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing namespace: %v, want an error wrapping os.ErrNotExist", err)
	}
}
