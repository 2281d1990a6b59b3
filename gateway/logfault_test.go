package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
	"github.com/sbx-dev/sbx/netpolicy"
)

// faultGateway is a gateway whose decision log is in dir, allowing
// loopback, with an upstream that counts the requests it gets and the
// gateway's logger writing to logs.
type faultGateway struct {
	g      *Gateway
	path   string
	up     *httptest.Server
	hits   atomic.Int64
	logs   *syncBuffer
	client *http.Client

	seenMu sync.Mutex
	seen   []string // the paths the upstream got, in order
}

// saw returns the paths the upstream got, in order.
func (fg *faultGateway) saw() []string {
	fg.seenMu.Lock()
	defer fg.seenMu.Unlock()
	return slices.Clone(fg.seen)
}

// waitFor waits up to 10 s for the logs to hold want n times.
func (b *syncBuffer) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(b.String(), want) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's logger did not say %q %d times; it said:\n%s", want, n, b.String())
		}
	}
}

func startFaultGateway(t *testing.T, dir string) *faultGateway {
	t.Helper()
	return startLimitedGateway(t, dir, decisionlog.FileSinkOptions{RatePerSecond: decisionlog.NoLimit, MaxBytes: decisionlog.NoLimit})
}

// startLimitedGateway is startFaultGateway with the log's limits.
func startLimitedGateway(t *testing.T, dir string, limits decisionlog.FileSinkOptions) *faultGateway {
	t.Helper()
	fg := &faultGateway{path: filepath.Join(dir, "decisions.jsonl"), logs: &syncBuffer{}}
	fg.up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fg.hits.Add(1)
		fg.seenMu.Lock()
		fg.seen = append(fg.seen, r.URL.Path)
		fg.seenMu.Unlock()
		io.WriteString(w, "hello\n")
	}))
	t.Cleanup(fg.up.Close)
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: mustCompile(t, loopbackPolicy(netpolicy.Allow)),
		LogFile: fg.path, LogLimits: limits,
		Logger: slog.New(slog.NewTextHandler(fg.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fg.g = g
	t.Cleanup(func() { g.Close() })
	pu, _ := url.Parse("http://" + g.ProxyAddr.String())
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	t.Cleanup(tr.CloseIdleConnections)
	fg.client = &http.Client{Transport: tr}
	return fg
}

// fileSink returns the gateway's FileSink.
func (fg *faultGateway) fileSink(t *testing.T) *decisionlog.FileSink {
	t.Helper()
	if fg.g.fileSink == nil {
		t.Fatal("the gateway has no FileSink")
	}
	return fg.g.fileSink
}

// get requests path from the upstream through the gateway, and returns
// the status and the body.
func (fg *faultGateway) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := fg.client.Get(fg.up.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lastDecision returns the last decision record the API's ring holds.
func (fg *faultGateway) lastDecision(t *testing.T) decisionlogtest.Line {
	t.Helper()
	lines, _ := fg.g.Ring.Since(0, 100000)
	for i := len(lines) - 1; i >= 0; i-- {
		var r decisionlogtest.Line
		if err := json.Unmarshal(lines[i], &r); err == nil && r.Event == decisionlog.EventDecision {
			return r
		}
	}
	t.Fatal("the ring holds no decision")
	return decisionlogtest.Line{}
}

// TestFaultLogFullBlocksRequests makes a running gateway's log file fail
// with ENOSPC: requests and tunnels it would allow are refused with 403,
// their reason naming the error, nothing reaches the upstream, the
// logger says so at once, and once the file works again requests go
// through and the logger says that too. Every allowed request that
// reached the upstream has its record in the file.
func TestFaultLogFullBlocksRequests(t *testing.T) {
	fg := startFaultGateway(t, t.TempDir())
	ff := &decisionlogtest.FlakyFile{}
	fg.fileSink(t).SetWriteFunc(ff.Write)

	if status, _ := fg.get(t, "/before"); status != http.StatusOK {
		t.Fatalf("before the fault: got %d, want 200", status)
	}
	ff.Set(syscall.ENOSPC, true)
	for _, p := range []string{"/during1", "/during2"} {
		status, body := fg.get(t, p)
		if status != http.StatusForbidden || !strings.Contains(body, "no space left on device") {
			t.Errorf("GET %s with the log full: got %d %q, want 403 naming the log's error", p, status, body)
		}
	}
	if status, _ := rawConnect(t, fg.g.ProxyAddr.String(), fg.up.Listener.Addr().String()); status != http.StatusForbidden {
		t.Errorf("CONNECT with the log full: got %d, want 403", status)
	}
	if got := fg.hits.Load(); got != 1 {
		t.Errorf("the upstream got %d requests, want 1: requests went through unrecorded", got)
	}
	d := fg.lastDecision(t)
	if d.Action != "block" || d.Rule != netpolicy.RuleGuard || !strings.Contains(d.Reason, "no space left on device") || !strings.Contains(d.Reason, fg.path) {
		t.Errorf("the ring's last decision: got %+v, want a block by rule guard naming %s and the error", d, fg.path)
	}
	fg.logs.waitFor(t, "cannot be written (write: no space left on device), so every request is blocked", 1)

	ff.Set(nil, false)
	if status, _ := fg.get(t, "/after"); status != http.StatusOK {
		t.Fatalf("once the log works again: got %d, want 200", status)
	}
	fg.logs.waitFor(t, "the decision log is written again", 1)
	if got := strings.Count(fg.logs.String(), "cannot be written ("); got != 1 {
		t.Errorf("the fault was said %d times, want once", got)
	}
	if err := fg.g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var allowed []string
	dropped := false
	for _, r := range decisionlogtest.ReadLines(t, fg.path) {
		switch {
		case r.Event == decisionlog.EventDecision && r.Action == "allow":
			allowed = append(allowed, r.Path)
		case r.Event == decisionlog.EventDropped:
			dropped = strings.Contains(r.Reason, "no space left on device")
		}
	}
	if strings.Join(allowed, " ") != "/before /after" {
		t.Errorf("allowed requests in the file: got %q, want /before /after", allowed)
	}
	if !dropped {
		t.Error("no dropped record names the error for the records left out")
	}
}

// TestFaultLogRemovedOrReplaced removes a running gateway's log file, and
// then puts another file in its place: each is noticed and said within
// about a second; a removed log is made anew at the next request, whose
// record it holds; a file sbx did not make is not written into, and
// requests are blocked until it is gone.
func TestFaultLogRemovedOrReplaced(t *testing.T) {
	fg := startFaultGateway(t, t.TempDir())
	if status, _ := fg.get(t, "/first"); status != http.StatusOK {
		t.Fatalf("got %d, want 200", status)
	}
	if err := os.Remove(fg.path); err != nil {
		t.Fatal(err)
	}
	fg.logs.waitFor(t, "was removed while sbx wrote it", 1)
	if status, _ := fg.get(t, "/second"); status != http.StatusOK {
		t.Fatalf("after the log was removed: got %d, want 200 (a new log)", status)
	}
	fg.logs.waitFor(t, "the decision log is written again", 1)
	if err := fg.fileSink(t).Flush(); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range decisionlogtest.ReadLines(t, fg.path) {
		if r.Event == decisionlog.EventDecision {
			paths = append(paths, r.Path)
		}
	}
	if strings.Join(paths, " ") != "/second" {
		t.Errorf("the new log's decisions: got %q, want /second", paths)
	}

	// Another file moved over the log.
	other := filepath.Join(filepath.Dir(fg.path), "other")
	if err := os.WriteFile(other, []byte("not sbx's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, fg.path); err != nil {
		t.Fatal(err)
	}
	fg.logs.waitFor(t, "another file is at its path now", 1)
	status, body := fg.get(t, "/third")
	if status != http.StatusForbidden || !strings.Contains(body, "another file is at its path") {
		t.Errorf("with another file in the log's place: got %d %q, want 403 naming it", status, body)
	}
	if data, _ := os.ReadFile(fg.path); string(data) != "not sbx's\n" {
		t.Errorf("the other file was written into: %q", data)
	}
	if got := fg.hits.Load(); got != 2 {
		t.Errorf("the upstream got %d requests, want 2", got)
	}
	if err := os.Remove(fg.path); err != nil {
		t.Fatal(err)
	}
	if status, _ := fg.get(t, "/fourth"); status != http.StatusOK {
		t.Errorf("once the other file is gone: got %d, want 200", status)
	}
	fg.logs.waitFor(t, "the decision log is written again", 2)
}
