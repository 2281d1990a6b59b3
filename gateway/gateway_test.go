package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// testGateway is a gateway serving on loopback, with its decision log in a
// ring the test reads.
type testGateway struct {
	srv   *Server
	addr  string // the proxy's host:port
	ring  *decisionlog.Ring
	log   *decisionlog.Log
	store *netpolicy.Store
}

// startGateway starts a gateway with the policy spec; static maps names to
// addresses. It is closed when the test ends.
func startGateway(t *testing.T, spec netpolicy.Spec, static map[string]string) *testGateway {
	t.Helper()
	return startGatewayWith(t, spec, static, nil)
}

// startGatewayWith is startGateway with more configuration: set, when not
// nil, changes the Config before the gateway is made.
func startGatewayWith(t testing.TB, spec netpolicy.Spec, static map[string]string, set func(*serverConfig)) *testGateway {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	res := &Resolver{System: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, fmt.Errorf("no DNS in tests")
	}}}
	for name, ip := range static {
		if err := res.AddStatic(name, netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	ring := decisionlog.NewRing(0)
	g := &testGateway{ring: ring, log: decisionlog.NewLog("", ring), store: netpolicy.NewStore(p)}
	cfg := serverConfig{Store: g.store, Log: g.log, Config: Config{
		Resolver: res,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Limits:   Limits{HeaderReadTimeout: 2 * time.Second, DialTimeout: 2 * time.Second},
	}}
	if set != nil {
		set(&cfg)
	}
	g.srv, err = newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		g.srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		g.log.Close()
	})
	return g
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// client returns an HTTP client that uses the gateway as its proxy for
// http and https, trusting the test TLS server's certificate.
func (g *testGateway) client(t *testing.T, tlsSrv *httptest.Server) *http.Client {
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: false}
	if tlsSrv != nil {
		tr.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// records returns every record the gateway logged so far, decoded.
func (g *testGateway) records(t *testing.T) []map[string]any {
	t.Helper()
	return ringRecords(t, g.ring)
}

// lastDecision waits for and returns the last decision record.
func (g *testGateway) lastDecision(t *testing.T) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs := g.records(t)
		for i := len(recs) - 1; i >= 0; i-- {
			if recs[i]["event"] == decisionlog.EventDecision {
				return recs[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision record")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoUpstream answers with what it received: method, path, headers.
func echoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "must not reach the client")
		json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.RequestURI(), "host": r.Host, "header": r.Header, "body": string(body),
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func portOf(t testing.TB, srv *httptest.Server) netpolicy.Port {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	var p int
	fmt.Sscan(u.Port(), &p)
	return netpolicy.Port(p)
}

// dialEchoThroughGateway starts echoUpstream and a gateway that allows it
// as api.test, and returns the upstream's port and a connection to the
// gateway (closed when the test ends), for requests written by hand.
func dialEchoThroughGateway(t *testing.T) (netpolicy.Port, net.Conn) {
	t.Helper()
	port := portOf(t, echoUpstream(t))
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return port, conn
}

// tcpServer serves each connection to a loopback listener with handle,
// in a goroutine of its own, until the test ends; it returns the listener.
func tcpServer(tb testing.TB, handle func(net.Conn)) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln
}

// loopbackPolicy allows names on the test servers' ports and lets the
// guard pass loopback, where the test upstreams live.
func loopbackPolicy(def netpolicy.Action, rules ...netpolicy.Rule) netpolicy.Spec {
	return netpolicy.Spec{Default: def, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Rules: rules}
}

func TestHTTPVerdicts(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	g := startGateway(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "mock", Host: "mock.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Intercept,
			Response: &netpolicy.Response{Status: 418, Headers: map[string]string{"Content-Type": "text/plain", "X-Canned": "yes"}, Body: "teapot"}},
		netpolicy.Rule{ID: "no-admin", Host: "api.test", Ports: []netpolicy.Port{port}, Path: "/admin", Action: netpolicy.Block},
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "mock.test": "127.0.0.1", "other.test": "127.0.0.1"})
	c := g.client(t, nil)
	base := func(host string) string { return fmt.Sprintf("http://%s:%d", host, port) }

	tests := []struct {
		url, action, rule string
		status            int
	}{
		{base("api.test") + "/v1/x?q=secret", "allow", "api", 200},
		{base("API.test.") + "/v1/x", "allow", "api", 200},
		{base("api.test") + "/admin/users", "block", "no-admin", 403},
		{base("api.test") + "/%61dmin", "block", "no-admin", 403},
		{base("mock.test") + "/", "intercept", "mock", 418},
		{base("other.test") + "/", "block", "default", 403},
	}
	for _, tt := range tests {
		resp, err := c.Get(tt.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: status %d, want %d (%s)", tt.url, resp.StatusCode, tt.status, body)
		}
		rec := g.lastDecision(t)
		if rec["action"] != tt.action || rec["rule"] != tt.rule {
			t.Errorf("GET %s: logged %v by %v, want %s by %s", tt.url, rec["action"], rec["rule"], tt.action, tt.rule)
		}
		switch tt.action {
		case "block":
			if resp.Header.Get(HeaderDecision) != "block" || resp.Header.Get(HeaderRule) != tt.rule || resp.Header.Get(HeaderReason) == "" {
				t.Errorf("GET %s: X-Sbx headers %v", tt.url, resp.Header)
			}
			if !strings.Contains(string(body), "sbx policy allow") {
				t.Errorf("GET %s: block body does not say how to allow it:\n%s", tt.url, body)
			}
		case "intercept":
			if string(body) != "teapot" || resp.Header.Get("X-Canned") != "yes" || resp.Header.Get(HeaderDecision) != "intercept" {
				t.Errorf("intercept answered %q with %v", body, resp.Header)
			}
		case "allow":
			var echo map[string]any
			if err := json.Unmarshal(body, &echo); err != nil {
				t.Fatalf("upstream answer %q: %v", body, err)
			}
			if resp.Header.Get("X-Hop") != "" {
				t.Errorf("a header the upstream's Connection named reached the client")
			}
		}
		if strings.Contains(fmt.Sprint(rec), "secret") {
			t.Errorf("the query string reached the log: %v", rec)
		}
	}
}

func TestHopByHopHeadersAreNotForwarded(t *testing.T) {
	port, conn := dialEchoThroughGateway(t)
	fmt.Fprintf(conn, "GET http://api.test:%d/echo HTTP/1.1\r\nHost: api.test:%d\r\n"+
		"proxy-AUTHORIZATION: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: X-Private, keep-alive\r\n"+
		"X-Private: drop me\r\nkeep-alive: timeout=5\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: yes\r\n\r\n", port, port)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var echo struct {
		Header http.Header
		Host   string
	}
	if err := json.NewDecoder(resp.Body).Decode(&echo); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Connection", "X-Private", "Keep-Alive", "Te", "Upgrade"} {
		if v := echo.Header.Get(h); v != "" {
			t.Errorf("upstream got %s: %q", h, v)
		}
	}
	if echo.Header.Get("X-Kept") != "yes" {
		t.Errorf("an end-to-end header was dropped: %v", echo.Header)
	}
	if want := fmt.Sprintf("api.test:%d", port); echo.Host != want {
		t.Errorf("upstream Host = %q, want %q", echo.Host, want)
	}
}

func TestAuditModeLetsBlocksThrough(t *testing.T) {
	up := echoUpstream(t)
	spec := loopbackPolicy(netpolicy.Block)
	spec.Mode = netpolicy.Audit
	g := startGateway(t, spec, map[string]string{"api.test": "127.0.0.1"})
	resp, err := g.client(t, nil).Get(fmt.Sprintf("http://api.test:%d/", portOf(t, up)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("audit mode: status %d, want 200", resp.StatusCode)
	}
	rec := g.lastDecision(t)
	if rec["action"] != "block" || rec["enforced"] != false {
		t.Errorf("audit mode logged %v enforced=%v, want block enforced=false", rec["action"], rec["enforced"])
	}
}

func TestGuard(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	static := map[string]string{"local.test": "127.0.0.1"}

	// A name that resolves to loopback is refused without allow_private.
	g := startGateway(t, netpolicy.Spec{Rules: []netpolicy.Rule{
		{Host: "local.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	}}, static)
	c := g.client(t, nil)
	resp, err := c.Get(fmt.Sprintf("http://local.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec := g.lastDecision(t)
	if resp.StatusCode != 403 || rec["rule"] != "guard" || !strings.Contains(rec["reason"].(string), "127.0.0.1 is loopback") {
		t.Errorf("name on loopback: status %d, logged %v %q; want 403 by guard", resp.StatusCode, rec["rule"], rec["reason"])
	}
	// An IP rule for 127.0.0.1 is allowed.
	g = startGateway(t, netpolicy.Spec{Rules: []netpolicy.Rule{
		{Host: "127.0.0.1", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	}}, static)
	c = g.client(t, nil)
	resp, err = c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("IP rule 127.0.0.1: status %d, want 200", resp.StatusCode)
	}

	// With allow_private the name passes, but the gateway's own address
	// never does, by name or by IP, even for CONNECT.
	g2 := startGateway(t, loopbackPolicy(netpolicy.Allow), static)
	c2 := g2.client(t, nil)
	resp, err = c2.Get(fmt.Sprintf("http://local.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("allow_private 127.0.0.0/8: status %d, want 200", resp.StatusCode)
	}
	_, gwPort, _ := net.SplitHostPort(g2.addr)
	for _, target := range []string{"http://127.0.0.1:" + gwPort + "/", "http://local.test:" + gwPort + "/"} {
		resp, err = c2.Get(target)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rec := g2.lastDecision(t)
		if resp.StatusCode != 403 || rec["rule"] != "guard" || !strings.Contains(rec["reason"].(string), "the gateway itself") {
			t.Errorf("%s: status %d, logged %v %q; want 403, the gateway itself", target, resp.StatusCode, rec["rule"], rec["reason"])
		}
	}
}

func TestConnectVerdictsAndSNI(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure") }))
	// The upstream notes every server name a ClientHello that reached it
	// asked for: a tunnel that let a mismatched one through is seen here,
	// whatever the client made of the answer.
	var namesMu sync.Mutex
	var names []string
	up.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		namesMu.Lock()
		names = append(names, h.ServerName)
		namesMu.Unlock()
		return nil, nil
	}}
	up.StartTLS()
	defer up.Close()
	port := portOf(t, up)
	g := startGateway(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "ok", Host: "example.com", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "mock", Host: "mock.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Intercept, Response: &netpolicy.Response{Body: "x"}},
	), map[string]string{"example.com": "127.0.0.1", "mock.test": "127.0.0.1", "evil.test": "127.0.0.1"})

	// The test server's certificate is for example.com: SNI matches.
	c := g.client(t, up)
	resp, err := c.Get(fmt.Sprintf("https://example.com:%d/", port))
	if err != nil {
		t.Fatalf("allowed CONNECT: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "secure" {
		t.Errorf("through the tunnel: %q", body)
	}
	if rec := g.lastDecision(t); rec["action"] != "allow" || rec["rule"] != "ok" || rec["kind"] != "connect" {
		t.Errorf("allowed CONNECT logged %v", rec)
	}

	// Blocked and intercepted CONNECTs get 403 with the headers.
	for _, tt := range []struct{ host, rule, reason string }{
		{"evil.test", "default", "no rule matched"},
		{"mock.test", "mock", "an HTTPS intercept needs TLS inspection"},
	} {
		status, hdr := rawConnect(t, g.addr, fmt.Sprintf("%s:%d", tt.host, port))
		if status != 403 || hdr.Get(HeaderDecision) != "block" || hdr.Get(HeaderRule) != tt.rule || !strings.Contains(hdr.Get(HeaderReason), tt.reason) {
			t.Errorf("CONNECT %s: %d %v", tt.host, status, hdr)
		}
	}

	// A ClientHello for another name closes the tunnel: sni mismatch.
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com:%d\r\n\r\n", port, port)
	br := bufio.NewReader(conn)
	resp, err = http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufConn{conn, br}, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Errorf("TLS handshake with a mismatched SNI succeeded through the tunnel")
	}
	// The decision (allow) was logged at decision time; the close record
	// says the SNI check blocked the tunnel.
	var closeRec map[string]any
	for deadline := time.Now().Add(5 * time.Second); closeRec == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, r := range g.records(t) {
			if r["event"] == decisionlog.EventClose && r["reason"] == "sni mismatch" {
				closeRec = r
			}
		}
	}
	if closeRec == nil || closeRec["action"] != "block" || closeRec["enforced"] != true {
		t.Errorf("SNI mismatch: close record %v, want action block, reason sni mismatch", closeRec)
	}
	namesMu.Lock()
	defer namesMu.Unlock()
	if slices.Contains(names, "evil.test") {
		t.Errorf("the upstream got a ClientHello for evil.test through a tunnel to example.com (server names it saw: %q)", names)
	}
	if !slices.Contains(names, "example.com") {
		t.Errorf("the upstream saw no ClientHello for example.com (%q): it cannot tell what reached it", names)
	}
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// rawConnect sends a CONNECT and returns the answer's status and headers.
func rawConnect(t *testing.T, proxy, target string) (int, http.Header) {
	t.Helper()
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp.StatusCode, resp.Header
}

func TestMalformedRequests(t *testing.T) {
	up := echoUpstream(t)
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
	port := portOf(t, up)
	tests := []struct {
		name, req string
		status    int
		method    string // and kind: connect for CONNECT, else http
	}{
		{"CL and TE", "POST http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "POST"},
		{"differing CL", "POST http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "POST"},
		{"obs-fold", "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nX-A: a\r\n  folded\r\n\r\n", 400, "GET"},
		{"origin form", "GET /x HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", 400, "GET"},
		{"https absolute", "GET https://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 400, "GET"},
		{"CONNECT no host", "CONNECT :443 HTTP/1.1\r\nHost: x%d\r\n\r\n", 400, "CONNECT"},
		{"CONNECT big port", "CONNECT api.test:99999 HTTP/1.1\r\nHost: x%d\r\n\r\n", 400, "CONNECT"},
		{"CONNECT port 0", "CONNECT api.test:0 HTTP/1.1\r\nHost: x%d\r\n\r\n", 400, "CONNECT"},
		{"CONNECT open bracket", "CONNECT [::1 HTTP/1.1\r\nHost: x%d\r\n\r\n", 400, "CONNECT"},
		{"CONNECT obs-fold", "CONNECT api.test:443 HTTP/1.1\r\nHost: x%d\r\nX-A: a\r\n  folded\r\n\r\n", 400, "CONNECT"},
		{"bad method", "G(T http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 400, ""},
		{"huge headers", "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			go fmt.Fprintf(conn, tt.req, port)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			kind := decisionlog.KindHTTP
			if tt.method == http.MethodConnect {
				kind = decisionlog.KindConnect
			}
			if d := g.lastDecision(t); d["kind"] != kind || d["method"] != tt.method || d["rule"] != netpolicy.RuleInvalid {
				t.Errorf("logged kind %v, method %v, rule %v; want %s, %q, %s", d["kind"], d["method"], d["rule"], kind, tt.method, netpolicy.RuleInvalid)
			}
			// The gateway still serves the next client.
			r2, err := g.client(t, nil).Get(fmt.Sprintf("http://api.test:%d/", port))
			if err != nil {
				t.Fatalf("next request: %v", err)
			}
			r2.Body.Close()
			if r2.StatusCode != 200 {
				t.Errorf("next request: %d", r2.StatusCode)
			}
		})
	}
}

func TestTunnelLimit(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	ring := decisionlog.NewRing(0)
	_, addr := startWith(t, loopbackPolicy(netpolicy.Allow), serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Limits: Limits{MaxTunnelsPerClient: 2}}})
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", sink.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		want := 200
		if i == 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("tunnel %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	recs := recordsOfKind(t, ring, decisionlog.KindConnect)
	if len(recs) != 3 {
		t.Fatalf("%d decision records, want 3 (one per CONNECT): %v", len(recs), recs)
	}
	const want = "client 127.0.0.1 has 2 tunnels open, the limit per client"
	if r := recs[2]; r["action"] != "block" || r["rule"] != "guard" || r["status"] != 429.0 || r["enforced"] != true || r["reason"] != want {
		t.Errorf("third CONNECT logged %v, want block by guard, 429, %q", r, want)
	}
	for _, r := range ringRecords(t, ring) {
		if r["event"] == decisionlog.EventClose && r["status"] == 429.0 {
			t.Errorf("the refused tunnel has a close record, as if it had been allowed: %v", r)
		}
	}
}

func TestEveryRequestIsLoggedOnce(t *testing.T) {
	up := echoUpstream(t)
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsUp.Close()
	port, tport := portOf(t, up), portOf(t, tlsUp)
	g := startGateway(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port, tport}, Action: netpolicy.Allow},
		netpolicy.Rule{Host: "mock.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Intercept, Response: &netpolicy.Response{Body: "m"}},
	), map[string]string{"example.com": "127.0.0.1", "mock.test": "127.0.0.1", "no.test": "127.0.0.1"})
	c := g.client(t, tlsUp)
	const rounds = 10
	var wg sync.WaitGroup
	n := 0
	for range rounds {
		for _, u := range []string{
			fmt.Sprintf("http://example.com:%d/a", port),
			fmt.Sprintf("http://mock.test:%d/", port),
			fmt.Sprintf("http://no.test:%d/", port),
			fmt.Sprintf("https://example.com:%d/", tport),
			fmt.Sprintf("https://no.test:%d/", tport),
		} {
			n++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := c.Get(u); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}
	wg.Wait()
	c.Transport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	var decisions, closes int
	for {
		decisions, closes = 0, 0
		var lastSeq float64
		for _, r := range g.records(t) {
			seq := r["seq"].(float64)
			if seq <= lastSeq {
				t.Fatalf("seq %v after %v", seq, lastSeq)
			}
			lastSeq = seq
			switch r["event"] {
			case decisionlog.EventDecision:
				decisions++
				for _, f := range []string{decisionlog.FieldV, decisionlog.FieldSeq, decisionlog.FieldID, decisionlog.FieldEvent, decisionlog.FieldTime, decisionlog.FieldSandbox, decisionlog.FieldClient, decisionlog.FieldKind, decisionlog.FieldMethod, decisionlog.FieldHost, decisionlog.FieldPort, decisionlog.FieldPath, decisionlog.FieldAction, decisionlog.FieldEnforced, decisionlog.FieldRule, decisionlog.FieldReason, decisionlog.FieldPolicyVersion, decisionlog.FieldStatus} {
					if _, ok := r[f]; !ok {
						t.Fatalf("decision record without %s: %v", f, r)
					}
				}
			case decisionlog.EventClose:
				closes++
			}
		}
		if decisions == n && closes == 2*rounds || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if decisions != n {
		t.Errorf("%d decision records for %d requests", decisions, n)
	}
	if closes != 2*rounds {
		t.Errorf("%d close records for %d allowed requests", closes, 2*rounds)
	}
}

func TestRefusedTargetsLogNoSecrets(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{}, nil)
	for _, target := range []string{
		"https://api.example.com/v1?token=SECRET1",
		"http://user:SECRET2@example.com/",
		"http://example.com/%zz?token=SECRET4",
		"http://example.com/v1?api_key=SECRET3",
	} {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: example.com\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
		}
		conn.Close()
	}
	time.Sleep(50 * time.Millisecond)
	lines, _ := g.ring.Since(0, 100)
	if len(lines) < 4 {
		t.Fatalf("%d records for 4 requests", len(lines))
	}
	for _, l := range lines {
		if strings.Contains(string(l), "SECRET") {
			t.Errorf("a secret reached the log: %s", l)
		}
	}
}

func TestChunkedTrailersKeepTheConnection(t *testing.T) {
	port, conn := dialEchoThroughGateway(t)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST http://api.test:%d/a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n"+
		"GET http://api.test:%d/b HTTP/1.1\r\nHost: api.test\r\n\r\n", port, port)
	br := bufio.NewReader(conn)
	for _, want := range []string{`"body":"hello"`, `"path":"/b"`} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer with %s: %v", want, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("got %d %s, want 200 with %s", resp.StatusCode, body, want)
		}
	}
}

func TestExpectContinue(t *testing.T) {
	port, conn := dialEchoThroughGateway(t)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", port)
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("first line %q, %v; want 100 Continue before the body is sent", line, err)
	}
	br.ReadString('\n')
	io.WriteString(conn, "hello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer: %v %v", resp, err)
	}
}

func TestUnspecifiedAddressIsTheGatewayItself(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Allow, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, nil)
	_, port, _ := net.SplitHostPort(g.addr)
	status, hdr := rawConnect(t, g.addr, "0.0.0.0:"+port)
	if status != 403 || hdr.Get(HeaderRule) != "guard" {
		t.Errorf("CONNECT 0.0.0.0:%s = %d %v, want 403 by guard", port, status, hdr)
	}
}

func TestStartRefusesAnAPIOnEveryAddress(t *testing.T) {
	p, _ := netpolicy.Compile(netpolicy.Spec{})
	dir := t.TempDir()
	if g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", API: []string{"0.0.0.0:0"}, TokenFile: dir + "/tok", Policy: p}); err == nil {
		g.Close()
		t.Errorf("an API on 0.0.0.0 was accepted")
	}
	notSocket := dir + "/notes.txt"
	os.WriteFile(notSocket, []byte("keep me"), 0o600)
	if g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", API: []string{"unix:" + notSocket}, TokenFile: dir + "/tok", Policy: p}); err == nil {
		g.Close()
		t.Errorf("an API socket path holding a file was accepted")
	}
	if data, _ := os.ReadFile(notSocket); string(data) != "keep me" {
		t.Errorf("the file at the socket path was removed")
	}
}

func TestWebSocketUpgradeIsRelayed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw) // echo
	}))
	defer up.Close()
	port := portOf(t, up)
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"ws.test": "127.0.0.1"})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET http://ws.test:%d/chat HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", port)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo through the relay: %q %v", buf, err)
	}
}

// startWith starts a gateway on loopback with cfg (Store set from spec)
// and returns its address; it is closed when the test ends.
func startWith(t *testing.T, spec netpolicy.Spec, cfg serverConfig) (*Server, string) {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = netpolicy.NewStore(p)
	srv, err := newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background(), ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

func TestAuditModeConnect(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { c.Close() }).Addr().String()
	spec := loopbackPolicy(netpolicy.Block)
	spec.Mode = netpolicy.Audit
	ring := decisionlog.NewRing(0)
	_, addr := startWith(t, spec, serverConfig{Log: decisionlog.NewLog("", ring)})
	if status, _ := rawConnect(t, addr, sink); status != 200 {
		t.Errorf("audit mode CONNECT: %d, want 200", status)
	}
	lines, _ := ring.Since(0, 10)
	if len(lines) == 0 || !strings.Contains(string(lines[0]), `"action":"block","enforced":false`) {
		t.Errorf("audit mode CONNECT logged %s, want block with enforced false", lines)
	}
}

func TestHeaderReadTimeout(t *testing.T) {
	_, addr := startWith(t, netpolicy.Spec{}, serverConfig{Config: Config{Limits: Limits{HeaderReadTimeout: 200 * time.Millisecond}}})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET http://a.test/ HTTP/1.1\r\nHost: a") // and nothing more
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the gateway did not close a slow head's connection: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want about 200ms", d)
	}
}

func TestIdleTunnelTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			defer c.Close() // silent: never sends, never closes
		}
	}()
	_, addr := startWith(t, loopbackPolicy(netpolicy.Allow), serverConfig{Config: Config{Limits: Limits{IdleTunnelTimeout: 300 * time.Millisecond}}})
	c, err := connectThroughT(t, addr, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("an idle tunnel was not closed: %v", err)
	}
}

func connectThroughT(t *testing.T, proxy, target string) (net.Conn, error) {
	t.Helper()
	return connectThrough(proxy, target)
}

func TestDialTimeoutIs504(t *testing.T) {
	hang := func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	_, addr := startWith(t, loopbackPolicy(netpolicy.Allow), serverConfig{Dial: hang, Config: Config{Limits: Limits{DialTimeout: 200 * time.Millisecond}}})
	if status, _ := rawConnect(t, addr, "127.0.0.1:9"); status != 504 {
		t.Errorf("CONNECT with a dial timeout: %d, want 504", status)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 504 {
		t.Errorf("GET with a dial timeout: %v %v, want 504", resp, err)
	}
	refused := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
	}
	_, addr2 := startWith(t, loopbackPolicy(netpolicy.Allow), serverConfig{Dial: refused})
	if status, _ := rawConnect(t, addr2, "127.0.0.1:9"); status != 502 {
		t.Errorf("CONNECT refused upstream: %d, want 502", status)
	}
}

// TestAuditModeNeverPassesTheGuardOrInvalidTargets: audit mode lets rule
// and default blocks through, never the address guard's or an invalid
// target's. The sandbox asks for the loopback service by a name that
// resolves there, by its IP (plain HTTP and CONNECT) and by an alternate
// IPv4 spelling; each is refused by the gateway (403, the rule, enforced),
// and the service, which counts every connection it accepts, is reached
// by none of them.
func TestAuditModeNeverPassesTheGuardOrInvalidTargets(t *testing.T) {
	up := echoUpstream(t)
	var reached atomic.Int64
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			reached.Add(1)
		}
	}
	port := portOf(t, up)
	spec := netpolicy.Spec{Mode: netpolicy.Audit} // no allow_private
	g := startGateway(t, spec, map[string]string{"local.test": "127.0.0.1"})
	c := g.client(t, nil)
	for _, target := range []string{fmt.Sprintf("local.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)} {
		resp, err := c.Get("http://" + target + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if rec := g.lastDecision(t); resp.StatusCode != 403 || rec["rule"] != "guard" || rec["enforced"] != true {
			t.Errorf("audit mode, GET %s: %d, logged %v enforced=%v; want 403 by guard, enforced", target, resp.StatusCode, rec["rule"], rec["enforced"])
		}
	}
	for _, tt := range []struct{ target, rule string }{
		{fmt.Sprintf("127.0.0.1:%d", port), "guard"},
		{fmt.Sprintf("local.test:%d", port), "guard"},
		{fmt.Sprintf("127.1:%d", port), "invalid"},
	} {
		status, hdr := rawConnect(t, g.addr, tt.target)
		if rec := g.lastDecision(t); status != 403 || hdr.Get(HeaderRule) != tt.rule || rec["enforced"] != true {
			t.Errorf("audit mode, CONNECT %s: %d %s enforced=%v; want 403 %s, enforced", tt.target, status, hdr.Get(HeaderRule), rec["enforced"], tt.rule)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the loopback service accepted %d connections through the gateway in audit mode, want none", n)
	}
}

func TestConnectionsPerClientAreCapped(t *testing.T) {
	ring := decisionlog.NewRing(0)
	srv, addr := startWith(t, netpolicy.Spec{}, serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Limits: Limits{MaxConnsPerClient: 2}}})
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		open := srv.clients[netip.MustParseAddr("127.0.0.1")]
		srv.mu.Unlock()
		if open == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections tracked, want 2", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("connection over the cap: %v %v, want 429", resp, err)
		}
	}
	waitBlocked(t, srv, 2)
	recs := recordsOfKind(t, ring, decisionlog.KindConn)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %v", len(recs), recs)
	}
	for _, r := range recs {
		if r["action"] != "block" || r["rule"] != "guard" || r["status"] != 429.0 || r["reason"] != "client 127.0.0.1 has 2 connections open, the limit per client" {
			t.Errorf("record %v, want block by guard, 429, the connections cap", r)
		}
	}
}

func TestLoggedPathsAreCapped(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{}, nil)
	long := "/" + strings.Repeat("a", 10<<10)
	resp, err := g.client(t, nil).Get("http://blocked.test" + long)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p := g.lastDecision(t)["path"].(string); len(p) > maxLoggedPath+3 {
		t.Errorf("logged path of %d bytes, want at most %d", len(p), maxLoggedPath)
	}
}

func TestResolverAsksForFullyQualifiedNames(t *testing.T) {
	var asked []string
	r := &Resolver{lookupNetIP: func(_ context.Context, _, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		return []netip.Addr{netip.MustParseAddr("::ffff:203.0.113.9")}, nil
	}}
	addrs, err := r.Lookup(context.Background(), "secrets")
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != "secrets." {
		t.Errorf("asked %q, want the fully qualified \"secrets.\"", asked)
	}
	if len(addrs) != 1 || addrs[0] != netip.MustParseAddr("203.0.113.9") {
		t.Errorf("answer %v, want 203.0.113.9 unmapped", addrs)
	}
}

func TestOnlyIPLiteralsAreDialed(t *testing.T) {
	srv, _ := startWith(t, netpolicy.Spec{}, serverConfig{Dial: func(context.Context, string, string) (net.Conn, error) {
		t.Fatal("the dialer was called for a name")
		return nil, nil
	}})
	if _, err := srv.dialChecked(context.Background(), "tcp", "example.com:80"); err == nil {
		t.Errorf("dialChecked dialed a name")
	}
}

func TestSNIFragmentedAndMalformed(t *testing.T) {
	// A real ClientHello for evil.test, captured from crypto/tls.
	var hello []byte
	{
		a, b := net.Pipe()
		go func() {
			tls.Client(a, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true}).Handshake()
			a.Close()
		}()
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		hdr := make([]byte, 5)
		io.ReadFull(b, hdr)
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		io.ReadFull(b, body)
		b.Close()
		hello = append(hdr, body...)
	}
	// The same handshake message split over two TLS records.
	msg := hello[5:]
	half := len(msg) / 2
	record := func(p []byte) []byte {
		return append([]byte{0x16, hello[1], hello[2], byte(len(p) >> 8), byte(len(p))}, p...)
	}
	fragmented := append(record(msg[:half]), record(msg[half:])...)
	malformed := []byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00}

	sink := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	_, port, _ := net.SplitHostPort(sink.Addr().String())
	ring := decisionlog.NewRing(0)
	_, addr := startWith(t, netpolicy.Spec{Default: netpolicy.Allow, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Resolver: func() *Resolver {
			r := &Resolver{}
			r.AddStatic("good.test", netip.MustParseAddr("127.0.0.1"))
			return r
		}()}})
	for _, tt := range []struct {
		name   string
		bytes  []byte
		reason string
	}{
		{"fragmented", fragmented, "sni mismatch"},
		{"malformed", malformed, "malformed TLS ClientHello"},
	} {
		c, err := connectThrough(addr, "good.test:"+port)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tt.bytes)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c) // the gateway closes the tunnel
		c.Close()
		found := false
		for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			lines, _ := ring.Since(0, 100)
			for _, l := range lines {
				if strings.Contains(string(l), `"event":"close"`) && strings.Contains(string(l), `"reason":"`+tt.reason+`"`) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s ClientHello: no close record with reason %q", tt.name, tt.reason)
		}
	}
}

// TestWebSocketRelayOutlivesASilentUpstream: an upgraded connection idles
// out only when neither side has sent for IdleTunnelTimeout; an upstream
// that is silent while the client sends keeps it, and may answer later.
func TestWebSocketRelayOutlivesASilentUpstream(t *testing.T) {
	const sends = 8
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, sends)
		if _, err := io.ReadFull(brw, buf); err == nil { // silent until the client has sent it all
			io.WriteString(conn, "done")
		}
	}))
	defer up.Close()
	port := portOf(t, up)
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), map[string]string{"ws.test": "127.0.0.1"}, func(c *serverConfig) {
		c.Limits.IdleConnTimeout, c.Limits.IdleTunnelTimeout = 150*time.Millisecond, 300*time.Millisecond
	})
	conn, br := dialRaw(t, g.addr)
	fmt.Fprintf(conn, "GET http://ws.test:%d/chat HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for range sends { // 800 ms in all: past both idle timeouts, never idle
		time.Sleep(100 * time.Millisecond)
		if _, err := io.WriteString(conn, "x"); err != nil {
			t.Fatalf("sending: %v", err)
		}
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "done" {
		t.Errorf("the upstream's late answer: got %q, %v; want done (the relay ended while the client was sending?)", buf, err)
	}
}

// TestTunnelOutlivesASilentSide: a CONNECT tunnel idles out only when
// neither side has sent for IdleTunnelTimeout: an upstream silent while
// the client trickles (a long poll, an event stream's other end) keeps it,
// and may answer later; a tunnel silent both ways still ends.
func TestTunnelOutlivesASilentSide(t *testing.T) {
	const sends = 8
	sink := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, sends)
		if _, err := io.ReadFull(c, buf); err == nil {
			io.WriteString(c, "done")
		}
		io.Copy(io.Discard, c)
	}).Addr().String()
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) {
		c.Limits.IdleTunnelTimeout = 300 * time.Millisecond
	})
	conn, br := connectRaw(t, g.addr, sink)
	for range sends { // 800 ms in all: past the idle timeout, never idle
		time.Sleep(100 * time.Millisecond)
		if _, err := io.WriteString(conn, "x"); err != nil {
			t.Fatalf("sending: %v", err)
		}
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "done" {
		t.Errorf("the upstream's late answer: got %q, %v; want done (the tunnel ended while the client was sending?)", buf, err)
	}
	// Silent both ways: it ends, within two idle timeouts.
	idle, ibr := connectRaw(t, g.addr, sink)
	start := time.Now()
	if _, err := ibr.ReadByte(); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("an idle tunnel: read %v after %v, want its end within two idle timeouts", err, time.Since(start))
	}
	idle.Close()
}

// TestTunnelClientThatPausesReading: a client that stops reading for
// longer than the idle timeout (less than half as long again) while the
// upstream pushes gets every byte, in order, when it reads again: a step
// that ends at its read deadline loses nothing, and no write is cut off
// and gone on from.
func TestTunnelClientThatPausesReading(t *testing.T) {
	const total = 8 << 20
	sink := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, total)
		for i := range buf {
			buf[i] = byte(i % 251)
		}
		c.Write(buf)
	}).Addr().String()
	// 1 s, not less: on a loaded machine (a race build beside other
	// tests) a tunnel that moves bytes can go 300 ms without running.
	idle := time.Second
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) { c.Limits.IdleTunnelTimeout = idle })
	_, br := connectRaw(t, g.addr, sink)
	time.Sleep(idle * 6 / 5) // the upstream fills every buffer meanwhile
	got, err := io.ReadAll(br)
	if len(got) != total {
		t.Fatalf("got %d of %d bytes (%v)", len(got), total, err)
	}
	for i, b := range got {
		if b != byte(i%251) {
			t.Fatalf("byte %d is %d, want %d: the stream lost bytes", i, b, byte(i%251))
		}
	}
}

// dialRaw connects to the gateway at addr for a test that speaks HTTP by
// hand: the connection (closed when the test ends, every read and write
// bounded by 10 s) and a reader of it.
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

// connectRaw opens a CONNECT tunnel to target through the gateway at addr,
// as dialRaw does, and fails the test unless it is answered 200.
func connectRaw(t *testing.T, addr, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, br := dialRaw(t, addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return conn, br
}

// TestUpstreamConnectionReuse checks how upstream connections are reused:
// the requests of one client connection share one upstream connection,
// which it keeps between them; two client connections at once use two;
// and when a client connection ends, its upstream connection goes to the
// pool, where the next client's requests find it.
func TestUpstreamConnectionReuse(t *testing.T) {
	up, opened := countingUpstream(t)
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), nil)
	get := func(conn net.Conn, br *bufio.Reader) { t.Helper(); getOK(t, conn, br, up) }
	want := func(n int32, when string) {
		t.Helper()
		if got := opened.Load(); got != n {
			t.Fatalf("%s: %d upstream connections opened, want %d", when, got, n)
		}
	}

	a, abr := dialRaw(t, g.addr)
	for range 3 {
		get(a, abr)
	}
	want(1, "three requests on one client connection")
	b, bbr := dialRaw(t, g.addr)
	get(b, bbr)
	get(a, abr)
	get(b, bbr)
	want(2, "two client connections at once")

	// Once the gateway has seen a and b end, their upstream connections
	// are in the pool.
	a.Close()
	b.Close()
	addr := netip.MustParseAddrPort(up.Listener.Addr().String())
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n := g.srv.pool.idleCount(addr)
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d upstream connections in the pool after the clients left, want 2", n)
		}
	}
	c, cbr := dialRaw(t, g.addr)
	d, dbr := dialRaw(t, g.addr)
	get(c, cbr)
	get(d, dbr)
	get(c, cbr)
	want(2, "two new client connections after the first two ended")
}

// TestHeldUpstreamConnectionAndTunnels checks that a client connection
// that turns into a CONNECT tunnel gives the upstream connection its
// earlier request left held to the pool, where another client's request
// finds it while the tunnel is open.
func TestHeldUpstreamConnectionAndTunnels(t *testing.T) {
	up, opened := countingUpstream(t)
	// The tunnel's target, another server than up: silent, it reads
	// until the tunnel ends.
	sink := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), nil)
	get := func(conn net.Conn, br *bufio.Reader) { t.Helper(); getOK(t, conn, br, up) }

	a, abr := dialRaw(t, g.addr)
	get(a, abr)
	fmt.Fprintf(a, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", sink.Addr())
	if resp, err := http.ReadResponse(abr, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT after a GET on one connection: %v %v", resp, err)
	}
	b, bbr := dialRaw(t, g.addr)
	get(b, bbr)
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d upstream connections opened for two requests, one of them while the first client's connection is a tunnel; want 1 (the first request's, from the pool)", n)
	}
}

// countingUpstream starts a server that answers "ok\n" and counts the
// connections made to it.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int32) {
	opened := new(atomic.Int32)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	return up, opened
}

// getOK sends a GET for up's root through the proxy connection conn and
// checks that up's "ok\n" comes back.
func getOK(t *testing.T, conn net.Conn, br *bufio.Reader, up *httptest.Server) {
	t.Helper()
	if status, body := proxyGet(t, conn, br, up); status != 200 || body != "ok\n" {
		t.Fatalf("got %d %q", status, body)
	}
}

// proxyGet sends a GET for up's root through the proxy connection conn
// and returns the answer's status and body.
func proxyGet(t *testing.T, conn net.Conn, br *bufio.Reader, up *httptest.Server) (int, string) {
	t.Helper()
	fmt.Fprintf(conn, "GET %s/ HTTP/1.1\r\nHost: %s\r\n\r\n", up.URL, up.Listener.Addr())
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestKeptUpstreamConnectionOnlyForWhatTheGuardPassed checks that the
// upstream connection a client connection keeps between its requests
// carries only a later request that was decided, and guarded, to the same
// address: requests to two upstreams in turn on one client connection
// each reach their own, and once the policy blocks one, its next request
// is refused before anything is sent on the connection kept to it.
func TestKeptUpstreamConnectionOnlyForWhatTheGuardPassed(t *testing.T) {
	serve := func(body string) (*httptest.Server, *atomic.Int32) {
		n := new(atomic.Int32)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { n.Add(1); io.WriteString(w, body) }))
		t.Cleanup(up.Close)
		return up, n
	}
	a, aRequests := serve("a\n")
	b, _ := serve("b\n")
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), nil)
	conn, br := dialRaw(t, g.addr)
	for i, step := range []struct {
		up   *httptest.Server
		want string
	}{{a, "a\n"}, {b, "b\n"}, {a, "a\n"}, {a, "a\n"}, {b, "b\n"}, {a, "a\n"}} {
		if status, body := proxyGet(t, conn, br, step.up); status != 200 || body != step.want {
			t.Fatalf("request %d, for %s: got %d %q, want 200 %q", i+1, step.up.URL, status, body, step.want)
		}
	}
	sent := aRequests.Load()
	// The last request went to a: its connection is the one kept.
	if _, err := g.store.Replace(loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "b", Host: "127.0.0.1", Ports: []netpolicy.Port{portOf(t, b)}, Action: netpolicy.Allow}), 0); err != nil {
		t.Fatal(err)
	}
	if status, body := proxyGet(t, conn, br, a); status != http.StatusForbidden {
		t.Fatalf("a request for a after the policy blocked it: got %d %q, want 403", status, body)
	}
	if n := aRequests.Load(); n != sent {
		t.Fatalf("a got %d requests after the policy blocked it, want none", n-sent)
	}
	if status, body := proxyGet(t, conn, br, b); status != 200 || body != "b\n" {
		t.Fatalf("a request for b, still allowed: got %d %q", status, body)
	}
}
