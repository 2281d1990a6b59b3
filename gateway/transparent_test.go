package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// transparentGateway serves a gateway's transparent path on loopback; the
// original destination of each connection is what dial said it was.
type transparentGateway struct {
	*testGateway
	addr string // the transparent listener
	mu   sync.Mutex
	dsts map[string]netip.AddrPort // client ip:port -> original destination
}

func startTransparent(t *testing.T, spec netpolicy.Spec, static map[string]string, set ...func(*serverConfig)) *transparentGateway {
	t.Helper()
	var edit func(*serverConfig)
	if len(set) > 0 {
		edit = set[0]
	}
	g := &transparentGateway{testGateway: startGatewayWith(t, spec, static, edit), dsts: map[string]netip.AddrPort{}}
	g.srv.limits.FirstBytesTimeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() {
		done <- g.srv.ServeTransparent(context.Background(), ln, func(c net.Conn) (netip.AddrPort, error) {
			// dial records the destination once its connect returns,
			// which may be after this accept.
			for range 500 {
				g.mu.Lock()
				dst, ok := g.dsts[c.RemoteAddr().String()]
				g.mu.Unlock()
				if ok {
					return dst, nil
				}
				time.Sleep(time.Millisecond)
			}
			return netip.AddrPort{}, errors.New("not redirected")
		})
	}()
	t.Cleanup(func() {
		g.srv.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeTransparent: %v", err)
		}
	})
	return g
}

// dial opens a connection as if the sandbox had dialed dst and its rules
// had redirected it.
func (g *transparentGateway) dial(t *testing.T, dst netip.AddrPort) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.dsts[c.LocalAddr().String()] = dst
	g.mu.Unlock()
	t.Cleanup(func() { c.Close() })
	return c
}

// fake returns the fake address of name, as the DNS stub would give it.
func (g *transparentGateway) fake(t *testing.T, name string, port netpolicy.Port) netip.AddrPort {
	t.Helper()
	ip, err := g.srv.fakeIPs.Assign(name)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(ip, uint16(port))
}

// httpClient returns a client whose every connection is one g.dial makes
// to dst, with no proxy: as a program that ignores HTTP_PROXY.
func (g *transparentGateway) httpClient(t *testing.T, dst netip.AddrPort, tlsConf *tls.Config) *http.Client {
	tr := &http.Transport{
		Proxy:           nil,
		TLSClientConfig: tlsConf,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return g.dial(t, dst), nil
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// waitDecision waits for the decision record of a transparent connection
// or request for host, and returns it.
func (g *transparentGateway) waitDecision(t *testing.T, host string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range g.records(t) {
			if r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindTransparent && r["host"] == host {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transparent decision for %s in %v", host, g.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTransparentHTTP(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "no-admin", Host: "api.test", Ports: []netpolicy.Port{port}, Path: "/admin", Action: netpolicy.Block},
		netpolicy.Rule{ID: "reads", Host: "api.test", Ports: []netpolicy.Port{port}, Methods: []string{"GET"}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"})
	dst := g.fake(t, "api.test", port)
	c := g.httpClient(t, dst, nil)

	// Allowed: the name behind the fake address decides, and is dialed.
	resp, err := c.Get("http://api.test:" + strconv.Itoa(int(port)) + "/v1/x?secret=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"path":"/v1/x?secret=1"`) {
		t.Fatalf("allowed request: %d %s", resp.StatusCode, body)
	}
	rec := g.waitDecision(t, "api.test")
	if rec["action"] != "allow" || rec["rule"] != "reads" || rec["method"] != "GET" || rec["path"] != "/v1/x" {
		t.Errorf("allowed request's record: %v", rec)
	}

	// The path rule and the method rule apply, with the proxy's 403.
	for _, tc := range []struct{ method, path, rule string }{
		{"GET", "/admin/users", "no-admin"},
		{"POST", "/v1/x", "default"},
	} {
		req, _ := http.NewRequest(tc.method, "http://api.test:"+strconv.Itoa(int(port))+tc.path, strings.NewReader("x"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("X-Sbx-Rule") != tc.rule {
			t.Errorf("%s %s: %d rule %q, want 403 by %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("X-Sbx-Rule"), tc.rule)
		}
	}

	// A Host header naming another host than the address's is blocked.
	conn := g.dial(t, dst)
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: other.test:"+strconv.Itoa(int(port))+"\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Sbx-Rule") != netpolicy.RuleInvalid {
		t.Errorf("Host mismatch: %d %v", resp.StatusCode, resp.Header)
	}
	var found bool
	for _, r := range g.records(t) {
		if r["kind"] == decisionlog.KindTransparent && strings.HasPrefix(r["reason"].(string), reasonHostMismatch) {
			found = r["action"] == "block" && r["host"] == "api.test"
		}
	}
	if !found {
		t.Errorf("no host mismatch record: %v", g.records(t))
	}
}

func TestTransparentTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello over tls")
	}))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "ex", Host: "example.com", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"example.com": "127.0.0.1", "evil.test": "127.0.0.1"})
	tlsConf := up.Client().Transport.(*http.Transport).TLSClientConfig.Clone()

	// The name behind the fake address, and the same name in the SNI.
	resp, err := g.httpClient(t, g.fake(t, "example.com", port), tlsConf).Get("https://example.com:" + strconv.Itoa(int(port)) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello over tls" {
		t.Fatalf("TLS through the transparent path: %q", body)
	}
	if rec := g.waitDecision(t, "example.com"); rec["action"] != "allow" || rec["method"] != "" {
		t.Errorf("TLS record: %v", rec)
	}

	// An SNI that is not the name: blocked before any dial.
	conf := tlsConf.Clone()
	conf.ServerName = "example.com"
	conn := tls.Client(g.dial(t, g.fake(t, "evil.test", port)), conf)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := conn.Handshake(); err == nil {
		t.Fatal("a handshake for example.com to evil.test's address went through")
	}
	rec := g.waitDecision(t, "evil.test")
	if rec["action"] != "block" || !strings.HasPrefix(rec["reason"].(string), reasonSNIMismatch) {
		t.Errorf("SNI mismatch record: %v", rec)
	}

	// An IP dialed with an SNI is decided and dialed as the name.
	resp, err = g.httpClient(t, netip.MustParseAddrPort("127.0.0.9:"+strconv.Itoa(int(port))), tlsConf).Get("https://example.com:" + strconv.Itoa(int(port)) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("IP with SNI: %d", resp.StatusCode)
	}
}

func TestTransparentRawTCP(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	banner := tcpServer(t, func(c net.Conn) { defer c.Close(); io.WriteString(c, "SSH-2.0-test\r\n"); io.Copy(io.Discard, c) })
	echoPort := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	bannerPort := netpolicy.Port(banner.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "echo", Host: "db.test", Ports: []netpolicy.Port{echoPort, bannerPort}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "ip", Host: "127.0.0.1", Ports: []netpolicy.Port{echoPort}, Action: netpolicy.Allow},
	), map[string]string{"db.test": "127.0.0.1"})

	// A protocol the client speaks first, by name.
	c := g.dial(t, g.fake(t, "db.test", echoPort))
	io.WriteString(c, "\x00\x01binary")
	buf := make([]byte, 8)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "\x00\x01binary" {
		t.Fatalf("echo by name: %q %v", buf, err)
	}
	c.Close()

	// A protocol where the server speaks first: decided after the wait.
	c = g.dial(t, g.fake(t, "db.test", bannerPort))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("banner: %q %v", line, err)
	}

	// An IP dialed directly is decided as that IP, guard included: the
	// rule allows 127.0.0.1, and allow_private lets loopback through; a
	// fake address the stub never gave out is refused.
	c = g.dial(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(echoPort)))
	io.WriteString(c, "ping")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf[:4]); err != nil || string(buf[:4]) != "ping" {
		t.Fatalf("echo by IP: %q %v", buf[:4], err)
	}
	if rec := g.waitDecision(t, "127.0.0.1"); rec["action"] != "allow" || rec["rule"] != "ip" {
		t.Errorf("IP record: %v", rec)
	}
	c = g.dial(t, netip.MustParseAddrPort("198.18.200.1:22"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Errorf("an unknown fake address was relayed: %q", buf[:n])
	}
	if rec := g.waitDecision(t, "198.18.200.1"); rec["action"] != "block" || rec["rule"] != netpolicy.RuleInvalid {
		t.Errorf("unknown fake address: %v", rec)
	}
}

func TestTransparentGuard(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	// No allow_private: loopback is the guard's, whatever the rule says.
	g := startTransparent(t, netpolicy.Spec{Default: netpolicy.Allow}, nil)
	c := g.dial(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))
	io.WriteString(c, "ping")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 4)); err == nil {
		t.Fatalf("the guard let a transparent connection to loopback through (%d bytes)", n)
	}
	if rec := g.waitDecision(t, "127.0.0.1"); rec["action"] != "block" || rec["rule"] != netpolicy.RuleGuard {
		t.Errorf("guard record: %v", rec)
	}

	// With loopback allowed, the gateway's own address is still refused.
	g = startTransparent(t, loopbackPolicy(netpolicy.Allow), nil)
	own := netip.MustParseAddrPort(g.testGateway.addr)
	c = g.dial(t, own)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+own.String()+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Sbx-Rule") != netpolicy.RuleGuard || !strings.Contains(resp.Header.Get("X-Sbx-Reason"), classGateway) {
		t.Errorf("a transparent request to the gateway's own address: %d %v", resp.StatusCode, resp.Header)
	}
}

// A captured request the gateway cannot place (no Host header, two of
// them, a head it cannot read) is recorded under where the connection was
// going, not under the request's own words: an attempt is logged with
// its destination even when it names none.
func TestTransparentRefusalRecordsDestination(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
	named := g.fake(t, "api.test", port)
	bare := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	for _, tc := range []struct {
		name, request, host, path string
		dst                       netip.AddrPort
		status                    int
	}{
		{"HTTP/1.1 without Host, to a name", "GET /v1/x?k=1 HTTP/1.1\r\n\r\n", "api.test", "", named, 400},
		{"HTTP/1.0 without Host, to a name", "GET /v1/x?k=1 HTTP/1.0\r\n\r\n", "api.test", "/v1/x", named, 400},
		{"HTTP/1.0 without Host, to an address", "POST /upload HTTP/1.0\r\nContent-Length: 0\r\n\r\n", "127.0.0.1", "/upload", bare, 400},
		{"two Host headers", "GET /a HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "api.test", "", named, 400},
		{"unreadable head", "GET /b HTTP/1.1\r\nBad Header\r\n\r\n", "api.test", "", named, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(g.records(t))
			c := g.dial(t, tc.dst)
			io.WriteString(c, tc.request)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("got status %d, want %d", resp.StatusCode, tc.status)
			}
			var rec map[string]any
			for deadline := time.Now().Add(5 * time.Second); rec == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, r := range g.records(t)[before:] {
					if r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindTransparent {
						rec = r
					}
				}
			}
			if rec == nil {
				t.Fatalf("no transparent decision in %v", g.records(t)[before:])
			}
			got := map[string]any{"host": rec["host"], "port": rec["port"], "path": rec["path"], "action": rec["action"], "rule": rec["rule"]}
			want := map[string]any{"host": tc.host, "port": float64(port), "path": tc.path, "action": "block", "rule": netpolicy.RuleInvalid}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
		})
	}
}
