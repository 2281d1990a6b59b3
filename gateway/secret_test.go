package gateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The values of the test secrets: what must reach the bound hosts and
// nothing else.
const (
	valueA = "sk-test-VALUE-A-5f2c81"
	valueB = "sk-test-VALUE-B-9d1e44"
)

// captured is what an upstream received: each request's host, target and
// header fields.
type captured struct {
	mu   sync.Mutex
	reqs []string // "HOST TARGET" and the header fields, one request each
}

func (c *captured) add(r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Host, r.RequestURI)
	r.Header.Write(&b)
	c.mu.Lock()
	c.reqs = append(c.reqs, b.String())
	c.mu.Unlock()
}

func (c *captured) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reqs...)
}

// secretSetup is a gateway with two secrets: API_KEY (valueA) bound to
// example.com on the TLS upstream's port and to plain.example on the
// plain one's, OTHER_KEY (valueB) bound to example.com on port 1 only.
// The policy allows example.com, other.example and plain.example on
// both ports and inspects other.example.
type secretSetup struct {
	g         *testGateway
	up, plain *httptest.Server
	got       *captured
	port      netpolicy.Port // the TLS upstream's
	plainPort netpolicy.Port
	a, b      *secrets.Secret
	ca        *CA
	static    map[string]string
}

func newSecretSetup(t *testing.T, mode netpolicy.Mode, set func(*serverConfig)) *secretSetup {
	t.Helper()
	s := &secretSetup{got: &captured{}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.got.add(r)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		io.WriteString(w, "upstream "+r.Proto)
	})
	s.up = httptest.NewUnstartedServer(handler)
	s.up.EnableHTTP2 = true
	s.up.StartTLS()
	t.Cleanup(s.up.Close)
	s.plain = httptest.NewServer(handler)
	t.Cleanup(s.plain.Close)
	s.port, s.plainPort = portOf(t, s.up), portOf(t, s.plain)
	var err error
	if s.a, err = secrets.New("API_KEY", valueA, []string{"example.com:" + s.port.String(), "plain.example:" + s.plainPort.String()}); err != nil {
		t.Fatal(err)
	}
	if s.b, err = secrets.New("OTHER_KEY", valueB, []string{"example.com:1"}); err != nil {
		t.Fatal(err)
	}
	if s.ca, err = NewCA("test", time.Hour); err != nil {
		t.Fatal(err)
	}
	ports := []netpolicy.Port{s.port, s.plainPort}
	spec := loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "ex", Host: "example.com", Ports: ports, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "other", Host: "other.example", Ports: ports, Action: netpolicy.Allow, Inspect: true},
		netpolicy.Rule{ID: "plain", Host: "plain.example", Ports: ports, Action: netpolicy.Allow},
	)
	spec.Mode = mode
	pool := x509.NewCertPool()
	pool.AddCert(s.up.Certificate())
	s.static = map[string]string{"example.com": "127.0.0.1", "other.example": "127.0.0.1", "plain.example": "127.0.0.1"}
	s.g = startGatewayWith(t, spec, s.static, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = s.ca, pool
		c.Secrets = []*secrets.Secret{s.a, s.b}
		if set != nil {
			set(c)
		}
	})
	return s
}

// client is a client of the gateway as proxy that trusts its CA.
func (s *secretSetup) client(t *testing.T, h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	proxy, _ := url.Parse("http://" + s.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (s *secretSetup) httpsURL(host, path string) string {
	return "https://" + host + ":" + s.port.String() + path
}

func (s *secretSetup) httpURL(host, path string) string {
	return "http://" + host + ":" + s.plainPort.String() + path
}

// noValues fails the test when what holds either secret's value.
func noValues(t *testing.T, where, what string) {
	t.Helper()
	for _, v := range []string{valueA, valueB} {
		if strings.Contains(what, v) {
			t.Errorf("%s holds a secret's value: %q", where, what)
		}
	}
}

// logText is every record of the gateway's ring, as the log writes them.
func (s *secretSetup) logText() string {
	lines, _ := s.g.ring.Since(0, 10000)
	return string(bytes.Join(lines, []byte("\n")))
}

// ringMark is the seq of the last record ring holds: records after it
// are those of what the test does next.
func ringMark(ring *decisionlog.Ring) uint64 {
	var mark uint64
	for {
		lines, next := ring.Since(mark, 10000)
		if len(lines) == 0 {
			return mark
		}
		mark = next
	}
}

// waitSecretBlock waits for a decision blocked by rule secret, logged
// after mark, and returns it.
func waitSecretBlock(t *testing.T, ring *decisionlog.Ring, mark uint64) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range ringRecords(t, ring) {
			if seq, _ := r["seq"].(float64); uint64(seq) > mark && r["event"] == decisionlog.EventDecision && r["rule"] == secrets.Rule {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision by rule secret in %v", ringRecords(t, ring))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkSecretBlock checks rec, a block of secret name's placeholder sent
// to host.
func checkSecretBlock(t *testing.T, rec map[string]any, name, host string) {
	t.Helper()
	want := fmt.Sprintf("secret %s's placeholder sent to %s", name, host)
	if rec["action"] != "block" || rec["rule"] != secrets.Rule || rec["secret"] != name || rec["reason"] != want || rec["enforced"] != true {
		t.Errorf("got record %v, want action block, rule %s, secret %s, enforced, reason %q", rec, secrets.Rule, name, want)
	}
}

// TestSecretInjectedForBoundHosts: the value goes in a credential header
// of HTTPS requests to a bound host, over HTTP/1.1 and HTTP/2, and the
// body keeps its placeholder. (It sent the placeholder in Authorization,
// X-Api-Key and X-Twice at once, and in plain HTTP too, before the value
// went only in one credential header field over TLS:
// TestSecretOnlyInCredentialHeaders, TestSecretNeverInPlainHTTP.)
func TestSecretInjectedForBoundHosts(t *testing.T) {
	s := newSecretSetup(t, netpolicy.Enforce, nil)
	ph := s.a.Placeholder()
	for _, tt := range []struct {
		name   string
		h2     bool
		header string
		value  string
	}{
		{"https http/1.1 bearer", false, "Authorization", "Bearer "},
		{"https h2 bearer", true, "Authorization", "Bearer "},
		{"https http/1.1 x-api-key", false, "X-Api-Key", ""},
		{"https h2 x-api-key", true, "X-Api-Key", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(s.got.all())
			req, _ := http.NewRequest("POST", s.httpsURL("example.com", "/v1/messages"), strings.NewReader(`{"key":"`+ph+`"}`))
			req.Header.Set(tt.header, tt.value+ph)
			resp, err := s.client(t, tt.h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("got %d %s, want 200", resp.StatusCode, body)
			}
			if tt.h2 && resp.Proto != "HTTP/2.0" {
				t.Errorf("got %s from the gateway, want HTTP/2.0", resp.Proto)
			}
			reqs := s.got.all()
			if len(reqs) != before+1 {
				t.Fatalf("the upstream got %d requests, want 1", len(reqs)-before)
			}
			got := reqs[before]
			if want := tt.header + ": " + tt.value + valueA; !strings.Contains(got, want+"\r\n") {
				t.Errorf("the upstream got %q, want it to hold %q", got, want)
			}
			if strings.Contains(got, ph) {
				t.Errorf("the upstream got the placeholder: %q", got)
			}
			noValues(t, "the decision log", s.logText())
		})
	}
}

func TestSecretPlaceholderElsewhereIsBlocked(t *testing.T) {
	for _, mode := range []netpolicy.Mode{netpolicy.Enforce, netpolicy.Audit} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSecretSetup(t, mode, nil)
			pa, pb := s.a.Placeholder(), s.b.Placeholder()
			tests := []struct {
				name     string
				url      string
				h2       bool
				header   string // a header field carrying the placeholder, "" for none
				secret   string
				host     string // as the record's reason names it
				noStatus bool   // the client sees no status (CONNECT refused)
			}{
				{name: "https header to another host", url: s.httpsURL("other.example", "/"), header: "Authorization: Bearer " + pa, secret: "API_KEY", host: "other.example"},
				{name: "https h2 header to another host", url: s.httpsURL("other.example", "/"), h2: true, header: "X-Api-Key: " + pa, secret: "API_KEY", host: "other.example"},
				{name: "https query to another host", url: s.httpsURL("other.example", "/p?k="+pa), secret: "API_KEY", host: "other.example"},
				{name: "https h2 path to another host", url: s.httpsURL("other.example", "/"+strings.ToUpper(pa)), h2: true, secret: "API_KEY", host: "other.example"},
				{name: "https percent-encoded path", url: s.httpsURL("other.example", "/%73"+pa[1:]), secret: "API_KEY", host: "other.example"},
				{name: "https header name", url: s.httpsURL("other.example", "/"), header: "X-" + pa + ": 1", secret: "API_KEY", host: "other.example"},
				{name: "https another secret's placeholder to a bound host", url: s.httpsURL("example.com", "/"), header: "X-Api-Key: " + pb, secret: "OTHER_KEY", host: "example.com"},
				// Two placeholders, the first bound to the host and the
				// second not: the second is looked for too.
				{name: "https two placeholders in the query to the first's host", url: s.httpsURL("example.com", "/x?a="+pa+"&b="+pb), secret: "OTHER_KEY", host: "example.com"},
				{name: "https h2 two placeholders in the path to the first's host", url: s.httpsURL("example.com", "/"+pa+"/"+strings.ToUpper(pb)), h2: true, secret: "OTHER_KEY", host: "example.com"},
				{name: "https the second placeholder percent-encoded", url: s.httpsURL("example.com", "/x?a="+pa+"&b=%73"+pb[1:]), secret: "OTHER_KEY", host: "example.com"},
				{name: "https two placeholders in a header name to the first's host", url: s.httpsURL("example.com", "/"), header: "X-" + pa + "-" + pb + ": 1", secret: "OTHER_KEY", host: "example.com"},
				{name: "https two placeholders in a header value to the first's host", url: s.httpsURL("example.com", "/"), header: "X-Api-Key: " + pa + "," + pb, secret: "OTHER_KEY", host: "example.com"},
				{name: "http two placeholders in the query to the first's host", url: s.httpURL("plain.example", "/x?a="+pa+"&b="+pb), secret: "OTHER_KEY", host: "plain.example"},
				{name: "http the second placeholder percent-encoded", url: s.httpURL("plain.example", "/x?a="+pa+"&b=%73"+pb[1:]), secret: "OTHER_KEY", host: "plain.example"},
				{name: "http two placeholders in a header name to the first's host", url: s.httpURL("plain.example", "/"), header: "X-" + pa + "-" + pb + ": 1", secret: "OTHER_KEY", host: "plain.example"},
				{name: "http header to another host", url: s.httpURL("other.example", "/"), header: "X-Api-Key: " + pa, secret: "API_KEY", host: "other.example"},
				{name: "http header to a bound host's other port", url: "http://example.com:" + s.plainPort.String() + "/", header: "X-Api-Key: " + pa, secret: "API_KEY", host: "example.com"},
				{name: "http path to another host", url: s.httpURL("other.example", "/"+pa), secret: "API_KEY", host: "other.example"},
				{name: "http query to another host", url: s.httpURL("other.example", "/?q=x+"+pa), secret: "API_KEY", host: "other.example"},
				{name: "http host", url: s.httpURL(strings.ToLower(pa)+".example.com", "/"), secret: "API_KEY", host: strings.ToLower(pa) + ".example.com"},
				{name: "CONNECT target", url: "https://" + strings.ToLower(pa) + ".example.com/", secret: "API_KEY", host: strings.ToLower(pa) + ".example.com", noStatus: true},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					mark := ringMark(s.g.ring)
					before := len(s.got.all())
					req, err := http.NewRequest("GET", tt.url, nil)
					if err != nil {
						t.Fatal(err)
					}
					if tt.header != "" {
						k, v, _ := strings.Cut(tt.header, ": ")
						req.Header[k] = []string{v}
					}
					resp, err := s.client(t, tt.h2).Do(req)
					switch {
					case tt.noStatus:
						if err == nil {
							resp.Body.Close()
							t.Fatalf("got %d, want the CONNECT refused", resp.StatusCode)
						}
					case err != nil:
						t.Fatal(err)
					default:
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusForbidden {
							t.Fatalf("got %d %s, want 403", resp.StatusCode, body)
						}
						noValues(t, "the answer", string(body))
					}
					checkSecretBlock(t, waitSecretBlock(t, s.g.ring, mark), tt.secret, tt.host)
					if n := len(s.got.all()) - before; n != 0 {
						t.Errorf("the upstream got %d requests, want none", n)
					}
					noValues(t, "the decision log", s.logText())
				})
			}
		})
	}
}

// TestSecretRedirectDoesNotCarryTheValue: the gateway relays a bound
// host's redirect as it is, and the client's request to the next host,
// which carries the placeholder, is blocked.
func TestSecretRedirectDoesNotCarryTheValue(t *testing.T) {
	s := newSecretSetup(t, netpolicy.Enforce, nil)
	ph := s.a.Placeholder()
	to := s.httpsURL("other.example", "/next")
	req, _ := http.NewRequest("GET", s.httpsURL("example.com", "/redirect?to="+url.QueryEscape(to)), nil)
	req.Header.Set("X-Api-Key", ph)
	resp, err := s.client(t, false).Do(req) // follows the redirect
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Request.URL.Host != "other.example:"+s.port.String() {
		t.Errorf("got %d from %s, want 403 from other.example", resp.StatusCode, resp.Request.URL)
	}
	noValues(t, "the answer", string(body))
	reqs := s.got.all()
	if len(reqs) != 1 || !strings.Contains(reqs[0], "X-Api-Key: "+valueA) {
		t.Errorf("the upstreams got %q, want one request, to example.com, with the value", reqs)
	}
	checkSecretBlock(t, waitSecretBlock(t, s.g.ring, 0), "API_KEY", "other.example")
	noValues(t, "the decision log", s.logText())
}

// TestSecretRecordingKeepsThePlaceholder: a recorded host's requests get
// the value upstream, and the recorder, which sees them before, keeps
// the placeholder.
func TestSecretRecordingKeepsThePlaceholder(t *testing.T) {
	var upSaw string
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upSaw = r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	rec := mockllm.NewRecorder(nil)
	var a *secrets.Secret
	g, port, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Action: netpolicy.Allow}, func(c *serverConfig) {
		var err error
		if a, err = secrets.New("API_KEY", valueA, []string{"example.com:" + strconv.Itoa(int(portOf(t, up)))}); err != nil {
			t.Fatal(err)
		}
		c.Secrets = []*secrets.Secret{a}
		c.RecordLLM = map[string]*mockllm.Recorder{"example.com": rec}
	})
	proxy, _ := url.Parse("http://" + g.addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 10 * time.Second}
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello ` + a.Placeholder() + `"}]}`
	req, _ := http.NewRequest("POST", "https://example.com:"+strconv.Itoa(int(port))+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", a.Placeholder())
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if upSaw != valueA {
		t.Errorf("the upstream got X-Api-Key %q, want the value", upSaw)
	}
	script, err := json.Marshal(rec.Script())
	if err != nil {
		t.Fatal(err)
	}
	noValues(t, "the recording", string(script))
	if len(rec.Turns()) != 1 {
		t.Errorf("got %d recorded turns, want 1: %s", len(rec.Turns()), script)
	}
}

func TestSecretTransparentSNIIsBlocked(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	a, err := secrets.New("API_KEY", valueA, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) { c.Secrets = []*secrets.Secret{a} })
	conf := &tls.Config{ServerName: strings.ToLower(a.Placeholder()) + ".evil.test", InsecureSkipVerify: true}
	conn := tls.Client(g.dial(t, netip.MustParseAddrPort("127.0.0.1:"+port.String())), conf)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := conn.Handshake(); err == nil {
		t.Fatal("a handshake with the placeholder in its server name went through")
	}
	checkSecretBlock(t, waitSecretBlock(t, g.ring, 0), "API_KEY", "127.0.0.1")
}

// TestSecretDNSNameIsBlocked: a name with a placeholder does not exist,
// in audit mode too.
func TestSecretDNSNameIsBlocked(t *testing.T) {
	a, err := secrets.New("API_KEY", valueA, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Allow, Mode: netpolicy.Audit}, nil, func(c *serverConfig) { c.Secrets = []*secrets.Secret{a} })
	for _, tcp := range []bool{false, true} {
		mark := ringMark(st.ring)
		name := a.Placeholder() + ".evil.test."
		if tcp {
			name = "x." + strings.ToLower(a.Placeholder()) + ".evil.test."
		}
		if rcode, _ := queryA(t, st, tcp, name); rcode != dnsmessage.RCodeNameError {
			t.Errorf("tcp %v: got %v, want NXDOMAIN", tcp, rcode)
		}
		var rec map[string]any
		for _, r := range ringRecords(t, st.ring) {
			if seq, _ := r["seq"].(float64); uint64(seq) > mark && r["kind"] == decisionlog.KindDNS && strings.Contains(strings.ToLower(r["host"].(string)), strings.ToLower(a.Placeholder())) {
				rec = r
			}
		}
		if rec == nil {
			t.Fatalf("tcp %v: no record of the query", tcp)
		}
		checkSecretBlock(t, rec, "API_KEY", rec["host"].(string))
	}
	if n := st.upstream.queries.Load(); n != 0 {
		t.Errorf("the resolvers got %d queries, want none", n)
	}
}

// TestSecretsCannotChange: a policy change that would change the
// policy's secrets is refused; one that keeps them is not.
func TestSecretsCannotChange(t *testing.T) {
	spec := netpolicy.Spec{Secrets: []netpolicy.Secret{{Name: "K", FromEnv: "K", Hosts: []string{"a.test"}}}}
	g := startGatewayWith(t, spec, nil, nil)
	for _, sec := range []netpolicy.Secret{
		{Name: "K", FromEnv: "K", Hosts: []string{"evil.test"}},
		{Name: "K", FromEnv: "K", Hosts: []string{"a.test"}, Headers: []string{"X-Other"}},
		{Name: "K", FromEnv: "K", Hosts: []string{"a.test"}, Methods: []string{"GET"}},
		{Name: "K", FromEnv: "K", Hosts: []string{"a.test"}, Paths: []string{"/v1"}},
	} {
		changed := spec
		changed.Secrets = []netpolicy.Secret{sec}
		if _, err := g.store.Replace(changed, 0); !errors.Is(err, secrets.ErrFixed) {
			t.Errorf("changing the secrets to %+v: got %v, want secrets.ErrFixed", sec, err)
		}
	}
	kept := spec
	kept.Default = netpolicy.Allow
	if _, err := g.store.Replace(kept, 0); err != nil {
		t.Errorf("keeping the secrets: %v", err)
	}
}

// TestSecretBlockIsNeverAsked: under default ask, a placeholder sent to
// another host is blocked at once, and no question is asked.
func TestSecretBlockIsNeverAsked(t *testing.T) {
	a, err := secrets.New("API_KEY", valueA, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Hour)
	g := startGatewayWith(t, spec, map[string]string{"other.example": "127.0.0.1"}, func(c *serverConfig) { c.Secrets = []*secrets.Secret{a} })
	for _, target := range []string{"http://other.example/", "https://" + strings.ToLower(a.Placeholder()) + ".example/"} {
		req, _ := http.NewRequest("GET", target, nil)
		req.Header.Set("X-Api-Key", a.Placeholder())
		resp, err := g.client(t, nil).Do(req) // 10 s: a held request would time out
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: got %d, want 403", target, resp.StatusCode)
			}
		} else if !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("%s: got %v, want the CONNECT refused with 403", target, err)
		}
	}
	for _, r := range g.records(t) {
		if r["event"] == decisionlog.EventApproval {
			t.Errorf("a question was asked: %v", r)
		}
	}
	if n := len(g.srv.approvals.List()); n != 0 {
		t.Errorf("got %d pending questions, want none", n)
	}
}
