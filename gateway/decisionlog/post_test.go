package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// closeRecord is a request's close record for the Post tests.
func closeRecord(host string) *Record {
	r := gcRecord(host)
	r.Event, r.Status = EventClose, 200
	return r
}

// heldCommit starts a commit of host whose write waits until gate is
// closed, through l's file whose writes is counting, and returns the
// commit's error once it returns.
func heldCommit(t *testing.T, l *Log, writes *atomic.Int64, host string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := l.Commit(gcRecord(host))
		done <- err
	}()
	gcWaitFor(t, "the commit's write", func() bool { return writes.Load() == 1 })
	return done
}

// TestLogPostDoesNotWaitForCommit posts a close record while a commit's
// write is held: Post returns at once (Emit would wait for the write),
// and once the write is let go, the commit writes the posted record
// before it returns: the ring, then the file, hold the commit's record,
// then the posted one, numbered after it.
func TestLogPostDoesNotWaitForCommit(t *testing.T) {
	var writes atomic.Int64
	gate := make(chan struct{})
	l, _, ring, path := openTestLog(t, func(f *os.File, b []byte) (int, error) {
		if writes.Add(1) == 1 {
			<-gate
		}
		return f.Write(b)
	})
	committed := heldCommit(t, l, &writes, "committed.test")

	posted := make(chan struct{})
	go func() {
		l.Post(closeRecord("posted.test"))
		close(posted)
	}()
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("Post waited for the commit's write")
	}
	close(gate)
	if err := <-committed; err != nil {
		t.Fatalf("the commit: %v", err)
	}
	// The commit wrote the posted record before it returned.
	lines, _ := ring.Since(0, 10)
	var inRing []string
	for _, line := range lines {
		var r Record
		if err := Decode(line, &r); err != nil {
			t.Fatal(err)
		}
		inRing = append(inRing, r.Host+"#"+r.Event)
	}
	if got, want := strings.Join(inRing, " "), "committed.test#decision posted.test#close"; got != want {
		t.Errorf("the ring: got %q, want %q", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := postedLines(t, path)
	if want := "1 committed.test decision, 2 posted.test close"; got != want {
		t.Errorf("the file: got %q, want %q", got, want)
	}
}

// TestLogPostAfterFailedCommit posts a close record while a commit's
// write is held, then makes that write fail: the commit gives its seq
// back before the posted record is numbered, so the posted record takes
// it, and the seqs have no gap. (The file, at fault, leaves the posted
// record out and counts it in a dropped record, as it would an Emit's.)
func TestLogPostAfterFailedCommit(t *testing.T) {
	var writes atomic.Int64
	gate := make(chan struct{})
	l, _, ring, path := openTestLog(t, func(f *os.File, b []byte) (int, error) {
		if writes.Add(1) == 1 {
			<-gate
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.EIO}
		}
		return f.Write(b)
	})
	committed := heldCommit(t, l, &writes, "failed.test")
	l.Post(closeRecord("posted.test"))
	close(gate)
	var le *LogFileError
	if err := <-committed; !errors.As(err, &le) {
		t.Fatalf("the commit: got %v, want a *LogFileError", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines, _ := ring.Since(0, 10)
	var r Record
	if len(lines) == 0 || Decode(lines[0], &r) != nil || r.Seq != 1 || r.Host != "posted.test" {
		t.Errorf("the ring's first record: got %q, want posted.test's close with seq 1", lines)
	}
	var got []string
	for _, r := range decisionlogtest.ReadLines(t, path) {
		got = append(got, fmt.Sprintf("%d %s %d", r.Seq, r.Event, r.Count))
	}
	if want := "2 dropped 1"; strings.Join(got, ", ") != want {
		t.Errorf("the file: got %q, want %q", strings.Join(got, ", "), want)
	}
}

// TestLogPostAfterClose posts a record after Close: nothing is written.
func TestLogPostAfterClose(t *testing.T) {
	l, _, ring, path := openTestLog(t, (*os.File).Write)
	l.Post(closeRecord("before.test"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Post(closeRecord("after.test"))
	if got, want := postedLines(t, path), "1 before.test close"; got != want {
		t.Errorf("the file: got %q, want %q", got, want)
	}
	if lines, _ := ring.Since(0, 10); len(lines) != 1 {
		t.Errorf("the ring: got %d records, want 1", len(lines))
	}
}

// postedLines returns the decision and close records of the log at path
// as "seq host event", joined by ", ".
func postedLines(t *testing.T, path string) string {
	t.Helper()
	var got []string
	for _, r := range decisionlogtest.ReadLines(t, path) {
		if r.Event == EventDecision || r.Event == EventClose {
			got = append(got, fmt.Sprintf("%d %s %s", r.Seq, r.Host, r.Event))
		}
	}
	return strings.Join(got, ", ")
}

// BenchmarkRequestRecords has 32 goroutines write a request's two
// records each, as the gateway's HTTP path does: the commit of its
// decision, then its close record, by Emit (which waits while a commit's
// write holds the Log) or by Post (which does not), in the same run. It
// reports the CPU time per request (cpu-ns/op): what the decision log
// costs an HTTP request.
func BenchmarkRequestRecords(b *testing.B) {
	for _, closeBy := range []string{"emit", "post"} {
		b.Run(closeBy, func(b *testing.B) {
			fs, _ := openTempSink(b, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
			l := NewLog("sb", fs, NewRing(10_000))
			defer l.Close()
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if _, err := l.Commit(gcRecord("api.example.test")); err != nil {
							b.Error(err)
							return
						}
						if closeBy == "post" {
							l.Post(closeRecord("api.example.test"))
						} else {
							l.Emit(closeRecord("api.example.test"))
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
