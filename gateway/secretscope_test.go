package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// These tests play the sandboxed command against a bound host that
// behaves as api.anthropic.com does: it quotes an anthropic-beta value it
// does not know in its 400, and echoes Origin and X-Request-Id. Whatever
// the command puts where, the key must come back to it only as it went:
// never.

// anthropicBetas are the anthropic-beta values the stand-in knows.
var anthropicBetas = []string{"prompt-caching-2024-07-31", "interleaved-thinking-2025-05-14"}

// anthropicStandIn answers as api.anthropic.com does (its error bodies
// are {"type":"error","error":{"type":...,"message":...}}): 401 without
// the key, in x-api-key or as a bearer token; 400 quoting every
// anthropic-beta value it does not know; Origin and X-Request-Id echoed
// in the answer's headers; else a message. got records every request.
func anthropicStandIn(got *captured, key string) http.HandlerFunc {
	apiError := func(w http.ResponseWriter, status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	}
	return func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		if o := r.Header.Get("Origin"); o != "" {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		if id := r.Header.Get("X-Request-Id"); id != "" {
			w.Header().Set("X-Request-Id", id)
		}
		if r.Header.Get("X-Api-Key") != key && r.Header.Get("Authorization") != "Bearer "+key {
			apiError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return
		}
		var unknown []string
		for _, v := range r.Header.Values("Anthropic-Beta") {
			for _, b := range strings.Split(v, ",") {
				if b = strings.TrimSpace(b); !slices.Contains(anthropicBetas, b) {
					unknown = append(unknown, b)
				}
			}
		}
		if len(unknown) > 0 {
			apiError(w, http.StatusBadRequest, "invalid_request_error",
				"Unexpected value(s) `"+strings.Join(unknown, "`, `")+"` for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header.")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	}
}

// scopeSetup is a gateway with one secret, ANTHROPIC_API_KEY (valueA),
// bound to example.com on an HTTPS stand-in's port and to plain.example
// on a plain HTTP stand-in's; both stand-ins answer as Anthropic does,
// and the policy allows both hosts on both ports, and other.example.
type scopeSetup struct {
	g                *testGateway
	up, plain        *httptest.Server
	got              *captured
	port, plainPort  netpolicy.Port
	sec              *secrets.Secret
	ca               *CA
	upstreamVerifies bool
}

// newScopeSetup starts a scopeSetup whose secret is bound as spec says
// (its name and hosts are the setup's); set, when not nil, changes the
// gateway's configuration.
func newScopeSetup(t *testing.T, spec netpolicy.Secret, set func(*serverConfig)) *scopeSetup {
	t.Helper()
	s := &scopeSetup{got: &captured{}}
	h := anthropicStandIn(s.got, valueA)
	s.up = httptest.NewUnstartedServer(h)
	s.up.EnableHTTP2 = true
	s.up.StartTLS()
	t.Cleanup(s.up.Close)
	s.plain = httptest.NewServer(h)
	t.Cleanup(s.plain.Close)
	s.port, s.plainPort = portOf(t, s.up), portOf(t, s.plain)
	spec.Name = "ANTHROPIC_API_KEY"
	spec.Hosts = []string{"example.com:" + s.port.String(), "plain.example:" + s.plainPort.String()}
	var err error
	if s.sec, err = secrets.FromSpec(spec, valueA); err != nil {
		t.Fatal(err)
	}
	if s.ca, err = NewCA("test", time.Hour); err != nil {
		t.Fatal(err)
	}
	ports := []netpolicy.Port{s.port, s.plainPort}
	pol := loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "example.com", Ports: ports, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "plain", Host: "plain.example", Ports: ports, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "other", Host: "other.example", Ports: ports, Action: netpolicy.Allow},
	)
	pool := x509.NewCertPool()
	pool.AddCert(s.up.Certificate())
	static := map[string]string{"example.com": "127.0.0.1", "plain.example": "127.0.0.1", "other.example": "127.0.0.1"}
	s.g = startGatewayWith(t, pol, static, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = s.ca, pool
		c.Secrets = []*secrets.Secret{s.sec}
		if set != nil {
			set(c)
		}
	})
	return s
}

// client is a client of the gateway as proxy that trusts its CA.
func (s *scopeSetup) client(t *testing.T, h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	proxy, _ := url.Parse("http://" + s.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// sandboxSees is everything of resp the sandbox sees: status, header
// fields and body.
func sandboxSees(resp *http.Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", resp.Status)
	resp.Header.Write(&b)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	b.Write(body)
	return b.String()
}

// wantSecretRefusal checks the decision logged after mark: a block by
// rule secret naming ANTHROPIC_API_KEY, enforced, whose reason says
// reason.
func wantSecretRefusal(t *testing.T, ring *decisionlog.Ring, mark uint64, reason string) {
	t.Helper()
	rec := waitSecretBlock(t, ring, mark)
	if rec["action"] != "block" || rec["secret"] != "ANTHROPIC_API_KEY" || rec["enforced"] != true {
		t.Errorf("got record %v, want an enforced block naming secret ANTHROPIC_API_KEY", rec)
	}
	if r, _ := rec["reason"].(string); !strings.Contains(r, reason) {
		t.Errorf("got reason %q, want it to say %q", r, reason)
	}
}

// TestSecretOnlyInCredentialHeaders: a request to the bound host that
// carries the placeholder anywhere but in one field line of a credential
// header, alone or after a scheme, is blocked by rule secret and never
// reaches the upstream, so that an upstream that quotes what it does not
// like (anthropic-beta) or echoes what it is sent (Origin, X-Request-Id)
// cannot hand the key back. Red on main: the gateway put the value in
// every header carrying the placeholder, and the stand-in's 400 quoted
// it.
func TestSecretOnlyInCredentialHeaders(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, nil)
	ph := s.sec.Placeholder()
	target := "https://example.com:" + s.port.String() + "/v1/messages"
	tests := []struct {
		name   string
		method string
		header [][2]string
		reason string // what the block's reason says
	}{
		{"anthropic-beta", "POST", [][2]string{{"X-Api-Key", ph}, {"Anthropic-Beta", ph}}, "in the header Anthropic-Beta"},
		{"anthropic-beta among known betas", "POST", [][2]string{{"X-Api-Key", ph}, {"Anthropic-Beta", anthropicBetas[0] + "," + ph}}, "in the header Anthropic-Beta"},
		{"origin", "POST", [][2]string{{"Authorization", "Bearer " + ph}, {"Origin", "https://" + ph}}, "in the header Origin"},
		{"request id", "POST", [][2]string{{"X-Api-Key", ph}, {"X-Request-Id", ph}}, "in the header X-Request-Id"},
		{"method", ph, [][2]string{{"X-Api-Key", ph}}, "in the method"},
		{"method alone", ph, nil, "in the method"},
		{"path", "POST", [][2]string{{"X-Api-Key", "k"}, {":path", "/v1/" + ph}}, "in the path or query"},
		{"credential header repeated", "POST", [][2]string{{"X-Api-Key", ph}, {"X-Api-Key", ph}}, "in 2 header field lines"},
		{"credential header repeated with other text", "POST", [][2]string{{"X-Api-Key", ph}, {"X-Api-Key", "x"}}, "in 2 header field lines"},
		{"in two credential headers", "POST", [][2]string{{"X-Api-Key", ph}, {"Authorization", "Bearer " + ph}}, "in 2 header field lines"},
		{"credential header with text after", "POST", [][2]string{{"X-Api-Key", ph + "-junk"}}, "with other text"},
		{"credential header with text before", "POST", [][2]string{{"Authorization", "Bearer x" + ph}}, "with other text"},
		{"credential header in another case", "POST", [][2]string{{"X-Api-Key", strings.ToUpper(ph)}}, "with other text"},
	}
	for _, h2 := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s h2 %v", tt.name, h2), func(t *testing.T) {
				mark := ringMark(s.g.ring)
				before := len(s.got.all())
				req, err := http.NewRequest(tt.method, target, strings.NewReader(`{"model":"m","max_tokens":5,"messages":[]}`))
				if err != nil {
					t.Fatal(err)
				}
				for _, kv := range tt.header {
					if kv[0] == ":path" {
						req.URL.Path = kv[1]
						continue
					}
					req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
				}
				resp, err := s.client(t, h2).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				status := resp.StatusCode
				answer := sandboxSees(resp)
				noValues(t, "the answer", answer)
				if status != http.StatusForbidden {
					t.Errorf("got %d, want 403: %s", status, answer)
				}
				wantSecretRefusal(t, s.g.ring, mark, tt.reason)
				if n := len(s.got.all()) - before; n != 0 {
					t.Errorf("the upstream got %d requests, want none: %q", n, s.got.all()[before:])
				}
				noValues(t, "the decision log", logText(s.g.ring))
			})
		}
	}
}

// TestSecretCredentialHeadersInjected: the forms API clients send a key
// in reach the upstream with the key, over HTTP/1.1 and HTTP/2, and the
// upstream's own errors, which quote what it does not like, come back
// as they are, with no key in them.
func TestSecretCredentialHeadersInjected(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, nil)
	ph := s.sec.Placeholder()
	for _, h2 := range []bool{false, true} {
		for _, tt := range []struct {
			name       string
			header     [][2]string
			status     int
			sent, want string // what the upstream got, what the answer holds
		}{
			{"x-api-key", [][2]string{{"X-Api-Key", ph}}, 200, "X-Api-Key: " + valueA, `"type":"message"`},
			{"bearer", [][2]string{{"Authorization", "Bearer " + ph}}, 200, "Authorization: Bearer " + valueA, `"type":"message"`},
			{"an unknown beta", [][2]string{{"X-Api-Key", ph}, {"Anthropic-Beta", "no-such-beta"}}, 400, "X-Api-Key: " + valueA, "Unexpected value(s) `no-such-beta` for the `anthropic-beta` header"},
		} {
			t.Run(fmt.Sprintf("%s h2 %v", tt.name, h2), func(t *testing.T) {
				before := len(s.got.all())
				req, _ := http.NewRequest("POST", "https://example.com:"+s.port.String()+"/v1/messages", strings.NewReader(`{"content":"`+ph+`"}`))
				for _, kv := range tt.header {
					req.Header.Add(kv[0], kv[1])
				}
				resp, err := s.client(t, h2).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				status := resp.StatusCode
				answer := sandboxSees(resp)
				if status != tt.status || !strings.Contains(answer, tt.want) {
					t.Errorf("got %q, want %d holding %q", answer, tt.status, tt.want)
				}
				noValues(t, "the answer", answer)
				got := s.got.all()[before:]
				if len(got) != 1 || !strings.Contains(got[0], tt.sent+"\r\n") {
					t.Errorf("the upstream got %q, want one request holding %q", got, tt.sent)
				}
				noValues(t, "the decision log", logText(s.g.ring))
			})
		}
	}
}

// TestSecretNeverInPlainHTTP: the value goes only over TLS. A request to
// a bound host and port in plain HTTP (through the proxy, inside a
// CONNECT tunnel, or captured) that carries the placeholder is blocked,
// and the upstream gets nothing. Red on main: the proxy and the tunnel
// put the value in the clear request.
func TestSecretNeverInPlainHTTP(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, nil)
	ph := s.sec.Placeholder()
	hostport := "plain.example:" + s.plainPort.String()
	send := map[string]func(t *testing.T) string{
		"proxy": func(t *testing.T) string {
			req, _ := http.NewRequest("GET", "http://"+hostport+"/v1/models", nil)
			req.Header.Set("X-Api-Key", ph)
			resp, err := s.client(t, false).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return sandboxSees(resp)
		},
		"inside a CONNECT tunnel": func(t *testing.T) string {
			c, err := net.Dial("tcp", s.g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nConnection: close\r\n\r\n", hostport, ph)
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			return sandboxSees(resp)
		},
	}
	for name, f := range send {
		t.Run(name, func(t *testing.T) {
			mark := ringMark(s.g.ring)
			before := len(s.got.all())
			answer := f(t)
			noValues(t, "the answer", answer)
			if !strings.HasPrefix(answer, "403 ") {
				t.Errorf("got %q, want 403", answer)
			}
			wantSecretRefusal(t, s.g.ring, mark, "in a plain HTTP request to plain.example: its value is sent only over HTTPS")
			if got := s.got.all()[before:]; len(got) != 0 {
				t.Errorf("the upstream got %q, want nothing", got)
			}
		})
	}
}

// TestSecretTransparentHTTPBlocked: a captured plain HTTP request to a
// bound host and port that carries the placeholder is blocked, as the
// proxy's is; one to another host is blocked as a placeholder sent
// elsewhere. Before, the bound host got the value in the clear (the test
// was TestSecretTransparentHTTPInjected, which held the old promise).
func TestSecretTransparentHTTPBlocked(t *testing.T) {
	got := &captured{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.add(r) }))
	t.Cleanup(up.Close)
	port := portOf(t, up)
	a, err := secrets.New("API_KEY", valueA, []string{"plain.example:" + port.String()})
	if err != nil {
		t.Fatal(err)
	}
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"plain.example": "127.0.0.1", "other.example": "127.0.0.1"},
		func(c *serverConfig) { c.Secrets = []*secrets.Secret{a} })
	get := func(host string) int {
		req, _ := http.NewRequest("GET", "http://"+host+":"+port.String()+"/", nil)
		req.Header.Set("X-Api-Key", a.Placeholder())
		resp, err := g.httpClient(t, g.fake(t, host, port), nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("plain.example"); code != http.StatusForbidden {
		t.Fatalf("to the bound host: got %d, want 403", code)
	}
	rec := waitSecretBlock(t, g.ring, 0)
	if r, _ := rec["reason"].(string); rec["secret"] != "API_KEY" || !strings.Contains(r, "plain HTTP") {
		t.Errorf("got %v, want a block of secret API_KEY in plain HTTP", rec)
	}
	mark := ringMark(g.ring)
	if code := get("other.example"); code != http.StatusForbidden {
		t.Fatalf("to another host: got %d, want 403", code)
	}
	checkSecretBlock(t, waitSecretBlock(t, g.ring, mark), "API_KEY", "other.example")
	if reqs := got.all(); len(reqs) != 0 {
		t.Errorf("the upstream got %q, want nothing", reqs)
	}
}

// TestSecretMethodElsewhereIsBlocked: a placeholder as the method of a
// request to a host its secret is not bound to is a placeholder sent
// there. Red on main: the method was not looked at.
func TestSecretMethodElsewhereIsBlocked(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, nil)
	req, _ := http.NewRequest(s.sec.Placeholder(), "http://other.example:"+s.plainPort.String()+"/", nil)
	resp, err := s.client(t, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if answer := sandboxSees(resp); !strings.HasPrefix(answer, "403 ") {
		t.Errorf("got %q, want 403", answer)
	}
	checkSecretBlock(t, waitSecretBlock(t, s.g.ring, 0), "ANTHROPIC_API_KEY", "other.example")
	if got := s.got.all(); len(got) != 0 {
		t.Errorf("the upstream got %q, want nothing", got)
	}
}

// TestSecretScopeMethodsPaths: a binding's methods and paths (policy
// form) limit the requests its value goes with: outside them a request
// carrying the placeholder is blocked, so the sandbox cannot use the key
// to mint another (POST /v1/api_keys), whatever spelling of the path it
// tries. Red on main: the policy form had no methods or paths, and the
// key went with any request.
func TestSecretScopeMethodsPaths(t *testing.T) {
	p, err := netpolicy.Parse("p.yaml", []byte(`version: 1
secrets:
  - name: K
    from_env: K
    hosts: [example.com]
    header: x-api-key
    methods: [post]
    paths: [/v1/messages]
`))
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Secrets()[0]
	s := newScopeSetup(t, netpolicy.Secret{Headers: spec.Headers, Methods: spec.Methods, Paths: spec.Paths}, nil)
	ph := s.sec.Placeholder()
	base := "https://example.com:" + s.port.String()
	for _, tt := range []struct {
		method, path string
		header       string
		status       int
		reason       string
	}{
		{"POST", "/v1/messages", "X-Api-Key", 200, ""},
		{"POST", "/v1/messages/count_tokens", "X-Api-Key", 200, ""},
		{"GET", "/v1/messages", "X-Api-Key", 403, "only with POST to paths under /v1/messages"},
		{"POST", "/v1/api_keys", "X-Api-Key", 403, "only with POST to paths under /v1/messages"},
		{"POST", "/v1/messages/../api_keys", "X-Api-Key", 403, "only with POST"},
		{"POST", "/v1/messages/%2e%2e/api_keys", "X-Api-Key", 403, "only with POST"},
		{"POST", "/v1/messages;x/../../api_keys", "X-Api-Key", 403, "only with POST"},
		// Authorization is not this binding's header.
		{"POST", "/v1/messages", "Authorization", 403, "in the header Authorization"},
	} {
		t.Run(tt.method+" "+tt.path+" "+tt.header, func(t *testing.T) {
			mark := ringMark(s.g.ring)
			before := len(s.got.all())
			req, _ := http.NewRequest(tt.method, base+"/", strings.NewReader("{}"))
			req.URL.Opaque = tt.path // sent as written
			req.Header.Set(tt.header, ph)
			if tt.header == "Authorization" {
				req.Header.Set(tt.header, "Bearer "+ph)
			}
			resp, err := s.client(t, false).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			status := resp.StatusCode
			answer := sandboxSees(resp)
			noValues(t, "the answer", answer)
			if status != tt.status {
				t.Fatalf("got %q, want %d", answer, tt.status)
			}
			got := s.got.all()[before:]
			if tt.status == 200 {
				if len(got) != 1 || !strings.Contains(got[0], "X-Api-Key: "+valueA) {
					t.Errorf("the upstream got %q, want the key", got)
				}
				return
			}
			wantSecretRefusal(t, s.g.ring, mark, tt.reason)
			if len(got) != 0 {
				t.Errorf("the upstream got %q, want nothing", got)
			}
		})
	}
	// A request without the placeholder is the policy's to decide: it
	// goes, with no key.
	before := len(s.got.all())
	resp, err := s.client(t, false).Get(base + "/v1/api_keys")
	if err != nil {
		t.Fatal(err)
	}
	if answer := sandboxSees(resp); !strings.HasPrefix(answer, "401 ") {
		t.Errorf("without the placeholder: got %q, want the upstream's 401", answer)
	}
	if got := s.got.all()[before:]; len(got) != 1 || strings.Contains(got[0], valueA) {
		t.Errorf("without the placeholder: the upstream got %q, want one request without the key", got)
	}
}

// TestSecretUnverifiedUpstreamGetsNothing: the value goes only to an
// upstream whose certificate the gateway verified; one it cannot verify
// gets no request at all.
func TestSecretUnverifiedUpstreamGetsNothing(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, func(c *serverConfig) { c.UpstreamRoots = x509.NewCertPool() })
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("POST", "https://example.com:"+s.port.String()+"/v1/messages", strings.NewReader("{}"))
		req.Header.Set("X-Api-Key", s.sec.Placeholder())
		resp, err := s.client(t, h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if answer := sandboxSees(resp); !strings.HasPrefix(answer, "502 ") || !strings.Contains(answer, "certificate") {
			t.Errorf("h2 %v: got %q, want 502 for the certificate", h2, answer)
		}
	}
	if got := s.got.all(); len(got) != 0 {
		t.Errorf("the upstream got %q, want nothing", got)
	}
}

// TestSecretUpstreamErrorsShowNoValue: a bound upstream whose broken
// answer quotes the key it was sent (a malformed status line, Go's error
// quoting it with %q; a malformed header line, quoted as it is) makes
// the gateway answer 502, and neither that answer nor the decision log
// holds the key. The key holds a '"' so that Go's quoting changes it.
// Red on main: the 502 and the log's error quoted the upstream's line.
func TestSecretUpstreamErrorsShowNoValue(t *testing.T) {
	const key = `sk-ant-"quoted"-7f3a9c`
	for _, tt := range []struct {
		name   string
		answer func(key string) string
	}{
		{"status line", func(key string) string { return "HTTP/1.1 " + key + " Bad\r\n\r\n" }},
		{"status line whole", func(key string) string { return "HTTP/1.1" + key + "\r\n\r\n" }},
		{"header line", func(key string) string { return "HTTP/1.1 200 OK\r\n" + key + "\r\nContent-Length: 0\r\n\r\n" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := rawAnswerUpstream(t, "X-Api-Key", tt.answer)
			var sec *secrets.Secret
			g, port, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Action: netpolicy.Allow}, func(c *serverConfig) {
				var err error
				if sec, err = secrets.New("ANTHROPIC_API_KEY", key, []string{"example.com:" + portOf(t, up).String()}); err != nil {
					t.Fatal(err)
				}
				c.Secrets = []*secrets.Secret{sec}
			})
			proxy, _ := url.Parse("http://" + g.addr)
			tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
			t.Cleanup(tr.CloseIdleConnections)
			req, _ := http.NewRequest("POST", "https://example.com:"+port.String()+"/v1/messages", strings.NewReader("{}"))
			req.Header.Set("X-Api-Key", sec.Placeholder())
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer := sandboxSees(resp)
			if !strings.HasPrefix(answer, "502 ") {
				t.Errorf("got %q, want 502", answer)
			}
			var closeRec map[string]any
			deadline := time.Now().Add(5 * time.Second)
			for closeRec == nil && time.Now().Before(deadline) {
				for _, r := range g.records(t) {
					if r["event"] == decisionlog.EventClose && r["kind"] == decisionlog.KindHTTPS {
						closeRec = r
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			if e, _ := closeRec["error"].(string); e == "" {
				t.Errorf("got close record %v, want one with the upstream's error", closeRec)
			}
			quoted := fmt.Sprintf("%q", key)
			for _, what := range []struct{ where, text string }{{"the answer", answer}, {"the decision log", logText(g.ring)}} {
				for _, form := range []string{key, quoted[1 : len(quoted)-1], "quoted"} {
					if strings.Contains(what.text, form) {
						t.Errorf("%s holds the key (as %s): %q", what.where, form, what.text)
					}
				}
			}
		})
	}
}

// logText is every record of ring, as the log writes them.
func logText(ring *decisionlog.Ring) string {
	lines, _ := ring.Since(0, 10000)
	var b strings.Builder
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestSecretTrailerIsBlocked: a placeholder in a trailer of a request to
// the bound host (sent after the body, so after the request was decided)
// cuts the request off: the client gets a 403, the close record names the
// secret with rule secret, and the upstream gets no trailer value. Red on
// main: the request went through, 200.
func TestSecretTrailerIsBlocked(t *testing.T) {
	s := newScopeSetup(t, netpolicy.Secret{}, nil)
	ph := s.sec.Placeholder()
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2 %v", h2), func(t *testing.T) {
			mark := ringMark(s.g.ring)
			req, _ := http.NewRequest("POST", "https://example.com:"+s.port.String()+"/v1/messages", io.NopCloser(strings.NewReader(`{"model":"m"}`)))
			req.ContentLength = -1 // chunked, with trailers
			req.Header.Set("X-Api-Key", ph)
			req.Trailer = http.Header{"X-Checksum": {"a " + ph}}
			resp, err := s.client(t, h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer := sandboxSees(resp)
			noValues(t, "the answer", answer)
			if !strings.HasPrefix(answer, "403 ") {
				t.Errorf("got %q, want 403", answer)
			}
			var closeRec map[string]any
			deadline := time.Now().Add(5 * time.Second)
			for closeRec == nil && time.Now().Before(deadline) {
				for _, r := range ringRecords(t, s.g.ring) {
					if seq, _ := r["seq"].(float64); uint64(seq) > mark && r["event"] == decisionlog.EventClose && r["kind"] == decisionlog.KindHTTPS {
						closeRec = r
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			if r, _ := closeRec["reason"].(string); closeRec["rule"] != secrets.Rule || closeRec["secret"] != "ANTHROPIC_API_KEY" || closeRec["action"] != "block" || !strings.Contains(r, "in a trailer") {
				t.Errorf("got close record %v, want a block by rule secret naming ANTHROPIC_API_KEY, in a trailer", closeRec)
			}
			for _, got := range s.got.all() {
				if strings.Contains(got, ph) {
					t.Errorf("the upstream got the placeholder: %q", got)
				}
			}
		})
	}
}
