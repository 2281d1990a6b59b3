package dnsstub

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub/dnsstubtest"
	"github.com/sbx-dev/sbx/netpolicy"
)

// testGateway is the Gateway of the tests: its records go to log, and it
// keeps what the stub told it.
type testGateway struct {
	log      *decisionlog.Log
	ids      atomic.Uint64
	clients  netip.Prefix // the only clients it lets ask; the zero Prefix lets all
	override func(raw, host string) (netpolicy.Decision, string, bool)

	mu               sync.Mutex
	refused          []netip.AddrPort
	servesOn         []netip.AddrPort
	networks         []string // of the records Decided got, in order
	allowed, blocked int
	panics           []*decisionlog.Record
}

func (g *testGateway) NewID() string { return fmt.Sprint(g.ids.Add(1)) }

func (g *testGateway) IsClient(ip netip.Addr) bool {
	return !g.clients.IsValid() || g.clients.Contains(ip)
}

func (g *testGateway) RefuseQuery(client netip.AddrPort) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refused = append(g.refused, client)
}

func (g *testGateway) ServesOn(ap netip.AddrPort) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.servesOn = append(g.servesOn, ap)
}

func (g *testGateway) Override(raw, host string) (netpolicy.Decision, string, bool) {
	if g.override == nil {
		return netpolicy.Decision{}, "", false
	}
	return g.override(raw, host)
}

func (g *testGateway) Decided(rec *decisionlog.Record, network string, _ netip.AddrPort) {
	g.mu.Lock()
	g.networks = append(g.networks, network)
	if rec.Action == string(netpolicy.Allow) {
		g.allowed++
	} else {
		g.blocked++
	}
	g.mu.Unlock()
	if g.log != nil {
		g.log.Emit(rec)
	}
}

func (g *testGateway) Panicked(rec *decisionlog.Record) {
	g.mu.Lock()
	g.panics = append(g.panics, rec)
	g.mu.Unlock()
	if g.log != nil {
		g.log.Emit(rec)
	}
}

// counts returns how many queries the stub recorded as allowed and as
// blocked.
func (g *testGateway) counts() (allowed, blocked int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allowed, g.blocked
}

// dnsStub is a stub serving on loopback over UDP and TCP, with its
// records in a ring.
type dnsStub struct {
	stub     *Stub
	gw       *testGateway
	store    *netpolicy.Store
	ring     *decisionlog.Ring
	udp, tcp string
}

// startStub starts a stub under spec; edit, when given, changes its
// Config and its Gateway before it is made. It is closed when the test
// ends. Its TCP listener serves each connection with ServeConn, as the
// gateway's does.
func startStub(t *testing.T, spec netpolicy.Spec, edit ...func(*Config, *testGateway)) *dnsStub {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	ring := decisionlog.NewRing(0)
	log := decisionlog.NewLog("", ring)
	st := &dnsStub{store: netpolicy.NewStore(p), ring: ring, gw: &testGateway{log: log}}
	cfg := Config{Store: st.store, Gateway: st.gw, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		IdleTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}
	for _, fn := range edit {
		fn(&cfg, st.gw)
	}
	if st.stub, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st.udp, st.tcp = pc.LocalAddr().String(), ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.stub.ServeUDP(ctx, pc) }()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				st.stub.ServeConn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		st.stub.Close()
		if err := <-done; err != nil {
			t.Errorf("serving DNS: %v", err)
		}
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		log.Close()
	})
	return st
}

// testWriter writes a logger's lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// recordsOfKind returns the decision records of kind in ring.
func recordsOfKind(t *testing.T, ring *decisionlog.Ring, kind string) []map[string]any {
	t.Helper()
	lines, _ := ring.Since(0, 10000)
	var out []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		if m["event"] == decisionlog.EventDecision && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
	st := startStub(t, stubPolicy())
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
		{"blocked-static.test.", dnsmessage.TypeA, rcNXDomain, ""}, // the gateway's TestDNSStaticNamesGetFakeAddresses gives it a static answer
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
					q := dnsstubtest.Query{Name: tt.name, Type: tt.typ, EDNS: edns}
					resp := exchange(t, st, tcp, q.Pack(t, id))
					if resp == nil {
						t.Fatal("no answer")
					}
					m := dnsstubtest.Unpack(t, resp)
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
					ip := checkFakeA(t, st.stub, m, tt.fake)
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
	if n := st.stub.FakeIPs().Len(); n != len(seen) {
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
func checkFakeA(t *testing.T, srv *Stub, m dnsmessage.Message, name string) netip.Addr {
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

func TestDNSFakeIPsAreSequentialAndStable(t *testing.T) {
	st := startStub(t, netpolicy.Spec{Default: netpolicy.Allow})
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
		if got, ok := st.stub.FakeIPs().Name(netip.MustParseAddr(ip)); !ok || got != name {
			t.Errorf("Name(%s) = %q, %v; want %q", ip, got, ok, name)
		}
	}
	if _, ok := st.stub.FakeIPs().Name(netip.MustParseAddr("198.18.0.4")); ok {
		t.Errorf("Name(198.18.0.4) found a name; none was given that address")
	}
}

func TestDNSPolicyChanges(t *testing.T) {
	st := startStub(t, netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{{ID: "a", Host: "api.test", Action: netpolicy.Allow}}})
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
	st := startStub(t, spec)
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
	st := startStub(t, stubPolicy())
	padded := dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 9)
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
		{"class CH", dnsstubtest.Query{Name: "version.bind.", Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS}.Pack(t, 9), rcRefused, false, true},
		{"class ANY", dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA, Class: dnsmessage.ClassANY}.Pack(t, 9), rcRefused, false, true},
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
				m := dnsstubtest.Unpack(t, resp)
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
	st := startStub(t, stubPolicy())
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
	send(dnsstubtest.Query{Name: "API.test.", Type: dnsmessage.TypeA}.Pack(t, 1))
	send(dnsstubtest.Query{Name: "evil.test.", Type: dnsmessage.TypeAAAA}.Pack(t, 2))
	send(dnsstubtest.Query{Name: "mock.test.", Type: dnsmessage.TypeHTTPS}.Pack(t, 3))
	send(dnsstubtest.Query{Name: "secret.exfil.test.", Type: dnsmessage.TypeTXT}.Pack(t, 4))
	send(dnsstubtest.Query{Name: "a b.test.", Type: dnsmessage.TypeA}.Pack(t, 5))
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
	allowed, blocked := st.gw.counts()
	if allowed != 2 || blocked != 5 {
		t.Errorf("counted %d allowed and %d blocked, want 2 and 5", allowed, blocked)
	}
}

func TestDNSResponseSizes(t *testing.T) {
	st := startStub(t, netpolicy.Spec{Default: netpolicy.Allow})
	// The longest name: 253 bytes, 255 in wire form.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + "."
	for _, edns := range []int{0, 100, 512, 4096, 65535} {
		for _, tcp := range []bool{false, true} {
			resp := exchange(t, st, tcp, dnsstubtest.Query{Name: long, Type: dnsmessage.TypeA, EDNS: edns}.Pack(t, 1))
			m := dnsstubtest.Unpack(t, resp)
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
		m := dnsstubtest.Unpack(t, resp)
		if over := limit < 50; m.Header.Truncated != over || (len(m.Answers) == 0) != over {
			t.Errorf("limit %d: %d bytes, truncated %v, %d answers", limit, len(resp), m.Header.Truncated, len(m.Answers))
		}
	}
}

func TestDNSOverTCPServesManyQueriesThenIdlesOut(t *testing.T) {
	st := startStub(t, stubPolicy(), func(c *Config, _ *testGateway) {
		c.IdleTimeout = 300 * time.Millisecond
		c.ReadTimeout = 300 * time.Millisecond
	})
	c, err := net.Dial("tcp", st.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Three queries in one write; three answers, in order.
	var out []byte
	for i, name := range []string{"api.test.", "evil.test.", "x.pkg.test."} {
		q := dnsstubtest.Query{Name: name, Type: dnsmessage.TypeA}.Pack(t, uint16(100+i))
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
		if m := dnsstubtest.Unpack(t, resp); m.Header.ID != uint16(100+i) || m.Header.RCode != want {
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
	st := startStub(t, netpolicy.Spec{Default: netpolicy.Allow}, func(c *Config, _ *testGateway) { c.Names = NewFakeIPs(2) })
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
	if resp := exchange(t, st, false, dnsstubtest.Query{Name: "d.test.", Type: dnsmessage.TypeAAAA}.Pack(t, 1)); dnsstubtest.Unpack(t, resp).Header.RCode != rcNoError {
		t.Errorf("AAAA once the table is full: %v, want NOERROR", dnsstubtest.Unpack(t, resp).Header.RCode)
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	r := recs[2]
	if r["host"] != "c.test" || r["action"] != "allow" || r["status"] != 2.0 || !strings.Contains(fmt.Sprint(r["error"]), "no fake address left") {
		t.Errorf("record of the refused name: %v; want action allow, status 2 (SERVFAIL), error no fake address left", r)
	}
}

// FuzzDNSQuery feeds the stub's query handler arbitrary messages: it must
// never panic, answer only with a well-formed response to the query's id,
// within the size bound, with at most one A record from the fake range,
// and log every message as one dns record.
func FuzzDNSQuery(f *testing.F) {
	for _, q := range []dnsstubtest.Query{
		{Name: "api.test.", Type: dnsmessage.TypeA},
		{Name: "evil.test.", Type: dnsmessage.TypeAAAA, EDNS: 1232},
		{Name: "x.test.", Type: dnsmessage.TypeTXT},
		{Name: "bücher.test.", Type: dnsmessage.TypeHTTPS, EDNS: 4096},
	} {
		f.Add(q.Pack(f, 1), false)
		f.Add(q.Pack(f, 2), true)
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
	srv, err := New(Config{Store: netpolicy.NewStore(p), Gateway: &testGateway{log: log}})
	if err != nil {
		f.Fatal(err)
	}
	defer log.Close()
	// One byte over the bound (a FORMERR), within what the target tries.
	over := dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(f, 3)
	f.Add(append(over, make([]byte, dnsMaxQuery+1-len(over))...), true)
	f.Fuzz(func(t *testing.T, msg []byte, tcp bool) {
		if len(msg) > dnsMaxQuery+8 {
			// Past the bound every query is the same FORMERR (a seed has
			// one); minimizing such long inputs would take the run's time.
			t.Skip("longer than the bound by more than 8 bytes: the same FORMERR as the seed one byte over")
		}
		before := last.n
		resp, ok := srv.answer(msg, tcp, netip.MustParseAddrPort("127.0.0.1:5353"), nil)
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

// TestDNSOverride: the Gateway's verdict comes before the policy's and is
// enforced in every mode; it gets the name as asked and normalized ("" for
// a name that does not normalize), and names the secret in the record.
func TestDNSOverride(t *testing.T) {
	var mu sync.Mutex
	var asked [][2]string
	st := startStub(t, netpolicy.Spec{Mode: netpolicy.Audit, Default: netpolicy.Block}, func(_ *Config, gw *testGateway) {
		gw.override = func(raw, host string) (netpolicy.Decision, string, bool) {
			mu.Lock()
			asked = append(asked, [2]string{raw, host})
			mu.Unlock()
			switch {
			case strings.Contains(raw, "placeholder"):
				return netpolicy.Decision{Action: netpolicy.Block, Rule: "secret", Reason: "a secret's placeholder"}, "API_KEY", true
			case host == "mocked.test":
				return netpolicy.Decision{Action: netpolicy.Allow, Rule: "mock-llm", Reason: "mocked"}, "", true
			}
			return netpolicy.Decision{}, "", false
		}
	})
	tests := []struct {
		name  string
		rcode dnsmessage.RCode
		rec   [5]string // action, rule, reason, secret, enforced
	}{
		{"x.placeholder.test.", rcNXDomain, [5]string{"block", "secret", "a secret's placeholder", "API_KEY", "true"}},
		{"a b.placeholder.", rcNXDomain, [5]string{"block", "secret", "a secret's placeholder", "API_KEY", "true"}},
		{"Mocked.test.", rcNoError, [5]string{"allow", "mock-llm", "mocked", "", "true"}},
		{"other.test.", rcNoError, [5]string{"block", netpolicy.RuleDefault, "no rule allows it on any port; the default is block", "", "false"}}, // audit mode: let through
	}
	for _, tt := range tests {
		if rc, _ := queryA(t, st, false, tt.name); rc != tt.rcode {
			t.Errorf("%s: got %v, want %v", tt.name, rc, tt.rcode)
		}
	}
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != len(tests) {
		t.Fatalf("got %d records, want %d", len(recs), len(tests))
	}
	for i, tt := range tests {
		r := recs[i]
		secret, _ := r["secret"].(string)
		got := [5]string{fmt.Sprint(r["action"]), fmt.Sprint(r["rule"]), fmt.Sprint(r["reason"]), secret, fmt.Sprint(r["enforced"])}
		if got != tt.rec {
			t.Errorf("%s: got record %v, want %v", tt.name, got, tt.rec)
		}
	}
	want := [][2]string{{"x.placeholder.test.", "x.placeholder.test"}, {"a b.placeholder.", ""}, {"Mocked.test.", "mocked.test"}, {"other.test.", "other.test"}}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("Override asked with %q, want %q", asked, want)
	}
}

// TestDNSClientsOutsideAreDropped: a UDP query from a client the Gateway
// refuses is neither answered nor recorded as a query; RefuseQuery is told.
func TestDNSClientsOutsideAreDropped(t *testing.T) {
	st := startStub(t, stubPolicy(), func(_ *Config, gw *testGateway) { gw.clients = netip.MustParsePrefix("10.0.0.0/8") })
	if resp, err := dnsstubtest.ExchangeUDP(t, st.udp, dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 1)); err == nil {
		t.Errorf("UDP query from outside the clients answered: %x", resp)
	}
	st.gw.mu.Lock()
	refused := st.gw.refused
	st.gw.mu.Unlock()
	if len(refused) != 1 || !refused[0].Addr().IsLoopback() {
		t.Errorf("RefuseQuery got %v, want the one loopback client", refused)
	}
	if recs := recordsOfKind(t, st.ring, decisionlog.KindDNS); len(recs) != 0 {
		t.Errorf("dns records %v, want none: nothing was read from a refused client", recs)
	}
}

// TestDNSServeUDPAndClose: ServeUDP tells the Gateway the address it
// serves on, returns nil once Close is called, and closes at once a
// socket it is given after; the networks of the records are the
// transports the queries came over.
func TestDNSServeUDPAndClose(t *testing.T) {
	st := startStub(t, stubPolicy())
	queryA(t, st, false, "api.test.")
	queryA(t, st, true, "api.test.")
	st.gw.mu.Lock()
	servesOn, networks := fmt.Sprint(st.gw.servesOn), fmt.Sprint(st.gw.networks)
	st.gw.mu.Unlock()
	if servesOn != "["+st.udp+"]" {
		t.Errorf("ServesOn got %s, want [%s]", servesOn, st.udp)
	}
	if networks != "[udp tcp]" {
		t.Errorf("Decided got the networks %s, want [udp tcp]", networks)
	}
	st.stub.Close()
	if _, err := dnsstubtest.ExchangeUDP(t, st.udp, dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 1)); err == nil {
		t.Error("the stub answered after Close")
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.stub.ServeUDP(context.Background(), pc); err != nil {
		t.Errorf("ServeUDP after Close: %v, want nil", err)
	}
	if _, err := pc.WriteTo([]byte("x"), pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the socket given after Close: write %v, want it closed", err)
	}
}

// TestDNSPanicAnsweringOneQuery: a panic while a worker answers a UDP
// query ends that query alone, unanswered: it is logged with its stack
// and handed to Gateway.Panicked as a close record, and the stub answers
// the next queries (more than it has workers, so that the worker that
// panicked answers too). Without the recover the panic ends the process.
func TestDNSPanicAnsweringOneQuery(t *testing.T) {
	var logs syncBuffer
	var calls atomic.Int32
	queryHook = func([]byte) {
		if calls.Add(1) == 1 {
			panic("injected query fault")
		}
	}
	t.Cleanup(func() { queryHook = nil })
	st := startStub(t, stubPolicy(), func(c *Config, _ *testGateway) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
	})
	c, err := net.Dial("udp", st.udp)
	if err != nil {
		t.Fatal(err)
	}
	client := c.LocalAddr().String()
	c.Close()
	// The first query comes from the socket just closed: its address is
	// the client the record must name.
	pc, err := net.ListenPacket("udp", client)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := net.ResolveUDPAddr("udp", st.udp)
	pc.WriteTo(dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, 1), dst)
	pc.SetReadDeadline(time.Now().Add(time.Second))
	if n, _, err := pc.ReadFrom(make([]byte, 2048)); err == nil {
		t.Errorf("the query that panicked: got an answer of %d bytes, want none", n)
	}
	pc.Close()
	for i := range 2 * 64 {
		if resp, err := dnsstubtest.ExchangeUDP(t, st.udp, dnsstubtest.Query{Name: "api.test.", Type: dnsmessage.TypeA}.Pack(t, uint16(i+2))); err != nil {
			t.Fatalf("query %d after the panic: %v, want an answer", i+1, err)
		} else if m := dnsstubtest.Unpack(t, resp); m.Header.RCode != dnsmessage.RCodeSuccess {
			t.Fatalf("query %d after the panic: got rcode %v, want success", i+1, m.Header.RCode)
		}
	}
	l := logs.String()
	if !strings.Contains(l, `panic="injected query fault"`) || !strings.Contains(l, "stack=") || !strings.Contains(l, "stub_test.go") {
		t.Errorf("the stub's log does not name the panic with its stack:\n%s", l)
	}
	st.gw.mu.Lock()
	defer st.gw.mu.Unlock()
	if len(st.gw.panics) != 1 {
		t.Fatalf("Panicked got %d records, want 1", len(st.gw.panics))
	}
	r := st.gw.panics[0]
	if r.Event != decisionlog.EventClose || r.Kind != decisionlog.KindDNS || r.Error != "gateway error: panic: injected query fault" || r.Client != client || r.ID == "" {
		t.Errorf("panic record %+v: want a close record of kind dns, the error without the stack, client %s and an id", r, client)
	}
}

// syncBuffer is a bytes.Buffer safe for the stub's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
