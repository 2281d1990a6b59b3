package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestPrivilegedApprovalWebView answers a real sandbox's questions in sbx
// ui, in a headless Chromium: sbx run with --default ask runs busybox wget
// to two unlisted hosts on an upstream in a network namespace of the
// test's own; sbx ui runs against the same state and log directories.
// The sandbox's page shows the first question, and "allow once" clicked
// lets the held wget through to the upstream's answer; the log's approval
// record says by ui. The second question's "deny once" clicked gets its
// wget a 403.
func TestPrivilegedApprovalWebView(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	needChromium(t)
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "wget"))
	state := filepath.Join(t.TempDir(), "state")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The log is where sbx run keeps it by default, where sbx ui looks.
	ran := runInBackground(ctx, "run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.211.0/24",
		"--resolve", "later.test="+up.Addr, "--resolve", "other.test="+up.Addr, "--allow-private", up.Net,
		"--default", "ask", "--ask-timeout", "90s", "--", "sh", "-c",
		`r=$(wget -q -O- http://later.test:8080/ 2>&1); echo "first exit $? $r"
r=$(wget -q -O- http://other.test:8080/ 2>&1); echo "second exit $? $r"`)
	var id string
	var r [3]string
	ended := false
	// A failed test's sandbox is stopped, and gone, before its state
	// directory; then its log goes.
	t.Cleanup(func() {
		cancel()
		if !ended {
			select {
			case <-ran:
			case <-time.After(30 * time.Second):
				t.Errorf("sbx run did not end within 30 s of its context's end")
			}
		}
		if id != "" {
			os.RemoveAll(filepath.Join(logRoot, id))
		}
	})
	id = waitForSandbox(t, state, "")
	logFile := filepath.Join(logRoot, id, run.LogName)

	uctx, stop := context.WithCancel(context.Background())
	defer stop()
	uiURL, exited := startUICommand(t, uctx, state, logRoot)
	bctx := startChromium(t)
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	client, err := hostSandboxes{stateDir: state, logDir: logRoot}.Client(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// question waits for the pending question about host and returns the
	// selector of its row on the sandbox's page.
	question := func(host string) (string, string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			a, err := client.Approvals(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range a.Approvals {
				if q.Host == host {
					return q.ID, `#approvals tr[data-approval="` + q.ID + `"]`
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("pending approvals: got %+v, want a question about %s", a.Approvals, host)
			}
		}
	}

	step("opening the printed URL", chromedp.Navigate(uiURL), chromedp.WaitVisible(chromedp.CSS("#running")))
	step("opening the sandbox", followLink(`#running a[href="/s/`+id+`"]`),
		chromedp.WaitVisible(chromedp.CSS("#approvals")))
	waitText(t, bctx, "#live", "live")

	// The first question shows; allow once lets the wget through.
	q1, row := question("later.test")
	step("the first question", chromedp.WaitVisible(chromedp.CSS(row)))
	waitText(t, bctx, row, "later.test")
	step("clicking allow once", answerClick(row+` button.allow[value="once"]`),
		chromedp.WaitNotPresent(chromedp.CSS(row)))

	// The second: deny once.
	q2, row := question("other.test")
	step("the second question", chromedp.WaitVisible(chromedp.CSS(row)))
	waitText(t, bctx, row, "other.test")
	step("clicking deny once", answerClick(row+` button.deny[value="once"]`),
		chromedp.WaitNotPresent(chromedp.CSS(row)))

	select {
	case r = <-ran:
		ended = true
	case <-time.After(60 * time.Second):
		t.Fatalf("sbx run did not end within 60 s of the answers")
	}
	t.Logf("sbx run (exit %s):\n%s\n%s", r[2], r[0], r[1])
	if r[2] != "0" {
		t.Errorf("sbx run: exit %s, want 0", r[2])
	}
	lines := strings.Split(r[0], "\n")
	if !slices.Contains(lines, "first exit 0 hello-upstream") {
		t.Errorf("the sandbox's output: got %q, want a line \"first exit 0 hello-upstream\" (allowed once)", r[0])
	}
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "second ") }); i < 0 ||
		!strings.HasPrefix(lines[i], "second exit 1 ") || !strings.Contains(lines[i], "403") || strings.Contains(lines[i], "hello-upstream") {
		t.Errorf("the sandbox's output: got %q, want a line \"second exit 1 ...403...\" (denied once)", r[0])
	}
	waitApprovalRecord(t, logFile, q1, "allow", "once", "ui")
	waitApprovalRecord(t, logFile, q2, "deny", "once", "ui")
	if n := up.requestsFromElsewhere(); n != 0 {
		t.Errorf("the upstream had %d requests from elsewhere than the gateway", n)
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
