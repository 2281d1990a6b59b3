package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// ringRecords decodes every record in ring.
func ringRecords(t *testing.T, ring *decisionlog.Ring) []map[string]any {
	t.Helper()
	lines, _ := ring.Since(0, 10000)
	var recs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// recordsOfKind returns the decision records of kind in ring.
func recordsOfKind(t *testing.T, ring *decisionlog.Ring, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range ringRecords(t, ring) {
		if r["event"] == decisionlog.EventDecision && r["kind"] == kind {
			out = append(out, r)
		}
	}
	return out
}

// waitBlocked waits until the server has counted n blocked requests or
// refused connections.
func waitBlocked(t *testing.T, srv *Server, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, blocked, _, _ := srv.Metrics().Counts()
		if blocked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals counted, want %d", blocked, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readNothing dials addr, sends a request and reports how many bytes came
// back and how the read ended. A refused connection reads 0 bytes and
// ends in EOF or a reset, never in a timeout.
func readNothing(t *testing.T, addr string) (int, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n")
	n, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF
	}
	return int(n), err
}

func TestClientsOutsideAreRefused(t *testing.T) {
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		clients []netip.Prefix
		served  bool
	}{
		{"not a client", []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("::1/128")}, false},
		{"its client", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true},
		{"anyone", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Through Start, so that Config.Clients reaches the server.
			g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: p, Clients: tc.clients})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			n, rerr := readNothing(t, g.ProxyAddr.String())
			var ne net.Error
			if errors.As(rerr, &ne) && ne.Timeout() {
				t.Fatalf("the connection hung: %v", rerr)
			}
			if !tc.served {
				if n != 0 {
					t.Errorf("a client outside Clients read %d bytes, want 0", n)
				}
				waitBlocked(t, g.Server, 1)
				recs := recordsOfKind(t, g.Ring, decisionlog.KindConn)
				if len(recs) != 1 {
					t.Fatalf("%d records of kind %s, want 1: %v", len(recs), decisionlog.KindConn, ringRecords(t, g.Ring))
				}
				r := recs[0]
				if r["action"] != "block" || r["rule"] != "guard" || r["enforced"] != true || r["status"] != 0.0 ||
					r["reason"] != "client 127.0.0.1 is not this gateway's sandbox" || !strings.HasPrefix(r["client"].(string), "127.0.0.1:") {
					t.Errorf("record %v, want a block by guard, status 0, reason naming the client", r)
				}
				return
			}
			if n == 0 {
				t.Errorf("a client in Clients got no answer (%v)", rerr)
			}
			if recs := recordsOfKind(t, g.Ring, decisionlog.KindConn); len(recs) != 0 {
				t.Errorf("a served client was logged as refused: %v", recs)
			}
		})
	}
}

func TestRefusedConnectionsAreRateBounded(t *testing.T) {
	ring := decisionlog.NewRing(0)
	srv, addr := startWith(t, netpolicy.Spec{}, serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Clients: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}}})
	const n = 3 * refusalBurst
	start := time.Now()
	for range n {
		if got, err := readNothing(t, addr); got != 0 {
			t.Fatalf("a refused client read %d bytes (%v)", got, err)
		}
	}
	waitBlocked(t, srv, n) // every refusal is counted, logged or not
	elapsed := time.Since(start)
	recs := recordsOfKind(t, ring, decisionlog.KindConn)
	if max := refusalBurst + int(elapsed/refusalEvery) + 1; len(recs) < 1 || len(recs) > max {
		t.Errorf("%d refusals in %v logged %d records, want 1 to %d", n, elapsed, len(recs), max)
	}
}

func TestRefusalLimiter(t *testing.T) {
	var l refusalLimiter
	t0 := time.Unix(1000, 0)
	for i := range refusalBurst {
		if ok, folded := l.allow(t0); !ok || folded != 0 {
			t.Fatalf("refusal %d of the burst: allow = %v, %d; want true, 0", i+1, ok, folded)
		}
	}
	for range 5 {
		if ok, _ := l.allow(t0.Add(refusalEvery / 2)); ok {
			t.Fatal("a refusal past the burst was let through within the second")
		}
	}
	if ok, folded := l.allow(t0.Add(refusalEvery)); !ok || folded != 5 {
		t.Errorf("a second later: allow = %v, %d; want true, 5 (the refusals it folded)", ok, folded)
	}
	if ok, _ := l.allow(t0.Add(refusalEvery)); ok {
		t.Error("a second token within the same second")
	}
	// A long quiet spell refills the bucket, no more.
	later := t0.Add(time.Hour)
	for i := range refusalBurst {
		if ok, _ := l.allow(later); !ok {
			t.Fatalf("after an hour, refusal %d: not let through", i+1)
		}
	}
	if ok, _ := l.allow(later); ok {
		t.Error("after an hour the bucket held more than refusalBurst")
	}
}

func TestFenceIsRefusedWhateverThePolicy(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	loop := netip.MustParsePrefix("127.0.0.0/8")
	for _, tc := range []struct {
		name  string
		spec  netpolicy.Spec
		fence []netip.Prefix
		want  int
	}{
		{"allow_private, no fence", loopbackPolicy(netpolicy.Allow), nil, 200},
		{"allow_private", loopbackPolicy(netpolicy.Allow), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 403},
		{"CIDR allow rule", netpolicy.Spec{Rules: []netpolicy.Rule{{Host: loop.String(), Ports: []netpolicy.Port{port}, Action: netpolicy.Allow}}},
			[]netip.Prefix{netip.MustParsePrefix("127.0.0.0/30")}, 403},
		{"mapped fence", loopbackPolicy(netpolicy.Allow), []netip.Prefix{netip.MustParsePrefix("::ffff:127.0.0.1/128")}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring := decisionlog.NewRing(0)
			res := &Resolver{}
			res.AddStatic("api.test", netip.MustParseAddr("127.0.0.1"))
			_, addr := startWith(t, tc.spec, serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Resolver: res, Fence: tc.fence}})
			targets := []string{fmt.Sprintf("127.0.0.1:%d", port)}
			if tc.spec.AllowPrivate != nil {
				targets = append(targets, fmt.Sprintf("api.test:%d", port))
			}
			for _, target := range targets {
				for _, method := range []string{"GET", "CONNECT"} {
					status, _ := rawRequest(t, addr, method, target)
					if status != tc.want {
						t.Errorf("%s %s: status %d, want %d", method, target, status, tc.want)
						continue
					}
					if tc.want != 403 {
						continue
					}
					recs := recordsOfKind(t, ring, map[string]string{"GET": decisionlog.KindHTTP, "CONNECT": decisionlog.KindConnect}[method])
					r := recs[len(recs)-1]
					if r["rule"] != "guard" || r["reason"] != "address guard: 127.0.0.1 is in the sandbox pool" {
						t.Errorf("%s %s logged %v %q, want guard, in the sandbox pool", method, target, r["rule"], r["reason"])
					}
				}
			}
		})
	}
}

// rawRequest sends one GET (absolute form) or CONNECT for target and
// returns the answer's status and headers.
func rawRequest(t *testing.T, proxy, method, target string) (int, http.Header) {
	t.Helper()
	if method == "CONNECT" {
		return rawConnect(t, proxy, target)
	}
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func TestHostAddressesAreRefused(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	var dials atomic.Int32
	ring := decisionlog.NewRing(0)
	srv, addr := startWith(t, netpolicy.Spec{Default: netpolicy.Allow, AllowPrivate: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("fd00::/8"),
	}}, serverConfig{Log: decisionlog.NewLog("", ring), Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
		// Nothing leaves loopback, whatever the guard lets through.
		if ap, err := netip.ParseAddrPort(a); err != nil || !ap.Addr().IsLoopback() {
			dials.Add(1)
			return nil, fmt.Errorf("test: refusing to dial %s", a)
		}
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}})
	// This host, as far as the guard knows, owns these; loopback among them
	// stays the policy's to allow.
	srv.hostAddrs.cur.Store(&hostAddrSet{expires: time.Now().Add(time.Hour), addrs: map[netip.Addr]struct{}{
		netip.MustParseAddr("192.0.2.77"): {}, netip.MustParseAddr("fd00::77"): {}, netip.MustParseAddr("127.0.0.1"): {},
	}})
	for _, tc := range []struct {
		target string
		want   int
		reason string
	}{
		{"192.0.2.77:80", 403, "address guard: 192.0.2.77 is this host's own address"},
		{"[fd00::77]:80", 403, "address guard: fd00::77 is this host's own address"},
		{"[::ffff:192.0.2.77]:80", 403, "address guard: 192.0.2.77 is this host's own address"},
		{fmt.Sprintf("127.0.0.1:%d", port), 200, ""},
	} {
		for _, method := range []string{"GET", "CONNECT"} {
			status, _ := rawRequest(t, addr, method, tc.target)
			if status != tc.want {
				t.Errorf("%s %s: status %d, want %d", method, tc.target, status, tc.want)
				continue
			}
			if tc.want != 403 {
				continue
			}
			recs := recordsOfKind(t, ring, map[string]string{"GET": decisionlog.KindHTTP, "CONNECT": decisionlog.KindConnect}[method])
			if r := recs[len(recs)-1]; r["rule"] != "guard" || r["reason"] != tc.reason {
				t.Errorf("%s %s logged %v %q, want guard, %q", method, tc.target, r["rule"], r["reason"], tc.reason)
			}
		}
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the gateway tried %d dials off loopback", n)
	}
}

// TestRealHostAddressIsRefused uses this host's real interfaces: a
// service on a non-loopback address of the host is refused even when
// allow_private covers it.
func TestRealHostAddressIsRefused(t *testing.T) {
	addrs, err := interfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own netip.Addr
	for _, a := range addrs {
		if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			own = a
			break
		}
	}
	if !own.IsValid() {
		t.Skip("this host has no IPv4 address but loopback")
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(own, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ring := decisionlog.NewRing(0)
	_, addr := startWith(t, netpolicy.Spec{Default: netpolicy.Allow, AllowPrivate: []netip.Prefix{netip.PrefixFrom(own, 32)}},
		serverConfig{Log: decisionlog.NewLog("", ring)})
	status, hdr := rawConnect(t, addr, ln.Addr().String())
	if want := "address guard: " + own.String() + " is this host's own address"; status != 403 || hdr.Get(HeaderReason) != want {
		t.Errorf("CONNECT %s: %d %q, want 403 %q", ln.Addr(), status, hdr.Get(HeaderReason), want)
	}
}

func TestHostAddrsCache(t *testing.T) {
	var calls int
	var fail error
	h := hostAddrs{list: func() ([]netip.Addr, error) {
		calls++
		if fail != nil {
			return nil, fail
		}
		return []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:198.51.100.1")}, nil
	}}
	check := func(ip string, want bool) {
		t.Helper()
		got, err := h.has(netip.MustParseAddr(ip))
		if err != nil || got != want {
			t.Errorf("has(%s) = %v, %v; want %v", ip, got, err, want)
		}
	}
	check("192.0.2.1", true)
	check("198.51.100.1", true) // listed mapped, kept unmapped
	check("192.0.2.2", false)
	if calls != 1 {
		t.Errorf("%d listings within the TTL, want 1", calls)
	}
	// Once stale, the next look lists again; a failure keeps the last
	// good listing.
	expire := func() { h.cur.Load().expires = time.Now().Add(-time.Millisecond) }
	expire()
	fail = errors.New("no netlink")
	check("192.0.2.1", true)
	if calls != 2 {
		t.Errorf("%d listings after the TTL, want 2", calls)
	}
	// With no good listing ever, has fails, and the guard refuses.
	h2 := hostAddrs{list: func() ([]netip.Addr, error) { return nil, fail }}
	if _, err := h2.has(netip.MustParseAddr("203.0.113.1")); err == nil {
		t.Error("has with no listing ever: no error")
	}
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(p)})
	if err != nil {
		t.Fatal(err)
	}
	srv.hostAddrs.list = h2.list
	if class := srv.fenceClass(netip.MustParseAddrPort("203.0.113.1:443")); class != classHostErr {
		t.Errorf("fenceClass when the host's addresses cannot be listed = %q, want %q", class, classHostErr)
	}
}

func TestInvalidPrefixesAreErrors(t *testing.T) {
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	// An invalid Clients prefix dropped would leave Clients empty, which
	// serves everyone.
	for _, cfg := range []serverConfig{
		{Config: Config{Clients: []netip.Prefix{{}}}},
		{Config: Config{Fence: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16"), {}}}},
	} {
		cfg.Store = netpolicy.NewStore(p)
		if _, err := newServer(cfg); err == nil {
			t.Errorf("newServer(Clients %v, Fence %v): no error", cfg.Clients, cfg.Fence)
		}
	}
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(p), Config: Config{Clients: []netip.Prefix{netip.MustParsePrefix("::ffff:10.213.0.6/127")}}})
	if err != nil {
		t.Fatal(err)
	}
	if !srv.isClient(netip.MustParseAddr("10.213.0.7")) || srv.isClient(netip.MustParseAddr("10.213.0.5")) {
		t.Errorf("a mapped Clients prefix is not read as the IPv4 one: %v", *srv.clientNets.Load())
	}
}

// BenchmarkFenceClass is the fence's cost on the dial path, for an
// address it lets through (every check runs), with the host's addresses
// cached; BenchmarkInterfaceAddrs is what a refresh, once a second, costs.
func BenchmarkFenceClass(b *testing.B) {
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(p), Config: Config{Fence: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16")}}})
	if err != nil {
		b.Fatal(err)
	}
	srv.AddOwnAddr(netip.MustParseAddrPort("10.213.0.1:3128"))
	ap := netip.MustParseAddrPort("203.0.113.9:443")
	for b.Loop() {
		if srv.fenceClass(ap) != "" {
			b.Fatal("refused")
		}
	}
}

func BenchmarkInterfaceAddrs(b *testing.B) {
	for b.Loop() {
		if _, err := interfaceAddrs(); err != nil {
			b.Fatal(err)
		}
	}
}
