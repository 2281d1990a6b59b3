package gateway

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
	"github.com/sbx-dev/sbx/netpolicy"
)

// These tests play a sandbox that tries to reach an upstream without its
// own record in the decision log (docs/decision-log.md): by filling the
// log to its size limit, by flooding it past its rate limit, and by
// removing or replacing the file (as another process on the host could)
// while it sends requests.

// readRecords decodes every record of the log file at path.
func readRecords(t *testing.T, path string) []decisionlog.Record {
	t.Helper()
	var out []decisionlog.Record
	for _, line := range decisionlogtest.RawLines(t, path) {
		var r decisionlog.Record
		if err := decisionlog.Decode(line, &r); err != nil {
			t.Fatalf("%s: %v: %q", path, err, line)
		}
		out = append(out, r)
	}
	return out
}

// allowedPaths returns the paths of the allowed decisions in recs.
func allowedPaths(recs []decisionlog.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Event == decisionlog.EventDecision && r.Action == string(netpolicy.Allow) {
			out = append(out, r.Path)
		}
	}
	return out
}

// TestFaultLogFullBlocksExfiltration fills the log to --log-max-size with junk
// requests, then sends the one that matters: the gateway blocks it (and a
// tunnel) with a reason naming the full log and the flag, the upstream
// never sees it, the logger says so once, and every request the upstream
// saw has its decision in the file. Moving the full log away gives room:
// a new log at the path, whose first record counts what was blocked
// meanwhile, and requests go through again.
func TestFaultLogFullBlocksExfiltration(t *testing.T) {
	fg := startLimitedGateway(t, t.TempDir(), decisionlog.FileSinkOptions{
		RatePerSecond: decisionlog.NoLimit, MaxBytes: 16 << 10, MaxBytesFlag: "--log-max-size"})
	for n := 0; ; n++ {
		if status, _ := fg.get(t, fmt.Sprintf("/junk/%d", n)); status != http.StatusOK {
			break
		}
		if n > 1000 {
			t.Fatal("1000 requests did not fill a 16 KiB log")
		}
	}
	full := "decision log " + fg.path + " is full (--log-max-size 16k)"
	status, body := fg.get(t, "/exfiltrate")
	if status != http.StatusForbidden || !strings.Contains(body, full) || !strings.Contains(body, "run again with a larger --log-max-size") {
		t.Errorf("GET /exfiltrate with the log full: got %d %q, want 403 naming %q and the flag", status, body, full)
	}
	if status, _ := rawConnect(t, fg.g.ProxyAddr.String(), fg.up.Listener.Addr().String()); status != http.StatusForbidden {
		t.Errorf("CONNECT with the log full: got %d, want 403", status)
	}
	if slices.Contains(fg.saw(), "/exfiltrate") {
		t.Error("the upstream got /exfiltrate, which the full log could not record")
	}
	if d := fg.lastDecision(t); d.Action != "block" || d.Rule != netpolicy.RuleGuard || !strings.Contains(d.Reason, full) {
		t.Errorf("the ring's last decision: got %+v, want a block by rule guard naming the full log", d)
	}
	fg.logs.waitFor(t, full, 1)
	for range 5 {
		fg.get(t, "/again")
	}
	if got := strings.Count(fg.logs.String(), full); got != 1 {
		t.Errorf("the logger said the log was full %d times, want once", got)
	}
	saw := fg.saw()
	if got := allowedPaths(readRecords(t, fg.path)); !slices.Equal(got, saw) {
		t.Errorf("allowed decisions in the full log:\n got %q\nwant what the upstream saw, %q", got, saw)
	}

	// Room returns: the full log is moved away.
	old := fg.path + ".1"
	if err := os.Rename(fg.path, old); err != nil {
		t.Fatal(err)
	}
	fg.logs.waitFor(t, "was removed while sbx wrote it", 1)
	if status, body := fg.get(t, "/after"); status != http.StatusOK {
		t.Fatalf("with the full log moved away: got %d %q, want 200", status, body)
	}
	fg.logs.waitFor(t, "the decision log is written again", 1)
	if err := fg.g.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, fg.path)
	if len(recs) == 0 || recs[0].Event != decisionlog.EventDropped || recs[0].Count < 7 ||
		!strings.Contains(recs[0].Reason, "size limit") || !strings.Contains(recs[0].Reason, "removed or replaced") {
		t.Fatalf("the new log's first record: got %+v, want a dropped record counting the 7 blocks, naming the size limit and the file moved away", recs[:min(1, len(recs))])
	}
	if got := allowedPaths(recs); !slices.Equal(got, []string{"/after"}) {
		t.Errorf("allowed decisions in the new log: got %q, want /after", got)
	}
}

// TestLogRateCannotHideExfiltration floods the log past --log-rate with
// one request repeated, then sends requests to new paths of the same
// host: each of those has its decision in the file, and the repeats left
// out are counted by a dropped record that names their target, so that
// written and counted add up to what was sent.
func TestLogRateCannotHideExfiltration(t *testing.T) {
	fg := startLimitedGateway(t, t.TempDir(), decisionlog.FileSinkOptions{RatePerSecond: 1, Burst: 10, MaxBytes: decisionlog.NoLimit})
	const junk = 200
	for range junk {
		if status, _ := fg.get(t, "/junk"); status != http.StatusOK {
			t.Fatalf("junk: got %d, want 200", status)
		}
	}
	exfil := []string{"/exfil/aGVsbG8", "/exfil/d29ybGQ", "/exfil/c2VjcmV0"}
	for _, p := range exfil {
		if status, _ := fg.get(t, p); status != http.StatusOK {
			t.Fatalf("%s: got %d, want 200", p, status)
		}
	}
	if err := fg.g.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, fg.path)
	var written, counted uint64
	got := map[string]int{}
	for _, r := range recs {
		switch {
		case r.Event == decisionlog.EventDecision && r.Path == "/junk":
			written++
		case r.Event == decisionlog.EventDecision:
			got[r.Path]++
		case r.Event == decisionlog.EventDropped:
			for _, tg := range r.Targets {
				if tg.Event == decisionlog.EventDecision && tg.Path == "/junk" && tg.Method == "GET" && tg.Action == "allow" {
					counted += tg.Count
				}
			}
		}
	}
	for _, p := range exfil {
		if got[p] != 1 {
			t.Errorf("decisions for %s in the file: got %d, want 1 (a new target is always written)", p, got[p])
		}
	}
	if written+counted != junk || counted == 0 {
		t.Errorf("/junk: %d decisions written and %d counted by target, want %d in all, some counted", written, counted, junk)
	}
}

// sentRequest is one request of a client loop: its path, whether it was
// sent after the log file was removed or replaced, and its status.
type sentRequest struct {
	path   string
	after  bool
	status int
}

// clientLoop sends GET /r/N through the gateway one after another, until
// stop is closed, marking those sent once changed is set.
func (fg *faultGateway) clientLoop(changed *atomic.Bool, stop <-chan struct{}) <-chan []sentRequest {
	done := make(chan []sentRequest, 1)
	go func() { // ends when stop is closed
		var out []sentRequest
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- out
				return
			default:
			}
			s := sentRequest{path: fmt.Sprintf("/r/%d", i), after: changed.Load()}
			resp, err := fg.client.Get(fg.up.URL + s.path)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s.status = resp.StatusCode
			}
			out = append(out, s)
		}
	}()
	return done
}

// waitSeen waits until the upstream got n requests.
func (fg *faultGateway) waitSeen(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(fg.saw()) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream got %d requests, want %d", len(fg.saw()), n)
		}
	}
}

// TestFaultLogRemovedWhileRequestsGo removes the log file while a client sends
// requests: every request sent after the removal that the upstream
// answered has its decision in the new log at the path, which says that
// the old one vanished; and the removal is said.
func TestFaultLogRemovedWhileRequestsGo(t *testing.T) {
	fg := startFaultGateway(t, t.TempDir())
	var removed atomic.Bool
	stop := make(chan struct{})
	done := fg.clientLoop(&removed, stop)
	fg.waitSeen(t, 20)
	if err := os.Remove(fg.path); err != nil {
		t.Fatal(err)
	}
	removed.Store(true)
	fg.logs.waitFor(t, "was removed while sbx wrote it", 1)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	sent := <-done
	if err := fg.g.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, fg.path)
	inLog := allowedPaths(recs)
	answered := 0
	var unlogged []string
	for _, s := range sent {
		if !s.after || s.status != http.StatusOK {
			continue
		}
		answered++
		if !slices.Contains(inLog, s.path) {
			unlogged = append(unlogged, s.path)
		}
	}
	if len(unlogged) > 0 {
		t.Errorf("%d requests sent after the log was removed were answered with no decision in the log at %s: %q", len(unlogged), fg.path, unlogged)
	}
	if answered == 0 {
		t.Error("no request went through after the removal: want a new log, and requests going on")
	}
	if len(recs) == 0 || recs[0].Event != decisionlog.EventDropped || !strings.Contains(recs[0].Reason, "removed or replaced") {
		t.Errorf("the new log's first record: got %+v, want a dropped record saying the old file vanished", recs[:min(1, len(recs))])
	}
}

// TestFaultLogReplacedWhileRequestsGo renames another file over the log while
// a client sends requests: no request sent after that reaches the
// upstream, each is blocked naming the log, the other file is not written
// into, and once it is removed a new log is made and requests go on.
func TestFaultLogReplacedWhileRequestsGo(t *testing.T) {
	fg := startFaultGateway(t, t.TempDir())
	other := filepath.Join(filepath.Dir(fg.path), "other")
	if err := os.WriteFile(other, []byte("not sbx's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var replaced atomic.Bool
	stop := make(chan struct{})
	done := fg.clientLoop(&replaced, stop)
	fg.waitSeen(t, 20)
	if err := os.Rename(other, fg.path); err != nil {
		t.Fatal(err)
	}
	replaced.Store(true)
	fg.logs.waitFor(t, "another file is at its path now", 1)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	sent := <-done
	saw := fg.saw()
	blocked := 0
	var through, reached []string
	for _, s := range sent {
		if !s.after {
			continue
		}
		if s.status != http.StatusForbidden {
			through = append(through, fmt.Sprintf("%s %d", s.path, s.status))
		}
		if slices.Contains(saw, s.path) {
			reached = append(reached, s.path)
		}
		blocked++
	}
	if len(through) > 0 || len(reached) > 0 {
		t.Errorf("sent after another file replaced the log: %q not refused with 403, and %q reached the upstream; want none", through, reached)
	}
	if blocked == 0 {
		t.Fatal("no request was sent after the replacement")
	}
	if data, _ := os.ReadFile(fg.path); string(data) != "not sbx's\n" {
		t.Errorf("the other file was written into: %q", data)
	}
	if err := os.Remove(fg.path); err != nil {
		t.Fatal(err)
	}
	if status, _ := fg.get(t, "/after"); status != http.StatusOK {
		t.Errorf("once the other file is gone: got %d, want 200", status)
	}
	if err := fg.g.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, fg.path)
	if got := allowedPaths(recs); !slices.Equal(got, []string{"/after"}) {
		t.Errorf("allowed decisions in the new log: got %q, want /after", got)
	}
	if len(recs) == 0 || recs[0].Event != decisionlog.EventDropped || recs[0].Count < uint64(blocked) {
		t.Errorf("the new log's first record: got %+v, want a dropped record counting the %d blocked requests", recs[:min(1, len(recs))], blocked)
	}
}
