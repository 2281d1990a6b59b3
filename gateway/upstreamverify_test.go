package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The upstream of an inspected request is verified on every path it can
// take: the tunnel's own connection (a lone HTTP/1.1 request), and the
// shared transport (concurrent HTTP/2 streams, a request with Expect, a
// --record-llm host). Each TestInspectUpstreamVerification* test sends its
// path's request to an upstream whose certificate the configured roots do
// not vouch for, and to one whose certificate names another host, and
// wants a 502, an upstream that never served a request, and a close
// record that says why; a verified upstream, the control, serves them.
// scripts/mutations/inspect-upstream-verify-*.mut break each path's
// verification and name the tests that must then fail.

// verifyCase is one upstream the gateway dials: the host the client asks
// for, the roots the gateway verifies it with, and what the close record
// of each request must say (nothing: it is served).
type verifyCase struct {
	name, host string
	roots      func(up *httptest.Server) *x509.CertPool
	wantError  string
}

func verifyCases(t *testing.T) []verifyCase {
	other, err := NewCA("not the upstream's", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return []verifyCase{
		{"verified", "example.com", func(up *httptest.Server) *x509.CertPool {
			p := x509.NewCertPool()
			p.AddCert(up.Certificate())
			return p
		}, ""},
		{"unknown authority", "example.com", func(*httptest.Server) *x509.CertPool {
			p := x509.NewCertPool()
			p.AddCert(other.Certificate())
			return p
		}, "certificate signed by unknown authority"},
		// The test certificate names example.com and *.example.com.
		{"another name", "other.test", func(up *httptest.Server) *x509.CertPool {
			p := x509.NewCertPool()
			p.AddCert(up.Certificate())
			return p
		}, "not other.test"},
	}
}

// verifyUpstream is a TLS upstream (HTTP/2 on) that counts the requests it
// serves. Its connections' TLS handshakes wait until gate connections have
// come (or a second and a half has passed), so that requests sent together
// are under way together.
type verifyUpstream struct {
	*httptest.Server
	served atomic.Int32
	ln     *gatedListener
}

func newVerifyUpstream(t *testing.T, gate int32) *verifyUpstream {
	t.Helper()
	u := &verifyUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "served")
	}))
	u.ln = &gatedListener{Listener: u.Listener, want: gate, open: make(chan struct{})}
	u.Listener = u.ln
	u.EnableHTTP2 = true
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	u.StartTLS()
	t.Cleanup(u.Close)
	stop := time.AfterFunc(1500*time.Millisecond, u.ln.release)
	t.Cleanup(func() { stop.Stop(); u.ln.release() }) // before Close
	return u
}

type gatedListener struct {
	net.Listener
	want     int32
	accepted atomic.Int32
	open     chan struct{}
	once     sync.Once
}

func (l *gatedListener) release() { l.once.Do(func() { close(l.open) }) }

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.accepted.Add(1) >= l.want {
		l.release()
	}
	return &gatedConn{Conn: c, open: l.open}, nil
}

type gatedConn struct {
	net.Conn
	open chan struct{}
}

func (c *gatedConn) Read(p []byte) (int, error) {
	<-c.open
	return c.Conn.Read(p)
}

// verifyGateway starts an upstream (whose handshakes wait for gate
// connections) and a gateway that inspects tc.host on its port, verifying
// it with tc.roots; set changes the gateway's Config further. It returns a
// client through the gateway that trusts its CA, HTTP/2 when h2, and the
// URL of path at tc.host.
func verifyGateway(t *testing.T, tc verifyCase, gate int32, h2 bool, path string, set func(*serverConfig), rules ...netpolicy.Rule) (*verifyUpstream, *testGateway, *http.Client, func(string) string) {
	t.Helper()
	up := newVerifyUpstream(t, gate)
	port := portOf(t, up.Server)
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rules = append(rules, netpolicy.Rule{Host: tc.host, Inspect: true, Action: netpolicy.Allow})
	for i := range rules {
		rules[i].Ports = []netpolicy.Port{port}
	}
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Block, rules...), map[string]string{tc.host: "127.0.0.1"}, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = ca, tc.roots(up.Server)
		if set != nil {
			set(c)
		}
	})
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(ca.Certificate())
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: clientRoots},
		ForceAttemptHTTP2: h2, ExpectContinueTimeout: 5 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	at := func(p string) string { return "https://" + tc.host + ":" + strconv.Itoa(int(port)) + p }
	return up, g, &http.Client{Transport: tr, Timeout: 10 * time.Second}, at
}

// checkVerified checks what n requests to path got: 200s from the
// upstream when tc's upstream verifies, else 502s, an upstream that served
// nothing, and n close records whose errors say the certificate failed and
// why.
func checkVerified(t *testing.T, tc verifyCase, up *verifyUpstream, g *testGateway, path string, statuses []int) {
	t.Helper()
	want := http.StatusBadGateway
	if tc.wantError == "" {
		want = http.StatusOK
	}
	for i, got := range statuses {
		if got != want {
			t.Errorf("request %d: got %d, want %d", i+1, got, want)
		}
	}
	if got := int(up.served.Load()); tc.wantError != "" && got != 0 || tc.wantError == "" && got != len(statuses) {
		t.Errorf("the upstream served %d requests, want %d", got, map[bool]int{true: 0, false: len(statuses)}[tc.wantError != ""])
	}
	var closes []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for {
		closes = closes[:0]
		for _, r := range g.records(t) {
			if r["event"] == decisionlog.EventClose && r["kind"] == decisionlog.KindHTTPS && r[decisionlog.FieldPath] == path {
				closes = append(closes, r)
			}
		}
		if len(closes) >= len(statuses) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(closes) != len(statuses) {
		t.Fatalf("%d close records of %s, want %d", len(closes), path, len(statuses))
	}
	for _, r := range closes {
		e, _ := r[decisionlog.FieldError].(string)
		switch {
		case tc.wantError == "" && e != "":
			t.Errorf("close record %v: an error, want none", r)
		case tc.wantError != "" && !(strings.HasPrefix(e, "upstream certificate: ") && strings.Contains(e, tc.wantError)):
			t.Errorf("close record error %q: want upstream certificate: ... %s", e, tc.wantError)
		}
	}
}

// do sends req and returns its status, 0 (and the error, reported) when
// it has none.
func do(t *testing.T, c *http.Client, req *http.Request, h2 bool) int {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL, err)
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if h2 && resp.ProtoMajor != 2 {
		t.Errorf("%s %s: got %s, want HTTP/2", req.Method, req.URL, resp.Proto)
	}
	return resp.StatusCode
}

// TestInspectUpstreamVerificationInline: a lone HTTP/1.1 request goes up
// on the tunnel's own connection (inlineRoundTrip).
func TestInspectUpstreamVerificationInline(t *testing.T) {
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			up, g, c, at := verifyGateway(t, tc, 1, false, "/v1/x", nil)
			req, _ := http.NewRequest("GET", at("/v1/x"), nil)
			checkVerified(t, tc, up, g, "/v1/x", []int{do(t, c, req, false)})
		})
	}
}

// TestInspectUpstreamVerificationH2Streams: streams of one HTTP/2 tunnel
// sent together; one takes the tunnel's own connection, the others the
// shared transport, which the upstream sees as a second connection.
func TestInspectUpstreamVerificationH2Streams(t *testing.T) {
	const streams = 4
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			up, g, c, at := verifyGateway(t, tc, 2, true, "/v1/x", nil,
				netpolicy.Rule{Path: "/warm", Host: tc.host, Action: netpolicy.Intercept, Response: &netpolicy.Response{Status: 200, Body: "warm"}})
			// The tunnel first, by a request answered in it, so that the
			// streams share one.
			warm, _ := http.NewRequest("GET", at("/warm"), nil)
			if got := do(t, c, warm, true); got != 200 {
				t.Fatalf("/warm: got %d, want 200 from the intercept rule", got)
			}
			statuses := make([]int, streams)
			var wg sync.WaitGroup
			for i := range streams {
				wg.Go(func() {
					req, _ := http.NewRequest("GET", at("/v1/x"), nil)
					statuses[i] = do(t, c, req, true)
				})
			}
			wg.Wait()
			if n := up.ln.accepted.Load(); n < 2 {
				t.Errorf("the upstream got %d connections, want 2 or more: the shared transport was not used", n)
			}
			checkVerified(t, tc, up, g, "/v1/x", statuses)
		})
	}
}

// TestInspectUpstreamVerificationExpectContinue: a request with Expect:
// 100-continue goes up through the shared transport.
func TestInspectUpstreamVerificationExpectContinue(t *testing.T) {
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			up, g, c, at := verifyGateway(t, tc, 1, false, "/v1/x", nil)
			req, _ := http.NewRequest("PUT", at("/v1/x"), strings.NewReader("payload"))
			req.Header.Set("Expect", "100-continue")
			checkVerified(t, tc, up, g, "/v1/x", []int{do(t, c, req, false)})
		})
	}
}

// TestInspectUpstreamVerificationRecordLLM: a --record-llm host's requests
// go up through its recorder and the shared transport.
func TestInspectUpstreamVerificationRecordLLM(t *testing.T) {
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			rec := mockllm.NewRecorder(nil)
			up, g, c, at := verifyGateway(t, tc, 1, false, "/v1/messages", func(c *serverConfig) {
				c.RecordLLM = map[string]*mockllm.Recorder{tc.host: rec}
			})
			body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`
			req, _ := http.NewRequestWithContext(context.Background(), "POST", at("/v1/messages"), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			checkVerified(t, tc, up, g, "/v1/messages", []int{do(t, c, req, false)})
			if n := len(rec.Turns()); tc.wantError != "" && n != 0 {
				t.Errorf("the recorder holds %d turns, want none from an upstream that did not verify", n)
			}
		})
	}
}
