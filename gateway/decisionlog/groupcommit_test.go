package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// gcRecord is an allowed request's record for the group commit tests.
func gcRecord(host string) *Record {
	return &Record{Event: EventDecision, Kind: KindHTTP, Host: host, Port: 443, Method: "GET",
		Path: "/v1/items", Action: "allow", Rule: "r1"}
}

// openTestLog opens a FileSink without a budget whose writes fn makes, and a
// Log over it and a Ring.
func openTestLog(t testing.TB, fn func(f *os.File, b []byte) (int, error)) (*Log, *FileSink, *Ring, string) {
	t.Helper()
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	fs.SetWriteFunc(fn)
	ring := NewRing(10_000)
	return NewLog("", fs, ring), fs, ring, path
}

// gcQueued returns how many commits wait in l's open batch.
func gcQueued(l *Log) int {
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	if l.open == nil {
		return 0
	}
	return len(l.open.recs)
}

// TestLogCommitsShareWrites commits from many goroutines at once through
// a file whose writes are slow: commits that come while a write is under
// way are taken to the file together by the next one, so there are far
// fewer writes than commits, and the file still holds every record once,
// in seq order.
func TestLogCommitsShareWrites(t *testing.T) {
	var writes atomic.Int64
	l, _, _, path := openTestLog(t, func(f *os.File, b []byte) (int, error) {
		writes.Add(1)
		time.Sleep(2 * time.Millisecond) // a slow disk: commits pile up
		return f.Write(b)
	})
	const goroutines, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if seq, err := l.Commit(gcRecord(fmt.Sprintf("h%d-%d.test", g, i))); err != nil || seq == 0 {
					errs <- fmt.Errorf("commit h%d-%d: got seq %d, %v; want a seq and nil", g, i, seq, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	commits := int64(goroutines * each)
	got := writes.Load()
	t.Logf("%d commits, %d writes", commits, got)
	if got > commits/4 {
		t.Errorf("%d concurrent commits made %d writes, want at most %d: commits waiting for a write should share the next", commits, got, commits/4)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decisionlogtest.ReadLines(t, path) // whole records, seqs increasing
	if int64(len(lines)) != commits {
		t.Fatalf("the file holds %d records, want %d", len(lines), commits)
	}
	seen := map[string]bool{}
	for i, r := range lines {
		if r.Seq != uint64(i+1) {
			t.Errorf("line %d: seq %d, want %d", i+1, r.Seq, i+1)
		}
		if seen[r.Host] {
			t.Errorf("%s is in the file twice", r.Host)
		}
		seen[r.Host] = true
	}
}

// TestLogFailedBatchFailsEveryCommit holds a commit's write while 16 more
// commits queue behind it, then makes the file fail: the 16 share one
// write, which fails, and every one of them returns the file's error,
// with no seq; none of them reaches the file or the ring, and the next
// commit, once the file works, does.
func TestLogFailedBatchFailsEveryCommit(t *testing.T) {
	var (
		writes  atomic.Int64
		failing atomic.Bool
		gate    = make(chan struct{})
	)
	l, _, ring, path := openTestLog(t, func(f *os.File, b []byte) (int, error) {
		if writes.Add(1) == 1 {
			<-gate // the first commit's write waits while the others queue
		} else if failing.Load() {
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.EIO}
		}
		return f.Write(b)
	})
	first := make(chan error, 1)
	go func() {
		_, err := l.Commit(gcRecord("first.test"))
		first <- err
	}()
	gcWaitFor(t, "the first commit's write", func() bool { return writes.Load() == 1 })

	const queued = 16
	type result struct {
		seq uint64
		err error
	}
	results := make(chan result, queued)
	for i := range queued {
		go func() {
			seq, err := l.Commit(gcRecord(fmt.Sprintf("batch-%d.test", i)))
			results <- result{seq, err}
		}()
	}
	gcWaitFor(t, fmt.Sprintf("%d commits queued behind the write", queued), func() bool { return gcQueued(l) == queued })
	failing.Store(true)
	close(gate)

	if err := <-first; err != nil {
		t.Fatalf("the first commit, written before the fault: %v", err)
	}
	for range queued {
		r := <-results
		var le *LogFileError
		if !errors.As(r.err, &le) || !errors.Is(r.err, syscall.EIO) || r.seq != 0 {
			t.Errorf("a commit of the failed batch: got seq %d, %v; want 0 and a *LogFileError wrapping EIO", r.seq, r.err)
		}
	}
	if got := writes.Load(); got != 2 {
		t.Errorf("writes: got %d, want 2 (the first commit's, and one for the %d queued)", got, queued)
	}

	failing.Store(false)
	if _, err := l.Commit(gcRecord("after.test")); err != nil {
		t.Fatalf("a commit once the file works: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range decisionlogtest.ReadLines(t, path) {
		if r.Event == EventDecision {
			got = append(got, r.Host)
		}
	}
	if want := "first.test after.test"; strings.Join(got, " ") != want {
		t.Errorf("decisions in the file: got %q, want %q", strings.Join(got, " "), want)
	}
	lines, _ := ring.Since(0, 100)
	for _, line := range lines {
		if strings.Contains(string(line), "batch-") {
			t.Errorf("the ring holds a failed commit: %s", line)
		}
	}
}

// gcWaitFor waits up to 10 s for cond, failing the test without it.
func gcWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
	}
}

// BenchmarkLogCommit has N goroutines commit at once, each commit by a
// write of its own (alone, as Commit did before group commit) and by
// Commit's batches (group), in the same run. The file is written as a
// log is, but each write goes to the start of a scratch file, so that
// the file does not grow with b.N. writes/op is the writes per commit.
//
//	go test ./gateway/decisionlog -run '^$' -bench LogCommit
func BenchmarkLogCommit(b *testing.B) {
	for _, n := range []int{1, 8, 32, 128} {
		for _, mode := range []string{"alone", "group"} {
			b.Run(fmt.Sprintf("%s/committers=%d", mode, n), func(b *testing.B) {
				scratch, err := os.Create(filepath.Join(b.TempDir(), "scratch"))
				if err != nil {
					b.Fatal(err)
				}
				defer scratch.Close()
				var writes atomic.Int64
				l, _, _, _ := openTestLog(b, func(f *os.File, p []byte) (int, error) {
					writes.Add(1)
					return f.Write(p)
				})
				defer l.Close()
				commit := l.Commit
				if mode == "alone" {
					commit = l.commitAlone
				}
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				b.ResetTimer()
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left.Add(-1) >= 0 {
							if _, err := commit(gcRecord("api.example.test")); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
			})
		}
	}
}

// BenchmarkCommitParallel has 32 goroutines commit allowed requests' records
// at once through a Log over a FileSink without a budget and a Ring, as the
// gateway's HTTP forward path commits each request before it goes upstream.
// The file is a real one and grows with b.N. cpu-ns/op is the process's
// CPU time (user and system) per commit, which other processes' load
// changes less than the time per commit.
//
//	go test ./gateway/decisionlog -run '^$' -bench CommitParallel
func BenchmarkCommitParallel(b *testing.B) {
	fs, _ := openTempSink(b, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	l := NewLog("sb", fs, NewRing(10_000))
	defer l.Close()
	const committers = 32
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := l.Commit(gcRecord("api.example.test")); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the CPU time, user and system, the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
