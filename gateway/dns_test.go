package gateway

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub"
	"github.com/sbx-dev/sbx/gateway/dnsstub/dnsstubtest"
	"github.com/sbx-dev/sbx/netpolicy"
)

// dnsStub is a gateway serving its DNS stub on loopback over UDP and TCP,
// with its decision log in a ring. Its Resolver asks upstream, a fake DNS
// server that counts the queries it gets.
type dnsStub struct {
	srv      *Server
	store    *netpolicy.Store
	ring     *decisionlog.Ring
	udp, tcp string
	upstream *fakeUpstream
}

// startDNS starts a DNS stub under spec; static maps names to addresses
// in its Resolver; edit, when not nil, changes the config before the
// server is made, and prepare the server before it serves. It is closed
// when the test ends.
func startDNS(t *testing.T, spec netpolicy.Spec, static map[string]string, edit func(*serverConfig), prepare ...func(*Server)) *dnsStub {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	up := startFakeUpstream(t)
	res := up.resolver()
	for name, ip := range static {
		if err := res.AddStatic(name, netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	ring := decisionlog.NewRing(0)
	log := decisionlog.NewLog("", ring)
	st := &dnsStub{store: netpolicy.NewStore(p), ring: ring, upstream: up}
	cfg := serverConfig{Store: st.store, Log: log, Config: Config{
		Resolver: res,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Limits:   Limits{HeaderReadTimeout: 2 * time.Second, DNSIdleTimeout: 2 * time.Second},
	}}
	if edit != nil {
		edit(&cfg)
	}
	st.srv, err = newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range prepare {
		fn(st.srv)
	}
	pc, ln, err := listenDNS(context.Background(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	st.udp, st.tcp = pc.LocalAddr().String(), ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- st.srv.dns.ServeUDP(ctx, pc) }()
	go func() { done <- st.srv.serveListener(ctx, ln, "DNS", 0, "", serveDNSConn(st.srv)) }()
	t.Cleanup(func() {
		cancel()
		st.srv.Close()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serving DNS: %v", err)
			}
		}
		log.Close()
	})
	return st
}

// fakeUpstream is a DNS server on loopback, over UDP and TCP, that answers
// every query with 192.0.2.1 and counts them: the real resolver a leaking
// stub would reach.
type fakeUpstream struct {
	udp, tcp string
	queries  atomic.Int64
}

func startFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	up := &fakeUpstream{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	up.udp = pc.LocalAddr().String()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			up.queries.Add(1)
			if resp := upstreamAnswer(buf[:n]); resp != nil {
				pc.WriteTo(resp, addr)
			}
		}
	}()
	ln := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		for {
			var size [2]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return
			}
			msg := make([]byte, binary.BigEndian.Uint16(size[:]))
			if _, err := io.ReadFull(c, msg); err != nil {
				return
			}
			up.queries.Add(1)
			if resp := upstreamAnswer(msg); resp != nil {
				c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp))))
				c.Write(resp)
			}
		}
	})
	up.tcp = ln.Addr().String()
	return up
}

// upstreamAnswer answers an A query with 192.0.2.1, other types with no
// record.
func upstreamAnswer(msg []byte) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(msg); err != nil || len(m.Questions) != 1 {
		return nil
	}
	m.Header.Response, m.Header.RecursionAvailable = true, true
	m.Answers, m.Authorities, m.Additionals = nil, nil, nil
	if q := m.Questions[0]; q.Type == dnsmessage.TypeA {
		m.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}},
		}}
	}
	resp, _ := m.Pack()
	return resp
}

// resolver returns a gateway Resolver whose system resolver is up.
func (up *fakeUpstream) resolver() *Resolver {
	return &Resolver{System: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		if strings.HasPrefix(network, "tcp") {
			return d.DialContext(ctx, network, up.tcp)
		}
		return d.DialContext(ctx, network, up.udp)
	}}}
}

// exchange sends msg over UDP or TCP and returns the answer, or nil when
// none came.
func exchange(t testing.TB, st *dnsStub, tcp bool, msg []byte) []byte {
	t.Helper()
	if tcp {
		if resps := dnsstubtest.ExchangeTCP(t, st.tcp, msg); len(resps) == 1 {
			return resps[0]
		}
		return nil
	}
	resp, err := dnsstubtest.ExchangeUDP(t, st.udp, msg)
	if err != nil {
		return nil
	}
	return resp
}

const (
	rcNoError  = dnsmessage.RCodeSuccess
	rcFormErr  = dnsmessage.RCodeFormatError
	rcServFail = dnsmessage.RCodeServerFailure
	rcNXDomain = dnsmessage.RCodeNameError
	rcNotImp   = dnsmessage.RCodeNotImplemented
	rcRefused  = dnsmessage.RCodeRefused
)

// stubPolicy is the policy of most DNS tests.
func stubPolicy() netpolicy.Spec {
	return netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
		{ID: "api", Host: "api.test", Action: netpolicy.Allow},
		{ID: "pkg", Host: "*.pkg.test", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow},
		{ID: "ssh", Host: "git.test", Ports: []netpolicy.Port{22}, Action: netpolicy.Allow},
		{ID: "evil", Host: "evil.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Block},
		{ID: "mock", Host: "mock.test", Action: netpolicy.Intercept, Response: &netpolicy.Response{Body: "hi"}},
		{ID: "half", Host: "half.test", Ports: []netpolicy.Port{443}, Action: netpolicy.Block},
		{ID: "half-ok", Host: "half.test", Action: netpolicy.Allow},
		{ID: "static", Host: "static.test", Action: netpolicy.Allow},
		{ID: "ip", Host: "203.0.113.7", Action: netpolicy.Allow},
		{ID: "idn", Host: "bücher.test", Action: netpolicy.Allow},
	}}
}

// queryA asks for name's A record over UDP or TCP and returns the rcode
// and the address answered, if any.
func queryA(t *testing.T, st *dnsStub, tcp bool, name string) (dnsmessage.RCode, netip.Addr) {
	t.Helper()
	resp := exchange(t, st, tcp, dnsstubtest.Query{Name: name, Type: dnsmessage.TypeA}.Pack(t, uint16(rand.N(1<<16))))
	if resp == nil {
		t.Fatalf("%s: no answer", name)
	}
	m := dnsstubtest.Unpack(t, resp)
	var ip netip.Addr
	if len(m.Answers) == 1 {
		if a, ok := m.Answers[0].Body.(*dnsmessage.AResource); ok {
			ip = netip.AddrFrom4(a.A)
		}
	}
	return m.Header.RCode, ip
}

// TestDNSNeverForwards shows that no query, for any name, blocked or
// allowed, valid or not, of any type, reaches the resolver the gateway
// has: its fake upstream counts none, though it answers the gateway's
// Resolver when that is asked.
func TestDNSNeverForwards(t *testing.T) {
	st := startDNS(t, stubPolicy(), map[string]string{"static.test": "127.0.0.1"}, nil)
	names := []string{"api.test.", "x.pkg.test.", "evil.test.", "other.test.", "static.test.", "secret-data-1234.exfil.test.",
		"203.0.113.7.", "127.1.", "a b.test.", "."}
	types := []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeHTTPS, dnsmessage.TypeSVCB,
		dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeALL, dnsmessage.TypeNS, dnsmessage.TypeCNAME}
	var answered int
	for _, tcp := range []bool{false, true} {
		for _, name := range names {
			for _, typ := range types {
				if exchange(t, st, tcp, dnsstubtest.Query{Name: name, Type: typ}.Pack(t, 7)) != nil {
					answered++
				}
			}
		}
	}
	if want := 2 * len(names) * len(types); answered != want {
		t.Errorf("%d queries answered, want %d", answered, want)
	}
	// A malformed query and a response sent to the stub go nowhere either.
	exchange(t, st, false, []byte("\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03abc"))
	exchange(t, st, false, []byte("\x00\x01\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	if n := st.upstream.queries.Load(); n != 0 {
		t.Fatalf("the upstream resolver got %d queries from the stub, want 0", n)
	}

	// The control: the same upstream does see what the gateway resolves.
	addrs, err := st.srv.resolver.Lookup(context.Background(), "control.test")
	if err != nil || len(addrs) == 0 || addrs[0] != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("the gateway's Resolver through the fake upstream: %v, %v; want 192.0.2.1", addrs, err)
	}
	if st.upstream.queries.Load() == 0 {
		t.Fatal("the fake upstream counted no query from the gateway's Resolver: the test could not see a leak")
	}
}

func TestDNSClientsOutsideAreRefused(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, func(c *serverConfig) { c.Clients = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	q := dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 1)
	if resp, err := dnsstubtest.ExchangeUDP(t, st.udp, q); err == nil {
		t.Errorf("UDP query from outside Clients answered: %x", resp)
	}
	if resps := dnsstubtest.ExchangeTCP(t, st.tcp, q); len(resps) != 0 {
		t.Errorf("TCP query from outside Clients answered")
	}
	waitBlocked(t, st.srv, 2)
	if recs := recordsOfKind(t, st.ring, decisionlog.KindDNS); len(recs) != 0 {
		t.Errorf("dns records %v, want none: nothing was read from a refused client", recs)
	}
	if recs := recordsOfKind(t, st.ring, decisionlog.KindConn); len(recs) != 2 || !strings.Contains(recs[0]["reason"].(string), "is not this gateway's sandbox") {
		t.Errorf("conn records %v, want two refusals of a client outside", recs)
	}
}

func TestStartServesDNS(t *testing.T) {
	p, err := netpolicy.Compile(loopbackPolicy(netpolicy.Allow))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DNS: "127.0.0.1:0", Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st := &dnsStub{srv: g.Server, ring: g.Ring, udp: g.DNSAddr.String(), tcp: g.DNSAddr.String()}
	for _, tcp := range []bool{false, true} {
		if rc, ip := queryA(t, st, tcp, "api.test."); rc != rcNoError || ip != netip.MustParseAddr("198.18.0.1") {
			t.Errorf("tcp %v: %v %s, want NOERROR 198.18.0.1", tcp, rc, ip)
		}
	}
	if n := len(recordsOfKind(t, g.Ring, decisionlog.KindDNS)); n != 2 {
		t.Errorf("%d dns records in the gateway's ring, want 2", n)
	}
	// The stub's port is the gateway's own: the guard refuses it,
	// whatever allow_private says.
	if status, h := rawConnect(t, g.ProxyAddr.String(), g.DNSAddr.String()); status != 403 || h.Get("X-Sbx-Rule") != netpolicy.RuleGuard {
		t.Errorf("CONNECT to the DNS stub's port: %d %v, want 403 by the guard", status, h)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := dnsstubtest.ExchangeUDP(t, g.DNSAddr.String(), dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 1)); err == nil {
		t.Errorf("the stub answered after Close")
	}
}

// TestDNSStaticNamesGetFakeAddresses: a name with a static answer in the
// gateway's Resolver (--resolve) gets a fake address as any other, never
// its own, and a static answer does not let through a name the policy
// blocks.
func TestDNSStaticNamesGetFakeAddresses(t *testing.T) {
	st := startDNS(t, stubPolicy(), map[string]string{"static.test": "127.0.0.1", "blocked-static.test": "127.0.0.1"}, nil)
	for _, tcp := range []bool{false, true} {
		if rc, ip := queryA(t, st, tcp, "static.test."); rc != rcNoError || !dnsstub.FakeIPRange().Contains(ip) {
			t.Errorf("static.test, tcp %v: got %v %s, want NOERROR with a fake address", tcp, rc, ip)
		}
		if rc, ip := queryA(t, st, tcp, "blocked-static.test."); rc != rcNXDomain || ip.IsValid() {
			t.Errorf("blocked-static.test, tcp %v: got %v %s, want NXDOMAIN", tcp, rc, ip)
		}
	}
}

// TestDNSQueriesAreCountedWithTheirProcess: the gateway counts each query
// the stub answers in its metrics by its verdict, and writes its record
// with the process Config.Owner names for the client's socket, asked with
// the query's transport and no remote address.
func TestDNSQueriesAreCountedWithTheirProcess(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	st := startDNS(t, stubPolicy(), nil, func(c *serverConfig) {
		c.Owner = func(network string, client, remote netip.AddrPort) Process {
			mu.Lock()
			asked = append(asked, network+" "+remote.String())
			mu.Unlock()
			return Process{PID: 42, Comm: "node", Exe: "/usr/bin/node", Unknown: "said with a pid: left out"}
		}
	})
	queryA(t, st, false, "api.test.")
	queryA(t, st, true, "evil.test.")
	queryA(t, st, false, "other.test.")
	if allowed, blocked, _, _ := st.srv.Metrics().Counts(); allowed != 1 || blocked != 2 {
		t.Errorf("counted %d allowed and %d blocked, want 1 and 2", allowed, blocked)
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != 3 {
		t.Fatalf("got %d dns records, want 3", len(recs))
	}
	for _, r := range recs {
		if r["pid"] != 42.0 || r["comm"] != "node" || r["exe"] != "/usr/bin/node" || r["process_unknown"] != nil {
			t.Errorf("record %v: want pid 42, comm node, exe /usr/bin/node, no process_unknown", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(asked, ","), "udp invalid AddrPort,tcp invalid AddrPort,udp invalid AddrPort"; got != want {
		t.Errorf("Owner asked with %q, want %q", got, want)
	}
}
