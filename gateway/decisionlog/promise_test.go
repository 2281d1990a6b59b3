package decisionlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// These tests hold the log's promise (docs/decision-log.md): no record
// that lets a request go on is left out of the file, whatever the
// budget, and none is written into a file that is not at the path.

// allowRecord is the decision of an allowed GET of path on host.
func allowRecord(host, path string) *Record {
	return &Record{Event: EventDecision, Kind: KindHTTP, Method: "GET", Host: host, Port: 80, Path: path, Action: "allow"}
}

// readAll decodes every record of the file at path.
func readAll(t *testing.T, path string) []Record {
	t.Helper()
	var out []Record
	for _, line := range decisionlogtest.RawLines(t, path) {
		var r Record
		if err := Decode(line, &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		out = append(out, r)
	}
	return out
}

// TestFileSinkFullFailsCommits fills a log to its size limit: every
// Commit then fails with a *LogFullError naming the file, the limit and
// the flag, while the file stays within its limit; the reporter is told
// once; records emitted meanwhile are counted in the last dropped record.
func TestFileSinkFullFailsCommits(t *testing.T) {
	fs, path, _ := lfOpen(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: 4 << 10, MaxBytesFlag: "--log-max-size"})
	l := NewLog("sb", fs)
	reports := newFaultReports(l)
	committed := 0
	var err error
	for i := 0; err == nil; i++ {
		if i > 100 {
			t.Fatal("100 commits did not fill a 4 KiB log")
		}
		if _, err = l.Commit(allowRecord("a.test", fmt.Sprintf("/%d", i))); err == nil {
			committed++
		}
	}
	var full *LogFullError
	if !errors.As(err, &full) {
		t.Fatalf("Commit past the limit: got %v, want a *LogFullError", err)
	}
	want := "decision log " + path + " is full (--log-max-size 4k), so every request is blocked until there is room: " +
		"move the file away and sbx starts a new log at its path within a second, or run again with a larger --log-max-size"
	if err.Error() != want {
		t.Errorf("the error:\ngot  %s\nwant %s", err, want)
	}
	if got := reports.next(t); got == nil || got.Error() != want {
		t.Errorf("reported: got %v, want the error", got)
	}
	for i := range 5 {
		l.Emit(&Record{Event: EventDecision, Kind: KindHTTP, Host: "a.test", Port: 80, Path: "/blocked", Action: "block", Reason: err.Error()})
		if _, err := l.Commit(allowRecord("b.test", fmt.Sprintf("/%d", i))); !errors.As(err, &full) {
			t.Errorf("Commit %d while full: got %v, want a *LogFullError", i, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 4<<10 {
		t.Errorf("the file: got %v (%v), want at most 4 KiB", fi.Size(), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, path)
	allowed := 0
	for _, r := range recs {
		if r.Event == EventDecision && r.Action == "allow" {
			allowed++
		}
	}
	last := recs[len(recs)-1]
	if allowed != committed || last.Event != EventDropped || last.Count < 5 || !strings.Contains(last.Reason, "size limit") {
		t.Errorf("got %d allowed decisions and last record %+v, want %d and a dropped record counting the 5 blocks", allowed, last, committed)
	}
	select {
	case e := <-reports.ch:
		t.Errorf("reported again: %v, want the fault told once", e)
	default:
	}
}

// TestFileSinkRateNamesTargets floods past the rate with repeats: each
// request to a new path is written in full (also once the sink remembers
// as many targets as it can), repeats are counted on their target, and
// written and counted add up.
func TestFileSinkRateNamesTargets(t *testing.T) {
	fs, path, clock := lfOpen(t, FileSinkOptions{RatePerSecond: 10, Burst: 10, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	for range 500 {
		if _, err := l.Commit(allowRecord("a.test", "/junk")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
	}
	for i := range 2 * maxFloodTargets {
		if _, err := l.Commit(allowRecord("a.test", fmt.Sprintf("/many/%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		l.Commit(allowRecord("a.test", "/junk"))
	}
	if _, err := l.Commit(allowRecord("a.test", "/exfil")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var junk, counted uint64
	paths := map[string]int{}
	for _, r := range readAll(t, path) {
		switch r.Event {
		case EventDecision:
			paths[r.Path]++
		case EventDropped:
			for _, tg := range r.Targets {
				if diff := cmp.Diff(DroppedTarget{Event: EventDecision, Kind: KindHTTP, Method: "GET", Host: "a.test", Port: 80, Path: "/junk", Action: "allow"},
					DroppedTarget{Event: tg.Event, Kind: tg.Kind, Method: tg.Method, Host: tg.Host, Port: tg.Port, Path: tg.Path, Action: tg.Action}); diff != "" {
					t.Errorf("a dropped record names another target (-want +got):\n%s", diff)
				}
				counted += tg.Count
			}
		}
	}
	junk = uint64(paths["/junk"])
	if junk+counted != 600 || counted == 0 {
		t.Errorf("/junk: %d written and %d counted, want 600 in all, some counted", junk, counted)
	}
	for i := range 2 * maxFloodTargets {
		if p := fmt.Sprintf("/many/%d", i); paths[p] != 1 {
			t.Fatalf("%s: got %d decisions, want 1", p, paths[p])
		}
	}
	if paths["/exfil"] != 1 {
		t.Errorf("/exfil, a new target after %d others: got %d decisions, want 1", 2*maxFloodTargets, paths["/exfil"])
	}
}

// TestFileSinkDroppedTargetsFitALine makes a dropped record name as many
// targets as a sink counts, with long paths whose every byte is escaped:
// the record stays a line a Reader takes.
func TestFileSinkDroppedTargetsFitALine(t *testing.T) {
	fs, path, _ := lfOpen(t, FileSinkOptions{RatePerSecond: 1, Burst: 1, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	long := strings.Repeat("\x01", 1024)
	for i := range 2 * maxFloodTargets {
		r := allowRecord("a.test", fmt.Sprintf("/%d/%s", i, long))
		l.Commit(r)
		l.Commit(allowRecord("a.test", r.Path))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rd := NewReader(bytes.NewReader(data), path)
	var r Record
	targets := 0
	for {
		err := rd.Next(&r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("reading the log: %v", err)
		}
		targets += len(r.Targets)
	}
	if targets == 0 {
		t.Error("no dropped record names a target")
	}
}

// TestDroppedTargetsRoundTrip encodes a dropped record with targets and
// decodes it with Decode and with encoding/json: both give it back.
func TestDroppedTargetsRoundTrip(t *testing.T) {
	in := Record{V: 1, Seq: 7, Event: EventDropped, Time: lfStart, Since: lfStart, Count: 3, Reason: "r",
		Targets: []DroppedTarget{
			{Event: EventDecision, Kind: KindHTTPS, Method: "GET", Host: "a.test", Port: 443, Path: "/x\"\n", Action: "allow", Count: 2},
			{Event: EventClose, Kind: KindConnect, Method: "CONNECT", Host: "b.test", Port: 443, Action: "allow", Count: 1},
		}}
	line := in.AppendJSON(nil)
	var got Record
	if err := Decode(line, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("Decode (-want +got):\n%s", diff)
	}
	var js struct {
		Targets []struct {
			Event, Kind, Method, Host, Path, Action string
			Port                                    int
			Count                                   uint64
		} `json:"targets"`
	}
	if err := json.Unmarshal(line, &js); err != nil || len(js.Targets) != 2 || js.Targets[0].Path != "/x\"\n" || js.Targets[1].Count != 1 {
		t.Errorf("encoding/json: got %+v (%v), want the targets", js, err)
	}
}

// TestFileSinkRemovedAtCommit removes the log between two commits, before
// the sink's watch looks: the second commit fails (its record went into
// the removed file), the next makes a new file whose first record says
// the old one vanished, and goes on.
func TestFileSinkRemovedAtCommit(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileRemoved) {
		t.Fatalf("Commit into the removed file: got %v, want ErrLogFileRemoved", err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/3")); err != nil {
		t.Fatalf("Commit after the removal: got %v, want a new file", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, path)
	if len(recs) != 2 || recs[0].Event != EventDropped || !strings.Contains(recs[0].Reason, "removed or replaced while sbx wrote it (the file was removed") ||
		recs[1].Path != "/3" {
		t.Errorf("the new file: got %+v, want a dropped record saying the old one vanished, then /3", recs)
	}
}

// TestFileSinkReplacedAtCommit puts another file at the log's path
// between two commits (renamed over it, or put there once the log was
// moved away, so that the log still has its one link), an empty one of
// sbx's own uid included: no commit writes into it or into the moved
// log, each fails, until the other file is removed.
func TestFileSinkReplacedAtCommit(t *testing.T) {
	for _, tt := range []struct {
		content string
		moved   bool
	}{{"not sbx's\n", false}, {"", false}, {"not sbx's\n", true}} {
		content := tt.content
		fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
		l := NewLog("sb", fs)
		if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(filepath.Dir(path), "other")
		if err := os.WriteFile(other, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if tt.moved {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(other, path); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileReplaced) {
				t.Errorf("%q: Commit %d with another file at the path: got %v, want ErrLogFileReplaced", content, i, err)
			}
		}
		if data, _ := os.ReadFile(path); string(data) != content {
			t.Errorf("the other file was written into: %q", data)
		}
		os.Remove(path)
		if _, err := l.Commit(allowRecord("a.test", "/3")); err != nil {
			t.Errorf("%q: Commit once the other file is gone: got %v, want nil", content, err)
		}
		l.Close()
	}
}

// TestFileSinkNoticesRemovalWhenIdle removes, then replaces, the file of
// a sink that writes nothing: each is reported within about a second
// (the watch looks twice a second; the bound leaves room for a loaded
// machine), and Commit fails meanwhile.
func TestFileSinkNoticesRemovalWhenIdle(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	defer l.Close()
	reports := newFaultReports(l)
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	other := path + ".other"
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := reports.next(t)
	if took := time.Since(start); !errors.Is(err, ErrLogFileReplaced) || took > 1500*time.Millisecond {
		t.Errorf("reported %v after %v, want ErrLogFileReplaced within about a second", err, took)
	}
	if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileReplaced) {
		t.Errorf("Commit: got %v, want ErrLogFileReplaced", err)
	}
}
