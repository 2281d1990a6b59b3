package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The attacks of these tests: a hostile program in the sandbox connects
// and sends nothing until the gateway has stopped waiting for its first
// bytes (Limits.FirstBytesTimeout) and decided the connection by its
// target and port; then it sends what the first-bytes checks would have
// refused. The client waits for that decision record before it sends, so
// its bytes are late however slow the machine is.

// waitTransparent waits for a transparent decision record that match
// accepts, and returns it.
func (g *transparentGateway) waitTransparent(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range g.records(t) {
			if r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindTransparent && match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transparent decision: %s, in %v", what, g.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dialLate dials dst and returns once the gateway has decided the
// connection by host and port alone, before the client's first byte.
func (g *transparentGateway) dialLate(t *testing.T, dst netip.AddrPort, host string) net.Conn {
	t.Helper()
	mark := ringMark(g.ring)
	c := g.dial(t, dst)
	g.waitTransparent(t, "the decision by target and port of "+host, func(r map[string]any) bool {
		seq, _ := r["seq"].(float64)
		return uint64(seq) > mark && r["host"] == host && r["method"] == ""
	})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// dialAt dials dst late (dialLate) or on time, with a deadline set.
func (g *transparentGateway) dialAt(t *testing.T, dst netip.AddrPort, host string, late bool) net.Conn {
	t.Helper()
	if late {
		return g.dialLate(t, dst, host)
	}
	c := g.dial(t, dst)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// hasReason reports whether r is a block whose reason starts with prefix.
func hasReason(r map[string]any, prefix string) bool {
	reason, _ := r["reason"].(string)
	return r["action"] == "block" && strings.HasPrefix(reason, prefix)
}

// TestTransparentLateTLS: a ClientHello that comes after the wait gets the
// checks of one on time. The upstream stands in for a CDN: it serves any
// name it is asked for, so a handshake for another name through an
// allowed name's address would be domain fronting.
func TestTransparentLateTLS(t *testing.T) {
	var served atomic.Int32
	cdn := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "served "+r.TLS.ServerName)
	}))
	t.Cleanup(cdn.Close)
	port := portOf(t, cdn)
	a, err := secrets.New("API_KEY", valueA, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "cdn", Host: "cdn.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "ip", Host: "127.0.0.1", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"cdn.test": "127.0.0.1"}, func(c *serverConfig) { c.Secrets = []*secrets.Secret{a} })
	handshake := func(c net.Conn, name string) (string, error) {
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+name+"\r\nConnection: close\r\n\r\n")
		b, err := io.ReadAll(tc)
		return string(b), err
	}

	// (a) Domain fronting: the allowed name's address, another name in
	// the ClientHello.
	body, err := handshake(g.dialLate(t, g.fake(t, "cdn.test", port), "cdn.test"), "evil.test")
	if err == nil {
		t.Errorf("a late ClientHello for evil.test to cdn.test's address was relayed: %q", body)
	}
	g.waitTransparent(t, "sni mismatch", func(r map[string]any) bool {
		return r["host"] == "cdn.test" && hasReason(r, reasonSNIMismatch)
	})

	// (b) A placeholder in the server name, to an allowed IP.
	mark := ringMark(g.ring)
	ip := netip.MustParseAddrPort("127.0.0.1:" + port.String())
	if _, err := handshake(g.dialLate(t, ip, "127.0.0.1"), strings.ToLower(a.Placeholder())+".evil.test"); err == nil {
		t.Error("a late ClientHello with a placeholder in its server name went through")
	}
	checkSecretBlock(t, waitSecretBlock(t, g.ring, mark), "API_KEY", "127.0.0.1")
	if n := served.Load(); n != 0 {
		t.Errorf("the CDN served %d requests, want none", n)
	}

	// A late ClientHello for the address's own name is served as on time.
	body, err = handshake(g.dialLate(t, g.fake(t, "cdn.test", port), "cdn.test"), "cdn.test")
	if err != nil || !strings.HasSuffix(body, "served cdn.test") {
		t.Errorf("a late ClientHello for cdn.test: %q %v", body, err)
	}
}

// TestTransparentLateHTTP: plain HTTP that comes after the wait is decided
// request by request, as on time. The upstream stands in for a server of
// many virtual hosts, which would serve the Host it is asked for.
func TestTransparentLateHTTP(t *testing.T) {
	var served atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "served "+r.Method+" "+r.Host+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "reads", Host: "paths.test", Ports: []netpolicy.Port{port}, Methods: []string{"GET"}, Path: "/allowed", Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1", "paths.test": "127.0.0.1"})
	send := func(host, req string) (*http.Response, error) {
		t.Helper()
		c := g.dialLate(t, g.fake(t, host, port), host)
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	// (c) A Host header naming another host than the address's.
	resp, err := send("api.test", "GET /x HTTP/1.1\r\nHost: other.test:"+port.String()+"\r\n\r\n")
	if err != nil || resp.StatusCode != 403 || resp.Header.Get("X-Sbx-Rule") != netpolicy.RuleInvalid {
		t.Errorf("late Host other.test: %v %v, want 403 by invalid", resp, err)
	}
	g.waitTransparent(t, "host mismatch", func(r map[string]any) bool {
		return r["host"] == "api.test" && r["method"] == "GET" && hasReason(r, reasonHostMismatch)
	})
	if n := served.Load(); n != 0 {
		t.Errorf("the upstream served %d requests, want none", n)
	}

	// A late request for the address's own name is served, and recorded
	// with its method and path.
	resp, err = send("api.test", "GET /x HTTP/1.1\r\nHost: api.test:"+port.String()+"\r\n\r\n")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("late GET /x: %v %v", resp, err)
	}
	g.waitTransparent(t, "GET /x allowed", func(r map[string]any) bool {
		return r["method"] == "GET" && r["path"] == "/x" && r["action"] == "allow" && r["rule"] == "api"
	})

	// A host only some methods or paths of which are allowed is refused
	// by target and port, which cannot tell them: a late request gets
	// nothing through.
	served.Store(0)
	if resp, err := send("paths.test", "POST /other HTTP/1.1\r\nHost: paths.test:"+port.String()+"\r\nContent-Length: 1\r\n\r\nx"); err == nil {
		t.Errorf("late POST /other to paths.test: %d, want the connection closed", resp.StatusCode)
	}
	g.waitTransparent(t, "paths.test refused", func(r map[string]any) bool {
		return r["host"] == "paths.test" && r["action"] == "block" && r["method"] == ""
	})
	if n := served.Load(); n != 0 {
		t.Errorf("the upstream served %d requests to paths.test, want none", n)
	}
}

// TestTransparentLateServerFirst: a protocol where the server speaks
// first is relayed as before, even when the client's answer looks like a
// request line (SMTP's "EHLO name").
func TestTransparentLateServerFirst(t *testing.T) {
	smtp := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		io.WriteString(c, "220 mail.test ESMTP\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "250 hello "+line)
	})
	port := netpolicy.Port(smtp.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "mail", Host: "mail.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"mail.test": "127.0.0.1"})
	c := g.dialLate(t, g.fake(t, "mail.test", port), "mail.test")
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "220 mail.test ESMTP\r\n" {
		t.Fatalf("banner: %q %v", line, err)
	}
	io.WriteString(c, "EHLO client.test\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "250 hello EHLO client.test\r\n" {
		t.Fatalf("answer: %q %v", line, err)
	}
}

// streamer is an upstream that speaks first and goes on speaking, a tick
// every 20 ms, as a feed or a server-first protocol's keep-alive does; it
// counts the bytes it is sent.
func streamer(t *testing.T) (port netpolicy.Port, got *atomic.Int32) {
	got = new(atomic.Int32)
	ln := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		go func() {
			buf := make([]byte, 1)
			for {
				n, err := c.Read(buf)
				got.Add(int32(n))
				if err != nil {
					return
				}
			}
		}()
		for {
			if _, err := io.WriteString(c, "tick\n"); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return netpolicy.Port(ln.Addr().(*net.TCPAddr).Port), got
}

// readTicks reads what a streamer sends for d, and fails if the
// connection ends first.
func readTicks(t *testing.T, br *bufio.Reader, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if line, err := br.ReadString('\n'); err != nil || line != "tick\n" {
			t.Fatalf("the streaming upstream, before the client's first byte: %q %v", line, err)
		}
	}
}

// sendHello sends a ClientHello for name on c and waits for c's end.
func sendHello(c net.Conn, name string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
}

// TestConnectLateSNI: a CONNECT client that sends nothing for longer than
// IdleTunnelTimeout while the upstream keeps the tunnel alive still has
// its first bytes' server name checked; before, the check gave up at the
// idle timeout and let the rest through unchecked.
func TestConnectLateSNI(t *testing.T) {
	port, got := streamer(t)
	idle := 300 * time.Millisecond
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "stream", Host: "stream.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"stream.test": "127.0.0.1"}, func(c *serverConfig) { c.Limits.IdleTunnelTimeout = idle })
	conn, br := connectRaw(t, g.addr, "stream.test:"+port.String())
	readTicks(t, br, 3*idle)
	if err := sendHello(conn, "evil.test"); err == nil {
		t.Error("a handshake for evil.test through a tunnel to stream.test went through")
	}
	conn.Close()
	if rec := waitClose(t, g, decisionlog.KindConnect, port); !hasReason(rec, reasonSNIMismatch) {
		t.Errorf("close record %v, want a block, %s", rec, reasonSNIMismatch)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the upstream got %d bytes of the ClientHello, want none", n)
	}
}

// TestTransparentLateSNIAfterTheServer: on a captured connection where the
// server spoke first, a ClientHello the client sends later, however late,
// still has its server name checked.
func TestTransparentLateSNIAfterTheServer(t *testing.T) {
	port, got := streamer(t)
	idle := 300 * time.Millisecond
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "stream", Host: "stream.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"stream.test": "127.0.0.1"}, func(c *serverConfig) { c.Limits.IdleTunnelTimeout = idle })
	conn := g.dialLate(t, g.fake(t, "stream.test", port), "stream.test")
	readTicks(t, bufio.NewReader(conn), 3*idle)
	if err := sendHello(conn, "evil.test"); err == nil {
		t.Error("a handshake for evil.test to stream.test's address went through")
	}
	conn.Close()
	if rec := waitClose(t, g.testGateway, decisionlog.KindTransparent, port); !hasReason(rec, reasonSNIMismatch) {
		t.Errorf("close record %v, want a block, %s", rec, reasonSNIMismatch)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the upstream got %d bytes of the ClientHello, want none", n)
	}
}

// waitClose waits for the close record of a tunnel of kind to port and
// returns it.
func waitClose(t *testing.T, g *testGateway, kind string, port netpolicy.Port) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range g.records(t) {
			if r["event"] == decisionlog.EventClose && r["kind"] == kind && r["port"] == float64(port) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such close record in %v", g.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTransparentLateInspected: a late ClientHello for a host the policy
// inspects is inspected, as on time: its requests are decided and logged
// one by one, never relayed in a tunnel the gateway cannot read.
func TestTransparentLateInspected(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	upRoots, caRoots := x509.NewCertPool(), x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	caRoots.AddCert(ca.Certificate())
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "ex", Host: "example.com", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow, Inspect: true},
	), map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) { c.CA, c.UpstreamRoots = ca, upRoots })
	tc := tls.Client(g.dialLate(t, g.fake(t, "example.com", port), "example.com"), &tls.Config{ServerName: "example.com", RootCAs: caRoots})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("a late handshake with the gateway's CA trusted: %v (relayed uninspected?)", err)
	}
	io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: example.com:"+port.String()+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a late inspected request: %v %v", resp, err)
	}
	resp.Body.Close()
	g.waitTransparent(t, "the inspected tunnel", func(r map[string]any) bool {
		return r["host"] == "example.com" && strings.HasPrefix(r["reason"].(string), "inspected")
	})
	var inspected bool
	for _, r := range g.records(t) {
		inspected = inspected || r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindHTTPS && r["method"] == "GET" && r["path"] == "/x"
	}
	if !inspected {
		t.Errorf("no record of the inspected GET /x in %v", g.records(t))
	}
}

// TestTransparentTrickledMethod: a request line whose method comes a byte
// at a time, past the wait for the first bytes, cannot be decided request
// by request: the connection is closed, on time and late, and the upstream
// gets no request. A protocol whose first message is a bare word still
// has it answered.
func TestTransparentTrickledMethod(t *testing.T) {
	var served atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "served "+r.Host)
	}))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	echoPort := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port, echoPort}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"})
	wait := 3 * g.srv.limits.FirstBytesTimeout
	for _, late := range []bool{false, true} {
		mark := ringMark(g.ring)
		c := g.dialAt(t, g.fake(t, "api.test", port), "api.test", late)
		io.WriteString(c, "G")
		time.Sleep(wait)
		io.WriteString(c, "ET /x HTTP/1.1\r\nHost: other.test:"+port.String()+"\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			t.Errorf("late %v: a trickled GET for other.test was answered %d, want the connection closed", late, resp.StatusCode)
		}
		var rec map[string]any
		for deadline := time.Now().Add(5 * time.Second); rec == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, r := range g.records(t) {
				if seq, _ := r["seq"].(float64); uint64(seq) > mark && r["event"] == decisionlog.EventClose && r["upstream"] != nil && r["status"] == 200.0 {
					rec = r
				}
			}
		}
		if rec == nil || !hasReason(rec, reasonTrickledRequest) {
			t.Errorf("late %v: close record %v, want a block, %s", late, rec, reasonTrickledRequest)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the upstream served %d requests, want none", n)
	}

	// A bare word, then a wait for the answer.
	c := g.dial(t, g.fake(t, "api.test", echoPort))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Errorf("a bare word: %q %v", buf, err)
	}
	c.Close()
	if rec := waitClose(t, g.testGateway, decisionlog.KindTransparent, echoPort); rec["bytes_out"] != 4.0 || rec["bytes_in"] != 4.0 {
		t.Errorf("the bare word's close record: %v, want 4 bytes each way", rec)
	}
}
