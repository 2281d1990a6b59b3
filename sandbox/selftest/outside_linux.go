package selftest

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The "outside" of sbx selftest: a network namespace of its own, reached
// from the host through a veth pair, with servers that answer with a
// secret and count what reaches them while the probe runs.

// outsidePool is where the outside's /30 comes from: next to the
// sandboxes' default pool, clear of every address of the host.
var outsidePool = netip.MustParsePrefix("10.214.0.0/16")

// OutsideNetnsPrefix names the outside's network namespace,
// sbxst-<pid>-<tag>: the pid of the process whose Run made it, so that
// the next Run removes one whose maker died (sbx gc does not look at it:
// it is no sandbox's).
const OutsideNetnsPrefix = "sbxst-"

// Ports of the outside's servers, in its own namespace.
const (
	portTCPByAddr = 4001 // TCP, for the probe by address
	portTCPByName = 4002 // TCP, for the probe by name
	portUDP       = 4003
	portIPv6      = 4004 // TCP and UDP on the IPv6 address
	portOther     = 4005 // TCP in the second sandbox's namespace, on its address
	portHTTP      = 8080 // HTTP, allowed to the probed sandbox by name
	portOtherHTTP = 8081 // HTTP, allowed to the second sandbox only
	portDNS       = 53
)

// hitCounter counts what reaches a server: all of it, and what came
// while probing was set (the controls, made before, did not).
type hitCounter struct {
	probing     *atomic.Bool
	all, probed atomic.Int64
}

func (h *hitCounter) hit() {
	h.all.Add(1)
	if h.probing.Load() {
		h.probed.Add(1)
	}
}

// counts returns what came while probing, and all.
func (h *hitCounter) counts() (probing, all int64) { return h.probed.Load(), h.all.Load() }

// outside is the outside made by newOutside. Close removes
// it.
type outside struct {
	netns      string // the namespace's name
	veth       string // the veth's host end
	host, addr netip.Addr
	// host6 and addr6 are the IPv6 addresses of the two ends; invalid,
	// and ipv6Off saying why, when the host has IPv6 off.
	host6, addr6 netip.Addr
	ipv6Off      string
	// secret is what every server answers with; dnsAnswer is the address
	// its DNS server answers every name with.
	secret    string
	dnsAnswer netip.Addr
	// probing is set while the probe runs: the servers count only then.
	probing atomic.Bool

	tcpByAddr, tcpByName, udp, tcp6, udp6, dnsUDP, dnsTCP, http, otherHTTP *hitCounter
	icmp                                                                   *icmpSniffer

	mu       sync.Mutex
	counters []*hitCounter // every counter made by counter()

	closers []func() error // undone in reverse by Close
}

// counter makes a hitCounter that counts while e.probing is set, and that
// resetCounts clears.
func (e *outside) counter() *hitCounter {
	h := &hitCounter{probing: &e.probing}
	e.mu.Lock()
	e.counters = append(e.counters, h)
	e.mu.Unlock()
	return h
}

// resetCounts clears every counter, for a new round of probing.
func (e *outside) resetCounts() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.counters {
		h.all.Store(0)
		h.probed.Store(0)
	}
}

// newOutside makes the outside: its namespace and veth pair (a free /30
// of outsidePool, a random IPv6 ULA /64 unless the host has IPv6 off) and
// its servers. On error nothing is left.
func newOutside() (_ *outside, retErr error) {
	sweepOutsides()
	tag := randomHex(4)
	e := &outside{
		netns:  fmt.Sprintf("%s%d-%s", OutsideNetnsPrefix, os.Getpid(), tag),
		veth:   "sbxo" + tag,
		secret: "sbx-selftest-secret-" + randomHex(8),
	}
	defer func() {
		if retErr != nil {
			if err := e.Close(); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}
	}()
	if err := e.pickAddrs(); err != nil {
		return nil, err
	}
	ns, err := sandbox.NewNamedNetns(e.netns)
	if err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", e.netns, err)
	}
	defer ns.Close()
	e.closers = append(e.closers, func() error {
		if err := netns.DeleteNamed(e.netns); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing network namespace %s: %w", e.netns, err)
		}
		return nil
	})
	if err := e.connect(ns, "sbxp"+tag); err != nil {
		return nil, err
	}
	if err := e.serve(ns); err != nil {
		return nil, err
	}
	return e, nil
}

// pickAddrs picks the outside's addresses: the DNS server's answer, a
// free /30 of outsidePool for the two ends, and a random IPv6 ULA /64.
func (e *outside) pickAddrs() error {
	e.dnsAnswer = netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + randomByte()%250)})
	subnet, err := freeOutsideSubnet()
	if err != nil {
		return err
	}
	e.host, e.addr = subnet.Addr().Next(), subnet.Addr().Next().Next()
	var ula [16]byte
	ula[0] = 0xfd
	rand.Read(ula[1:6])
	ula[15] = 1
	e.host6 = netip.AddrFrom16(ula)
	ula[15] = 2
	e.addr6 = netip.AddrFrom16(ula)
	return nil
}

// connect joins the host and ns with a veth pair (peer the end in ns),
// addresses both ends, brings them up, and routes the outside back
// through the host.
func (e *outside) connect(ns netns.NsHandle, peer string) error {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e.veth}, PeerName: peer, PeerNamespace: netlink.NsFd(ns)}); err != nil {
		return fmt.Errorf("creating veth %s: %w", e.veth, err)
	}
	e.closers = append(e.closers, func() error {
		l, err := netlink.LinkByName(e.veth)
		if err != nil {
			return nil // gone with the namespace
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("removing veth %s: %w", e.veth, err)
		}
		return nil
	})
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	hostLink, err := netlink.LinkByName(e.veth)
	if err != nil {
		return err
	}
	peerLink, err := h.LinkByName(peer)
	if err != nil {
		return err
	}
	if err := e.address(h, hostLink, peerLink); err != nil {
		return err
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, up := range []func() error{
		func() error { return h.LinkSetUp(lo) },
		func() error { return h.LinkSetUp(peerLink) },
		func() error { return netlink.LinkSetUp(hostLink) },
	} {
		if err := up(); err != nil {
			return fmt.Errorf("bringing up the outside's links: %w", err)
		}
	}
	// A way back to anywhere, as the internet would have: an answer to
	// a packet that got out would find its way.
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peerLink.Attrs().Index, Gw: e.host.AsSlice()}); err != nil {
		return fmt.Errorf("routing the outside: %w", err)
	}
	if e.addr6.IsValid() {
		if err := h.RouteAdd(&netlink.Route{LinkIndex: peerLink.Attrs().Index, Gw: e.host6.AsSlice()}); err != nil {
			return fmt.Errorf("routing the outside: %w", err)
		}
	}
	return nil
}

// address gives the veth's ends their addresses: IPv4, and IPv6 unless
// the host has it off (then ipv6Off says so, and the IPv6 addresses are
// cleared).
func (e *outside) address(h *netlink.Handle, hostLink, peerLink netlink.Link) error {
	if err := netlink.AddrAdd(hostLink, addrOf(e.host, 30, 0)); err != nil {
		return fmt.Errorf("addressing %s: %w", e.veth, err)
	}
	if err := h.AddrAdd(peerLink, addrOf(e.addr, 30, 0)); err != nil {
		return fmt.Errorf("addressing %s: %w", peerLink.Attrs().Name, err)
	}
	// IPv6 without duplicate address detection, so that the addresses
	// are there at once.
	if err := netlink.AddrAdd(hostLink, addrOf(e.host6, 64, unix.IFA_F_NODAD)); err != nil {
		e.ipv6Off = fmt.Sprintf("IPv6 is off on this host (adding an IPv6 address: %v), so nothing can be tried over it", err)
		e.host6, e.addr6 = netip.Addr{}, netip.Addr{}
	} else if err := h.AddrAdd(peerLink, addrOf(e.addr6, 64, unix.IFA_F_NODAD)); err != nil {
		return fmt.Errorf("addressing %s: %w", peerLink.Attrs().Name, err)
	}
	return nil
}

// listen opens a listener (or, for udp networks, a packet connection) on
// addr:port in ns, which Close closes.
func (e *outside) listen(ns netns.NsHandle, network string, addr netip.Addr, port int) (io.Closer, error) {
	var c io.Closer
	err := withNetns(ns, func() error {
		var err error
		hostPort := net.JoinHostPort(addr.String(), strconv.Itoa(port))
		if strings.HasPrefix(network, "udp") {
			c, err = net.ListenPacket(network, hostPort)
		} else {
			c, err = net.Listen(network, hostPort)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening in the outside: %w", err)
	}
	e.closers = append(e.closers, c.Close)
	return c, nil
}

// serve starts the outside's servers in ns.
func (e *outside) serve(ns netns.NsHandle) error {
	e.tcpByAddr, e.tcpByName, e.udp, e.dnsUDP, e.dnsTCP, e.http, e.otherHTTP = e.counter(), e.counter(), e.counter(), e.counter(), e.counter(), e.counter(), e.counter()
	if e.addr6.IsValid() {
		e.tcp6, e.udp6 = e.counter(), e.counter()
	}
	for _, serve := range []func(netns.NsHandle) error{e.serveSecrets, e.serveDNS, e.serveHTTP, e.sniffICMP} {
		if err := serve(ns); err != nil {
			return err
		}
	}
	return nil
}

// serveSecrets starts the servers that answer any line or datagram with
// the secret: TCP by address and by name, UDP, and both on IPv6.
func (e *outside) serveSecrets(ns netns.NsHandle) error {
	for _, s := range []struct {
		port int
		hits *hitCounter
	}{{portTCPByAddr, e.tcpByAddr}, {portTCPByName, e.tcpByName}} {
		ln, err := e.listen(ns, "tcp4", e.addr, s.port)
		if err != nil {
			return err
		}
		go serveBanner(ln.(net.Listener), e.secret, s.hits)
	}
	pc, err := e.listen(ns, "udp4", e.addr, portUDP)
	if err != nil {
		return err
	}
	go serveUDPSecret(pc.(net.PacketConn), e.secret, e.udp)
	if !e.addr6.IsValid() {
		return nil
	}
	ln, err := e.listen(ns, "tcp6", e.addr6, portIPv6)
	if err != nil {
		return err
	}
	go serveBanner(ln.(net.Listener), e.secret, e.tcp6)
	pc, err = e.listen(ns, "udp6", e.addr6, portIPv6)
	if err != nil {
		return err
	}
	go serveUDPSecret(pc.(net.PacketConn), e.secret, e.udp6)
	return nil
}

// serveDNS starts the DNS server, over UDP and TCP, that answers every
// name with dnsAnswer.
func (e *outside) serveDNS(ns netns.NsHandle) error {
	pc, err := e.listen(ns, "udp4", e.addr, portDNS)
	if err != nil {
		return err
	}
	go serveDNSUDP(pc.(net.PacketConn), e.dnsAnswer, e.dnsUDP)
	ln, err := e.listen(ns, "tcp4", e.addr, portDNS)
	if err != nil {
		return err
	}
	go serveDNSTCP(ln.(net.Listener), e.dnsAnswer, e.dnsTCP)
	return nil
}

// serveHTTP starts the HTTP servers the sandboxes are allowed to, which
// answer with the secret.
func (e *outside) serveHTTP(ns netns.NsHandle) error {
	for _, s := range []struct {
		port int
		hits *hitCounter
	}{{portHTTP, e.http}, {portOtherHTTP, e.otherHTTP}} {
		ln, err := e.listen(ns, "tcp4", e.addr, s.port)
		if err != nil {
			return err
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.hits.hit()
			io.WriteString(w, e.secret+"\n")
		})}
		go srv.Serve(ln.(net.Listener)) // ends when the listener closes
	}
	return nil
}

// sniffICMP starts counting the echo requests that reach the outside.
func (e *outside) sniffICMP(ns netns.NsHandle) error {
	var sniffer *icmp.PacketConn
	if err := withNetns(ns, func() error {
		var err error
		sniffer, err = icmp.ListenPacket("ip4:icmp", e.addr.String())
		return err
	}); err != nil {
		return fmt.Errorf("listening for ICMP in the outside: %w", err)
	}
	e.closers = append(e.closers, sniffer.Close)
	e.icmp = &icmpSniffer{tokens: map[string]int{}}
	go e.icmp.run(sniffer)
	return nil
}

// Close stops the servers and removes the namespace and veth, returning
// every failure.
func (e *outside) Close() error {
	var errs *multierror.Error
	for i := len(e.closers) - 1; i >= 0; i-- {
		if err := e.closers[i](); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = multierror.Append(errs, err)
		}
	}
	e.closers = nil
	return errs.ErrorOrNil()
}

// serveBanner answers each connection on ln, once its first line has
// come (or a second has passed), with a line holding secret, and closes
// it. It ends when ln is closed.
func serveBanner(ln net.Listener, secret string, hits *hitCounter) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hits.hit()
		// Ends within the deadline.
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Second))
			bufio.NewReader(c).ReadString('\n')
			io.WriteString(c, "sbx-selftest "+secret+"\n")
		}()
	}
}

// serveUDPSecret answers each datagram on pc with secret. It ends when pc
// is closed.
func serveUDPSecret(pc net.PacketConn, secret string, hits *hitCounter) {
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		hits.hit()
		pc.WriteTo([]byte("sbx-selftest "+secret), from)
	}
}

// dnsAnswerTo answers a DNS query with answer as the A record of
// whatever name it asks for; nil for what is not a query.
func dnsAnswerTo(query []byte, answer netip.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if q.Type == dnsmessage.TypeA {
		b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: answer.As4()})
	}
	msg, _ := b.Finish()
	return msg
}

// serveDNSUDP answers every query on pc with answer. It ends when pc is
// closed.
func serveDNSUDP(pc net.PacketConn, answer netip.Addr, hits *hitCounter) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		hits.hit()
		if msg := dnsAnswerTo(buf[:n], answer); msg != nil {
			pc.WriteTo(msg, from)
		}
	}
}

// serveDNSTCP answers one query per connection on ln with answer. It ends
// when ln is closed.
func serveDNSTCP(ln net.Listener, answer netip.Addr, hits *hitCounter) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hits.hit()
		// Ends within the deadline.
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			var n uint16
			if binary.Read(c, binary.BigEndian, &n) != nil {
				return
			}
			query := make([]byte, n)
			if _, err := io.ReadFull(c, query); err != nil {
				return
			}
			if msg := dnsAnswerTo(query, answer); msg != nil {
				c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
			}
		}()
	}
}

// icmpSniffer counts the ICMP echo requests that reach the outside, by
// the token they carry (the kernel answers them itself).
type icmpSniffer struct {
	mu     sync.Mutex
	tokens map[string]int
}

// run reads c until it is closed.
func (s *icmpSniffer) run(c *icmp.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEcho {
			continue
		}
		if echo, ok := m.Body.(*icmp.Echo); ok {
			s.mu.Lock()
			s.tokens[string(echo.Data)]++
			s.mu.Unlock()
		}
	}
}

// seen is how many echo requests carried token.
func (s *icmpSniffer) seen(token string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.tokens[token])
}

// freeOutsideSubnet picks a random /30 of outsidePool that overlaps no
// address or route of the host.
func freeOutsideSubnet() (netip.Prefix, error) {
	var used []netip.Prefix
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("listing the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			used = append(used, p)
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("listing the host's routes: %w", err)
	}
	for _, r := range routes {
		if p, ok := prefixOf(r.Dst); ok && p.Bits() > 0 {
			used = append(used, p)
		}
	}
	for range 200 {
		a := outsidePool.Addr().As4()
		a[2], a[3] = randomByte(), randomByte()&^3
		cand := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /30 in %s for the selftest's outside: the host's addresses and routes cover it", outsidePool)
}

// prefixOf converts n, masked; false for nil.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits).Masked(), true
}

func addrOf(a netip.Addr, bits, flags int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}, Flags: flags}
}

// sweepOutsides removes the outside namespaces of selftests that died
// without removing them (killed, say); their veth pairs go with them.
func sweepOutsides() {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return
	}
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), OutsideNetnsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			netns.DeleteNamed(ent.Name())
		}
	}
}

// withNetns runs fn on a thread switched into ns: the sockets fn makes
// stay there whatever thread uses them later. fn must not make sockets on
// other goroutines.
func withNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("entering a network namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("sbx: cannot return to the host network namespace: %v", err))
	}
	return ferr
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func randomByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}
