package ui

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// askSpec is a policy that asks about every host: --default ask, with
// time enough for a test to answer.
var askSpec = netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(2 * time.Minute)}

// hold sends GET path to the upstream through the gateway, where the
// policy holds it on a question, and returns a channel that gets its
// status when it completes (0 when it failed).
func (u *uiTest) hold(t *testing.T, path string) <-chan int {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: u.gw.ProxyAddr.String()}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: time.Minute}
	got := make(chan int, 1)
	// Ends when the request does: answered, timed out, or the gateway
	// closed by the test's cleanup.
	go func() {
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://" + u.upstream + path)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	return got
}

// apiClient is a client of the gateway's API, as the view's.
func (u *uiTest) apiClient(t *testing.T) *api.Client {
	t.Helper()
	c, err := api.NewClient(u.sb.apiAddr, u.sb.token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitPending waits up to 10 s until the gateway has n pending questions
// and returns them; it moves the view's clock on by AnswerDelay, as if
// they had been on screen that long.
func (u *uiTest) waitPending(t *testing.T, n int) []api.Approval {
	t.Helper()
	u.clock.advance(AnswerDelay)
	c := u.apiClient(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := c.Approvals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Approvals) == n || time.Now().After(deadline) {
			if len(a.Approvals) != n {
				t.Fatalf("pending approvals: got %+v after 10 s, want %d", a.Approvals, n)
			}
			return a.Approvals
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answers returns the gateway's approval records of answers.
func (u *uiTest) answers(t *testing.T) []decisionlog.Record {
	t.Helper()
	d, err := u.apiClient(t).Decisions(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []decisionlog.Record
	for _, raw := range d.Decisions {
		var rec decisionlog.Record
		if err := decisionlog.Decode(raw, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Event == decisionlog.EventApproval && rec.Answer != "" {
			out = append(out, rec)
		}
	}
	return out
}

// post sends the form to path as the view's own page does
// (Sec-Fetch-Site: same-origin), with c's CSRF token unless the form has
// one, and headers hdr over those ("" removes one).
func (u *uiTest) post(t *testing.T, c *http.Client, path string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	if !form.Has("csrf") {
		form.Set("csrf", u.csrfOf(t, c))
	}
	req, _ := http.NewRequest("POST", u.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	status, body, _ := do(t, c, req)
	return status, body
}

// stillHeld fails if the held request completed.
func stillHeld(t *testing.T, held <-chan int) {
	t.Helper()
	select {
	case got := <-held:
		t.Fatalf("held request: completed with %d, want it still held", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// result waits up to 10 s for the held request's status.
func result(t *testing.T, held <-chan int) int {
	t.Helper()
	select {
	case got := <-held:
		return got
	case <-time.After(10 * time.Second):
		t.Fatalf("held request: not completed 10 s after its answer")
		return 0
	}
}

// TestUIApprovalsList: a pending question is on the sandbox's page, with
// its target, request, time left and a button for each answer and scope,
// and counted on the first page.
func TestUIApprovalsList(t *testing.T) {
	u := startUI(t, askSpec)
	c := browser(t)
	u.login(t, c)
	pendingCell := regexp.MustCompile(`<td class="pending">([^<]*(?:<a [^>]*>[^<]*</a>)?)</td>`)

	_, body, _ := u.get(t, c, "/")
	if m := pendingCell.FindStringSubmatch(body); m == nil || m[1] != "0" {
		t.Errorf("first page before a question: got pending cell %q, want 0 in\n%s", m, body)
	}
	_, body, _ = u.get(t, c, "/s/"+liveID)
	if !strings.Contains(body, `<p id="no-approvals">No question is pending.</p>`) || strings.Contains(body, `<tr class="approval" data-approval="a`) {
		t.Errorf("sandbox page before a question: want \"No question is pending.\" shown and no question:\n%s", body)
	}

	held := u.hold(t, "/some/path")
	q := u.waitPending(t, 1)[0]

	_, body, _ = u.get(t, c, "/")
	want := `<a href="/s/` + liveID + `#approvals" class="pending">1 pending</a>`
	if m := pendingCell.FindStringSubmatch(body); m == nil || m[1] != want {
		t.Errorf("first page with a question: got pending cell %q, want %q in\n%s", m, want, body)
	}

	status, body, _ := u.get(t, c, "/s/"+liveID)
	if status != http.StatusOK {
		t.Fatalf("GET /s/%s: got %d, want 200:\n%s", liveID, status, body)
	}
	row := regexp.MustCompile(`(?s)<tr class="approval" data-approval="` + q.ID + `".*?</tr>`).FindString(body)
	if row == "" {
		t.Fatalf("sandbox page: no row of question %s in\n%s", q.ID, body)
	}
	for _, w := range []string{
		`<td class="target">` + u.upstream + `</td>`,
		`<td class="request">http GET /some/path</td>`,
		`<td class="why">default: `,
		`<td class="waiting">1</td>`,
		`<td class="asked">` + q.Asked.Local().Format("15:04:05") + `</td>`,
		`action="/s/` + liveID + `/approvals/` + q.ID + `"`,
	} {
		if !strings.Contains(row, w) {
			t.Errorf("question's row: lacks %q:\n%s", w, row)
		}
	}
	if !regexp.MustCompile(`<td class="left">(2m0s|1m5\ds)</td>`).MatchString(row) {
		t.Errorf("question's row: want the time left, about 2m0s:\n%s", row)
	}
	forms := regexp.MustCompile(`(?s)<form method="post" action="[^"]*" class="answer">.*?</form>`).FindAllString(row, -1)
	if len(forms) != 2 {
		t.Fatalf("question's row: got %d answer forms, want 2 (allow, deny):\n%s", len(forms), row)
	}
	for i, answer := range []string{"allow", "deny"} {
		for _, w := range []string{
			`<input type="hidden" name="answer" value="` + answer + `">`,
			`<button type="submit" name="scope" value="once" class="` + answer + `">` + answer + ` once</button>`,
			`<button type="submit" name="scope" value="session" class="` + answer + `">` + answer + ` for this session</button>`,
			`<button type="submit" name="scope" value="always" class="` + answer + `">` + answer + ` always</button>`,
		} {
			if !strings.Contains(forms[i], w) {
				t.Errorf("question's %s form: lacks %q:\n%s", answer, w, forms[i])
			}
		}
	}
	if strings.Contains(body, `<p id="no-approvals">`) {
		t.Errorf("sandbox page with a question: \"No question is pending.\" is shown:\n%s", body)
	}
	stillHeld(t, held)
}

// TestUIApprovalAnswer: the buttons' POST answers the question through
// the API, by ui; the held request completes as answered, and the API's
// refusals (an always answer without a file: 409) are shown with their
// reason, the question still pending.
func TestUIApprovalAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, answer, scope string
		approvalsFile       bool
		id                  string // the question's when ""
		want                int
		wantBody            string // in the answer to the POST
		wantRequest         int    // the held request's status; 0: still held
	}{
		{name: "allow once", answer: "allow", scope: "once", want: http.StatusSeeOther, wantRequest: http.StatusOK},
		{name: "deny once", answer: "deny", scope: "once", want: http.StatusSeeOther, wantRequest: http.StatusForbidden},
		{name: "allow session", answer: "allow", scope: "session", want: http.StatusSeeOther, wantRequest: http.StatusOK},
		{name: "deny always", answer: "deny", scope: "always", approvalsFile: true, want: http.StatusSeeOther, wantRequest: http.StatusForbidden},
		{name: "always without a file", answer: "allow", scope: "always", want: http.StatusConflict, wantBody: "this gateway has no file to write an always answer to"},
		{name: "unknown scope", answer: "allow", scope: "forever", want: http.StatusBadRequest, wantBody: "scope &#34;forever&#34;: want once, session or always"},
		{name: "unknown answer", answer: "maybe", scope: "once", want: http.StatusBadRequest, wantBody: "answer &#34;maybe&#34;: want allow or deny"},
		{name: "no such question", answer: "allow", scope: "once", id: "a99", want: http.StatusConflict, wantBody: "question a99 is no longer pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "approvals.yaml")
			u := startUI(t, askSpec, func(cfg *gateway.Config) {
				if tc.approvalsFile {
					cfg.ApprovalsFile = file
				}
			})
			c := browser(t)
			u.login(t, c)
			held := u.hold(t, "/")
			q := u.waitPending(t, 1)[0]
			id := tc.id
			if id == "" {
				id = q.ID
			}
			status, body := u.post(t, c, "/s/"+liveID+"/approvals/"+id, url.Values{"answer": {tc.answer}, "scope": {tc.scope}}, nil)
			if status != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("POST the answer: got %d:\n%s\nwant %d with %q", status, body, tc.want, tc.wantBody)
			}
			if tc.wantRequest == 0 {
				stillHeld(t, held)
				if got := u.waitPending(t, 1); got[0].ID != q.ID {
					t.Errorf("pending after the refusal: got %+v, want %s still", got, q.ID)
				}
				if got := u.answers(t); len(got) != 0 {
					t.Errorf("approval records of answers: got %+v, want none", got)
				}
				return
			}
			if got := result(t, held); got != tc.wantRequest {
				t.Errorf("held request: got %d, want %d", got, tc.wantRequest)
			}
			recs := u.answers(t)
			if len(recs) != 1 || recs[0].ApprovalID != q.ID || recs[0].Answer != tc.answer || recs[0].Scope != tc.scope || recs[0].By != "ui" {
				t.Fatalf("approval records of answers: got %+v, want one of %s: %s %s by ui", recs, q.ID, tc.answer, tc.scope)
			}
			u.waitPending(t, 0)
			if tc.approvalsFile {
				data, err := os.ReadFile(file)
				if err != nil || !strings.Contains(string(data), "by ui") {
					t.Errorf("approvals file: got %q (%v), want the rule, added by ui", data, err)
				}
			}
		})
	}
}

// TestUIApprovalRefusesCrossSite: an answer POSTed from another site, or
// without the session's CSRF token, is refused and the question stays
// pending, its request held; the view's own page answers it.
func TestUIApprovalRefusesCrossSite(t *testing.T) {
	u := startUI(t, askSpec)
	c := browser(t)
	u.login(t, c)
	held := u.hold(t, "/")
	q := u.waitPending(t, 1)[0]
	path := "/s/" + liveID + "/approvals/" + q.ID
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"cross-site", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"}},
		{"origin only, foreign", url.Values{}, map[string]string{"Sec-Fetch-Site": "", "Origin": "http://evil.test"}},
		{"same-site other port", url.Values{}, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}},
		{"no csrf", url.Values{"csrf": {""}}, nil},
		{"wrong csrf", url.Values{"csrf": {strings.Repeat("0", 64)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.form.Set("answer", "allow")
			tc.form.Set("scope", "once")
			if status, body := u.post(t, c, path, tc.form, tc.hdr); status != http.StatusForbidden {
				t.Errorf("POST: got %d %q, want 403", status, body)
			}
			if got := u.waitPending(t, 1); got[0].ID != q.ID {
				t.Errorf("pending: got %+v, want %s still", got, q.ID)
			}
			stillHeld(t, held)
		})
	}
	if got := u.answers(t); len(got) != 0 {
		t.Errorf("approval records of answers after the refusals: got %+v, want none", got)
	}
	if status, body := u.post(t, c, path, url.Values{"answer": {"allow"}, "scope": {"once"}}, nil); status != http.StatusSeeOther {
		t.Fatalf("POST from the view's page: got %d %q, want 303", status, body)
	}
	if got := result(t, held); got != http.StatusOK {
		t.Errorf("held request after the view's answer: got %d, want 200", got)
	}
}

// askingGateway is the Gateway of a management API whose pending
// questions are what a test says: a real gateway asks only about valid
// host names, but the view must not trust the API with markup.
type askingGateway struct {
	store   *netpolicy.Store
	pending []api.Approval
}

func (g *askingGateway) Store() *netpolicy.Store { return g.store }
func (g *askingGateway) Counts() api.Counts      { return api.Counts{} }
func (g *askingGateway) Metrics() http.Handler   { return http.NotFoundHandler() }
func (g *askingGateway) Mocks() (hosts, scripts map[string]*mockllm.Responder) {
	return nil, nil
}
func (g *askingGateway) Recorders() map[string]*mockllm.Recorder { return nil }
func (g *askingGateway) Approvals() []api.Approval               { return g.pending }
func (g *askingGateway) AnswerApproval(id string, _ api.ApprovalAnswer) (api.Approval, error) {
	return api.Approval{}, fmt.Errorf("%w %q", api.ErrApprovalNotFound, id)
}

// TestUIApprovalsEscape: a question whose host, path, client and reason
// hold HTML is shown as text on both pages and in the live stream.
func TestUIApprovalsEscape(t *testing.T) {
	p, err := netpolicy.Compile(askSpec)
	if err != nil {
		t.Fatal(err)
	}
	q := api.Approval{
		ID: `a1"><script>alert("id")</script>`, Host: hostileHost, Port: 443, Kind: decisionlog.KindConnect, Method: `<i>CONNECT</i>`,
		Path: `/<svg onload=alert(1)>`, Client: `<b>10.0.0.2</b>`, Rule: `<u>rule</u>`, Reason: hostileReason,
		Asked: time.Now(), Deadline: time.Now().Add(time.Minute), Waiting: 1,
	}
	gw := &askingGateway{store: netpolicy.NewStore(p), pending: []api.Approval{q}}
	ring := decisionlog.NewRing(0)
	log := decisionlog.NewLog(liveID, ring)
	srv, err := api.NewServer(api.ServerConfig{Gateway: gw, Token: "the-token-of-the-tests", Ring: ring, Sandbox: liveID})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }() // ends when ctx does
	t.Cleanup(func() {
		cancel()
		<-served
	})
	sb := &fakeSandboxes{
		running: Sandbox{ID: liveID, Name: "agent", Status: "running", Time: time.Now()},
		apiAddr: ln.Addr().String(), token: "the-token-of-the-tests", endedLog: filepath.Join(t.TempDir(), "none"),
	}
	view, err := Start(context.Background(), Config{Sandboxes: sb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { view.Close() })
	u := &uiTest{sb: sb, srv: view, base: fmt.Sprintf("http://127.0.0.1:%d", view.Port())}
	c := browser(t)
	u.login(t, c)

	raws := []string{"<script>", "<img src=x", "<svg", "<i>CONNECT", "<b>10.0", "<u>rule"}
	for path, want := range map[string][]string{
		"/": {`1 pending`},
		"/s/" + liveID: {
			"&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;.test:443", "&lt;i&gt;CONNECT&lt;/i&gt; /&lt;svg onload=alert(1)&gt;",
			"&lt;b&gt;10.0.0.2&lt;/b&gt;", "&lt;u&gt;rule&lt;/u&gt;: &lt;img src=x onerror=alert(&#34;reason&#34;)&gt; &amp; more",
			`data-approval="a1&#34;&gt;&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;"`,
			`action="/s/` + liveID + `/approvals/a1%22%3E%3Cscript%3Ealert%28%22id%22%29%3C%2Fscript%3E"`,
		},
	} {
		status, body, _ := u.get(t, c, path)
		if status != http.StatusOK {
			t.Fatalf("GET %s: got %d, want 200:\n%s", path, status, body)
		}
		for _, raw := range raws {
			if strings.Contains(body, raw) {
				t.Errorf("GET %s: the page holds %q unescaped:\n%s", path, raw, body)
			}
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: the page lacks %q, the text escaped:\n%s", path, w, body)
			}
		}
	}

	// Live: the question's record brings the question, escaped.
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	req, _ := http.NewRequestWithContext(sctx, "GET", u.base+"/s/"+liveID+"/events?since=0", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	log.Emit(&decisionlog.Record{Event: decisionlog.EventApproval, Kind: q.Kind, Method: q.Method, Host: q.Host, Port: int(q.Port),
		Path: q.Path, Action: string(netpolicy.Ask), Rule: q.Rule, Reason: q.Reason, ApprovalID: q.ID})
	sc := bufio.NewScanner(resp.Body)
	var event []string
	for sc.Scan() {
		if sc.Text() == "" {
			break
		}
		event = append(event, sc.Text())
	}
	if len(event) != 3 || event[1] != "event: approval" {
		t.Fatalf("event: got %q, want id, event: approval, data", event)
	}
	if !strings.Contains(event[2], `\u003cscript\u003ealert(\"host\")`) || strings.Contains(event[2], "<") || strings.Contains(event[2], "csrf") {
		t.Errorf("event data: got %s, want the host with < and > escaped, and no CSRF token", event[2])
	}
}

// TestUIApprovalEvents: a question asked while the page is open comes on
// the event stream with its time left, and its answer removes it.
func TestUIApprovalEvents(t *testing.T) {
	u := startUI(t, askSpec)
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
	sc := bufio.NewScanner(resp.Body)
	next := func(name string) string {
		t.Helper()
		for {
			var event []string
			for sc.Scan() && sc.Text() != "" {
				event = append(event, sc.Text())
			}
			if len(event) == 0 {
				t.Fatalf("the stream ended before event %s (%v)", name, sc.Err())
			}
			if len(event) == 3 && event[1] == "event: "+name {
				return strings.TrimPrefix(event[2], "data: ")
			}
		}
	}
	held := u.hold(t, "/")
	data := next("approval")
	q := u.waitPending(t, 1)[0]
	for _, w := range []string{`"id":"` + q.ID + `"`, `"target":"` + u.upstream + `"`, `"request":"GET /"`, fmt.Sprintf(`"deadline":%d`, q.Deadline.UnixMilli())} {
		if !strings.Contains(data, w) {
			t.Errorf("approval event: got %s, want %s in it", data, w)
		}
	}
	if _, err := u.apiClient(t).AnswerApproval(ctx, q.ID, api.ApprovalAnswer{Answer: "deny", Scope: "once"}); err != nil {
		t.Fatal(err)
	}
	if data, want := next("answered"), `{"id":"`+q.ID+`","answer":"deny","scope":"once","by":"api"}`; data != want {
		t.Errorf("answered event: got %s, want %s", data, want)
	}
	if got := result(t, held); got != http.StatusForbidden {
		t.Errorf("held request: got %d, want 403", got)
	}
}

// The answer forms of a question's row post the API's words, every
// answer with every scope, and answerOf takes exactly those: the words
// are api's, written once.
func TestUIAnswerFormsUseTheAPIWords(t *testing.T) {
	var b strings.Builder
	row := approvalRowOf(api.Approval{ID: "a1", Host: "pypi.org", Port: 443, Method: "GET", Path: "/"}, &Sandbox{ID: liveID}, "token")
	if err := templates()["sandbox"].ExecuteTemplate(&b, "approval", row); err != nil {
		t.Fatal(err)
	}
	forms := regexp.MustCompile(`(?s)<form.*?</form>`).FindAllString(b.String(), -1)
	answerRe := regexp.MustCompile(`name="answer" value="([^"]*)"`)
	scopeRe := regexp.MustCompile(`name="scope" value="([^"]*)"`)
	var got []string
	for _, f := range forms {
		a := answerRe.FindStringSubmatch(f)
		if a == nil {
			t.Fatalf("a form without an answer: %s", f)
		}
		for _, sc := range scopeRe.FindAllStringSubmatch(f, -1) {
			got = append(got, a[1]+" "+sc[1])
		}
	}
	var want []string
	for _, a := range api.Answers() {
		for _, sc := range api.Scopes() {
			want = append(want, a+" "+sc)
		}
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("the forms post: got %q, want %q", got, want)
	}
	for _, tc := range []struct {
		answer, scope string
		ok            bool
	}{
		{api.AnswerAllow, api.ScopeOnce, true},
		{api.AnswerDeny, api.ScopeAlways, true},
		{api.AnswerAllow, api.ScopeSession, true},
		{"maybe", api.ScopeOnce, false},
		{api.AnswerAllow, "forever", false},
		{api.AnswerAllow, "", false}, // the form always says its scope
		{"Allow", api.ScopeOnce, false},
	} {
		r, _ := http.NewRequest("POST", "/", strings.NewReader(url.Values{"answer": {tc.answer}, "scope": {tc.scope}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		a, err := answerOf(r)
		if (err == nil) != tc.ok {
			t.Errorf("answerOf(%s %s): got %v, want ok %v", tc.answer, tc.scope, err, tc.ok)
		}
		if err == nil && a.By != api.ByUI {
			t.Errorf("answerOf(%s %s): by %q, want %q", tc.answer, tc.scope, a.By, api.ByUI)
		}
	}
}

// A question's row shows its method and path, which every request held
// on it has, and says "N requests" when more wait on it: the answer
// reaches them all.
func TestUIApprovalRowCountsRequests(t *testing.T) {
	for _, tt := range []struct {
		waiting int
		want    string
	}{
		{1, "GET /a"},
		{3, "GET /a (3 requests)"},
		{0, "GET /a"}, // every request left: the question stays till its answer
	} {
		row := approvalRowOf(api.Approval{ID: "a1", Host: "api.test", Port: 80, Kind: "http", Method: "GET", Path: "/a", Waiting: tt.waiting}, &Sandbox{ID: liveID}, "token")
		if row.Request != tt.want {
			t.Errorf("%d waiting: got request %q, want %q", tt.waiting, row.Request, tt.want)
		}
		var b strings.Builder
		if err := templates()["sandbox"].ExecuteTemplate(&b, "approval", row); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), `<td class="request">http `+tt.want+`</td>`) {
			t.Errorf("%d waiting: the row lacks %q:\n%s", tt.waiting, tt.want, b.String())
		}
	}
}

// TestUIRowsShowHiddenCharacters: a host, path, method or reason the
// sandbox chose with a bidi override or a control character shows them
// escaped in the page's rows and the live stream's, so they cannot
// reorder or hide what the user reads before answering.
func TestUIRowsShowHiddenCharacters(t *testing.T) {
	hostile := "/a\u202egpj.exe\x1b[8m"
	want := `/a\u202egpj.exe\x1b[8m`
	row := approvalRowOf(api.Approval{ID: "a1", Host: "x\u2066.test", Port: 80, Kind: "http", Method: "GET", Path: hostile, Waiting: 1, Reason: "r\u200b"}, &Sandbox{ID: liveID}, "token")
	if row.Request != "GET "+want || row.Target != `x\u2066.test:80` || !strings.HasSuffix(row.Why, `r\u200b`) {
		t.Errorf("approval row: got request %q, target %q, why %q; want the hidden characters escaped", row.Request, row.Target, row.Why)
	}
	d := decisionRowOf(&decisionlog.Record{Event: decisionlog.EventDecision, Method: "GET", Host: "x\u202e.test", Port: 80, Path: hostile, Action: "block", Enforced: true, Reason: "no\x07"})
	if d.Path != want || d.Target != `x\u202e.test:80` || d.Reason != `no\x07` {
		t.Errorf("decision row: got path %q, target %q, reason %q; want the hidden characters escaped", d.Path, d.Target, d.Reason)
	}
}
