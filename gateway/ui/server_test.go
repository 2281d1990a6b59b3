package ui

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The tests run the view over a real gateway started in the test (its
// API on a unix socket) and a log file of an ended sandbox, through
// fakeSandboxes.

const (
	liveID  = "1a2b3c4d5e6f"
	endedID = "abcdefabcdef"
)

// fakeSandboxes lists one running sandbox, whose API is a real gateway's,
// and one ended one, whose log is a file.
type fakeSandboxes struct {
	running   Sandbox
	apiAddr   string
	token     string
	endedLog  string
	endedName string
}

func (f *fakeSandboxes) List(context.Context) ([]Sandbox, error) {
	return []Sandbox{f.running, {ID: endedID, Name: f.endedName, Status: StatusEnded, Time: time.Now(), HasLog: true}}, nil
}

func (f *fakeSandboxes) Client(_ context.Context, id string) (*api.Client, error) {
	if id != liveID {
		return nil, fmt.Errorf("sandbox %s is not running", id)
	}
	return api.NewClient(f.apiAddr, f.token)
}

func (f *fakeSandboxes) OpenLog(_ context.Context, id string) (io.ReadCloser, error) {
	if id != endedID {
		return nil, fmt.Errorf("no log of %s", id)
	}
	return os.Open(f.endedLog)
}

// uiTest is a view over a running gateway.
type uiTest struct {
	gw       *gateway.Gateway
	sb       *fakeSandboxes
	srv      *Server
	clock    *testClock // the view's
	base     string     // http://127.0.0.1:PORT
	upstream string     // host:port of a loopback upstream, as api.test
}

// startUI starts a gateway with spec (loopback allowed) whose names
// *.test resolve to 127.0.0.1, an upstream on loopback, and a view of it;
// set, when given, changes the gateway's configuration before it starts.
func startUI(t *testing.T, spec netpolicy.Spec, set ...func(*gateway.Config)) *uiTest {
	t.Helper()
	return startUIWith(t, spec, nil, set...)
}

// startUIWith is startUI whose view's configuration view, when not nil,
// changes before the view starts.
func startUIWith(t *testing.T, spec netpolicy.Spec, view func(*Config), set ...func(*gateway.Config)) *uiTest {
	t.Helper()
	dir := t.TempDir()
	spec.AllowPrivate = append(spec.AllowPrivate, netip.MustParsePrefix("127.0.0.0/8"))
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res := &gateway.Resolver{System: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, fmt.Errorf("no DNS in tests")
	}}}
	for _, name := range []string{"api.test", "other.test"} {
		if err := res.AddStatic(name, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", API: []string{"unix:" + filepath.Join(dir, "api.sock")}, TokenFile: filepath.Join(dir, "token"),
		Policy: p, Resolver: res, Sandbox: liveID,
	}
	for _, f := range set {
		f(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw, err := gateway.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		gw.Close()
	})
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}

	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "upstream\n") })}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(upLn) // ends when the cleanup closes it
	t.Cleanup(func() { up.Close() })

	ended := filepath.Join(dir, "ended.jsonl")
	writeEndedLog(t, ended)
	sb := &fakeSandboxes{
		running: Sandbox{ID: liveID, Name: "agent", Status: "running", Command: []string{"agent", "--go"}, Time: time.Now()},
		apiAddr: gw.APIAddrs[0], token: strings.TrimSpace(string(token)), endedLog: ended, endedName: "old",
	}
	clock := &testClock{}
	viewCfg := Config{Sandboxes: sb, now: clock.now}
	if view != nil {
		view(&viewCfg)
	}
	srv, err := Start(context.Background(), viewCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &uiTest{gw: gw, sb: sb, srv: srv, clock: clock, base: fmt.Sprintf("http://127.0.0.1:%d", srv.Port()),
		upstream: fmt.Sprintf("api.test:%d", upLn.Addr().(*net.TCPAddr).Port)}
}

// testClock is the wall clock moved on by what a test says.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// reset sets the clock back to the wall clock.
func (c *testClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = 0
}

// advance moves the clock on by d.
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// hostile are strings with HTML in them, as a log may hold.
const (
	hostileHost   = `<script>alert("host")</script>.test`
	hostileReason = `<img src=x onerror=alert("reason")> & more`
)

// writeEndedLog writes an ended sandbox's log with a decision whose host
// and reason hold HTML.
func writeEndedLog(t *testing.T, path string) {
	t.Helper()
	recs := []*decisionlog.Record{
		{V: decisionlog.SchemaVersion, Seq: 1, Event: decisionlog.EventPolicy, Time: time.Now(), Sandbox: endedID, PolicyVersion: 1, Change: "policy loaded"},
		{V: decisionlog.SchemaVersion, Seq: 2, ID: "c1", Event: decisionlog.EventDecision, Time: time.Now(), Sandbox: endedID, Client: "10.0.0.2:4000",
			Kind: decisionlog.KindHTTP, Method: "GET", Host: hostileHost, Port: 80, Path: "/", Action: "block", Enforced: true, Rule: "default", Reason: hostileReason, PolicyVersion: 1, Status: 403},
	}
	var b []byte
	for _, r := range recs {
		b = r.AppendJSON(b)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client with a cookie jar that never follows
// redirects, so the tests see them.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login opens the printed URL with c and checks the redirect.
func (u *uiTest) login(t *testing.T, c *http.Client) {
	t.Helper()
	resp, err := c.Get(u.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("GET the printed URL: got %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// do sends a request and returns the status and body.
func do(t *testing.T, c *http.Client, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func (u *uiTest) get(t *testing.T, c *http.Client, path string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, req)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOf returns the CSRF token of the sandbox page's forms.
func (u *uiTest) csrfOf(t *testing.T, c *http.Client) string {
	t.Helper()
	status, body, _ := u.get(t, c, "/s/"+liveID)
	m := csrfInput.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("GET /s/%s: got %d and no CSRF token in\n%s", liveID, status, body)
	}
	return m[1]
}

// policyVersion asks the gateway for its policy's version.
func (u *uiTest) policy(t *testing.T) *api.Policy {
	t.Helper()
	c, err := api.NewClient(u.sb.apiAddr, u.sb.token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Policy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUIRefusesForeignHost: a request whose Host header is not
// 127.0.0.1:PORT is refused, session or not (a page of another site whose
// name was rebound to 127.0.0.1 sends its own name; localhost may reach
// another user's program on [::1]).
func TestUIRefusesForeignHost(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	port := fmt.Sprint(u.srv.Port())
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusMisdirectedRequest},
		{"LocalHost:" + port, http.StatusMisdirectedRequest},
		{"[::ffff:127.0.0.1]:" + port, http.StatusMisdirectedRequest},
		{"evil.test:" + port, http.StatusMisdirectedRequest},
		{"localhost.evil.test:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.2:" + port, http.StatusMisdirectedRequest},
		{"[::1]:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1", http.StatusMisdirectedRequest},
		{"127.0.0.1:1", http.StatusMisdirectedRequest},
		{"evil.test", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.host, func(t *testing.T) {
			for _, path := range []string{"/", "/?token=" + strings.TrimPrefix(u.srv.URL(), u.base+"/?token=")} {
				req, _ := http.NewRequest("GET", u.base+path, nil)
				req.Host = tc.host
				// The session's cookie, as the browser would send it to
				// the rebound name (cookies ignore the port).
				for _, ck := range c.Jar.Cookies(&url.URL{Scheme: "http", Host: "127.0.0.1:" + port}) {
					req.AddCookie(ck)
				}
				want := tc.want
				if want == http.StatusOK && strings.Contains(path, "token") {
					want = http.StatusSeeOther
				}
				status, body, hdr := do(t, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, req)
				if status != want {
					t.Errorf("GET %s with Host %q: got %d %q, want %d", path, tc.host, status, body, want)
				}
				if want == http.StatusMisdirectedRequest && hdr.Get("Set-Cookie") != "" {
					t.Errorf("GET %s with Host %q: got a cookie %q, want none", path, tc.host, hdr.Get("Set-Cookie"))
				}
			}
		})
	}
}

// TestUITokenToCookie: the printed URL's token gets a session cookie
// (HttpOnly, SameSite=Strict) and a redirect to the same page without the
// token; without it, or with a wrong token or cookie, nothing is served.
func TestUITokenToCookie(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	token := strings.TrimPrefix(u.srv.URL(), u.base+"/?token=")
	if len(token) < 32 {
		t.Fatalf("token %q: want at least 32 hex digits", token)
	}

	c := browser(t)
	for _, path := range []string{"/", "/s/" + liveID, "/static/ui.css", "/?token=wrong", "/?token="} {
		if status, body, hdr := u.get(t, c, path); status != http.StatusUnauthorized || hdr.Get("Set-Cookie") != "" {
			t.Errorf("GET %s without a session: got %d %q cookie %q, want 401 and no cookie", path, status, body, hdr.Get("Set-Cookie"))
		}
	}

	status, _, hdr := u.get(t, c, "/s/"+liveID+"?token="+token+"&x=1")
	if status != http.StatusSeeOther || hdr.Get("Location") != "/s/"+liveID+"?x=1" {
		t.Fatalf("GET with the token: got %d to %q, want 303 to /s/%s?x=1", status, hdr.Get("Location"), liveID)
	}
	resp := &http.Response{Header: hdr}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("GET with the token: got cookies %q, want one", hdr.Values("Set-Cookie"))
	}
	ck := cookies[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || strings.Contains(ck.Value, token) {
		t.Errorf("session cookie: got %q, want HttpOnly, SameSite=Strict, Path=/, without the token", hdr.Get("Set-Cookie"))
	}
	if status, body, _ := u.get(t, c, "/"); status != http.StatusOK || !strings.Contains(body, liveID) {
		t.Errorf("GET / with the cookie: got %d, want 200 listing %s:\n%s", status, liveID, body)
	}

	// A cookie this server did not make is no session.
	forged := browser(t)
	forged.Jar.SetCookies(&url.URL{Scheme: "http", Host: "127.0.0.1"}, []*http.Cookie{{Name: ck.Name, Value: "0000." + strings.Repeat("0", 64), Path: "/"}})
	if status, _, _ := u.get(t, forged, "/"); status != http.StatusUnauthorized {
		t.Errorf("GET / with a forged cookie: got %d, want 401", status)
	}
}

// TestUIRefusesCrossSitePOST: a POST that changes the policy is refused
// unless it comes from the view's own page (Sec-Fetch-Site or Origin) with
// the session's CSRF token; the refused ones change nothing.
func TestUIRefusesCrossSitePOST(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	csrf := u.csrfOf(t, c)
	otherCSRF := u.srv.csrfToken(randomHex(16)) // another session's: the token makes one only
	if otherCSRF == csrf {
		t.Fatalf("two sessions have the same CSRF token %q", csrf)
	}
	own := u.base
	for _, tc := range []struct {
		name          string
		site, origin  string
		csrf          string
		want          int
		wantRuleAdded bool
	}{
		{"cross-site", "cross-site", "http://evil.test", csrf, http.StatusForbidden, false},
		{"same-site other port", "same-site", "http://127.0.0.1:1", csrf, http.StatusForbidden, false},
		{"origin only, foreign", "", "http://evil.test", csrf, http.StatusForbidden, false},
		{"origin null", "", "null", csrf, http.StatusForbidden, false},
		{"no browser headers", "", "", csrf, http.StatusForbidden, false},
		{"origin localhost", "", "http://localhost:" + fmt.Sprint(u.srv.Port()), csrf, http.StatusForbidden, false},
		{"same-origin, origin of another port", "same-origin", "http://127.0.0.1:1", csrf, http.StatusForbidden, false},
		{"same-origin, no origin", "same-origin", "", csrf, http.StatusSeeOther, true},
		{"same-origin, origin null (no-referrer)", "same-origin", "null", csrf, http.StatusSeeOther, true},
		{"own origin, no Sec-Fetch-Site", "", own, csrf, http.StatusSeeOther, true},
		{"no csrf", "same-origin", own, "", http.StatusForbidden, false},
		{"wrong csrf", "same-origin", own, strings.Repeat("0", 64), http.StatusForbidden, false},
		{"another session's csrf", "same-origin", own, otherCSRF, http.StatusForbidden, false},
		{"own page", "same-origin", own, csrf, http.StatusSeeOther, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.policy(t).Version
			form := url.Values{"action": {"allow"}, "pattern": {u.upstream}, "csrf": {tc.csrf}}
			req, _ := http.NewRequest("POST", u.base+"/s/"+liveID+"/rules", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.site != "" {
				req.Header.Set("Sec-Fetch-Site", tc.site)
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			status, body, _ := do(t, c, req)
			if status != tc.want {
				t.Errorf("POST: got %d %q, want %d", status, body, tc.want)
			}
			if after := u.policy(t).Version; (after != before) != tc.wantRuleAdded {
				t.Errorf("policy version: got %d after %d, want a change %v", after, before, tc.wantRuleAdded)
			}
		})
	}
	// A GET never changes anything: the forms' actions are POST only.
	if status, _, _ := u.get(t, c, "/s/"+liveID+"/rules?action=allow&pattern=other.test&csrf="+csrf); status != http.StatusMethodNotAllowed {
		t.Errorf("GET of the add form's action: got %d, want 405", status)
	}
}

// TestUIRules: the add and remove forms change the running policy
// through the API, as sbx policy allow and remove do.
func TestUIRules(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	post := func(path string, form url.Values) (int, string) {
		form.Set("csrf", u.csrfOf(t, c))
		req, _ := http.NewRequest("POST", u.base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		status, body, _ := do(t, c, req)
		return status, body
	}
	if status, body := post("/s/"+liveID+"/rules", url.Values{"action": {"allow"}, "pattern": {"api.test:8080"}, "id": {"gh"}}); status != http.StatusSeeOther {
		t.Fatalf("add: got %d %q, want 303", status, body)
	}
	if status, body := post("/s/"+liveID+"/rules", url.Values{"action": {"block"}, "pattern": {"other.test"}, "position": {"0"}}); status != http.StatusSeeOther {
		t.Fatalf("add at 0: got %d %q, want 303", status, body)
	}
	rules := u.policy(t).Policy.Rules
	if len(rules) != 2 || rules[0].Host != "other.test" || rules[0].Action != netpolicy.Block || rules[1].ID != "gh" || rules[1].Host != "api.test" || len(rules[1].Ports) != 1 || rules[1].Ports[0] != 8080 {
		t.Fatalf("rules: got %+v, want block other.test first, then gh allowing api.test:8080", rules)
	}
	for _, tc := range []struct {
		form url.Values
		want int
	}{
		{url.Values{"action": {"allow"}, "pattern": {"https://api.test/"}}, http.StatusBadRequest},
		{url.Values{"action": {"intercept"}, "pattern": {"api.test"}}, http.StatusBadRequest},
		{url.Values{"action": {"allow"}, "pattern": {"api.test"}, "position": {"-1"}}, http.StatusBadRequest},
		{url.Values{"action": {"allow"}, "pattern": {"api.test"}, "id": {"gh"}}, http.StatusBadRequest}, // the API's: the id is taken
	} {
		if status, body := post("/s/"+liveID+"/rules", tc.form); status != tc.want {
			t.Errorf("add %v: got %d %q, want %d", tc.form, status, body, tc.want)
		}
	}
	if status, body := post("/s/"+liveID+"/rules/gh/remove", url.Values{}); status != http.StatusSeeOther {
		t.Fatalf("remove gh: got %d %q, want 303", status, body)
	}
	if status, body := post("/s/"+liveID+"/rules/gh/remove", url.Values{}); status != http.StatusNotFound {
		t.Errorf("remove gh again: got %d %q, want 404", status, body)
	}
	if rules := u.policy(t).Policy.Rules; len(rules) != 1 || rules[0].Host != "other.test" {
		t.Errorf("rules after remove: got %+v, want only other.test's", rules)
	}
	if status, _ := post("/s/nosuchsandbox/rules", url.Values{"action": {"allow"}, "pattern": {"api.test"}}); status != http.StatusNotFound {
		t.Errorf("add to a sandbox not listed: got %d, want 404", status)
	}
}

// TestUIEscapes: host names, reasons and names with HTML in them, from a
// running sandbox's decisions and an ended one's log, render as text.
func TestUIEscapes(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	u.sb.running.Name = `<b>agent</b>`
	u.sb.running.Command = []string{"sh", "-c", `echo "<iframe src=//evil.test>"`}
	u.sb.endedName = `<i>old</i>`
	u.gw.Log.Emit(&decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindHTTP, Method: "GET", Host: hostileHost, Port: 80, Path: `/<svg onload=alert(1)>`,
		Action: "block", Enforced: true, Rule: `<u>rule</u>`, Reason: hostileReason})
	c := browser(t)
	u.login(t, c)
	for _, path := range []string{"/", "/s/" + liveID, "/s/" + endedID, "/s/" + endedID + "/audit"} {
		status, body, _ := u.get(t, c, path)
		if status != http.StatusOK {
			t.Fatalf("GET %s: got %d, want 200:\n%s", path, status, body)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg", "<b>agent", "<i>old", "<iframe", "<u>rule"} {
			if strings.Contains(body, raw) {
				t.Errorf("GET %s: the page holds %q unescaped:\n%s", path, raw, body)
			}
		}
	}
	for path, want := range map[string][]string{
		"/":                        {"&lt;b&gt;agent&lt;/b&gt;", "&lt;iframe src=//evil.test&gt;"},
		"/s/" + liveID:             {" · running · ", "&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;.test:80", "&lt;img src=x onerror=alert(&#34;reason&#34;)&gt; &amp; more", "/&lt;svg onload=alert(1)&gt;", "&lt;u&gt;rule&lt;/u&gt;"},
		"/s/" + endedID + "/audit": {"&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;.test"},
	} {
		_, body, _ := u.get(t, c, path)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: the page lacks %q, the text escaped:\n%s", path, w, body)
			}
		}
	}
}

// TestUICSP: every answer, refusals and assets included, has the strict
// Content-Security-Policy, and the pages load nothing from elsewhere.
func TestUICSP(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	const want = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	c := browser(t)
	if _, _, hdr := u.get(t, c, "/"); hdr.Get("Content-Security-Policy") != want {
		t.Errorf("401: got CSP %q, want %q", hdr.Get("Content-Security-Policy"), want)
	}
	u.login(t, c)
	src := regexp.MustCompile(`(?:src|href|action)="([^"]*)"`)
	for _, path := range []string{"/", "/s/" + liveID, "/s/" + endedID + "/audit", "/static/ui.js", "/static/ui.css", "/s/nosuch"} {
		status, body, hdr := u.get(t, c, path)
		if got := hdr.Get("Content-Security-Policy"); got != want {
			t.Errorf("GET %s (%d): got CSP %q, want %q", path, status, got, want)
		}
		if got := hdr.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: got X-Content-Type-Options %q, want nosniff", path, got)
		}
		if strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".css") {
			continue
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, "<style") || strings.Contains(body, " on") && regexp.MustCompile(` on[a-z]+=`).MatchString(body) {
			t.Errorf("GET %s: the page has inline script or style:\n%s", path, body)
		}
		for _, m := range src.FindAllStringSubmatch(body, -1) {
			if !strings.HasPrefix(m[1], "/") || strings.HasPrefix(m[1], "//") {
				t.Errorf("GET %s: %s is not a path of the view", path, m[0])
			}
		}
	}
	req, _ := http.NewRequest("GET", u.base+"/", nil)
	req.Host = "evil.test"
	if _, _, hdr := do(t, c, req); hdr.Get("Content-Security-Policy") != want {
		t.Errorf("421: got CSP %q, want %q", hdr.Get("Content-Security-Policy"), want)
	}
}

// TestUIEvents: a sandbox's event stream sends each new decision as a
// server-sent event, its text JSON-escaped.
func TestUIEvents(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", u.base+"/s/"+liveID+"/events?since=0", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("events: got %d %q, want 200 text/event-stream", resp.StatusCode, ct)
	}
	u.gw.Log.Emit(&decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindHTTP, Method: "GET", Host: hostileHost, Port: 80, Action: "block", Enforced: true, Rule: "default", Reason: hostileReason})
	sc := bufio.NewScanner(resp.Body)
	var event []string
	for sc.Scan() {
		if sc.Text() == "" {
			break
		}
		event = append(event, sc.Text())
	}
	if len(event) != 3 || !strings.HasPrefix(event[0], "id: ") || event[1] != "event: decision" {
		t.Fatalf("event: got %q, want id, event: decision, data", event)
	}
	if !strings.Contains(event[2], `\u003cscript\u003e`) || strings.Contains(event[2], "<") {
		t.Errorf("event data: got %s, want the host with < and > escaped", event[2])
	}
}

// TestUIClusterSandbox: a sandbox listed with a place (a cluster's
// namespace) and a health shows them on the first page and its own; one
// whose gateway keeps no file for always answers (a cluster sandbox's)
// offers no always answer and says why, where another offers them.
func TestUIClusterSandbox(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	_, body, _ := u.get(t, c, "/s/"+liveID)
	if !strings.Contains(body, `value="always"`) || strings.Contains(body, `id="no-always"`) {
		t.Fatalf("a sandbox of this host: want always answers offered and no note:\n%s", body)
	}
	if _, body, _ = u.get(t, c, "/"); !strings.Contains(body, `<td class="where">this host</td>`) {
		t.Errorf("GET /: a sandbox of this host not shown as such:\n%s", body)
	}
	u.sb.running.Where, u.sb.running.Health, u.sb.running.NoAlways = "cluster, namespace ns1", "gateway not ready", true
	_, body, _ = u.get(t, c, "/")
	for _, want := range []string{`<td class="where">cluster, namespace ns1</td>`, `running <span class="health">(gateway not ready)</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /: the page lacks %q:\n%s", want, body)
		}
	}
	_, body, _ = u.get(t, c, "/s/"+liveID)
	if strings.Contains(body, `value="always"`) || !strings.Contains(body, `id="no-always"`) || !strings.Contains(body, `<span class="where">cluster, namespace ns1</span>`) {
		t.Errorf("a cluster sandbox: want no always answers, the note why and where it runs:\n%s", body)
	}
}
