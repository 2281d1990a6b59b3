package login

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
)

// realTokens are the substrings no copy or answer the sandbox gets may
// hold: every real token of the files and the stand-in.
var realTokens = []string{"real-access", "real-refresh", "real-id-signature", "real-mcp-token", "real-key"}

// wantNoReal fails when s holds a real token.
func wantNoReal(t *testing.T, what, s string) {
	t.Helper()
	for _, r := range realTokens {
		if strings.Contains(s, r) {
			t.Errorf("%s holds a real token (%s): %s", what, r, s)
		}
	}
}

// TestCopyHoldsPlaceholders: the sandbox's copy has the file's shape
// (the agent reads it as a login: its parse finds an access and a
// refresh token), its expiry and claims, and no real token: the tokens
// are placeholders, the id token's signature is one, Codex's API key is
// a secret's placeholder, and Claude Code's MCP logins are left out.
func TestCopyHoldsPlaceholders(t *testing.T) {
	for _, agent := range Agents() {
		t.Run(agent, func(t *testing.T) {
			b := fileOf(agent, "real-access-0", "real-refresh-0")
			if agent == "codex" {
				b = []byte(strings.Replace(string(b), `"OPENAI_API_KEY":null`, `"OPENAI_API_KEY":"real-key-0"`, 1))
			}
			l, err := Parse(agent, b)
			if err != nil {
				t.Fatal(err)
			}
			c := l.Copy()
			wantNoReal(t, "the copy", string(c))
			got, err := l.a.parse(c)
			if err != nil {
				t.Fatalf("the agent cannot read the copy: %v", err)
			}
			if got.access != l.access.Placeholder() || !strings.HasPrefix(got.refresh, PlaceholderPrefix+agent+"-refresh-") {
				t.Errorf("got tokens %q, %q, want the access token's placeholder and a refresh placeholder", got.access, got.refresh)
			}
			var f map[string]any
			json.Unmarshal(c, &f)
			switch agent {
			case "claude":
				o := f["claudeAiOauth"].(map[string]any)
				if diff := cmp.Diff([]any{"user:inference", "user:profile"}, o["scopes"]); diff != "" || o["expiresAt"] != 1748276587173.0 || o["subscriptionType"] != "max" {
					t.Errorf("got %v, want the file's expiresAt, scopes and subscriptionType", o)
				}
				if _, ok := f["mcpOAuth"]; ok {
					t.Errorf("the copy holds mcpOAuth: %s", c)
				}
			case "codex":
				if got.apiKey != l.apiKey.Placeholder() {
					t.Errorf("got OPENAI_API_KEY %q, want the API key's placeholder", got.apiKey)
				}
				parts := strings.Split(got.id, ".")
				real := strings.Split(jwt(`{"email":"u@example.com","https://api.openai.com/auth":{"chatgpt_plan_type":"pro"}}`, "x"), ".")
				if len(parts) != 3 || parts[0] != real[0] || parts[1] != real[1] {
					t.Errorf("got id token %q, want the real one's header and claims", got.id)
				}
				if f["last_refresh"] != "2025-06-01T10:00:00Z" || f["tokens"].(map[string]any)["account_id"] != "acct-1" {
					t.Errorf("got %s, want last_refresh and account_id kept", c)
				}
			}
		})
	}
}

// TestParseRefusesNoLogin: a file without an OAuth login (an API key
// alone, not JSON) is refused, saying to log in on the host.
func TestParseRefusesNoLogin(t *testing.T) {
	for _, tt := range []struct{ agent, file string }{
		{"claude", `{}`},
		{"claude", `not json`},
		{"codex", `{"OPENAI_API_KEY":"sk-1","tokens":null}`},
		{"gemini", `{}`},
	} {
		if _, err := Parse(tt.agent, []byte(tt.file)); err == nil {
			t.Errorf("Parse(%s, %s): got no error, want one", tt.agent, tt.file)
		}
	}
}

// agentSide makes a request as the sandboxed agent would, through rt,
// and returns the answer's status and body.
func agentSide(t *testing.T, rt http.RoundTripper, method, rawURL, ct, body string) (int, string) {
	t.Helper()
	status, _, b := agentSees(t, rt, method, rawURL, ct, body)
	return status, b
}

// agentSees is agentSide with the answer's header fields too.
func agentSees(t *testing.T, rt http.RoundTripper, method, rawURL, ct, body string) (status int, header, b string) {
	t.Helper()
	r, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		r.Header.Set("Content-Type", ct)
	}
	resp, err := rt.RoundTrip(r)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	all, _ := io.ReadAll(resp.Body)
	var h strings.Builder
	resp.Header.Write(&h)
	return resp.StatusCode, h.String(), string(all)
}

// tokenURL is the agent's token endpoint.
func tokenURL(agent string) string {
	a := agents[agent]
	return "https://" + a.tokenHosts[0] + a.tokenPath
}

// TestRefreshWithPlaceholder: the agent's refresh with its placeholder is
// performed with the real refresh token (the stand-in rotates them, so
// a second refresh works only with the token the first gave), answered
// with placeholders only, and the access token the gateway puts in
// requests becomes the new one. The close record names the tokens
// replaced, never a token.
func TestRefreshWithPlaceholder(t *testing.T) {
	for _, agent := range Agents() {
		t.Run(agent, func(t *testing.T) {
			s := &tokenStandIn{agent: agent, refresh: "real-refresh-0"}
			next := startStandIn(t, s)
			l, err := Parse(agent, fileOf(agent, "real-access-0", "real-refresh-0"))
			if err != nil {
				t.Fatal(err)
			}
			set, err := secrets.NewSet(l.Secrets(), nil)
			if err != nil {
				t.Fatal(err)
			}
			l.Bind(set)
			clock := time.Unix(1_750_000_000, 0)
			l.now = func() time.Time { return clock }
			for i := 1; i <= 2; i++ {
				rec := &decisionlog.Record{}
				status, body := agentSide(t, l.Refresher(next, rec), "POST", tokenURL(agent), "application/json", refreshBody(agent, l.ph.refresh))
				if status != http.StatusOK {
					t.Fatalf("refresh %d: got %d %s, want 200", i, status, body)
				}
				wantNoReal(t, "the refresh's answer", body)
				var ans map[string]any
				json.Unmarshal([]byte(body), &ans)
				if ans["access_token"] != l.ph.access || ans["refresh_token"] != l.ph.refresh {
					t.Errorf("refresh %d: got %s, want the placeholders", i, body)
				}
				if agent == "claude" && ans["expires_in"] != 28800.0 {
					t.Errorf("refresh %d: got %s, want expires_in as the endpoint said", i, body)
				}
				if agent == "codex" {
					claims := strings.Split(ans["id_token"].(string), ".")[1]
					if b, _ := base64Decode(claims); !strings.Contains(string(b), `"n":`+string(rune('0'+i))) {
						t.Errorf("refresh %d: got id token claims %s, want the new token's", i, b)
					}
				}
				if want := agents[agent].secretBase + "_ACCESS_TOKEN," + agents[agent].secretBase + "_REFRESH_TOKEN"; rec.Secret != want || rec.Error != "" {
					t.Errorf("refresh %d: got record secret %q error %q, want %q and none", i, rec.Secret, rec.Error, want)
				}
				h := http.Header{"Authorization": {"Bearer " + l.ph.access}}
				set.Inject(h, agents[agent].apiHosts[0], 443, "POST", "/v1/messages")
				if want := "Bearer real-access-" + string(rune('0'+i)); h.Get("Authorization") != want {
					t.Errorf("refresh %d: the gateway sends %q, want %q", i, h.Get("Authorization"), want)
				}
				clock = clock.Add(time.Hour)
			}
			if got := s.got(); !strings.Contains(got, `"refresh_token":"real-refresh-1"`) || strings.Contains(got, PlaceholderPrefix) {
				t.Errorf("the endpoint got %s, want the real refresh tokens, no placeholder", got)
			}
		})
	}
}

// base64Decode decodes a JWT part.
func base64Decode(s string) ([]byte, error) {
	return jsonB64.DecodeString(s)
}

// TestRefreshCoalesced: a second refresh soon after the first (an
// agent's retry, its second process) gets the first's answer, and the
// endpoint is asked once: the refresh token the agent holds is spent.
func TestRefreshCoalesced(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0"}
	next := startStandIn(t, s)
	l, err := Parse("claude", claudeFile("real-access-0", "real-refresh-0"))
	if err != nil {
		t.Fatal(err)
	}
	var answers []string
	for range 2 {
		status, body := agentSide(t, l.Refresher(next, &decisionlog.Record{}), "POST", tokenURL("claude"), "application/json", refreshBody("claude", l.ph.refresh))
		if status != http.StatusOK {
			t.Fatalf("got %d %s, want 200", status, body)
		}
		answers = append(answers, body)
	}
	if answers[0] != answers[1] || s.n != 1 {
		t.Errorf("got answers %q and refreshes %d, want one refresh answered twice", answers, s.n)
	}
}

// TestRefresherAttacker: what the sandboxed command can send the token
// endpoint to get a real token out: the placeholder with another grant,
// in a form with the field twice, over plain HTTP, to another path, with
// GET, or a refresh token it made up. Each reaches the endpoint with the
// placeholder as it is (worth nothing there), or not at all, and its
// answer holds no real token; the endpoint quotes what it was sent.
func TestRefresherAttacker(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0", quote: true}
	next := startStandIn(t, s)
	l, err := Parse("claude", claudeFile("real-access-0", "real-refresh-0"))
	if err != nil {
		t.Fatal(err)
	}
	ph := l.ph.refresh
	tests := []struct {
		name, method, url, ct, body string
	}{
		{"another grant", "POST", tokenURL("claude"), "application/json", `{"grant_type":"urn:ietf:params:oauth:grant-type:token-exchange","subject_token":"` + ph + `","refresh_token":"` + ph + `"}`},
		{"authorization code", "POST", tokenURL("claude"), "application/json", `{"grant_type":"authorization_code","code":"` + ph + `"}`},
		{"form with the token twice", "POST", tokenURL("claude"), "application/x-www-form-urlencoded", "grant_type=refresh_token&refresh_token=" + ph + "&refresh_token=x"},
		{"grant twice", "POST", tokenURL("claude"), "application/x-www-form-urlencoded", "grant_type=refresh_token&grant_type=password&refresh_token=" + ph},
		{"plain http", "POST", "http://platform.claude.com/v1/oauth/token", "application/json", refreshBody("claude", ph)},
		{"another path", "POST", "https://platform.claude.com/v1/oauth/token/introspect", "application/json", refreshBody("claude", ph)},
		{"get", "GET", tokenURL("claude") + "?grant_type=refresh_token&refresh_token=" + ph, "", ""},
		{"made-up token", "POST", tokenURL("claude"), "application/json", refreshBody("claude", "sbx-login-claude-refresh-00")},
		{"the access placeholder", "POST", tokenURL("claude"), "application/json", refreshBody("claude", l.ph.access)},
		{"placeholder case changed", "POST", tokenURL("claude"), "application/json", refreshBody("claude", strings.ToUpper(ph))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, header, body := agentSees(t, l.Refresher(next, &decisionlog.Record{}), tt.method, tt.url, tt.ct, tt.body)
			wantNoReal(t, "the answer", header+body)
		})
	}
	if got := s.got(); strings.Contains(got, "real-") {
		t.Errorf("the endpoint was sent a real token:\n%s", got)
	}
	if s.n != 0 {
		t.Errorf("got %d refreshes, want none", s.n)
	}
}

// TestRefreshErrorScrubbed: an endpoint that refuses the real refresh
// token (revoked on the host) quoting it in its invalid_grant, body and
// a header, gets to the agent as it came, but with the placeholder where
// the token was.
func TestRefreshErrorScrubbed(t *testing.T) {
	s := &tokenStandIn{agent: "codex", refresh: "real-refresh-other", quote: true}
	next := startStandIn(t, s)
	l, err := Parse("codex", codexFile("real-access-0", "real-refresh-0"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &decisionlog.Record{}
	status, header, body := agentSees(t, l.Refresher(next, rec), "POST", tokenURL("codex"), "application/json", refreshBody("codex", l.ph.refresh))
	if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_grant"`) || !strings.Contains(body, l.ph.refresh) || !strings.Contains(header, l.ph.refresh) {
		t.Errorf("got %d %s%s, want the endpoint's 400 invalid_grant quoting the placeholder", status, header, body)
	}
	wantNoReal(t, "the answer", header+body)
}

// writeHome makes a home owned by the test's uid holding agent's file
// b, mode 0600, and returns it.
func writeHome(t *testing.T, agent string, b []byte) string {
	t.Helper()
	home := t.TempDir()
	p := filepath.Join(home, agents[agent].file)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestRefreshWritesBack: a login read from a home gets its refreshed
// tokens written back there, as the agent writes them (Claude Code's
// expiresAt from expires_in, its scopes; Codex's last_refresh), the
// file's other fields kept, its mode kept, through a rename.
func TestRefreshWritesBack(t *testing.T) {
	for _, agent := range Agents() {
		t.Run(agent, func(t *testing.T) {
			s := &tokenStandIn{agent: agent, refresh: "real-refresh-0"}
			next := startStandIn(t, s)
			home := writeHome(t, agent, fileOf(agent, "real-access-0", "real-refresh-0"))
			p := filepath.Join(home, agents[agent].file)
			before, _ := os.Stat(p)
			l, err := Read(agent, home, os.Getuid())
			if err != nil {
				t.Fatal(err)
			}
			now := time.UnixMilli(1_750_000_000_000)
			l.now = func() time.Time { return now }
			rec := &decisionlog.Record{}
			if status, body := agentSide(t, l.Refresher(next, rec), "POST", tokenURL(agent), "application/json", refreshBody(agent, l.ph.refresh)); status != 200 || rec.Error != "" {
				t.Fatalf("got %d %s, record error %q, want 200 and none", status, body, rec.Error)
			}
			after, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if after.Mode() != before.Mode() || os.SameFile(before, after) {
				t.Errorf("got mode %v (same file %v), want %v through a new file", after.Mode(), os.SameFile(before, after), before.Mode())
			}
			b, _ := os.ReadFile(p)
			var f map[string]any
			json.Unmarshal(b, &f)
			switch agent {
			case "claude":
				o := f["claudeAiOauth"].(map[string]any)
				want := map[string]any{"accessToken": "real-access-1", "refreshToken": "real-refresh-1", "expiresAt": float64(now.UnixMilli() + 28800_000),
					"scopes": []any{"user:inference", "user:profile"}, "subscriptionType": "max"}
				if diff := cmp.Diff(want, o); diff != "" || f["mcpOAuth"] == nil {
					t.Errorf("the host file (-want +got):\n%s\n%s", diff, b)
				}
			case "codex":
				tk := f["tokens"].(map[string]any)
				if tk["access_token"] != "real-access-1" || tk["refresh_token"] != "real-refresh-1" || !strings.HasSuffix(tk["id_token"].(string), ".real-id-signature-1") ||
					tk["account_id"] != "acct-1" || f["last_refresh"] != now.UTC().Format(time.RFC3339Nano) {
					t.Errorf("got the host file %s, want the new tokens, account_id kept, last_refresh now", b)
				}
			}
			ents, _ := os.ReadDir(filepath.Dir(p))
			if len(ents) != 1 {
				t.Errorf("got %d files beside the login, want none left", len(ents)-1)
			}
		})
	}
}

// TestRefreshKeepsFileChangedOnHost: when the host's agent refreshes
// while the gateway does (the file's refresh token changes under it),
// the gateway does not write over the file; the record says its tokens
// are kept in the gateway only.
func TestRefreshKeepsFileChangedOnHost(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0"}
	next := startStandIn(t, s)
	home := writeHome(t, "claude", claudeFile("real-access-0", "real-refresh-0"))
	p := filepath.Join(home, ".claude/.credentials.json")
	l, err := Read("claude", home, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	hostWrote := claudeFile("real-access-host", "real-refresh-host")
	s.during = func() { os.WriteFile(p, hostWrote, 0o600) }
	rec := &decisionlog.Record{}
	if status, body := agentSide(t, l.Refresher(next, rec), "POST", tokenURL("claude"), "application/json", refreshBody("claude", l.ph.refresh)); status != 200 {
		t.Fatalf("got %d %s, want 200", status, body)
	}
	if b, _ := os.ReadFile(p); string(b) != string(hostWrote) {
		t.Errorf("got the host file %s, want the host's own write kept", b)
	}
	if !strings.Contains(rec.Error, "changed on the host") {
		t.Errorf("got record error %q, want it to say the file changed on the host", rec.Error)
	}
	wantNoReal(t, "the record", rec.Error)
}

// TestReadRefusesLinks: a link at the credential file or at its
// directory is not followed (the link could lead to a file of root's),
// nor is a FIFO read; a file of another user's is refused.
func TestReadRefusesLinks(t *testing.T) {
	other := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(other, claudeFile("real-access-0", "real-refresh-0"), 0o600)
	tests := []struct {
		name  string
		setup func(home string)
		want  string
	}{
		{"file link", func(home string) {
			os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
			os.Symlink(other, filepath.Join(home, ".claude/.credentials.json"))
		}, "symbolic link"},
		{"directory link", func(home string) {
			os.MkdirAll(filepath.Join(home, "elsewhere"), 0o700)
			os.Link(other, filepath.Join(home, "elsewhere/.credentials.json"))
			os.Symlink(filepath.Join(home, "elsewhere"), filepath.Join(home, ".claude"))
		}, "symbolic link"},
		{"fifo", func(home string) {
			os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
			mkfifo(filepath.Join(home, ".claude/.credentials.json"))
		}, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			tt.setup(home)
			_, err := Read("claude", home, os.Getuid())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
	t.Run("another user's file", func(t *testing.T) {
		home := writeHome(t, "claude", claudeFile("real-access-0", "real-refresh-0"))
		_, err := Read("claude", home, os.Getuid()+1)
		if err == nil || !strings.Contains(err.Error(), "belongs to uid") {
			t.Errorf("got %v, want an error saying whose it is", err)
		}
	})
}

// TestRefresherPassesLargeBodies: a body to the token endpoint over the
// bound (no refresh) goes on whole, as it came.
func TestRefresherPassesLargeBodies(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0"}
	next := startStandIn(t, s)
	l, err := Parse("claude", claudeFile("real-access-0", "real-refresh-0"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"grant_type":"x","pad":"` + strings.Repeat("a", maxFile+10) + `"}`
	agentSide(t, l.Refresher(next, &decisionlog.Record{}), "POST", tokenURL("claude"), "application/json", body)
	if got := s.got(); !strings.HasSuffix(got, body) {
		t.Errorf("the endpoint got %d bytes, want the %d sent", len(got), len(body))
	}
}

// TestRefreshTwoGateways: two gateways keeping the same login (two
// sandboxes of one user) refresh at once: the second waits for the
// first's write-back and refreshes with the token it wrote, so the
// endpoint never sees a refresh token twice and neither agent is logged
// out.
func TestRefreshTwoGateways(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0"}
	next := startStandIn(t, s)
	home := writeHome(t, "claude", claudeFile("real-access-0", "real-refresh-0"))
	var ls [2]*Login
	for i := range ls {
		l, err := Read("claude", home, os.Getuid())
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	second := make(chan int, 1)
	var once sync.Once
	s.during = func() { // the first refresh is at the endpoint: the second starts
		once.Do(func() {
			go func() {
				status, _ := agentSide(t, ls[1].Refresher(next, &decisionlog.Record{}), "POST", tokenURL("claude"), "application/json", refreshBody("claude", ls[1].ph.refresh))
				second <- status
			}()
			time.Sleep(200 * time.Millisecond)
		})
	}
	if status, body := agentSide(t, ls[0].Refresher(next, &decisionlog.Record{}), "POST", tokenURL("claude"), "application/json", refreshBody("claude", ls[0].ph.refresh)); status != http.StatusOK {
		t.Fatalf("the first refresh: got %d %s, want 200", status, body)
	}
	if status := <-second; status != http.StatusOK {
		t.Errorf("the second refresh: got %d, want 200 (the endpoint got %s)", status, s.got())
	}
	if s.n != 2 || strings.Count(s.got(), `"refresh_token":"real-refresh-0"`) != 1 {
		t.Errorf("the endpoint got %s, want two refreshes, each with the token the last one gave", s.got())
	}
}

// TestRefreshSendsOnlyTheGrant: what the sandbox adds to its refresh (a
// narrower scope, a parameter of its own, another client id) does not
// reach the endpoint, whose answer would be written to the user's file.
func TestRefreshSendsOnlyTheGrant(t *testing.T) {
	s := &tokenStandIn{agent: "claude", refresh: "real-refresh-0"}
	next := startStandIn(t, s)
	l, err := Parse("claude", claudeFile("real-access-0", "real-refresh-0"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"grant_type":"refresh_token","refresh_token":"` + l.ph.refresh + `","client_id":"evil","scope":"user:profile","redirect_uri":"https://evil.test/"}`
	if status, b := agentSide(t, l.Refresher(next, &decisionlog.Record{}), "POST", tokenURL("claude"), "application/json", body); status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", status, b)
	}
	want := `POST /v1/oauth/token {"client_id":"9d1c250a-e61b-44d9-88ed-5944d1962f5e","grant_type":"refresh_token","refresh_token":"real-refresh-0"}`
	if got := s.got(); got != want {
		t.Errorf("the endpoint got %s, want %s", got, want)
	}
}

// TestRefreshAnswerScrubbed: a refresh's answer that carries the new
// tokens where the gateway does not put placeholders (a cookie), or that
// it cannot read whole, gives the sandbox none of them.
func TestRefreshAnswerScrubbed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      *tokenStandIn
		status int
	}{
		{"a cookie of the new token", &tokenStandIn{agent: "claude", refresh: "real-refresh-0", cookie: true}, http.StatusOK},
		{"an answer over 64 KiB", &tokenStandIn{agent: "claude", refresh: "real-refresh-0", pad: maxFile}, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := startStandIn(t, tc.s)
			l, err := Parse("claude", claudeFile("real-access-0", "real-refresh-0"))
			if err != nil {
				t.Fatal(err)
			}
			rec := &decisionlog.Record{}
			status, header, body := agentSees(t, l.Refresher(next, rec), "POST", tokenURL("claude"), "application/json", refreshBody("claude", l.ph.refresh))
			if status != tc.status {
				t.Errorf("got %d, want %d", status, tc.status)
			}
			wantNoReal(t, "the answer's header", header)
			wantNoReal(t, "the answer", body)
			if tc.status != http.StatusOK && !strings.Contains(rec.Error, "the login may be lost") {
				t.Errorf("got record error %q, want it to say the login may be lost", rec.Error)
			}
		})
	}
}
