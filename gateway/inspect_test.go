package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// inspectSetup is a gateway that inspects example.com (the name the test
// TLS server's certificate carries) on the upstream's port, and an
// upstream that says what it was asked.
type inspectSetup struct {
	g    *testGateway
	ca   *CA
	up   *httptest.Server
	port netpolicy.Port
}

func newInspectSetup(t *testing.T, mode netpolicy.Mode, roots func(up *httptest.Server) *x509.CertPool, rules ...netpolicy.Rule) *inspectSetup {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream-Proto", r.Proto)
		w.Header().Set("X-Upstream-Client", r.RemoteAddr)
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.RequestURI()+" host="+r.Host+" body="+string(body))
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	s := &inspectSetup{up: up, port: portOf(t, up)}
	for i := range rules {
		if len(rules[i].Ports) == 0 {
			rules[i].Ports = []netpolicy.Port{s.port}
		}
	}
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.ca = ca
	spec := loopbackPolicy(netpolicy.Block, rules...)
	spec.Mode = mode
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	if roots != nil {
		pool = roots(up)
	}
	s.g = startGatewayWith(t, spec, map[string]string{"example.com": "127.0.0.1", "other.example": "127.0.0.1"}, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = ca, pool
	})
	return s
}

// inspectedUpstream starts up (a TLS httptest server) and a gateway that
// resolves example.com to loopback and decides it by a policy that blocks
// all but rule, whose ports default to up's; the gateway has a CA and
// trusts up's certificate, and set changes its Config further. It returns
// the gateway, up's port, and a pool of the gateway's CA for clients.
func inspectedUpstream(tb testing.TB, up *httptest.Server, rule netpolicy.Rule, set func(*serverConfig)) (*testGateway, netpolicy.Port, *x509.CertPool) {
	tb.Helper()
	up.StartTLS()
	tb.Cleanup(up.Close)
	port := portOf(tb, up)
	if len(rule.Ports) == 0 {
		rule.Ports = []netpolicy.Port{port}
	}
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	g := startGatewayWith(tb, loopbackPolicy(netpolicy.Block, rule), map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = ca, pool
		if set != nil {
			set(c)
		}
	})
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(ca.Certificate())
	return g, port, clientRoots
}

// client trusts the sandbox's CA (and the upstream's own certificate, for
// tunnels that are not inspected), through the gateway.
func (s *inspectSetup) client(t *testing.T, h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	pool.AddCert(s.up.Certificate())
	proxy, _ := url.Parse("http://" + s.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (s *inspectSetup) url(host, path string) string {
	return "https://" + host + ":" + strconv.Itoa(int(s.port)) + path
}

func TestInspectedRequestsAreDecidedOneByOne(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil,
		netpolicy.Rule{ID: "mock", Host: "example.com", Path: "/mock", Action: netpolicy.Intercept,
			Response: &netpolicy.Response{Status: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"mocked":true}`}},
		netpolicy.Rule{ID: "read", Host: "example.com", Methods: []string{"GET"}, Path: "/v1/", Action: netpolicy.Allow},
	)
	for _, h2 := range []bool{false, true} {
		c := s.client(t, h2)
		wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		for _, tc := range []struct {
			method, path string
			status       int
			body, rule   string
		}{
			{"GET", "/v1/items?q=secret", 200, "upstream GET /v1/items?q=secret host=example.com:" + strconv.Itoa(int(s.port)), "read"},
			{"POST", "/v1/items", 403, "sbx blocked POST https://example.com:", "default"},
			{"GET", "/admin", 403, "sbx blocked GET https://example.com:", "default"},
			{"GET", "/mock", 201, `{"mocked":true}`, "mock"},
		} {
			req, _ := http.NewRequest(tc.method, s.url("example.com", tc.path), strings.NewReader("payload"))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("h2 %v: %s %s: %v", h2, tc.method, tc.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.HasPrefix(string(body), tc.body) || resp.Proto != wantProto {
				t.Errorf("h2 %v: %s %s: got %d %s %q, want %d %s %q", h2, tc.method, tc.path, resp.StatusCode, resp.Proto, body, tc.status, wantProto, tc.body)
			}
			if got := resp.Header.Get(HeaderRule); tc.status != 200 && got != tc.rule {
				t.Errorf("h2 %v: %s %s: %s %q, want %q", h2, tc.method, tc.path, HeaderRule, got, tc.rule)
			}
			rec := s.g.lastDecision(t)
			if rec["kind"] != decisionlog.KindHTTPS || rec["method"] != tc.method || rec["rule"] != tc.rule || strings.Contains(rec["path"].(string), "secret") {
				t.Errorf("h2 %v: %s %s: logged %v, want kind https, the method, rule %s and no query", h2, tc.method, tc.path, rec, tc.rule)
			}
		}
	}
	// The tunnel itself is logged as a CONNECT, allowed because requests
	// in it may be.
	var connects int
	for _, r := range s.g.records(t) {
		if r["kind"] == decisionlog.KindConnect && r["event"] == decisionlog.EventDecision {
			connects++
			if r["action"] != "allow" || !strings.Contains(r["reason"].(string), "inspect") {
				t.Errorf("the inspected CONNECT: %v, want allow with a reason that says it is inspected", r)
			}
		}
	}
	if connects == 0 {
		t.Error("no connect record for the inspected tunnels")
	}
}

// TestUninspectedHostsStaySpliced: a host no rule inspects is a tunnel;
// the client sees the upstream's own certificate, never one of the CA's,
// even while another port of it is inspected.
func TestUninspectedHostsStaySpliced(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil,
		netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{1}, Path: "/v1/", Action: netpolicy.Allow},
		netpolicy.Rule{Host: "example.com", Action: netpolicy.Allow},
	)
	resp, err := s.client(t, false).Get(s.url("example.com", "/anything"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName == s.ca.Certificate().Subject.CommonName {
		t.Errorf("example.com: got %d, issuer %v; want 200 from the upstream's own certificate", resp.StatusCode, resp.TLS.PeerCertificates[0].Issuer)
	}
	for _, r := range s.g.records(t) {
		if r["kind"] == decisionlog.KindHTTPS {
			t.Errorf("an uninspected tunnel logged a request: %v", r)
		}
	}
}

func TestInspectedUpstreamCertificateIsVerified(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, func(*httptest.Server) *x509.CertPool { return x509.NewCertPool() },
		netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow})
	resp, err := s.client(t, false).Get(s.url("example.com", "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("an upstream the roots do not vouch for: got %d, want 502", resp.StatusCode)
	}
	if cl := lastClose(t, s.g, decisionlog.KindHTTPS); !strings.Contains(cl["error"].(string), "upstream certificate") {
		t.Errorf("close record %v: want an error about the upstream certificate", cl)
	}
}

// TestPinningClientIsLogged: a client that does not trust the CA ends the
// handshake, and the tunnel's close record says so.
func TestPinningClientIsLogged(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow})
	proxy, _ := url.Parse("http://" + s.g.addr)
	pool := x509.NewCertPool()
	pool.AddCert(s.up.Certificate()) // the real server's only: a pinning client
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	_, err := c.Get(s.url("example.com", "/"))
	var uae x509.UnknownAuthorityError
	if !errors.As(err, &uae) {
		t.Errorf("a client that trusts only the upstream: got %v, want an unknown authority", err)
	}
	if cl := lastClose(t, s.g, decisionlog.KindConnect); !strings.Contains(cl["error"].(string), "client rejected the sbx CA") {
		t.Errorf("close record %v: want %q", cl, "client rejected the sbx CA")
	}
}

func TestInspectAuditModeAndHostMismatch(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Audit, nil, netpolicy.Rule{Host: "example.com", Path: "/ok", Action: netpolicy.Allow})
	c := s.client(t, false)
	resp, err := c.Get(s.url("example.com", "/not-ok"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec := s.g.lastDecision(t)
	if resp.StatusCode != 200 || rec["action"] != "block" || rec["enforced"] != false {
		t.Errorf("audit mode: got %d, logged %v; want 200 and an unenforced block", resp.StatusCode, rec)
	}
	// A request for another host inside the tunnel is refused, audit
	// mode or not.
	req, _ := http.NewRequest("GET", s.url("example.com", "/ok"), nil)
	req.Host = "other.example"
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec = s.g.lastDecision(t)
	if resp.StatusCode != 403 || rec["rule"] != netpolicy.RuleInvalid || !strings.Contains(rec["reason"].(string), "host mismatch") {
		t.Errorf("Host other.example in a tunnel to example.com: got %d, logged %v; want 403, rule invalid, host mismatch", resp.StatusCode, rec)
	}
}

// lastClose waits for the last close record of kind.
func lastClose(t *testing.T, g *testGateway, kind string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a 64 MiB answer under -race on a loaded machine
	for {
		recs := g.records(t)
		for i := len(recs) - 1; i >= 0; i-- {
			if recs[i]["event"] == decisionlog.EventClose && recs[i]["kind"] == kind {
				if _, ok := recs[i]["error"]; !ok {
					recs[i]["error"] = ""
				}
				return recs[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no close record of kind %s", kind)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzInspectedRequest sends whatever bytes the fuzzer makes as requests
// inside an inspected tunnel whose policy allows GET under /public/ only.
// Whatever the framing, encoding or path tricks, the upstream never gets
// a request the policy does not allow, and the gateway answers or closes.
func FuzzInspectedRequest(f *testing.F) {
	f.Add([]byte("GET /public/x HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	f.Add([]byte("GET /public/../admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	f.Add([]byte("GET /public/%2e%2e/admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\nGET /admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	f.Add([]byte("POST /public/x HTTP/1.1\r\nHost: example.com:PORT\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	f.Add([]byte("GET http://example.com:PORT/admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	f.Add([]byte("GET //admin HTTP/1.1\r\nHost: example.com:PORT\r\n\r\n"))
	var mu sync.Mutex
	var seen []string
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	g, port, clientPool := inspectedUpstream(f, up, netpolicy.Rule{Host: "example.com", Methods: []string{"GET"}, Path: "/public/", Action: netpolicy.Allow}, nil)
	p := g.store.Load().Policy()
	target := "example.com:" + strconv.Itoa(int(port))
	f.Fuzz(func(t *testing.T, req []byte) {
		req = bytes.ReplaceAll(req, []byte("PORT"), []byte(strconv.Itoa(int(port))))
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(&bufConn{Conn: c, br: br}, &tls.Config{ServerName: "example.com", RootCAs: clientPool, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		tc.Write(req)
		tc.CloseWrite()
		io.Copy(io.Discard, tc)

		mu.Lock()
		got := seen
		seen = nil
		mu.Unlock()
		for _, s := range got {
			method, path, _ := strings.Cut(s, " ")
			if d := p.Verdict(netpolicy.Target{Host: "example.com", Port: uint16(port), Method: method, Path: path}); d.Action != netpolicy.Allow ||
				!strings.HasPrefix(netpolicy.CanonicalPath(path), "/public/") {
				t.Fatalf("the upstream got %q, which the policy does not allow (%s: %s)", s, d.Rule, d.Reason)
			}
		}
	})
}

// TestInspectedConnectCarryingPlainHTTP: a CONNECT to an inspected host
// whose client speaks plain HTTP in it (a proxy client to port 80) has its
// requests decided one by one as kind http.
func TestInspectedConnectCarryingPlainHTTP(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Block, netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port}, Path: "/ok", Action: netpolicy.Allow}),
		map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
			var err error
			if c.CA, err = NewCA("plain", time.Hour); err != nil {
				t.Fatal(err)
			}
		})
	target := "example.com:" + strconv.Itoa(int(port))
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	for _, tc := range []struct {
		path   string
		status int
	}{{"/ok", 200}, {"/admin", 403}} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.path, target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rec := g.lastDecision(t)
		if resp.StatusCode != tc.status || rec["kind"] != decisionlog.KindHTTP || rec["path"] != tc.path {
			t.Errorf("GET %s in the tunnel: got %d, logged %v; want %d and an http record", tc.path, resp.StatusCode, rec, tc.status)
		}
	}
}

// TestInspectedRequestsDecidedAsSent: what would be decided one way and
// sent another is refused and logged: a target that is not an absolute
// path, and a CONNECT inside the tunnel.
func TestInspectedRequestsDecidedAsSent(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	g, port, clientPool := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Path: "/", Action: netpolicy.Allow}, nil)
	target := "example.com:" + strconv.Itoa(int(port))
	for _, line := range []string{"GET x:admin/secret HTTP/1.1", "CONNECT " + target + " HTTP/1.1"} {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(&bufConn{Conn: c, br: br}, &tls.Config{ServerName: "example.com", RootCAs: clientPool, NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, "%s\r\nHost: %s\r\n\r\n", line, target)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		rec := g.lastDecision(t)
		if resp.StatusCode != http.StatusBadRequest || rec["rule"] != netpolicy.RuleInvalid || rec["kind"] != decisionlog.KindHTTPS {
			t.Errorf("%s: got %d, logged %v; want 400 and an https record of rule invalid", line, resp.StatusCode, rec)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// TestInspectTransportPerPolicyVersion: a policy change retires the
// upstream connections pooled under the old policy, whose guard may now
// refuse their address: the next request dials again.
func TestInspectTransportPerPolicyVersion(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil, netpolicy.Rule{ID: "a", Host: "example.com", Inspect: true, Action: netpolicy.Allow})
	c := s.client(t, false)
	conns := map[string]bool{} // the gateway's upstream connections, by their address
	get := func() {
		resp, err := c.Get(s.url("example.com", "/"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns[resp.Header.Get("X-Upstream-Client")] = true
	}
	get()
	get()
	if n := len(conns); n != 1 {
		t.Fatalf("two requests under one policy: %d upstream connections, want 1 (pooled)", n)
	}
	if _, _, err := s.g.store.AddRule(netpolicy.Rule{ID: "b", Host: "other.example", Action: netpolicy.Allow}, -1, 0); err != nil {
		t.Fatal(err)
	}
	get()
	if n := len(conns); n != 2 {
		t.Errorf("after a policy change: %d upstream connections, want 2 (the pooled one retired)", n)
	}
}

// TestInspectedStreamHeadersFlushed: a streamed answer's head reaches the
// client before its first event.
func TestInspectedStreamHeadersFlushed(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	g, port, clientPool := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow}, nil)
	t.Cleanup(func() { close(release) }) // runs before up.Close, which waits for the handler
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: clientPool}, ResponseHeaderTimeout: 2 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get("https://example.com:" + strconv.Itoa(int(port)) + "/events")
	if err != nil {
		t.Fatalf("the head of a stream did not come before its first event: %v", err)
	}
	resp.Body.Close()
}

func TestHandshakeError(t *testing.T) {
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}
	badMAC := &net.OpError{Op: "local error", Err: errors.New("tls: bad record MAC")}
	for _, tt := range []struct {
		err      error
		certSent bool
		alert    byte // an unencrypted alert's description
		rejected bool
	}{
		{alert, true, 0, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, true, 0, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: protocol version not supported")}, false, 0, false},
		{io.EOF, true, 0, true},   // hung up on the certificate
		{io.EOF, false, 0, false}, // hung up before it
		{net.ErrClosed, true, 0, false},
		{badMAC, true, 48, true},   // unknown_ca, unencrypted
		{badMAC, true, 46, true},   // certificate_unknown
		{badMAC, true, 42, true},   // bad_certificate
		{badMAC, false, 48, false}, // before the certificate: not about it
		{badMAC, true, 40, false},  // handshake_failure: not about the certificate
		{badMAC, true, 0, false},   // no alert
	} {
		msg := handshakeError(tt.err, tt.certSent, tt.alert, "example.com")
		if got := strings.HasPrefix(msg, reasonCARejected); got != tt.rejected {
			t.Errorf("handshakeError(%v, certSent %v, alert %d) = %q: rejected %v, want %v", tt.err, tt.certSent, tt.alert, msg, got, tt.rejected)
		}
	}
}

// TestInspectedUpstreamClosedWhileIdle: the tunnel's own upstream
// connection, closed by the upstream while it idled, is dialed again for
// the next request instead of failing it.
func TestInspectedUpstreamClosedWhileIdle(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow})
	c := s.client(t, false)
	for i := range 3 {
		resp, err := c.Get(s.url("example.com", "/"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: got %d, want 200", i+1, resp.StatusCode)
		}
		s.up.CloseClientConnections() // the upstream hangs up on its idle connections
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInspectedClientThatStopsReading: a client that stops reading an
// inspected answer is cut off after the idle timeout; its request's close
// record comes, with an error, instead of the request holding its tunnel
// and upstream connection for good.
func TestInspectedClientThatStopsReading(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 64<<20)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(big) }))
	g, port, clientPool := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow}, func(c *serverConfig) {
		c.Limits.IdleConnTimeout = 500 * time.Millisecond
	})
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: clientPool}}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get("https://example.com:" + strconv.Itoa(int(port)) + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // never read
	if cl := lastClose(t, g, decisionlog.KindHTTPS); cl["error"] == "" {
		t.Errorf("the stalled request's close record: %v, want an error", cl)
	}
}

// TestRealClientsRejectingTheCAAreNamed: curl and Python (OpenSSL) that do
// not trust the sandbox's CA end the handshake with an alert, which over
// TLS 1.3 they send unencrypted after the gateway's encrypted Finished (Go
// then sees only a bad record MAC); over TLS 1.2 and 1.3 alike the
// tunnel's close record says the client rejected the sbx CA, and how to
// fix it.
func TestRealClientsRejectingTheCAAreNamed(t *testing.T) {
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Logf("%s is not installed: its cases are skipped", tool)
		}
	}
	// python connects through the proxy, then runs the handshake with a
	// context that trusts only the file given, at exactly one version.
	const python = `
import socket, ssl, sys
proxy, target, cafile, version = sys.argv[1:5]
host, port = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    b = s.recv(1)
    if not b:
        sys.exit("the proxy closed the connection: " + repr(head))
    head += b
if b" 200 " not in head.split(b"\r\n")[0]:
    sys.exit("the proxy answered " + repr(head))
ctx = ssl.create_default_context(cafile=cafile)
v = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
ctx.minimum_version = ctx.maximum_version = v
try:
    ctx.wrap_socket(s, server_hostname=target.rsplit(":", 1)[0])
except ssl.SSLCertVerificationError as e:
    print("verification failed:", e)
    sys.exit(3)
sys.exit("the handshake succeeded")
`
	for _, tt := range []struct {
		tool, version string
	}{
		{"curl", "1.3"}, {"curl", "1.2"}, {"python3", "1.3"}, {"python3", "1.2"},
	} {
		t.Run(tt.tool+"/TLS"+tt.version, func(t *testing.T) {
			if _, err := exec.LookPath(tt.tool); err != nil {
				t.Skipf("%s is not installed", tt.tool)
			}
			s := newInspectSetup(t, netpolicy.Enforce, nil, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow})
			// The client trusts the real server's certificate only, as a
			// client that pins it or ignores the sandbox's trust variables.
			cafile := filepath.Join(t.TempDir(), "upstream.pem")
			if err := os.WriteFile(cafile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.up.Certificate().Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			target := "example.com:" + strconv.Itoa(int(s.port))
			var cmd *exec.Cmd
			wantExit := 60 // curl: the peer's certificate cannot be verified
			if tt.tool == "curl" {
				cmd = exec.Command("curl", "-sS", "-o", "/dev/null", "--max-time", "10", "--proxy", "http://"+s.g.addr, "--cacert", cafile,
					"--tlsv"+tt.version, "--tls-max", tt.version, "https://"+target+"/")
			} else {
				cmd = exec.Command("python3", "-c", python, s.g.addr, target, cafile, tt.version)
				wantExit = 3
			}
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // no proxy or trust variables
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != wantExit {
				t.Fatalf("%s: got %v (%s), want exit %d: the certificate not verified", tt.tool, err, out, wantExit)
			}
			cl := lastClose(t, s.g, decisionlog.KindConnect)
			msg, _ := cl["error"].(string)
			if !strings.HasPrefix(msg, reasonCARejected) {
				t.Errorf("close record's error: got %q, want it to begin with %q", msg, reasonCARejected)
			}
			if !strings.Contains(msg, "SSL_CERT_FILE") || !strings.Contains(msg, "example.com") {
				t.Errorf("close record's error: got %q, want the fix: the trust variables, or stop inspecting example.com", msg)
			}
		})
	}
}

// TestAlertScan: the scan follows record boundaries however the client's
// bytes arrive, and takes only an unencrypted fatal alert for one: not
// the same bytes inside another record, an encrypted alert, or a warning.
func TestAlertScan(t *testing.T) {
	record := func(typ byte, body ...byte) []byte {
		return append([]byte{typ, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
	}
	unknownCA := record(21, 2, 48)
	hello := record(22, bytes.Repeat([]byte{1}, 300)...) // longer than 255: both length bytes count
	ccs := record(20, 1)
	for _, tt := range []struct {
		name   string
		stream []byte
		want   byte
	}{
		{"unknown_ca after the hello", slices.Concat(hello, ccs, unknownCA), 48},
		{"bad_certificate", slices.Concat(hello, record(21, 2, 42)), 42},
		{"the alert's bytes inside a record", slices.Concat(hello, record(23, unknownCA...)), 0},
		{"an encrypted alert", slices.Concat(hello, record(21, bytes.Repeat([]byte{2}, 26)...)), 0},
		{"a warning", slices.Concat(hello, record(21, 1, 48)), 0},
		{"an empty record first", slices.Concat(record(23), unknownCA), 48},
		{"nothing after the hello", hello, 0},
	} {
		for _, chunk := range []int{1, 2, 3, 5, 7, 1000} {
			a := &alertScan{}
			for b := tt.stream; len(b) > 0; {
				k := min(chunk, len(b))
				a.scan(b[:k])
				b = b[k:]
			}
			if a.alert != tt.want {
				t.Errorf("%s, in chunks of %d: got alert %d, want %d", tt.name, chunk, a.alert, tt.want)
			}
		}
	}
}
