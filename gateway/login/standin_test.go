package login

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// tokenStandIn behaves as the agents' token endpoints do (RFC 6749 §5):
// a POST of {"grant_type":"refresh_token","refresh_token":...} (JSON,
// or a form) with the current refresh token answers new tokens, and the
// refresh token rotates: a used or unknown one is 400
// {"error":"invalid_grant",...}, another grant 400
// {"error":"unsupported_grant_type",...}. quote makes its errors quote
// the refresh token they were sent, in their body and a header, as a
// careless endpoint might.
type tokenStandIn struct {
	agent string
	quote bool

	mu      sync.Mutex
	refresh string   // the one refresh token it takes now
	access  string   // the access token it gave last
	n       int      // refreshes done
	bodies  []string // every request's body, as the endpoint got it
	during  func()   // runs while a refresh is answered
	cookie  bool     // a refresh's answer sets a cookie of the new access token
	pad     int      // bytes of padding in a refresh's answer
}

func (s *tokenStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, r.Method+" "+r.URL.String()+" "+string(b))
	fail := func(code, desc string) {
		if s.quote {
			w.Header().Set("X-Echo", string(b))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	var q map[string]string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		f, _ := url.ParseQuery(string(b))
		q = map[string]string{"grant_type": f.Get("grant_type"), "refresh_token": f.Get("refresh_token")}
	} else if err := json.Unmarshal(b, &q); err != nil {
		fail("invalid_request", "the body is not JSON")
		return
	}
	switch {
	case r.Method != http.MethodPost:
		fail("invalid_request", "POST only")
	case q["grant_type"] != "refresh_token":
		fail("unsupported_grant_type", "grant type "+q["grant_type"]+" is not supported")
	case q["refresh_token"] != s.refresh && s.quote:
		fail("invalid_grant", "refresh token "+q["refresh_token"]+" not found or invalid")
	case q["refresh_token"] != s.refresh:
		fail("invalid_grant", "Refresh token not found or invalid")
	default:
		s.n++
		if s.during != nil {
			s.during()
		}
		s.refresh, s.access = fmt.Sprintf("real-refresh-%d", s.n), fmt.Sprintf("real-access-%d", s.n)
		w.Header().Set("Content-Type", "application/json")
		if s.cookie {
			w.Header().Set("Set-Cookie", "session="+s.access+"; Secure; HttpOnly")
		}
		ans := map[string]any{"access_token": s.access, "refresh_token": s.refresh}
		if s.pad > 0 {
			ans["pad"] = strings.Repeat("x", s.pad)
		}
		if s.agent == "claude" {
			ans["token_type"], ans["expires_in"], ans["scope"] = "Bearer", 28800, "user:inference user:profile"
			ans["account"] = map[string]string{"uuid": "a1", "email_address": "u@example.com"}
		} else {
			ans["id_token"] = jwt(fmt.Sprintf(`{"email":"u@example.com","n":%d}`, s.n), fmt.Sprintf("real-id-signature-%d", s.n))
		}
		json.NewEncoder(w).Encode(ans)
	}
}

// got is every body the stand-in was sent, joined.
func (s *tokenStandIn) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.bodies, "\n")
}

// jwt is a JWT of claims with signature sig (not a real one).
func jwt(claims, sig string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc([]byte(claims)) + "." + sig
}

// startStandIn starts s as an HTTPS server on loopback and returns the
// transport that reaches it whatever the request's host: the gateway's
// upstream transport, verified against its certificate.
func startStandIn(t *testing.T, s *tokenStandIn) http.RoundTripper {
	t.Helper()
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// claudeFile is a Claude Code credentials file with tokens access and
// refresh, and an MCP login beside them.
func claudeFile(access, refresh string) []byte {
	return []byte(fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"refreshToken":%q,"expiresAt":1748276587173,"scopes":["user:inference","user:profile"],"subscriptionType":"max"},"mcpOAuth":{"srv":{"accessToken":"real-mcp-token"}}}`, access, refresh))
}

// codexFile is a Codex auth.json with tokens access and refresh.
func codexFile(access, refresh string) []byte {
	return []byte(fmt.Sprintf(`{"OPENAI_API_KEY":null,"tokens":{"id_token":%q,"access_token":%q,"refresh_token":%q,"account_id":"acct-1"},"last_refresh":"2025-06-01T10:00:00Z"}`,
		jwt(`{"email":"u@example.com","https://api.openai.com/auth":{"chatgpt_plan_type":"pro"}}`, "real-id-signature-0"), access, refresh))
}

// fileOf is agent's credential file with access and refresh.
func fileOf(agent, access, refresh string) []byte {
	if agent == "claude" {
		return claudeFile(access, refresh)
	}
	return codexFile(access, refresh)
}

// refreshBody is the body agent's CLI posts to refresh with refresh.
func refreshBody(agent, refresh string) string {
	if agent == "claude" {
		return fmt.Sprintf(`{"grant_type":"refresh_token","refresh_token":%q,"client_id":"9d1c250a-e61b-44d9-88ed-5944d1962f5e"}`, refresh)
	}
	return fmt.Sprintf(`{"client_id":"app_EMoamEEZ73f0CkXaXp7hrann","grant_type":"refresh_token","refresh_token":%q,"scope":"openid profile email"}`, refresh)
}

// jsonB64 decodes a JWT's parts.
var jsonB64 = base64.RawURLEncoding
