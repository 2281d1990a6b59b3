package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
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
	go func() { done <- st.srv.ServeDNSUDP(ctx, pc) }()
	go func() { done <- st.srv.ServeDNSTCP(ctx, ln) }()
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

// dnsQuery describes a query the tests build.
type dnsQuery struct {
	name  string
	typ   dnsmessage.Type
	class dnsmessage.Class // 0: IN
	edns  int              // the UDP size offered in an OPT record; 0: no OPT
}

// pack builds q with id as a real stub resolver would (RD set).
func (q dnsQuery) pack(t testing.TB, id uint16) []byte {
	t.Helper()
	name, err := dnsmessage.NewName(q.name)
	if err != nil {
		t.Fatalf("NewName(%q): %v", q.name, err)
	}
	class := q.class
	if class == 0 {
		class = dnsmessage.ClassINET
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: name, Type: q.typ, Class: class}); err != nil {
		t.Fatal(err)
	}
	if q.edns > 0 {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(q.edns, dnsmessage.RCodeSuccess, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// exchangeUDP sends msg to addr from a new socket and returns the answer,
// or an error when none comes within a second.
func exchangeUDP(t testing.TB, addr string, msg []byte) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// exchangeTCP sends every message on one new connection to addr, all at
// once, and returns the answers read until as many came, or the
// connection ended (a reset too, even while connecting), or a second
// passed.
func exchangeTCP(t testing.TB, addr string, msgs ...[]byte) [][]byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		t.Fatal(err)
	}
	defer c.Close()
	var out []byte
	for _, m := range msgs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
		out = append(out, m...)
	}
	if _, err := c.Write(out); err != nil {
		return nil
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	var resps [][]byte
	for range msgs {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			break
		}
		resp := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatalf("reading a DNS answer over TCP: %v", err)
		}
		resps = append(resps, resp)
	}
	return resps
}

// exchange sends msg over UDP or TCP and returns the answer, or nil when
// none came.
func exchange(t testing.TB, st *dnsStub, tcp bool, msg []byte) []byte {
	t.Helper()
	if tcp {
		if resps := exchangeTCP(t, st.tcp, msg); len(resps) == 1 {
			return resps[0]
		}
		return nil
	}
	resp, err := exchangeUDP(t, st.udp, msg)
	if err != nil {
		return nil
	}
	return resp
}

// unpack parses a response or fails the test.
func unpack(t testing.TB, resp []byte) dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("unpacking the answer %x: %v", resp, err)
	}
	return m
}

// rcodeOf returns a response's code, with the extended bits of its OPT
// record.
func rcodeOf(m dnsmessage.Message) dnsmessage.RCode {
	for _, r := range m.Additionals {
		if r.Header.Type == dnsmessage.TypeOPT {
			return r.Header.ExtendedRCode(m.Header.RCode)
		}
	}
	return m.Header.RCode
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

func TestDNSAnswers(t *testing.T) {
	st := startDNS(t, stubPolicy(), map[string]string{"static.test": "127.0.0.1", "blocked-static.test": "127.0.0.1"}, nil)
	pol := st.store.Load().Policy()
	tests := []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		fake  string // the normalized name behind the fake A answered; "" for no answer
	}{
		{"api.test.", dnsmessage.TypeA, rcNoError, "api.test"},
		{"API.Test.", dnsmessage.TypeA, rcNoError, "api.test"},
		{"x.y.pkg.test.", dnsmessage.TypeA, rcNoError, "x.y.pkg.test"},
		{"pkg.test.", dnsmessage.TypeA, rcNXDomain, ""},
		{"git.test.", dnsmessage.TypeA, rcNoError, "git.test"}, // allowed on port 22 only
		{"evil.test.", dnsmessage.TypeA, rcNXDomain, ""},
		{"evil.test.", dnsmessage.TypeAAAA, rcNXDomain, ""}, // a blocked name does not exist, whatever the type
		{"evil.test.", dnsmessage.TypeHTTPS, rcNXDomain, ""},
		{"other.test.", dnsmessage.TypeA, rcNXDomain, ""},
		{"mock.test.", dnsmessage.TypeA, rcNoError, "mock.test"},
		{"half.test.", dnsmessage.TypeA, rcNoError, "half.test"}, // 443 blocked, 80 allowed
		{"static.test.", dnsmessage.TypeA, rcNoError, "static.test"},
		{"blocked-static.test.", dnsmessage.TypeA, rcNXDomain, ""}, // --resolve does not bypass the policy
		{"203.0.113.7.", dnsmessage.TypeA, rcNoError, "203.0.113.7"},
		{"203.0.113.8.", dnsmessage.TypeA, rcNXDomain, ""},
		{"bücher.test.", dnsmessage.TypeA, rcNoError, "xn--bcher-kva.test"},
		{"xn--bcher-kva.test.", dnsmessage.TypeA, rcNoError, "xn--bcher-kva.test"},

		// No IPv6 and no service records: empty answers.
		{"api.test.", dnsmessage.TypeAAAA, rcNoError, ""},
		{"api.test.", dnsmessage.TypeHTTPS, rcNoError, ""},
		{"api.test.", dnsmessage.TypeSVCB, rcNoError, ""},

		// Every other type is refused, whatever the name.
		{"api.test.", dnsmessage.TypeTXT, rcRefused, ""},
		{"api.test.", dnsmessage.TypeMX, rcRefused, ""},
		{"api.test.", dnsmessage.TypeALL, rcRefused, ""},
		{"api.test.", dnsmessage.Type(10), rcRefused, ""}, // NULL
		{"api.test.", dnsmessage.TypeCNAME, rcRefused, ""},
		{"api.test.", dnsmessage.TypeNS, rcRefused, ""},
		{"api.test.", dnsmessage.TypeSRV, rcRefused, ""},
		{"api.test.", dnsmessage.TypePTR, rcRefused, ""},
		{"7.113.0.203.in-addr.arpa.", dnsmessage.TypePTR, rcRefused, ""},
		{"api.test.", dnsmessage.TypeAXFR, rcRefused, ""},
		{"api.test.", dnsmessage.Type(65280), rcRefused, ""},
		{"evil.test.", dnsmessage.TypeTXT, rcRefused, ""},

		// Names that do not normalize do not exist.
		{"127.1.", dnsmessage.TypeA, rcNXDomain, ""},
		{"2130706433.", dnsmessage.TypeA, rcNXDomain, ""},
		{"a b.test.", dnsmessage.TypeA, rcNXDomain, ""},
		{"a@api.test.", dnsmessage.TypeA, rcNXDomain, ""},
		{"[::1].", dnsmessage.TypeA, rcNXDomain, ""},
		{".", dnsmessage.TypeA, rcNXDomain, ""},
		{"\x00.test.", dnsmessage.TypeA, rcNXDomain, ""},
	}
	seen := map[string]netip.Addr{} // normalized name -> its fake address
	id := uint16(1)
	for _, tcp := range []bool{false, true} {
		for _, edns := range []int{0, 4096} {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s/%d/tcp=%v/edns=%d", tt.name, tt.typ, tcp, edns), func(t *testing.T) {
					id++
					q := dnsQuery{name: tt.name, typ: tt.typ, edns: edns}
					resp := exchange(t, st, tcp, q.pack(t, id))
					if resp == nil {
						t.Fatal("no answer")
					}
					m := unpack(t, resp)
					h := m.Header
					if h.ID != id || !h.Response || !h.RecursionDesired || !h.RecursionAvailable || h.Truncated || h.OpCode != 0 {
						t.Errorf("header %+v, want id %d, response, RD and RA, not truncated", h, id)
					}
					if rc := rcodeOf(m); rc != tt.rcode {
						t.Errorf("rcode %v, want %v", rc, tt.rcode)
					}
					if len(m.Questions) != 1 || m.Questions[0].Name.String() != tt.name || m.Questions[0].Type != tt.typ {
						t.Errorf("question %+v, want %q type %v echoed as sent", m.Questions, tt.name, tt.typ)
					}
					checkOPT(t, m, edns > 0)
					if tt.fake == "" {
						if len(m.Answers) != 0 {
							t.Errorf("answers %+v, want none", m.Answers)
						}
						return
					}
					ip := checkFakeA(t, st.srv, m, tt.fake)
					if prev, ok := seen[tt.fake]; ok && prev != ip {
						t.Errorf("%s is %s, was %s: a fake address must not change", tt.fake, ip, prev)
					}
					for name, other := range seen {
						if name != tt.fake && other == ip {
							t.Errorf("%s and %s both have %s", name, tt.fake, ip)
						}
					}
					seen[tt.fake] = ip
				})
			}
		}
	}
	// The stub answers A exactly for the names MayAllowHost allows.
	for _, tt := range tests {
		if tt.typ != dnsmessage.TypeA {
			continue
		}
		if got := pol.MayAllowHost(tt.name); got != (tt.rcode == rcNoError) {
			t.Errorf("MayAllowHost(%q) = %v, but the stub answered %v", tt.name, got, tt.rcode)
		}
	}
	if n := st.srv.FakeIPs().Len(); n != len(seen) {
		t.Errorf("%d names hold fake addresses, want %d (only names answered with one)", n, len(seen))
	}
}

// checkOPT checks that a response has an OPT record offering 1232 bytes
// exactly when the query had one.
func checkOPT(t *testing.T, m dnsmessage.Message, want bool) {
	t.Helper()
	var opts []dnsmessage.Resource
	for _, r := range m.Additionals {
		if r.Header.Type == dnsmessage.TypeOPT {
			opts = append(opts, r)
		}
	}
	switch {
	case !want && len(opts) > 0:
		t.Errorf("OPT record in the answer to a query without one")
	case want && len(opts) != 1:
		t.Errorf("%d OPT records in the answer to a query with one, want 1", len(opts))
	case want && int(opts[0].Header.Class) != dnsMaxPayload:
		t.Errorf("OPT offers %d bytes, want %d", opts[0].Header.Class, dnsMaxPayload)
	}
}

// checkFakeA checks that m answers one A record of the question's name,
// class IN, TTL 5, with a fake address whose name is name, and returns
// the address.
func checkFakeA(t *testing.T, srv *Server, m dnsmessage.Message, name string) netip.Addr {
	t.Helper()
	if len(m.Answers) != 1 {
		t.Fatalf("answers %+v, want one A record", m.Answers)
	}
	a := m.Answers[0]
	body, ok := a.Body.(*dnsmessage.AResource)
	if !ok || a.Header.Type != dnsmessage.TypeA || a.Header.Class != dnsmessage.ClassINET {
		t.Fatalf("answer %+v, want an A record of class IN", a)
	}
	if a.Header.Name != m.Questions[0].Name {
		t.Errorf("answer for %q, want the question's name %q", a.Header.Name, m.Questions[0].Name)
	}
	if a.Header.TTL != 5 {
		t.Errorf("TTL %d, want 5", a.Header.TTL)
	}
	ip := netip.AddrFrom4(body.A)
	if !FakeIPRange().Contains(ip) {
		t.Errorf("address %s is outside %s", ip, FakeIPRange())
	}
	if got, ok := srv.FakeIPs().Name(ip); !ok || got != name {
		t.Errorf("FakeIPs().Name(%s) = %q, %v; want %q", ip, got, ok, name)
	}
	if got, ok := srv.FakeIPs().Addr(name); !ok || got != ip {
		t.Errorf("FakeIPs().Addr(%q) = %s, %v; want %s", name, got, ok, ip)
	}
	return ip
}

// queryA asks for name's A record over UDP or TCP and returns the rcode
// and the address answered, if any.
func queryA(t *testing.T, st *dnsStub, tcp bool, name string) (dnsmessage.RCode, netip.Addr) {
	t.Helper()
	resp := exchange(t, st, tcp, dnsQuery{name: name, typ: dnsmessage.TypeA}.pack(t, uint16(rand.N(1<<16))))
	if resp == nil {
		t.Fatalf("%s: no answer", name)
	}
	m := unpack(t, resp)
	var ip netip.Addr
	if len(m.Answers) == 1 {
		if a, ok := m.Answers[0].Body.(*dnsmessage.AResource); ok {
			ip = netip.AddrFrom4(a.A)
		}
	}
	return m.Header.RCode, ip
}

func TestDNSFakeIPsAreSequentialAndStable(t *testing.T) {
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Allow}, nil, nil)
	steps := []struct {
		name string
		tcp  bool
		want string
	}{
		{"a.test.", false, "198.18.0.1"},
		{"b.test.", true, "198.18.0.2"},
		{"A.TEST.", true, "198.18.0.1"},
		{"a.test.", false, "198.18.0.1"},
		{"c.b.test.", false, "198.18.0.3"},
		{"b.test.", false, "198.18.0.2"},
	}
	for _, s := range steps {
		rc, ip := queryA(t, st, s.tcp, s.name)
		if rc != rcNoError || ip != netip.MustParseAddr(s.want) {
			t.Errorf("%s (tcp %v): %v %s, want NOERROR %s", s.name, s.tcp, rc, ip, s.want)
		}
	}
	for ip, name := range map[string]string{"198.18.0.1": "a.test", "198.18.0.2": "b.test", "198.18.0.3": "c.b.test"} {
		if got, ok := st.srv.FakeIPs().Name(netip.MustParseAddr(ip)); !ok || got != name {
			t.Errorf("Name(%s) = %q, %v; want %q", ip, got, ok, name)
		}
	}
	if _, ok := st.srv.FakeIPs().Name(netip.MustParseAddr("198.18.0.4")); ok {
		t.Errorf("Name(198.18.0.4) found a name; none was given that address")
	}
}

func TestDNSPolicyChanges(t *testing.T) {
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{{ID: "a", Host: "api.test", Action: netpolicy.Allow}}}, nil, nil)
	_, first := queryA(t, st, false, "api.test.")
	if !first.IsValid() {
		t.Fatal("api.test: no address while allowed")
	}
	if _, err := st.store.RemoveRule("a", 0); err != nil {
		t.Fatal(err)
	}
	if rc, ip := queryA(t, st, false, "api.test."); rc != rcNXDomain || ip.IsValid() {
		t.Errorf("after the rule is removed: %v %s, want NXDOMAIN", rc, ip)
	}
	if _, _, err := st.store.AddRule(netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{8443}, Action: netpolicy.Allow}, -1, 0); err != nil {
		t.Fatal(err)
	}
	if rc, ip := queryA(t, st, true, "api.test."); rc != rcNoError || ip != first {
		t.Errorf("allowed again: %v %s, want NOERROR and the same address %s", rc, ip, first)
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	var versions []float64
	for _, r := range recs {
		versions = append(versions, r["policy_version"].(float64))
	}
	if fmt.Sprint(versions) != "[1 2 3]" {
		t.Errorf("policy versions of the dns records %v, want [1 2 3]", versions)
	}
}

func TestDNSAuditMode(t *testing.T) {
	spec := netpolicy.Spec{Mode: netpolicy.Audit, Default: netpolicy.Block, Rules: []netpolicy.Rule{
		{ID: "evil", Host: "evil.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Block},
	}}
	st := startDNS(t, spec, nil, nil)
	for _, name := range []string{"evil.test.", "anything.test."} {
		if rc, ip := queryA(t, st, false, name); rc != rcNoError || !FakeIPRange().Contains(ip) {
			t.Errorf("audit mode, %s: %v %s, want NOERROR with a fake address", name, rc, ip)
		}
	}
	if rc, _ := queryA(t, st, false, "127.1."); rc != rcNXDomain {
		t.Errorf("audit mode, 127.1: %v, want NXDOMAIN: invalid names are not let through in any mode", rc)
	}
	want := []struct {
		host, rule string
		enforced   bool
		status     float64
	}{
		{"evil.test", "evil", false, 0},
		{"anything.test", netpolicy.RuleDefault, false, 0},
		{"127.1.", netpolicy.RuleInvalid, true, 3},
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != len(want) {
		t.Fatalf("%d dns records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r["host"] != w.host || r["action"] != "block" || r["rule"] != w.rule || r["enforced"] != w.enforced || r["status"] != w.status {
			t.Errorf("record %d: %v; want host %s, action block, rule %s, enforced %v, status %v", i, r, w.host, w.rule, w.enforced, w.status)
		}
	}
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
				if exchange(t, st, tcp, dnsQuery{name: name, typ: typ}.pack(t, 7)) != nil {
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

// rawHeader is a DNS header with the given flags and counts.
func rawHeader(id, flags, qd, an, ns, ar uint16) []byte {
	var b []byte
	for _, v := range []uint16{id, flags, qd, an, ns, ar} {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

// rawQuestion is the question api.test A IN in wire form.
var rawQuestion = []byte("\x03api\x04test\x00\x00\x01\x00\x01")

// rawOPT is an OPT record offering size bytes, EDNS version version.
func rawOPT(size uint16, version byte) []byte {
	return []byte{0, 0, 41, byte(size >> 8), byte(size), 0, version, 0, 0, 0, 0}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestDNSMalformed(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, nil)
	padded := dnsQuery{name: "api.test.", typ: dnsmessage.TypeA}.pack(t, 9)
	padded[11] = 1 // one additional record: an OPT with 1300 bytes of padding
	padded = cat(padded, []byte{0, 0, 41, 4, 0, 0, 0, 0, 0, 0x05, 0x18, 0, 12, 0x05, 0x14}, make([]byte, 1300))
	tests := []struct {
		name     string
		msg      []byte
		rcode    dnsmessage.RCode // with noAnswer false
		noAnswer bool
		question bool // the question is echoed
	}{
		{"empty", nil, 0, true, false},
		{"shorter than a header", []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00"), 0, true, false},
		{"a response", cat(rawHeader(9, 0x8180, 1, 0, 0, 0), rawQuestion), 0, true, false},
		{"no question", rawHeader(9, 0x0100, 0, 0, 0, 0), rcFormErr, false, false},
		{"two questions", cat(rawHeader(9, 0x0100, 2, 0, 0, 0), rawQuestion, rawQuestion), rcFormErr, false, false},
		{"question missing", rawHeader(9, 0x0100, 1, 0, 0, 0), rcFormErr, false, false},
		{"question cut short", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), rawQuestion[:8]), rcFormErr, false, false},
		{"dot inside a label", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), []byte("\x03a.b\x04test\x00\x00\x01\x00\x01")), rcFormErr, false, false},
		{"pointer loop", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), []byte("\xc0\x0c\x00\x01\x00\x01")), rcFormErr, false, false},
		{"pointer forward", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), []byte("\xc0\x40\x00\x01\x00\x01")), rcFormErr, false, false},
		{"reserved label type", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), []byte("\x43abc\x00\x00\x01\x00\x01")), rcFormErr, false, false},
		{"name too long", cat(rawHeader(9, 0x0100, 1, 0, 0, 0), bytes.Repeat([]byte("\x3f"+strings.Repeat("a", 63)), 5), []byte("\x00\x00\x01\x00\x01")), rcFormErr, false, false},
		{"answer count with no answer", cat(rawHeader(9, 0x0100, 1, 1, 0, 0), rawQuestion), rcFormErr, false, true},
		{"two OPT records", cat(rawHeader(9, 0x0100, 1, 0, 0, 2), rawQuestion, rawOPT(1232, 0), rawOPT(1232, 0)), rcFormErr, false, true},
		{"OPT cut short", cat(rawHeader(9, 0x0100, 1, 0, 0, 1), rawQuestion, rawOPT(1232, 0)[:9]), rcFormErr, false, true},
		{"EDNS version 1", cat(rawHeader(9, 0x0100, 1, 0, 0, 1), rawQuestion, rawOPT(1232, 1)), rcodeBadVers, false, true},
		{"opcode STATUS", cat(rawHeader(9, 2<<11|0x0100, 1, 0, 0, 0), rawQuestion), rcNotImp, false, false},
		{"opcode UPDATE", cat(rawHeader(9, 5<<11, 1, 0, 0, 0), rawQuestion), rcNotImp, false, false},
		{"class CH", dnsQuery{name: "version.bind.", typ: dnsmessage.TypeTXT, class: dnsmessage.ClassCHAOS}.pack(t, 9), rcRefused, false, true},
		{"class ANY", dnsQuery{name: "api.test.", typ: dnsmessage.TypeA, class: dnsmessage.ClassANY}.pack(t, 9), rcRefused, false, true},
		{"longer than 1232 bytes", padded, rcFormErr, false, false},
	}
	for _, tcp := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/tcp=%v", tt.name, tcp), func(t *testing.T) {
				resp := exchange(t, st, tcp, tt.msg)
				if tt.noAnswer {
					if resp != nil {
						t.Fatalf("answer %x, want none", resp)
					}
					return
				}
				if resp == nil {
					t.Fatal("no answer")
				}
				m := unpack(t, resp)
				if m.Header.ID != 9 || !m.Header.Response || m.Header.CheckingDisabled || m.Header.Truncated || m.Header.Authoritative {
					t.Errorf("header %+v, want a response with id 9 and no flag but RD and RA", m.Header)
				}
				if rc := rcodeOf(m); rc != tt.rcode {
					t.Errorf("rcode %v, want %v", rc, tt.rcode)
				}
				if len(m.Answers) != 0 {
					t.Errorf("answers %+v, want none", m.Answers)
				}
				if got := len(m.Questions) == 1; got != tt.question {
					t.Errorf("question echoed: %v, want %v", got, tt.question)
				}
			})
		}
	}
	// Every query was logged, answered or not, and none was allowed.
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != 2*len(tests) {
		t.Errorf("%d dns records, want %d", len(recs), 2*len(tests))
	}
	for _, r := range recs {
		if r["action"] != "block" || r["rule"] != netpolicy.RuleInvalid || r["reason"] == "" {
			t.Errorf("record %v, want a block by rule invalid with a reason", r)
		}
	}
}

func TestDNSRecords(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, nil)
	c, err := net.Dial("udp", st.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := c.LocalAddr().String()
	send := func(msg []byte) {
		t.Helper()
		c.Write(msg)
		c.SetReadDeadline(time.Now().Add(time.Second))
		c.Read(make([]byte, 2048))
	}
	send(dnsQuery{name: "API.test.", typ: dnsmessage.TypeA}.pack(t, 1))
	send(dnsQuery{name: "evil.test.", typ: dnsmessage.TypeAAAA}.pack(t, 2))
	send(dnsQuery{name: "mock.test.", typ: dnsmessage.TypeHTTPS}.pack(t, 3))
	send(dnsQuery{name: "secret.exfil.test.", typ: dnsmessage.TypeTXT}.pack(t, 4))
	send(dnsQuery{name: "a b.test.", typ: dnsmessage.TypeA}.pack(t, 5))
	send(rawHeader(6, 0x0100, 0, 0, 0, 0))
	send([]byte("junk"))

	type rec struct {
		Host, Method, Action, Rule, Reason, Error string
		Enforced                                  bool
		Status                                    int
	}
	want := []rec{
		{"api.test", "A", "allow", "api", "rule api: allow api.test", "", true, 0},
		{"evil.test", "AAAA", "block", "evil", "rule evil: block evil.test", "", true, 3},
		{"mock.test", "HTTPS", "allow", "mock", "rule mock: intercept mock.test (the gateway answers its requests, so the host is let through to it)", "", true, 0},
		{"secret.exfil.test", "TXT", "block", "invalid", "query type TXT is refused: the stub answers A, and AAAA, HTTPS and SVCB with no records, nothing else", "", true, 5},
		{"a b.test.", "A", "block", "invalid", `invalid target "a b.test.": character ' ' is not allowed in a host name`, "", true, 3},
		{"", "", "block", "invalid", "malformed query: no question", "", true, 1},
		{"", "", "block", "invalid", "malformed query: 4 bytes, shorter than a DNS header", "not answered", true, 0},
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != len(want) {
		t.Fatalf("%d dns records, want %d: %v", len(recs), len(want), recs)
	}
	ids := map[any]bool{}
	for i, r := range recs {
		got := rec{Host: r["host"].(string), Method: r["method"].(string), Action: r["action"].(string), Rule: r["rule"].(string),
			Reason: r["reason"].(string), Enforced: r["enforced"].(bool), Status: int(r["status"].(float64))}
		if e, ok := r["error"]; ok {
			got.Error = e.(string)
		}
		if got != want[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got, want[i])
		}
		if r["event"] != decisionlog.EventDecision || r["kind"] != "dns" || r["port"] != 53.0 || r["path"] != "" || r["client"] != client || r["policy_version"] != 1.0 {
			t.Errorf("record %d: %v; want a decision of kind dns, port 53, no path, client %s, policy version 1", i, r, client)
		}
		if ids[r["id"]] || r["id"] == "" {
			t.Errorf("record %d: id %v empty or reused", i, r["id"])
		}
		ids[r["id"]] = true
	}
	allowed, blocked, _, _ := st.srv.Metrics().Counts()
	if allowed != 2 || blocked != 5 {
		t.Errorf("counted %d allowed and %d blocked, want 2 and 5", allowed, blocked)
	}
}

func TestDNSResponseSizes(t *testing.T) {
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Allow}, nil, nil)
	// The longest name: 253 bytes, 255 in wire form.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + "."
	for _, edns := range []int{0, 100, 512, 4096, 65535} {
		for _, tcp := range []bool{false, true} {
			resp := exchange(t, st, tcp, dnsQuery{name: long, typ: dnsmessage.TypeA, edns: edns}.pack(t, 1))
			m := unpack(t, resp)
			if len(resp) > dnsMaxPlainUDP || m.Header.Truncated || len(m.Answers) != 1 {
				t.Errorf("edns %d, tcp %v: %d bytes, truncated %v, %d answers; want one answer in at most 512 bytes", edns, tcp, len(resp), m.Header.Truncated, len(m.Answers))
			}
			checkOPT(t, m, edns > 0)
		}
	}
}

// TestDNSReplyOverLimitIsTruncated checks the bound that the stub's own
// answers never reach: a response over the limit goes out truncated,
// without its answer.
func TestDNSReplyOverLimitIsTruncated(t *testing.T) {
	name := dnsmessage.MustNewName("api.test.")
	for _, limit := range []int{40, 512} {
		r := dnsReply{
			header:   dnsmessage.Header{ID: 1, Response: true},
			question: &dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
			a:        [4]byte{198, 18, 0, 1}, hasA: true,
			limit: limit,
			rec:   &decisionlog.Record{},
		}
		resp, ok := r.finish(nil, rcNoError)
		if !ok {
			t.Fatal("no response")
		}
		m := unpack(t, resp)
		if over := limit < 50; m.Header.Truncated != over || (len(m.Answers) == 0) != over {
			t.Errorf("limit %d: %d bytes, truncated %v, %d answers", limit, len(resp), m.Header.Truncated, len(m.Answers))
		}
	}
}

func TestDNSOverTCPServesManyQueriesThenIdlesOut(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, func(c *serverConfig) {
		c.Limits.DNSIdleTimeout = 300 * time.Millisecond
		c.Limits.HeaderReadTimeout = 300 * time.Millisecond
	})
	c, err := net.Dial("tcp", st.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Three queries in one write; three answers, in order.
	var out []byte
	for i, name := range []string{"api.test.", "evil.test.", "x.pkg.test."} {
		q := dnsQuery{name: name, typ: dnsmessage.TypeA}.pack(t, uint16(100+i))
		out = append(binary.BigEndian.AppendUint16(out, uint16(len(q))), q...)
	}
	c.Write(out)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for i, want := range []dnsmessage.RCode{rcNoError, rcNXDomain, rcNoError} {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		resp := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatal(err)
		}
		if m := unpack(t, resp); m.Header.ID != uint16(100+i) || m.Header.RCode != want {
			t.Errorf("answer %d: id %d rcode %v, want id %d rcode %v", i, m.Header.ID, m.Header.RCode, 100+i, want)
		}
	}
	// Then an idle connection is closed.
	start := time.Now()
	if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("idle connection: read %d, %v; want it closed", n, err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("idle connection closed after %v, want about 300ms", d)
	}

	// A query begun and never finished is cut off too.
	c2, err := net.Dial("tcp", st.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte{0, 40, 0, 1, 1}) // 40 bytes announced, 3 sent
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("unfinished query: read %d, %v; want the connection closed", n, err)
	}
}

func TestDNSFakeIPsExhausted(t *testing.T) {
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Allow}, nil, nil, func(s *Server) { s.fakeIPs = newFakeIPs(2) })
	for _, name := range []string{"a.test.", "b.test."} {
		if rc, ip := queryA(t, st, false, name); rc != rcNoError || !ip.IsValid() {
			t.Fatalf("%s: %v %s, want an address", name, rc, ip)
		}
	}
	if rc, ip := queryA(t, st, false, "c.test."); rc != rcServFail || ip.IsValid() {
		t.Errorf("a third name in a table of two: %v %s, want SERVFAIL", rc, ip)
	}
	if rc, ip := queryA(t, st, true, "a.test."); rc != rcNoError || ip != netip.MustParseAddr("198.18.0.1") {
		t.Errorf("a.test once the table is full: %v %s, want its address 198.18.0.1 still", rc, ip)
	}
	// AAAA needs no address: still answered.
	if resp := exchange(t, st, false, dnsQuery{name: "d.test.", typ: dnsmessage.TypeAAAA}.pack(t, 1)); unpack(t, resp).Header.RCode != rcNoError {
		t.Errorf("AAAA once the table is full: %v, want NOERROR", unpack(t, resp).Header.RCode)
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	r := recs[2]
	if r["host"] != "c.test" || r["action"] != "allow" || r["status"] != 2.0 || !strings.Contains(fmt.Sprint(r["error"]), "no fake address left") {
		t.Errorf("record of the refused name: %v; want action allow, status 2 (SERVFAIL), error no fake address left", r)
	}
}

func TestDNSClientsOutsideAreRefused(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, func(c *serverConfig) { c.Clients = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	q := dnsQuery{name: "api.test.", typ: dnsmessage.TypeA}.pack(t, 1)
	if resp, err := exchangeUDP(t, st.udp, q); err == nil {
		t.Errorf("UDP query from outside Clients answered: %x", resp)
	}
	if resps := exchangeTCP(t, st.tcp, q); len(resps) != 0 {
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
	if _, err := exchangeUDP(t, g.DNSAddr.String(), dnsQuery{name: "api.test.", typ: dnsmessage.TypeA}.pack(t, 1)); err == nil {
		t.Errorf("the stub answered after Close")
	}
}

// FuzzDNSQuery feeds the stub's query handler arbitrary messages: it must
// never panic, answer only with a well-formed response to the query's id,
// within the size bound, with at most one A record from the fake range,
// and log every message as one dns record.
func FuzzDNSQuery(f *testing.F) {
	for _, q := range []dnsQuery{
		{name: "api.test.", typ: dnsmessage.TypeA},
		{name: "evil.test.", typ: dnsmessage.TypeAAAA, edns: 1232},
		{name: "x.test.", typ: dnsmessage.TypeTXT},
		{name: "bücher.test.", typ: dnsmessage.TypeHTTPS, edns: 4096},
	} {
		f.Add(q.pack(f, 1), false)
		f.Add(q.pack(f, 2), true)
	}
	f.Add(cat(rawHeader(9, 0x0100, 1, 0, 0, 1), rawQuestion, rawOPT(1232, 1)), false)
	f.Add(cat(rawHeader(9, 5<<11, 1, 0, 0, 0), rawQuestion), false)
	f.Add([]byte("\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"), false)

	p, err := netpolicy.Compile(stubPolicy())
	if err != nil {
		f.Fatal(err)
	}
	last := &lastRecord{}
	log := decisionlog.NewLog("", last)
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(p), Log: log})
	if err != nil {
		f.Fatal(err)
	}
	defer log.Close()
	// One byte over the bound (a FORMERR), within what the target tries.
	over := dnsQuery{name: "api.test.", typ: dnsmessage.TypeA}.pack(f, 3)
	f.Add(append(over, make([]byte, dnsMaxQuery+1-len(over))...), true)
	f.Fuzz(func(t *testing.T, msg []byte, tcp bool) {
		if len(msg) > dnsMaxQuery+8 {
			// Past the bound every query is the same FORMERR (a seed has
			// one); minimizing such long inputs would take the run's time.
			t.Skip("longer than the bound by more than 8 bytes: the same FORMERR as the seed one byte over")
		}
		before := last.n
		resp, ok := srv.answerDNS(msg, tcp, netip.MustParseAddrPort("127.0.0.1:5353"), nil)
		if last.n != before+1 {
			t.Fatalf("%d records for one message, want 1", last.n-before)
		}
		var rec map[string]any
		if err := json.Unmarshal(last.line, &rec); err != nil {
			t.Fatalf("record %q: %v", last.line, err)
		}
		if rec["kind"] != decisionlog.KindDNS || rec["port"] != 53.0 || rec["reason"] == "" || (rec["action"] != "allow" && rec["action"] != "block") {
			t.Fatalf("record %v, want kind dns, port 53, a reason, action allow or block", rec)
		}
		if !ok {
			if len(msg) >= 12 && msg[2]&0x80 == 0 {
				t.Fatalf("query %x left unanswered", msg)
			}
			return
		}
		if !tcp && len(resp) > dnsMaxPayload {
			t.Fatalf("UDP answer of %d bytes, over %d", len(resp), dnsMaxPayload)
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("answer %x does not parse: %v", resp, err)
		}
		if m.Header.ID != binary.BigEndian.Uint16(msg) || !m.Header.Response || !m.Header.RecursionAvailable ||
			m.Header.RecursionDesired != (msg[2]&0x01 != 0) || m.Header.CheckingDisabled != (msg[3]&0x10 != 0) ||
			m.Header.OpCode != dnsmessage.OpCode(msg[2]>>3&0xf) {
			t.Fatalf("header %+v for a query with flags %08b %08b, want a response with the query's id, opcode, RD and CD, and RA", m.Header, msg[2], msg[3])
		}
		if rc := rcodeOf(m); int(rc) != int(rec["status"].(float64)) {
			t.Fatalf("rcode %v, record status %v", rc, rec["status"])
		}
		if len(m.Answers) > 1 {
			t.Fatalf("%d answers, want at most 1", len(m.Answers))
		}
		if len(m.Answers) == 1 {
			a, isA := m.Answers[0].Body.(*dnsmessage.AResource)
			if !isA || m.Header.RCode != rcNoError || !FakeIPRange().Contains(netip.AddrFrom4(a.A)) || rec["action"] != "allow" {
				t.Fatalf("answer %+v (rcode %v, action %v), want a fake A in a NOERROR allowed", m.Answers[0], m.Header.RCode, rec["action"])
			}
			if name, ok := srv.FakeIPs().Name(netip.AddrFrom4(a.A)); !ok || name != rec["host"] {
				t.Fatalf("fake address of %q is %q's", rec["host"], name)
			}
		}
	})
}

// lastRecord is a Sink that keeps the last line it got and counts them.
type lastRecord struct {
	line []byte
	n    int
}

func (s *lastRecord) WriteRecord(_ uint64, line []byte) error {
	s.line = append(s.line[:0], line...)
	s.n++
	return nil
}
func (s *lastRecord) Flush() error { return nil }
func (s *lastRecord) Close() error { return nil }
