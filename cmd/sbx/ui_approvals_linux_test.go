package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/ui"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestUIApprovalsInChromium answers questions in sbx ui, in a real
// headless Chromium driven through the DevTools protocol. The sandbox's
// gateway runs with --default ask semantics; a request through it to a
// loopback upstream is held. The page, open already, shows the question
// as it comes; "allow always" clicked shows why it cannot be (no file to
// write: 409) and leaves it pending; "allow once" clicked lets the held
// request through, and the log's approval record says by ui. A second
// question is counted on the first page, and its "deny once" clicked
// gets the request its 403. A third, answered through the API while the
// page is open, leaves the page. The screenshot with a question on it
// must not be blank.
func TestUIApprovalsInChromium(t *testing.T) {
	needChromium(t)
	stateDir, logDir := t.TempDir(), t.TempDir()
	const id = "0a5cbeef"
	gw, upstream := startRecordedGatewaySpec(t, stateDir, logDir, id,
		netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(2 * time.Minute)})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	uiURL, exited := startUICommand(t, ctx, stateDir, logDir)
	bctx := startChromium(t)
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	client, err := hostSandboxes{stateDir: stateDir, logDir: logDir}.Client(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// asked holds a request and returns its question's id and a channel
	// that gets the request's status.
	asked := func() (string, <-chan int) {
		t.Helper()
		held := heldGet(gw, "http://"+upstream+"/")
		deadline := time.Now().Add(10 * time.Second)
		for {
			a, err := client.Approvals(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Approvals) == 1 {
				return a.Approvals[0].ID, held
			}
			if time.Now().After(deadline) {
				t.Fatalf("pending approvals: got %+v 10 s after a request, want its question", a.Approvals)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	status := func(held <-chan int) int {
		t.Helper()
		select {
		case got := <-held:
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("held request: not completed 10 s after its answer")
			return 0
		}
	}

	step("opening the printed URL", chromedp.Navigate(uiURL), chromedp.WaitVisible(chromedp.CSS("#running")))
	step("opening the sandbox", followLink(`#running a[href="/s/`+id+`"]`),
		chromedp.WaitVisible(chromedp.CSS("#no-approvals")))
	waitText(t, bctx, "#live", "live")

	// A question while the page is open appears on it.
	q1, held1 := asked()
	row := `#approvals tr[data-approval="` + q1 + `"]`
	step("the live question", chromedp.WaitVisible(chromedp.CSS(row)), chromedp.WaitNotVisible(chromedp.CSS("#no-approvals")))
	if got := text(row); !strings.Contains(got, upstream) || !strings.Contains(got, "GET /") {
		t.Errorf("live question's row: got %q, want %s and GET /", got, upstream)
	}
	waitText(t, bctx, row+" td.left", "1m5")
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	checkNotBlank(t, shot)

	// Allow always: this sandbox has no file to write it to. The page
	// says why, and the question waits still.
	step("clicking allow always", answerClick(row+` button.allow[value="always"]`),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	if got := text("#error"); !strings.Contains(got, "no file to write an always answer to") {
		t.Errorf("allow always without a file: got %q, want the API's reason", got)
	}
	select {
	case got := <-held1:
		t.Fatalf("held request after allow always was refused: got %d, want it still held", got)
	default:
	}
	step("going back", followLink(`a[href="/s/`+id+`"]`), chromedp.WaitVisible(chromedp.CSS(row)))

	// Allow once: the request goes through, and the log says by ui.
	step("clicking allow once", answerClick(row+` button.allow[value="once"]`),
		chromedp.WaitVisible(chromedp.CSS("#no-approvals")), chromedp.WaitNotPresent(chromedp.CSS(row)))
	if got := status(held1); got != http.StatusOK {
		t.Errorf("request allowed once in the view: got %d, want 200", got)
	}
	waitApprovalRecord(t, filepath.Join(logDir, id, run.LogName), q1, "allow", "once", "ui")

	// A second question: counted on the first page, which links to it;
	// deny once gets the request its 403.
	q2, held2 := asked()
	row = `#approvals tr[data-approval="` + q2 + `"]`
	step("the first page", followLink(`header a.home`), chromedp.WaitVisible(chromedp.CSS("#running")))
	if got := text(`#running td.pending`); got != "1 pending" {
		t.Errorf("first page's pending count: got %q, want \"1 pending\"", got)
	}
	step("following the count", followLink(`#running a.pending`), chromedp.WaitVisible(chromedp.CSS(row)))
	step("clicking deny once", answerClick(row+` button.deny[value="once"]`),
		chromedp.WaitVisible(chromedp.CSS("#no-approvals")), chromedp.WaitNotPresent(chromedp.CSS(row)))
	if got := status(held2); got != http.StatusForbidden {
		t.Errorf("request denied once in the view: got %d, want 403", got)
	}
	waitApprovalRecord(t, filepath.Join(logDir, id, run.LogName), q2, "deny", "once", "ui")

	// A third, answered elsewhere while the page is open, leaves it.
	waitText(t, bctx, "#live", "live")
	q3, held3 := asked()
	row = `#approvals tr[data-approval="` + q3 + `"]`
	step("the third question", chromedp.WaitVisible(chromedp.CSS(row)))
	if _, err := client.AnswerApproval(context.Background(), q3, api.ApprovalAnswer{Answer: "deny", Scope: "once"}); err != nil {
		t.Fatal(err)
	}
	step("the answered question leaves", chromedp.WaitNotPresent(chromedp.CSS(row)), chromedp.WaitVisible(chromedp.CSS("#no-approvals")))
	if got := status(held3); got != http.StatusForbidden {
		t.Errorf("request denied through the API: got %d, want 403", got)
	}

	stop()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("sbx ui: exit %d after interrupt, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("sbx ui did not stop within 10 s of its context's end")
	}
}

// answerClick clicks the answer button sel once the page takes clicks on
// it: the page holds a question's buttons disabled for ui.AnswerDelay
// after the questions shown change, and the view refuses an answer to a
// question asked less than that ago.
func answerClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Sleep(ui.AnswerDelay+200*time.Millisecond),
		chromedp.WaitEnabled(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// heldGet sends GET target through the gateway's proxy, where it may be
// held on a question, and returns a channel that gets its status (0 when
// it failed).
func heldGet(gw *gateway.Gateway, target string) <-chan int {
	proxy := &url.URL{Scheme: "http", Host: gw.ProxyAddr.String()}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: time.Minute}
	got := make(chan int, 1)
	// Ends when the request does: answered, timed out (a minute), or the
	// gateway closed by the test's cleanup.
	go func() {
		defer c.CloseIdleConnections()
		resp, err := c.Get(target)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	return got
}

// waitApprovalRecord waits up to 10 s until the decision log at path has
// the approval record of question id's answer, and checks it.
func waitApprovalRecord(t *testing.T, path, id, answer, scope, by string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec decisionlog.Record
			if decisionlog.Decode(sc.Bytes(), &rec) != nil || rec.Event != decisionlog.EventApproval || rec.ApprovalID != id || rec.Answer == "" {
				continue
			}
			if rec.Answer != answer || rec.Scope != scope || rec.By != by {
				t.Errorf("approval record of %s: got answer %q scope %q by %q, want %s %s by %s", id, rec.Answer, rec.Scope, rec.By, answer, scope, by)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision log %s: no approval record of %s's answer after 10 s", path, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
