package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/netpolicy"
)

// loginService stands in for Anthropic's: an API that takes only the
// current access token as a bearer token (and answers 401
// authentication_error otherwise), and a token endpoint that rotates
// tokens as console.anthropic.com/v1/oauth/token does (a used refresh
// token is 400 invalid_grant). Both record what they were sent.
type loginService struct {
	mu      sync.Mutex
	access  string
	refresh string
	n       int
	sent    []string // every request either got: method, target, Authorization and body
}

func (s *loginService) note(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	s.sent = append(s.sent, r.Method+" "+r.Host+r.RequestURI+" "+r.Header.Get("Authorization")+" "+string(b))
	return string(b)
}

func (s *loginService) api(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note(r)
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer "+s.access {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired or is invalid: `+r.Header.Get("Authorization")+`"}}`)
		return
	}
	io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"hi"}],"echo":"`+r.Header.Get("Authorization")+`"}`)
}

func (s *loginService) token(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var q map[string]string
	json.Unmarshal([]byte(s.note(r)), &q)
	w.Header().Set("Content-Type", "application/json")
	if q["grant_type"] != "refresh_token" || q["refresh_token"] != s.refresh {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"invalid_grant","error_description":"Refresh token not found or invalid"}`)
		return
	}
	s.n++
	s.access, s.refresh = fmt.Sprintf("real-access-%d", s.n), fmt.Sprintf("real-refresh-%d", s.n)
	fmt.Fprintf(w, `{"token_type":"Bearer","access_token":%q,"refresh_token":%q,"expires_in":28800,"scope":"user:inference user:profile"}`, s.access, s.refresh)
}

func (s *loginService) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.sent, "\n")
}

// loginSetup is a gateway with a Claude login whose API host is
// api.example.com (the API stand-in's port) and whose token endpoint is
// token.example.com (the token stand-in's), both allowed, as is
// other.example.com (the API stand-in again); plain.example.com is the token
// stand-in's handler over plain HTTP.
type loginSetup struct {
	g         *testGateway
	svc       *loginService
	l         *login.Login
	ca        *CA
	upCert    *x509.Certificate
	apiPort   netpolicy.Port
	tokenPort netpolicy.Port
	plainPort netpolicy.Port
}

func newLoginSetup(t *testing.T) *loginSetup {
	t.Helper()
	s := &loginSetup{svc: &loginService{access: "real-access-0", refresh: "real-refresh-0"}}
	api := httptest.NewTLSServer(http.HandlerFunc(s.svc.api))
	t.Cleanup(api.Close)
	tok := httptest.NewTLSServer(http.HandlerFunc(s.svc.token))
	t.Cleanup(tok.Close)
	plain := httptest.NewServer(http.HandlerFunc(s.svc.token))
	t.Cleanup(plain.Close)
	s.apiPort, s.tokenPort, s.plainPort = portOf(t, api), portOf(t, tok), portOf(t, plain)
	file := `{"claudeAiOauth":{"accessToken":"real-access-0","refreshToken":"real-refresh-0","expiresAt":1748276587173,"scopes":["user:inference"],"subscriptionType":"max"}}`
	var err error
	s.l, err = login.ParseAt("claude", []byte(file), login.Endpoints{
		APIHosts: []string{"api.example.com:" + s.apiPort.String()}, Token: "token.example.com:" + s.tokenPort.String()})
	if err != nil {
		t.Fatal(err)
	}
	if s.ca, err = NewCA("test", time.Hour); err != nil {
		t.Fatal(err)
	}
	ports := []netpolicy.Port{s.apiPort, s.tokenPort, s.plainPort}
	pol := loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.example.com", Ports: ports, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "token", Host: "token.example.com", Ports: ports, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "other", Host: "other.example.com", Ports: ports, Action: netpolicy.Allow},
	)
	pool := x509.NewCertPool()
	pool.AddCert(api.Certificate())
	pool.AddCert(tok.Certificate())
	s.upCert = api.Certificate()
	static := map[string]string{"api.example.com": "127.0.0.1", "token.example.com": "127.0.0.1", "other.example.com": "127.0.0.1"}
	s.g = startGatewayWith(t, pol, static, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = s.ca, pool
		c.Logins = []*login.Login{s.l}
	})
	return s
}

// client is the sandboxed command's client: the gateway as proxy, its CA
// trusted (and the stand-ins' certificate, for a tunnel it does not
// open).
func (s *loginSetup) client(t *testing.T) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	pool.AddCert(s.upCert)
	proxy, _ := url.Parse("http://" + s.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// copyTokens are the placeholders of the sandbox's copy.
func (s *loginSetup) copyTokens(t *testing.T) (access, refresh string) {
	var f struct {
		O struct{ AccessToken, RefreshToken string } `json:"claudeAiOauth"`
	}
	if err := json.Unmarshal(s.l.Copy(), &f); err != nil {
		t.Fatal(err)
	}
	return f.O.AccessToken, f.O.RefreshToken
}

// loginDo sends a request as the sandboxed command and returns what it sees.
func loginDo(t *testing.T, c *http.Client, method, u, auth, body string) (int, string) {
	t.Helper()
	r, _ := http.NewRequest(method, u, strings.NewReader(body))
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, sandboxSees(resp)
}

// TestLoginThroughGateway: the agent, holding the copy's placeholders,
// reaches its API with the real access token put in by the gateway; its
// refresh with the placeholder refresh token is performed by the gateway
// with the real one and answered with placeholders; its next API request
// carries the new access token; the refresh's close record names the
// tokens replaced; and nothing the sandbox sees, nor the log, holds a
// real token, though the API quotes the Authorization it got.
func TestLoginThroughGateway(t *testing.T) {
	s := newLoginSetup(t)
	c := s.client(t)
	access, refresh := s.copyTokens(t)
	apiURL := "https://api.example.com:" + s.apiPort.String() + "/v1/messages"
	var seen []string
	call := func(method, u, auth, body string) (int, string) {
		status, got := loginDo(t, c, method, u, auth, body)
		seen = append(seen, got)
		return status, got
	}
	if status, got := call("POST", apiURL, "Bearer "+access, `{}`); status != 200 || !strings.Contains(got, `"echo":"Bearer `+access) {
		t.Fatalf("API before the refresh: got %d %s, want 200 echoing the placeholder", status, got)
	}
	status, got := call("POST", "https://token.example.com:"+s.tokenPort.String()+"/v1/oauth/token", "",
		`{"grant_type":"refresh_token","refresh_token":"`+refresh+`","client_id":"9d1c250a-e61b-44d9-88ed-5944d1962f5e"}`)
	if status != 200 || !strings.Contains(got, `"access_token":"`+access+`"`) || !strings.Contains(got, `"refresh_token":"`+refresh+`"`) {
		t.Fatalf("refresh: got %d %s, want 200 with the placeholders", status, got)
	}
	if status, got := call("POST", apiURL, "Bearer "+access, `{}`); status != 200 {
		t.Fatalf("API after the refresh: got %d %s, want 200 (the new access token put in)", status, got)
	}
	if sent := s.svc.all(); !strings.Contains(sent, "Bearer real-access-1") || !strings.Contains(sent, `"refresh_token":"real-refresh-0"`) || strings.Contains(sent, login.PlaceholderPrefix) {
		t.Errorf("the service got:\n%s\nwant the real tokens, no refresh placeholder", sent)
	}
	close := s.g.waitRecord(t, "the refresh's close record", func(r map[string]any) bool {
		return r["event"] == decisionlog.EventClose && r["host"] == "token.example.com"
	})
	if close["secret"] != "CLAUDE_ACCESS_TOKEN,CLAUDE_REFRESH_TOKEN" || close["status"] != 200.0 {
		t.Errorf("got the refresh's close record %v, want status 200 naming both tokens", close)
	}
	for _, r := range s.g.records(t) {
		b, _ := json.Marshal(r)
		seen = append(seen, string(b))
	}
	for _, got := range seen {
		if strings.Contains(got, "real-") {
			t.Errorf("the sandbox or the log saw a real token: %s", got)
		}
	}
}

// TestLoginAttacker: the sandboxed command tries to get the real tokens
// out: the access placeholder to another host (a tunnel the gateway does
// not open: the placeholder goes as it is), in a body or another
// header to the API, over plain HTTP, to the token endpoint; the refresh
// placeholder over plain HTTP. None of it sends a real token anywhere or
// shows one to the sandbox.
func TestLoginAttacker(t *testing.T) {
	s := newLoginSetup(t)
	c := s.client(t)
	access, refresh := s.copyTokens(t)
	api := "api.example.com:" + s.apiPort.String()
	tests := []struct {
		name, method, url, auth, body string
		blocked                       bool
	}{
		{"access to another host", "POST", "https://other.example.com:" + s.apiPort.String() + "/v1/messages", "Bearer " + access, "", false},
		{"access in the body", "POST", "https://" + api + "/v1/messages", "", `{"k":"` + access + `"}`, false},
		{"access in the path", "GET", "https://" + api + "/v1/" + access, "", "", true},
		{"access over plain HTTP", "POST", "http://plain.example.com:" + s.plainPort.String() + "/v1/oauth/token", "Bearer " + access, "", true},
		{"access to the token endpoint", "POST", "https://token.example.com:" + s.tokenPort.String() + "/v1/oauth/token", "Bearer " + access, `{}`, true},
		{"refresh over plain HTTP", "POST", "http://token.example.com:" + s.plainPort.String() + "/v1/oauth/token", "", `{"grant_type":"refresh_token","refresh_token":"` + refresh + `"}`, false},
		{"refresh with another grant", "POST", "https://token.example.com:" + s.tokenPort.String() + "/v1/oauth/token", "", `{"grant_type":"client_credentials","refresh_token":"` + refresh + `"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark := ringMark(s.g.ring)
			status, got := loginDo(t, c, tt.method, tt.url, tt.auth, tt.body)
			if strings.Contains(got, "real-") {
				t.Errorf("the sandbox saw a real token: %s", got)
			}
			if tt.blocked {
				if status != http.StatusForbidden {
					t.Errorf("got %d %s, want 403", status, got)
				}
				rec := waitSecretBlock(t, s.g.ring, mark)
				if rec["secret"] != "CLAUDE_ACCESS_TOKEN" {
					t.Errorf("got record %v, want a block naming CLAUDE_ACCESS_TOKEN", rec)
				}
			}
		})
	}
	if sent := s.svc.all(); strings.Contains(sent, "real-") {
		t.Errorf("a real token was sent:\n%s", sent)
	}
	if s.svc.n != 0 {
		t.Errorf("got %d refreshes, want none", s.svc.n)
	}
}
