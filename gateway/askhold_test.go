package gateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// askInspected is a gateway whose default is ask, with the policy's
// ask_timeout, that inspects example.com on the port of an HTTP/2-capable
// TLS upstream saying what it was asked; limits, when not zero, are the
// gateway's Limits, and maxApprovals, when not zero, the most requests
// it holds for answers.
type askInspected struct {
	g    *testGateway
	ca   *CA
	up   *httptest.Server
	port uint16
}

func newAskInspected(t *testing.T, timeout time.Duration, limits Limits, maxApprovals int) *askInspected {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.RequestURI()+" body="+string(body))
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	port := portOf(t, up)
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	spec := loopbackPolicy(netpolicy.Ask, netpolicy.Rule{ID: "look", Host: "example.com", Ports: []netpolicy.Port{port}, Inspect: true})
	spec.AskTimeout = netpolicy.Duration(timeout)
	g := startGatewayWith(t, spec, map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = ca, roots
		if limits != (Limits{}) {
			c.Limits = limits
		}
		c.MaxApprovals = maxApprovals
	})
	return &askInspected{g: g, ca: ca, up: up, port: uint16(port)}
}

// client is an HTTP client through the gateway that trusts its CA,
// speaking HTTP/2 in the inspected tunnel when h2 is set.
func (s *askInspected) client(t *testing.T, h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	proxy, _ := url.Parse("http://" + s.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func (s *askInspected) url(path string) string {
	return "https://example.com:" + strconv.Itoa(int(s.port)) + path
}

// doAsync sends req through c in a goroutine; the channel gets its result
// and the protocol it was answered in (in header "Proto").
func doAsync(c *http.Client, req *http.Request) <-chan askResult {
	ch := make(chan askResult, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			ch <- askResult{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Set("Proto", resp.Proto)
		ch <- askResult{status: resp.StatusCode, body: string(body), header: resp.Header, err: err}
	}()
	return ch
}

// A request inside an inspected tunnel, HTTP/1.1 and HTTP/2, whose
// verdict is ask is held on its question (kind https, its method and
// path) until the answer: an allow lets it through to the upstream, a
// deny is a 403 saying who denied it, and no answer a 403 saying none
// came.
func TestAskHeldInsideInspectedTunnel(t *testing.T) {
	s := newAskInspected(t, time.Minute, Limits{}, 0)
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		for _, tt := range []struct {
			name    string
			answer  *approval.Answer // nil: no answer, the question times out
			status  int
			body    string // the body's start
			reason  string // in the 403's HeaderReason
			timeout time.Duration
		}{
			{name: "allow", answer: &approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByAPI}, status: 200, body: "upstream POST /v1/x?q=1 body=payload"},
			{name: "deny", answer: &approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}, status: 403, body: "sbx blocked POST https://example.com:", reason: "denied once by cli"},
			{name: "timeout", status: 403, body: "sbx blocked POST https://example.com:", reason: approval.ReasonNoAnswer + "1s", timeout: time.Second},
		} {
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				spec := s.g.store.Load().Policy().Spec()
				spec.AskTimeout = netpolicy.Duration(time.Minute)
				if tt.timeout != 0 {
					spec.AskTimeout = netpolicy.Duration(tt.timeout)
				}
				if _, err := s.g.store.Replace(spec, 0); err != nil {
					t.Fatal(err)
				}
				c := s.client(t, h2)
				req, _ := http.NewRequest("POST", s.url("/v1/x?q=1"), strings.NewReader("payload"))
				ch := doAsync(c, req)
				q := waitQuestion(t, s.g.srv, "example.com", s.port, 1)
				if q.Kind != decisionlog.KindHTTPS || q.Method != "POST" || q.Path != "/v1/x" || q.Rule != netpolicy.RuleDefault {
					t.Errorf("question: got %+v, want kind https, POST /v1/x by rule default", q)
				}
				if tt.answer != nil {
					stillHeld(t, ch)
					if _, err := s.g.srv.approvals.Answer(q.ID, *tt.answer); err != nil {
						t.Fatalf("AnswerApproval: %v", err)
					}
				}
				r := result(t, ch)
				if r.status != tt.status || !strings.HasPrefix(r.body, tt.body) || r.header.Get("Proto") != proto {
					t.Fatalf("got %d %s %q, want %d %s %q", r.status, r.header.Get("Proto"), r.body, tt.status, proto, tt.body)
				}
				if tt.reason != "" && !strings.Contains(r.header.Get(HeaderReason), tt.reason) {
					t.Errorf("%s: got %q, want it to say %q", HeaderReason, r.header.Get(HeaderReason), tt.reason)
				}
				rec := s.g.lastDecision(t)
				want := map[bool]string{true: "allow", false: "block"}[tt.status == 200]
				if rec["kind"] != decisionlog.KindHTTPS || rec["action"] != want || rec["method"] != "POST" {
					t.Errorf("decision record: got %v, want kind https, action %s", rec, want)
				}
				if p := s.g.srv.approvals.List(); len(p) != 0 {
					t.Errorf("pending after the answer: %+v", p)
				}
			})
		}
	}
}

// A hold is the gateway's wait, not the client's idleness: a request held
// longer than the connection's idle and header timeouts (and an inspected
// tunnel's idle timeout, which is the same) is answered whole once its
// question is, on every path a question is asked on.
func TestAskHoldOutlastsTheGatewaysTimeouts(t *testing.T) {
	const limit = 300 * time.Millisecond
	const held = 4 * limit
	limits := Limits{HeaderReadTimeout: limit, IdleConnTimeout: limit, IdleTunnelTimeout: 10 * limit, DialTimeout: 2 * time.Second}
	// Inspected, HTTP/1.1 and HTTP/2: a first request (so that the
	// tunnel's writes have left a deadline), then one held past it.
	s := newAskInspected(t, time.Minute, limits, 0)
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		for _, allow := range []bool{true, false} {
			name := fmt.Sprintf("inspected %s allow %v", proto, allow)
			c := s.client(t, h2)
			first := doAsync(c, mustRequest(t, "POST", s.url("/first"), "one"))
			q := waitQuestion(t, s.g.srv, "example.com", s.port, 1)
			if _, err := s.g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
				t.Fatal(err)
			}
			if r := result(t, first); r.status != 200 {
				t.Fatalf("%s: the first request: got %d %q, want 200", name, r.status, r.body)
			}
			ch := doAsync(c, mustRequest(t, "GET", s.url("/held"), ""))
			q = waitQuestion(t, s.g.srv, "example.com", s.port, 1)
			time.Sleep(held)
			if _, err := s.g.srv.approvals.Answer(q.ID, approval.Answer{Allow: allow, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
				t.Fatal(err)
			}
			r := <-ch
			want := map[bool]int{true: 200, false: 403}[allow]
			if r.err != nil || r.status != want || r.header.Get("Proto") != proto {
				t.Errorf("%s: held %v: got %d %s %v, want %d", name, held, r.status, r.header.Get("Proto"), r.err, want)
			}
			if allow && r.err == nil && r.body != "upstream GET /held body=" {
				t.Errorf("%s: got body %q, want the upstream's whole answer", name, r.body)
			}
		}
	}

	// The proxy: the first request of a connection (under the header
	// timeout), a later one (under the idle timeout), and a CONNECT.
	up := echoUpstream(t)
	port := uint16(portOf(t, up))
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Minute)
	g := startGatewayWith(t, spec, map[string]string{"api.test": "127.0.0.1"}, func(c *serverConfig) { c.Limits = limits })
	c := g.client(t, nil)
	base := fmt.Sprintf("http://api.test:%d", port)
	for i, tt := range []struct {
		path  string
		allow bool
	}{{"/first", true}, {"/second", true}, {"/third", false}, {"/fourth", true}} {
		ch := doAsync(c, mustRequest(t, "POST", base+tt.path, "payload"))
		q := waitQuestion(t, g.srv, "api.test", port, 1)
		time.Sleep(held)
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: tt.allow, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		switch {
		case r.err != nil:
			t.Errorf("proxy request %d (allow %v): held %v: %v", i, tt.allow, held, r.err)
		case tt.allow && (r.status != 200 || !strings.Contains(r.body, `"path":"`+tt.path+`"`)):
			t.Errorf("proxy request %d: held %v: got %d %q, want 200 from the upstream", i, held, r.status, r.body)
		case !tt.allow && (r.status != 403 || !strings.Contains(r.header.Get(HeaderReason), "denied once by api")):
			t.Errorf("proxy request %d: held %v: got %d %q, want 403 denied once by api", i, held, r.status, r.header.Get(HeaderReason))
		}
	}
	for _, allow := range []bool{true, false} {
		done := make(chan askResult, 1)
		go func() {
			status, hdr := rawConnect(t, g.addr, fmt.Sprintf("api.test:%d", port))
			done <- askResult{status: status, header: hdr}
		}()
		q := waitQuestion(t, g.srv, "api.test", port, 1)
		time.Sleep(held)
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: allow, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{true: 200, false: 403}[allow]
		if r := result(t, done); r.status != want {
			t.Errorf("CONNECT held %v, allow %v: got %d, want %d", held, allow, r.status, want)
		}
	}
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Who answered is written into the decision log: the gateway takes only
// the known answerers, whoever calls it.
func TestAskAnswerByIsOneOfTheSet(t *testing.T) {
	g, c, base, port := askGateway(t, time.Minute, nil)
	ch := getAsync(c, base+"/")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	for _, by := range []string{"", approval.ByTimeout, "root", "CLI", "cli\nallowed always by admin"} {
		_, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: by})
		if !errors.Is(err, approval.ErrInvalidAnswer) || !strings.Contains(err.Error(), "cli, api, ui, tty") {
			t.Errorf("by %q: got %v, want ErrInvalidAnswer naming cli, api, ui, tty", by, err)
		}
	}
	stillHeld(t, ch)
	for _, by := range []string{approval.ByTTY, approval.ByCLI, approval.ByAPI, approval.ByUI} {
		if _, err := g.srv.approvals.Answer("a999", approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: by}); !errors.Is(err, approval.ErrNotFound) {
			t.Errorf("by %q: got %v, want it taken (and the unknown id refused)", by, err)
		}
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByTTY}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.status != 200 {
		t.Errorf("got %d, want 200", r.status)
	}
}
