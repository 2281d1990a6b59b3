package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// chromiumBin is where Debian's chromium package puts the browser.
const chromiumBin = "/usr/bin/chromium"

// TestUIInChromium drives sbx ui in a real headless Chromium through the
// DevTools protocol (chromedp). sbx ui finds, as sbx ps does, a sandbox
// recorded in a state directory (this test process as its owner) whose
// gateway runs in the test with its API socket and token where a
// sandbox's are, and an ended sandbox by its log. The browser opens the
// printed URL, follows the links, clicks "add rule" and "remove", sees
// each decision of a request through the gateway appear live, reads the
// ended sandbox's audit report, and takes a screenshot that must not be
// blank.
func TestUIInChromium(t *testing.T) {
	needChromium(t)
	stateDir, logDir := t.TempDir(), t.TempDir()
	const id, endedID = "0badc0de", "0ddba11e"
	gw, upstream := startRecordedGateway(t, stateDir, logDir, id)
	writeUITestLog(t, filepath.Join(logDir, endedID, run.LogName), endedID)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	url, exited := startUICommand(t, ctx, stateDir, logDir)
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

	// The printed URL: a session, and the token leaves the address bar.
	step("opening the printed URL", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#running")))
	if loc, err := chromedp.Run(bctx, chromedp.Location()); err != nil || strings.Contains(loc, "token") {
		t.Errorf("location after opening the URL: got %q (%v), want the page without its token", loc, err)
	}
	if got := text("#running"); !strings.Contains(got, id) || !strings.Contains(got, "agent") {
		t.Errorf("running sandboxes: got %q, want %s (agent)", got, id)
	}

	// The sandbox's page, its script running under the CSP: live.
	step("opening the sandbox", followLink(`#running a[href="/s/`+id+`"]`),
		chromedp.WaitVisible(chromedp.CSS("#add-rule")))
	waitText(t, bctx, "#live", "live")

	// A request the policy blocks appears as it happens.
	if got := proxyGet(t, gw, "http://"+upstream+"/"); got != http.StatusForbidden {
		t.Errorf("request before the rule: got %d, want 403", got)
	}
	step("the live block", chromedp.WaitVisible(chromedp.CSS(`#decisions tr.block[data-seq]`)))
	if got := text(`#decisions tr.block[data-seq]`); !strings.Contains(got, "api.test") {
		t.Errorf("live block row: got %q, want api.test's", got)
	}

	// Add rule, clicked: the request goes through, live.
	step("adding a rule", chromedp.SendKeys(chromedp.CSS(`#add-rule input[name="pattern"]`), upstream),
		chromedp.Click(chromedp.CSS("#add")), chromedp.WaitVisible(chromedp.CSS(`#rules tr[data-rule="r1"]`)))
	if got := text(`#rules tr[data-rule="r1"]`); !strings.Contains(got, "allow") || !strings.Contains(got, "api.test") {
		t.Errorf("added rule's row: got %q, want allow api.test", got)
	}
	waitText(t, bctx, "#live", "live")
	if got := proxyGet(t, gw, "http://"+upstream+"/"); got != http.StatusOK {
		t.Errorf("request after add rule: got %d, want 200", got)
	}
	step("the live allow", chromedp.WaitVisible(chromedp.CSS(`#decisions tr.allow[data-seq]`)))
	if got := text(`#decisions tr.allow[data-seq]`); !strings.Contains(got, "r1") {
		t.Errorf("live allow row: got %q, want rule r1's", got)
	}
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	checkNotBlank(t, shot)

	// Remove, clicked: the rule is gone and the request blocked again.
	step("removing the rule", chromedp.Click(chromedp.CSS(`#rules tr[data-rule="r1"] button.remove`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#rules tr[data-rule="r1"]`)))
	if got := proxyGet(t, gw, "http://"+upstream+"/"); got != http.StatusForbidden {
		t.Errorf("request after remove: got %d, want 403", got)
	}

	// The ended sandbox's audit report, from the first page.
	step("the first page", followLink(`header a.home`), chromedp.WaitVisible(chromedp.CSS("#ended")))
	step("the audit report", followLink(`#ended a[href="/s/`+endedID+`/audit"]`), chromedp.WaitVisible(chromedp.CSS("#report")))
	if got := text("#report"); !strings.Contains(got, "<b>bold</b>.test") {
		t.Errorf("audit report: got %q, want the ended sandbox's host, as text", got)
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

// needChromium skips the test when chromium is not installed, or fails
// it under SBX_REQUIRE_PRIVILEGED=1.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumBin); err != nil {
		if os.Getenv("SBX_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("chromium is not installed (%v), and SBX_REQUIRE_PRIVILEGED=1: install it with apt-get install -y chromium", err)
		}
		t.Skipf("chromium is not installed (%v): apt-get install -y chromium to run this test", err)
	}
}

// startChromium starts a headless Chromium for the whole test and returns
// its context; the test's cleanup stops it.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	// The browser: nothing but loopback reaches anything (a dead proxy
	// for the rest), and nothing of its own in the background. Its
	// temporary files (a singleton socket it leaves when killed) go in
	// the test's directory, not the machine's /tmp.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumBin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-features", "NetworkTimeServiceQuerying"), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.ProxyServer("http://127.0.0.1:9"), chromedp.Env("TMPDIR="+t.TempDir()))
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, for the whole test
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

// startRecordedGateway starts a gateway as sandbox id's (its API socket,
// token and log where sbx run puts them) and records the sandbox in
// stateDir with this process as its owner; it returns the gateway and
// the host:port, api.test's, of an upstream on loopback. Its policy's
// default is block; loopback is allowed past the address guard.
func startRecordedGateway(t *testing.T, stateDir, logDir, id string) (*gateway.Gateway, string) {
	t.Helper()
	return startRecordedGatewaySpec(t, stateDir, logDir, id, netpolicy.Spec{Default: netpolicy.Block})
}

// startRecordedGatewaySpec is startRecordedGateway with the policy spec,
// loopback allowed.
func startRecordedGatewaySpec(t *testing.T, stateDir, logDir, id string, spec netpolicy.Spec) (*gateway.Gateway, string) {
	t.Helper()
	spec.AllowPrivate = append(spec.AllowPrivate, netip.MustParsePrefix("127.0.0.0/8"))
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res := &gateway.Resolver{System: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, fmt.Errorf("no DNS in tests")
	}}}
	if err := res.AddStatic("api.test", netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(stateDir, id)
	if err := os.MkdirAll(filepath.Join(logDir, id), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw, err := gateway.Start(ctx, gateway.Config{
		Listen: "127.0.0.1:0", API: []string{"unix:" + filepath.Join(dir, "api.sock")}, TokenFile: filepath.Join(dir, "token"),
		LogFile: filepath.Join(logDir, id, run.LogName), Policy: p, Resolver: res, Sandbox: id,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		gw.Close()
	})
	st := sandbox.State{ID: id, Name: "agent", Status: sandbox.StatusRunning, PID: os.Getpid(), Command: []string{"agent", "--work"}, Created: time.Now()}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "upstream\n") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln) // ends when the cleanup closes it
	t.Cleanup(func() { up.Close() })
	return gw, fmt.Sprintf("api.test:%d", ln.Addr().(*net.TCPAddr).Port)
}

// writeUITestLog writes an ended sandbox's decision log, with a host that
// holds HTML.
func writeUITestLog(t *testing.T, path, id string) {
	t.Helper()
	rec := decisionlog.Record{V: decisionlog.SchemaVersion, Seq: 1, ID: "c1", Event: decisionlog.EventDecision, Time: time.Now(), Sandbox: id,
		Client: "10.0.0.2:4000", Kind: decisionlog.KindHTTP, Method: "GET", Host: "<b>bold</b>.test", Port: 80, Path: "/",
		Action: "block", Enforced: true, Rule: "default", Reason: "no rule matched", PolicyVersion: 1, Status: 403}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(rec.AppendJSON(nil), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startUICommand runs sbx ui --port 0 (and extra flags) until ctx ends
// and returns the URL it printed and a channel that gets its exit code.
func startUICommand(t *testing.T, ctx context.Context, stateDir, logDir string, extra ...string) (string, <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	root := newRootCmd()
	root.SetArgs(append([]string{"ui", "--port", "0", "--state-dir", stateDir, "--log-dir", logDir}, extra...))
	root.SetOut(pw)
	root.SetErr(&stderr)
	exited := make(chan int, 1)
	// Ends when ctx does: sbx ui stops then.
	go func() {
		code := execute(ctx, root)
		pw.Close()
		exited <- code
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("sbx ui printed nothing (exit %d); stderr: %s", <-exited, stderr.String())
	}
	line := sc.Text()
	go io.Copy(io.Discard, pr) // the rest of its output; ends when it exits
	u, ok := strings.CutPrefix(line, "sbx ui: open ")
	if !ok {
		t.Fatalf("sbx ui printed %q, want \"sbx ui: open URL\"", line)
	}
	if pu, err := url.Parse(u); err != nil || pu.Hostname() != "127.0.0.1" || pu.Query().Get("token") == "" {
		t.Fatalf("sbx ui's URL %q: want http://127.0.0.1:PORT/?token=...", u)
	}
	return u, exited
}

// proxyGet sends GET target through the gateway's proxy and returns the
// status.
func proxyGet(t *testing.T, gw *gateway.Gateway, target string) int {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: gw.ProxyAddr.String()}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s through the gateway: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitText waits up to 30 s until the text of sel holds want.
func waitText(t *testing.T, bctx context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		cancel()
		if got = s; err == nil && strings.Contains(s, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("text of %s: got %q after 30 s, want it to hold %q (does the page's script run?)", sel, got, want)
}

// checkNotBlank fails unless the PNG shot has pixels of more than one
// colour, and of a fair number of them: the page drew.
func checkNotBlank(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 8 {
		t.Errorf("screenshot of %v: %d colours, want the page drawn (at least 8)", b.Size(), len(colours))
	}
}

// followLink clicks the link sel and waits until the page it opens has
// loaded. A click, or a query, made while a page still loads can find a
// node that its document no longer has once loaded ("Could not find node
// with given id").
func followLink(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
		return chromedp.Void{}, err
	}
}
