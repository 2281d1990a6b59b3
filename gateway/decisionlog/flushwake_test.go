package decisionlog

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestCommitKeepsFlushPending: a commit writes what waits for the file
// along with its records, but leaves the flusher's timer, armed by the
// record before, counted as pending, so that the record after the commit
// (a request's close record, after its decision's commit) does not wake
// the flusher again, a goroutine handoff for every request; and that
// record still reaches the file by that timer.
func TestCommitKeepsFlushPending(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	defer l.Close()
	start := time.Now()
	l.Emit(&Record{Event: EventDecision, ID: "1"})
	if _, err := l.Commit(&Record{Event: EventDecision, ID: "2"}); err != nil {
		t.Fatal(err)
	}
	fs.writer.mu.Lock()
	pending := fs.writer.pending
	fs.writer.mu.Unlock()
	// The flusher's timer clears pending when it fires, fileSinkFlushInterval
	// after the first record: only a check well before that tells.
	if !pending && time.Since(start) < fileSinkFlushInterval/2 {
		t.Errorf("after a commit: pending false, want true (the flusher's timer, armed by the record before, flushes the records after the commit; clearing pending makes the next record wake the flusher again)")
	}
	l.Emit(&Record{Event: EventClose, ID: "2"})
	deadline := time.Now().Add(20 * fileSinkFlushInterval)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n == 3 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the file holds %d records %v after the last one was emitted, want 3:\n%s", n, 20*fileSinkFlushInterval, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
