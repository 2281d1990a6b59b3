package main

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/ui"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// uiBrowser is headless Chromium on one sbx ui's pages, for a test.
type uiBrowser struct {
	t   *testing.T
	ctx context.Context
}

// do runs the steps within 30 s, or fails the test saying what.
func (b uiBrowser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates the script in the page within 30 s and returns its value.
func evalIn[T any](b uiBrowser, script string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", script, err)
	}
	return v
}

// pendingIDs returns the ids of the sandbox's pending questions.
func pendingIDs(t *testing.T, c *api.Client) []string {
	t.Helper()
	a, err := c.Approvals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, q := range a.Approvals {
		ids = append(ids, q.ID)
	}
	return ids
}

// waitQuestion waits up to 10 s for a pending question other than those
// in old and returns its id.
func waitQuestion(t *testing.T, c *api.Client, old ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, id := range pendingIDs(t, c) {
			if !slices.Contains(old, id) {
				return id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new question 10 s after a request")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// asNobody runs curl as the user nobody (another local user), never
// through a proxy, and returns its output.
func asNobody(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("curl", append([]string{"--silent", "--noproxy", "*", "--max-time", "20"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %q as nobody: %v", args, err)
	}
	return string(out)
}

// TestPrivilegedUIStolenCookie plays another local user (nobody) against
// sbx ui open in the owner's Chromium. The other user's server on another
// port of 127.0.0.1, which the owner's browser visits, is sent the view's
// session cookie (browsers keep cookies apart by host, not by port): that
// much is the browser's and is not promised. With it, curl run as nobody
// cannot read a page (the session is bound to the owner's uid), and its
// POSTs (add a rule, remove one, answer the pending question "allow for
// this session") with the page's CSRF token change nothing, whether they
// carry no browser's Sec-Fetch-Site and Origin or forged ones. Then the
// other user's page, open in the owner's browser, posts the same forms
// with the token: the browser says same-site, from another origin, and
// nothing changes either.
func TestPrivilegedUIStolenCookie(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run curl as the user nobody")
	}
	needChromium(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl is not installed: %v", err)
	}
	stateDir, logDir := t.TempDir(), t.TempDir()
	const id = "0badf00d"
	gw, upstream := startRecordedGatewaySpec(t, stateDir, logDir, id,
		netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(2 * time.Minute)})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	uiURL, _ := startUICommand(t, ctx, stateDir, logDir)
	view, _ := url.Parse(uiURL)
	client, err := hostSandboxes{stateDir: stateDir, logDir: logDir}.Client(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	policy := func() uint64 {
		t.Helper()
		p, err := client.Policy(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return p.Version
	}

	// The other user's server: it keeps the cookies it is sent and serves
	// a page that posts the view's forms.
	var mu sync.Mutex
	var stolen string
	var attack struct{ Action, CSRF, Answer string }
	page := template.Must(template.New("attack").Parse(`<!DOCTYPE html><html><body>
<form id="f" method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<input type="hidden" name="answer" value="allow"><input type="hidden" name="scope" value="session">
<input type="hidden" name="action" value="allow"><input type="hidden" name="pattern" value="{{.Answer}}"></form>
<script>document.getElementById("f").submit()</script></body></html>`))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if c := r.Header.Get("Cookie"); c != "" {
			stolen = c
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/attack" {
			page.Execute(w, attack)
			return
		}
		fmt.Fprintln(w, "<p>hello</p>")
	})}
	go other.Serve(ln) // ends when the cleanup closes it
	t.Cleanup(func() { other.Close() })
	otherURL := "http://" + ln.Addr().String()

	b := uiBrowser{t, startChromium(t)}
	b.do("opening the printed URL", chromedp.Navigate(uiURL), chromedp.WaitVisible(chromedp.CSS("#running")))
	b.do("visiting the other user's server", chromedp.Navigate(otherURL+"/"), chromedp.WaitVisible(chromedp.CSS("p")))
	mu.Lock()
	cookie := stolen
	mu.Unlock()
	if !strings.Contains(cookie, "sbx_ui_"+view.Port()+"=") {
		t.Fatalf("cookie the other user's server got: %q, want the view's session cookie (a browser sends it to every port)", cookie)
	}

	held := heldGet(gw, "http://"+upstream+"/")
	q := waitQuestion(t, client)
	time.Sleep(ui.AnswerDelay) // the question has been on screen long enough
	before := policy()

	// curl as nobody, with the cookie: it cannot read a page (the session
	// is the owner's browser's), and with the page's CSRF token (read
	// from the owner's browser here) and with or without the headers a
	// browser would send, it changes nothing.
	sandboxPage := view.Scheme + "://" + view.Host + "/s/" + id
	if got := asNobody(t, "--cookie", cookie, "--output", "/dev/null", "--write-out", "%{http_code}", sandboxPage); got != "403" {
		t.Errorf("GET %s by curl as nobody with the stolen cookie: got %s, want 403", sandboxPage, got)
	}
	b.do("the sandbox's page", chromedp.Navigate(sandboxPage), chromedp.WaitVisible(chromedp.CSS("#add-rule")))
	csrf := evalIn[string](b, `document.querySelector('#add-rule input[name="csrf"]').value`)
	for _, tc := range []struct{ path, form string }{
		{"/rules", "action=allow&pattern=" + url.QueryEscape(upstream)},
		{"/rules/default/remove", ""},
		{"/approvals/" + q, "answer=allow&scope=session"},
	} {
		for _, headers := range [][]string{nil, {"--header", "Sec-Fetch-Site: same-origin", "--header", "Origin: " + view.Scheme + "://" + view.Host}} {
			got := asNobody(t, append(headers, "--cookie", cookie, "--output", "/dev/null", "--write-out", "%{http_code}",
				"--data", tc.form+"&csrf="+csrf, sandboxPage+tc.path)...)
			if got != "403" {
				t.Errorf("POST %s by curl as nobody with the stolen cookie, the CSRF token and headers %q: got %s, want 403", tc.path, headers, got)
			}
		}
	}
	if after := policy(); after != before {
		t.Errorf("policy version after curl's replays: got %d, want %d (unchanged)", after, before)
	}
	if got := pendingIDs(t, client); len(got) != 1 || got[0] != q {
		t.Errorf("pending after curl's replays: got %q, want %s still", got, q)
	}

	// The other user's page in the owner's browser, with the token.
	for _, action := range []string{"/rules", "/approvals/" + q} {
		mu.Lock()
		attack.Action, attack.CSRF, attack.Answer = sandboxPage+action, csrf, upstream
		mu.Unlock()
		b.do("the other user's page posting "+action, chromedp.Navigate(otherURL+"/attack"),
			chromedp.WaitVisible(chromedp.CSS("body")))
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(evalIn[string](b, "document.body.innerText"), "cross-origin request refused") {
			if time.Now().After(deadline) {
				t.Fatalf("the other user's page posting %s: got %q in the browser, want the view's refusal", action, evalIn[string](b, "location.href+' '+document.body.innerText"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if after := policy(); after != before {
		t.Errorf("policy version after the other user's page: got %d, want %d (unchanged)", after, before)
	}
	if got := pendingIDs(t, client); len(got) != 1 || got[0] != q {
		t.Errorf("pending after the other user's page: got %q, want %s still", got, q)
	}
	select {
	case got := <-held:
		t.Errorf("held request: completed with %d, want it still held", got)
	default:
	}
}

// TestUIAnswerRaceInChromium: the owner goes to click "allow for this
// session" on a question that times out just then, and the next
// question, to another target, takes its row. The click, at the same
// place, lands on the new question's button while that has been on
// screen for less than ui.AnswerDelay: the button is disabled, nothing is
// answered, and the new question stays pending. After the delay, the
// same click answers it.
func TestUIAnswerRaceInChromium(t *testing.T) {
	const id = "0dec1de5"
	page := openAskSandbox(t, id, 3*time.Second)
	gw, upstream, client, b, logDir := page.gw, page.upstream, page.client, page.b, page.logDir

	// The first question, looked at: where its button is.
	heldGet(gw, "http://"+upstream+"/first")
	q1 := waitQuestion(t, client)
	button := func(q string) string { return `#approvals tr[data-approval="` + q + `"] button.allow[value="session"]` }
	b.do("the first question", chromedp.WaitVisible(chromedp.CSS(button(q1))), chromedp.Sleep(ui.AnswerDelay),
		chromedp.WaitEnabled(chromedp.CSS(button(q1))))
	type point struct{ X, Y float64 }
	at := evalIn[point](b, `(function(){var r=document.querySelector('`+button(q1)+`').getBoundingClientRect();return {X:r.x+r.width/2,Y:r.y+r.height/2};})()`)

	// It times out; the next one, to another port, comes in its place,
	// and the click meant for the first lands on it.
	b.do("the first question timing out", chromedp.WaitNotPresent(chromedp.CSS(`#approvals tr[data-approval="`+q1+`"]`)))
	host, _, _ := net.SplitHostPort(upstream)
	held2 := heldGet(gw, "http://"+net.JoinHostPort(host, "1")+"/second")
	q2 := waitQuestion(t, client, q1)
	b.do("the second question", chromedp.WaitVisible(chromedp.CSS(`#approvals tr[data-approval="`+q2+`"]`)))
	under := evalIn[string](b, fmt.Sprintf(`(function(){var e=document.elementFromPoint(%f,%f);var tr=e&&e.closest("tr");return (tr?tr.dataset.approval:"")+" "+(e?e.textContent:"");})()`, at.X, at.Y))
	b.do("the click meant for the first question", chromedp.MouseClickXY(at.X, at.Y))
	if want := q2 + " allow for this session"; under != want {
		t.Fatalf("under the first question's button now: got %q, want %q (the race needs the second question in its place)", under, want)
	}
	time.Sleep(500 * time.Millisecond)
	if got := pendingIDs(t, client); len(got) != 1 || got[0] != q2 {
		t.Fatalf("pending after the click meant for %s: got %q, want %s still", q1, got, q2)
	}
	select {
	case got := <-held2:
		t.Fatalf("second request after the click meant for the first: completed with %d, want it held", got)
	default:
	}
	if st, err := client.Policy(context.Background()); err != nil || len(st.Policy.Rules) != 0 {
		t.Fatalf("rules after the click meant for the first question: got %+v (%v), want none", st, err)
	}

	// Looked at for the delay, the same click answers it.
	b.do("the second question, looked at", chromedp.WaitEnabled(chromedp.CSS(button(q2))), chromedp.MouseClickXY(at.X, at.Y),
		chromedp.WaitNotPresent(chromedp.CSS(`#approvals tr[data-approval="`+q2+`"]`)))
	waitApprovalRecord(t, filepath.Join(logDir, id, run.LogName), q2, "allow", "session", "ui")
}

// TestUILongTargetInChromium: a question whose path is 2000 characters
// long, with three requests waiting on it, leaves its six answer buttons
// and its count of waiting requests on screen and clickable (each is
// what the browser finds at its own centre) in a 1280×900 window, live
// and after a reload; the page does not scroll sideways; allow once,
// clicked, lets the requests through.
func TestUILongTargetInChromium(t *testing.T) {
	const id = "0b16a7c5"
	page := openAskSandbox(t, id, 2*time.Minute)
	gw, upstream, client, b := page.gw, page.upstream, page.client, page.b

	path := "/" + strings.Repeat("a", 2000)
	var held []<-chan int
	held = append(held, heldGet(gw, "http://"+upstream+path))
	q := waitQuestion(t, client)
	for range 2 {
		held = append(held, heldGet(gw, "http://"+upstream+path))
	}
	row := `#approvals tr[data-approval="` + q + `"]`
	check := func(when string) {
		t.Helper()
		got := evalIn[[]string](b, `(function(){
  var out = [];
  var els = Array.from(document.querySelectorAll('`+row+` button')).concat([document.querySelector('`+row+` td.waiting')]);
  els.forEach(function (e) {
    var r = e.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;
    var on = r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight;
    var hit = document.elementFromPoint(x, y);
    if (!on || !(hit === e || e.contains(hit))) out.push((e.textContent || e.className) + " at " + JSON.stringify(r) + " in " + innerWidth + "x" + innerHeight);
  });
  if (els.length != 7) out.push(els.length + " buttons and counts, want 7");
  if (document.documentElement.scrollWidth > innerWidth) out.push("the page is " + document.documentElement.scrollWidth + " px wide in " + innerWidth);
  return out;
})()`)
		for _, g := range got {
			t.Errorf("%s: not on screen or not clickable: %s", when, g)
		}
	}
	b.do("the live question", chromedp.WaitVisible(chromedp.CSS(row)))
	check("live")
	deadline := time.Now().Add(10 * time.Second)
	for a, err := client.Approvals(context.Background()); err != nil || len(a.Approvals) != 1 || a.Approvals[0].Waiting != 3; a, err = client.Approvals(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("pending: got %+v (%v) 10 s after three requests, want one question with 3 waiting", a, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.do("reloading", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := evalIn[string](b, `document.querySelector('`+row+` td.waiting').textContent`); got != "3" {
		t.Errorf("waiting after a reload: got %q, want 3", got)
	}
	check("after a reload")
	b.do("clicking allow once", answerClick(row+` button.allow[value="once"]`), chromedp.WaitNotPresent(chromedp.CSS(row)))
	for i, h := range held {
		select {
		case got := <-h:
			if got != http.StatusOK {
				t.Errorf("held request %d: got %d, want 200", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("held request %d: not completed 10 s after allow once", i)
		}
	}
}

// askSandboxPage is a sandbox whose default is ask, with its gateway, the
// upstream it may reach, an API client of it, and its page in `sbx ui`
// open in Chromium, showing no question yet.
type askSandboxPage struct {
	gw       *gateway.Gateway
	upstream string
	client   *api.Client
	b        uiBrowser
	logDir   string
}

// openAskSandbox starts sandbox id's gateway (questions time out after
// askTimeout) and `sbx ui`, and opens the sandbox's page as a user would:
// the printed URL, then the sandbox's link. All of it ends with the test.
func openAskSandbox(t *testing.T, id string, askTimeout time.Duration) askSandboxPage {
	t.Helper()
	needChromium(t)
	stateDir, logDir := t.TempDir(), t.TempDir()
	gw, upstream := startRecordedGatewaySpec(t, stateDir, logDir, id,
		netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(askTimeout)})
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	uiURL, _ := startUICommand(t, ctx, stateDir, logDir)
	client, err := hostSandboxes{stateDir: stateDir, logDir: logDir}.Client(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	b := uiBrowser{t, startChromium(t)}
	b.do("opening the printed URL", chromedp.Navigate(uiURL), chromedp.WaitVisible(chromedp.CSS("#running")))
	b.do("opening the sandbox", followLink(`#running a[href="/s/`+id+`"]`),
		chromedp.WaitVisible(chromedp.CSS("#no-approvals")))
	waitText(t, b.ctx, "#live", "live")
	return askSandboxPage{gw: gw, upstream: upstream, client: client, b: b, logDir: logDir}
}
