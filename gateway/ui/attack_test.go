package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/netpolicy"
)

// stolen is a client without a cookie jar's rules or a browser's
// headers, as curl is, that sends the cookies c holds for the view.
func (u *uiTest) stolen(t *testing.T, c *http.Client) *http.Client {
	t.Helper()
	thief := browser(t)
	base, _ := url.Parse(u.base)
	thief.Jar.SetCookies(base, c.Jar.Cookies(base))
	if len(c.Jar.Cookies(base)) == 0 {
		t.Fatalf("no session cookie to steal")
	}
	return thief
}

// TestUITokenOnce: the printed URL's token is exchanged once for a
// session; whoever opens it next (the URL read from a terminal or a
// process list) gets 410 and a page that says so, and no session. The
// browser that used it is sent on to its page.
func TestUITokenOnce(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	select {
	case <-u.srv.LoggedIn():
		t.Fatalf("LoggedIn closed before the token was used")
	default:
	}
	c := browser(t)
	u.login(t, c)
	select {
	case <-u.srv.LoggedIn():
	default:
		t.Errorf("LoggedIn not closed after the token was used")
	}

	late := browser(t)
	status, body, hdr := u.get(t, late, strings.TrimPrefix(u.srv.URL(), u.base))
	if status != http.StatusGone || !strings.Contains(body, "this link was used already") || !strings.Contains(body, "Run sbx ui again") {
		t.Errorf("second use of the token: got %d %q, want 410 saying the link was used and to run sbx ui again", status, body)
	}
	if got := hdr.Get("Set-Cookie"); got != "" {
		t.Errorf("second use of the token: got cookie %q, want none", got)
	}
	if status, _, _ := u.get(t, late, "/"); status != http.StatusUnauthorized {
		t.Errorf("GET / after the refused second use: got %d, want 401", status)
	}
	// The browser that has the session, opening the URL again, goes on.
	if status, _, hdr := u.get(t, c, "/s/"+liveID+"?token="+strings.TrimPrefix(u.srv.URL(), u.base+"/?token=")); status != http.StatusSeeOther || hdr.Get("Location") != "/s/"+liveID {
		t.Errorf("the URL again with the session: got %d to %q, want 303 to /s/%s", status, hdr.Get("Location"), liveID)
	}
	if status, _, _ := u.get(t, c, "/"); status != http.StatusOK {
		t.Errorf("GET / with the session: got %d, want 200", status)
	}
}

// TestUISessionIdle: a session lasts SessionIdle without a request, and
// every request starts that time again; then its cookie is refused and
// the page says to run sbx ui again.
func TestUISessionIdle(t *testing.T) {
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	c := browser(t)
	u.login(t, c)
	u.clock.advance(SessionIdle - time.Minute)
	if status, _, _ := u.get(t, c, "/"); status != http.StatusOK {
		t.Fatalf("GET / %s after the last request: got %d, want 200", SessionIdle-time.Minute, status)
	}
	u.clock.advance(SessionIdle - time.Minute)
	if status, _, _ := u.get(t, c, "/"); status != http.StatusOK {
		t.Fatalf("GET / %s after the last request: got %d, want 200", SessionIdle-time.Minute, status)
	}
	u.clock.advance(SessionIdle)
	status, body, _ := u.get(t, c, "/")
	if status != http.StatusUnauthorized || !strings.Contains(body, "expired") || !strings.Contains(body, "run sbx ui again") {
		t.Errorf("GET / %s after the last request: got %d %q, want 401 saying the session expired", SessionIdle, status, body)
	}
	u.clock.advance(-SessionIdle)
	if status, _, _ := u.get(t, c, "/"); status != http.StatusUnauthorized {
		t.Errorf("GET / after the session expired, clock set back: got %d, want 401 (the session is gone)", status)
	}
}

// TestUIStolenCookieReplay: another local user who got the session
// cookie (a browser sends it to every port of 127.0.0.1) replays it from
// a program that is not a browser, with the CSRF token read from a page:
// without Sec-Fetch-Site or Origin, no rule is added and no question
// answered.
func TestUIStolenCookieReplay(t *testing.T) {
	u := startUI(t, askSpec)
	c := browser(t)
	u.login(t, c)
	thief := u.stolen(t, c)
	csrf := u.csrfOf(t, thief)
	held := u.hold(t, "/")
	q := u.waitPending(t, 1)[0]
	before := u.policy(t).Version
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/s/" + liveID + "/rules", url.Values{"action": {"allow"}, "pattern": {"other.test"}}},
		{"/s/" + liveID + "/rules/default/remove", url.Values{}},
		{"/s/" + liveID + "/approvals/" + q.ID, url.Values{"answer": {"allow"}, "scope": {"session"}}},
	} {
		tc.form.Set("csrf", csrf)
		status, body := u.post(t, thief, tc.path, tc.form, map[string]string{"Sec-Fetch-Site": ""})
		if status != http.StatusForbidden {
			t.Errorf("POST %s with the stolen cookie, no browser headers: got %d %q, want 403", tc.path, status, body)
		}
	}
	if after := u.policy(t).Version; after != before {
		t.Errorf("policy version after the replays: got %d, want %d (unchanged)", after, before)
	}
	if got := u.answers(t); len(got) != 0 {
		t.Errorf("answers after the replays: got %+v, want none", got)
	}
	stillHeld(t, held)
}

// TestUIAnswerNamesItsQuestion: an answer is to the question its form
// names. One to a question that went (answered, timed out) gets 409 and
// answers no other; one to a question asked less than AnswerDelay ago
// gets 409 and leaves it pending (a click meant for the question that
// was there before); once the delay is past, it is taken.
func TestUIAnswerNamesItsQuestion(t *testing.T) {
	u := startUI(t, askSpec)
	c := browser(t)
	u.login(t, c)
	api := u.apiClient(t)
	held1 := u.hold(t, "/first")
	q1 := u.waitPending(t, 1)[0]
	if _, err := api.AnswerApproval(context.Background(), q1.ID, apiAnswer("deny", "once")); err != nil {
		t.Fatal(err)
	}
	if got := result(t, held1); got != http.StatusForbidden {
		t.Fatalf("first request, denied: got %d, want 403", got)
	}
	// The next question comes; a click meant for the first one.
	held2 := u.hold(t, "/second")
	q2 := u.waitPending(t, 1)[0]
	form := url.Values{"answer": {"allow"}, "scope": {"session"}}
	status, body := u.post(t, c, "/s/"+liveID+"/approvals/"+q1.ID, form, nil)
	if status != http.StatusConflict || !strings.Contains(body, "question "+q1.ID+" is no longer pending") {
		t.Errorf("answer to the gone question: got %d:\n%s\nwant 409 saying it is no longer pending", status, body)
	}
	stillHeld(t, held2)

	// A question just asked: its answer waits for AnswerDelay.
	u.clock.reset()
	status, body = u.post(t, c, "/s/"+liveID+"/approvals/"+q2.ID, url.Values{"answer": {"allow"}, "scope": {"session"}}, nil)
	if status != http.StatusConflict || !strings.Contains(body, "question "+q2.ID+" was asked") {
		t.Errorf("answer to a question asked just now: got %d:\n%s\nwant 409 saying it was asked just now", status, body)
	}
	stillHeld(t, held2)
	if got := u.answers(t); len(got) != 1 {
		t.Errorf("answers: got %+v, want the API's deny of %s only", got, q1.ID)
	}
	if got := u.waitPending(t, 1); got[0].ID != q2.ID { // and AnswerDelay later
		t.Fatalf("pending: got %+v, want %s", got, q2.ID)
	}
	if status, body := u.post(t, c, "/s/"+liveID+"/approvals/"+q2.ID, url.Values{"answer": {"allow"}, "scope": {"once"}}, nil); status != http.StatusSeeOther {
		t.Fatalf("answer %s after the delay: got %d %q, want 303", AnswerDelay, status, body)
	}
	if got := result(t, held2); got != http.StatusOK {
		t.Errorf("second request, allowed: got %d, want 200", got)
	}
}

func apiAnswer(answer, scope string) api.ApprovalAnswer {
	return api.ApprovalAnswer{Answer: answer, Scope: scope}
}

// TestUISessionBoundToUser: the session is the user's whose program
// exchanged the token; the cookie sent by another user's program (as the
// system tells the view) is refused, pages and POSTs alike, even with the
// CSRF token and the headers a browser sends.
func TestUISessionBoundToUser(t *testing.T) {
	var uid atomic.Uint32
	uid.Store(1000)
	u := startUIWith(t, askSpec, func(cfg *Config) {
		cfg.peerUID = func(net.Addr, net.Addr) (uint32, error) { return uid.Load(), nil }
	})
	c := browser(t)
	u.login(t, c)
	csrf := u.csrfOf(t, c)
	held := u.hold(t, "/")
	q := u.waitPending(t, 1)[0]
	before := u.policy(t).Version

	uid.Store(65534)
	thief := u.stolen(t, c)
	thief.Transport = &http.Transport{} // its own connections, nobody's
	defer thief.CloseIdleConnections()
	if status, body, _ := u.get(t, thief, "/s/"+liveID); status != http.StatusForbidden || !strings.Contains(body, "uid 65534") {
		t.Errorf("GET with the cookie from uid 65534: got %d %q, want 403 naming the uid", status, body)
	}
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/s/" + liveID + "/rules", url.Values{"action": {"allow"}, "pattern": {"other.test"}}},
		{"/s/" + liveID + "/approvals/" + q.ID, url.Values{"answer": {"allow"}, "scope": {"session"}}},
	} {
		tc.form.Set("csrf", csrf)
		if status, body := u.post(t, thief, tc.path, tc.form, map[string]string{"Origin": u.base}); status != http.StatusForbidden {
			t.Errorf("POST %s with the cookie, CSRF token and browser headers from uid 65534: got %d %q, want 403", tc.path, status, body)
		}
	}
	if after := u.policy(t).Version; after != before {
		t.Errorf("policy version: got %d, want %d (unchanged)", after, before)
	}
	stillHeld(t, held)

	uid.Store(1000)
	if status, _, _ := u.get(t, c, "/"); status != http.StatusOK {
		t.Errorf("GET / from the owner's uid: got %d, want 200", status)
	}
}

// TestUIHoldsIPv6Loopback: while the view runs, no other program can
// listen on [::1] at its port (where a browser sent to localhost:PORT may
// go first), and a request there is refused and told where the view is.
// A port whose [::1] another program holds already is refused.
func TestUIHoldsIPv6Loopback(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no [::1] here: %v", err)
	}
	probe.Close()
	u := startUI(t, netpolicy.Spec{Default: netpolicy.Block})
	port := fmt.Sprint(u.srv.Port())
	if ln, err := net.Listen("tcp6", "[::1]:"+port); err == nil {
		ln.Close()
		t.Errorf("listening on [::1]:%s while the view runs: got no error, want it taken", port)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://[::1]:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "open http://127.0.0.1:"+port+"/") {
		t.Errorf("GET http://[::1]:%s/: got %d %q, want 421 naming http://127.0.0.1:%s/", port, resp.StatusCode, body, port)
	}

	// Another program on [::1] first: that port is refused. The port is
	// one whose 127.0.0.1 nothing else holds (another test's connection
	// may, by chance).
	var taken int
	for try := 0; ; try++ {
		other, err := net.Listen("tcp6", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		taken = other.Addr().(*net.TCPAddr).Port
		if free, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", taken)); err == nil {
			free.Close()
			break
		}
		if try == 20 {
			t.Fatal("found no port whose 127.0.0.1 is free in 20 tries")
		}
	}
	srv, err := Start(context.Background(), Config{Sandboxes: u.sb, Port: taken})
	if err == nil {
		srv.Close()
		t.Fatalf("Start on port %d, whose [::1] another program holds: got no error", taken)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("[::1]:%d is taken by another program", taken)) {
		t.Errorf("Start on port %d, whose [::1] another program holds: got %v, want it said", taken, err)
	}
}

// TestUILoginUserUnknown: where the system should tell whose program
// opened the URL but does not, the token makes no session (one any
// local user's program could use) and the page says to run sbx ui again.
func TestUILoginUserUnknown(t *testing.T) {
	u := startUIWith(t, netpolicy.Spec{Default: netpolicy.Block}, func(cfg *Config) {
		cfg.peerUID = func(net.Addr, net.Addr) (uint32, error) { return 0, errors.New("no socket of it on this host") }
	})
	c := browser(t)
	status, body, hdr := u.get(t, c, strings.TrimPrefix(u.srv.URL(), u.base))
	if status != http.StatusInternalServerError || !strings.Contains(body, "run sbx ui again") || hdr.Get("Set-Cookie") != "" {
		t.Errorf("GET the URL, its user unknown: got %d %q cookie %q, want 500 saying to run sbx ui again and no cookie", status, body, hdr.Get("Set-Cookie"))
	}
}
