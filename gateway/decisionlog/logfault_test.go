package decisionlog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// faultReports collects what a Log's ReportFileFaults is told.
type faultReports struct {
	ch chan error
}

func newFaultReports(l *Log) *faultReports {
	r := &faultReports{ch: make(chan error, 100)}
	l.ReportFileFaults(func(err error) { r.ch <- err })
	return r
}

// next returns the next report, failing after 10 s without one.
func (r *faultReports) next(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no fault was reported within 10 s")
		return nil
	}
}

// TestFaultLogCommitFailsThenSucceeds makes the file of a Log's FileSink
// fail under a commit (half of the write reaching the file) and then work
// again: the failed commits return the write's error and reach no sink,
// records emitted meanwhile are left out and counted (but a policy
// record, which waits), the fault and the recovery are reported once
// each, and the file holds only whole records: none of a failed commit,
// a dropped record naming the error, then the commit that worked.
func TestFaultLogCommitFailsThenSucceeds(t *testing.T) {
	ff := &decisionlogtest.FlakyFile{}
	l, fs, ring, path := openTestLog(t, ff.Write)
	reports := newFaultReports(l)
	decision := func(host string) *Record {
		return &Record{Event: EventDecision, Kind: KindHTTP, Host: host, Action: "allow", Rule: "r1",
			Reason: strings.Repeat("x", 300)}
	}

	if _, err := l.Commit(decision("before.test")); err != nil {
		t.Fatalf("commit before the fault: %v", err)
	}
	l.Emit(&Record{Event: EventClose, Kind: KindHTTP, Host: "before.test"})

	ff.Set(syscall.ENOSPC, true)
	for i := range 3 {
		seq, err := l.Commit(decision("failed.test"))
		var le *LogFileError
		if !errors.As(err, &le) || !errors.Is(err, syscall.ENOSPC) || le.Path != path {
			t.Fatalf("commit %d with the file full: got seq %d, %v; want a *LogFileError for %s wrapping ENOSPC", i, seq, err, path)
		}
		if !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "free space") {
			t.Errorf("the error does not name the cause and the fix: %v", err)
		}
		// The gateway logs the refusal instead.
		l.Emit(&Record{Event: EventDecision, Kind: KindHTTP, Host: "failed.test", Action: "block", Rule: "guard", Reason: err.Error()})
	}
	// A policy record is kept for the file, as it says how the records
	// after it were decided.
	l.Emit(&Record{Event: EventPolicy, PolicyVersion: 2})
	if err := reports.next(t); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("report of the fault: got %v, want ENOSPC", err)
	}
	if err := fs.Fault(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Fault while the file is full: got %v, want ENOSPC", err)
	}

	ff.Set(nil, false)
	if _, err := l.Commit(decision("after.test")); err != nil {
		t.Fatalf("commit once the file works: %v", err)
	}
	if err := reports.next(t); err != nil {
		t.Fatalf("report of the recovery: got %v, want nil", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-reports.ch:
		t.Errorf("one more report: %v", err)
	default:
	}

	var got []string
	for _, r := range decisionlogtest.ReadLines(t, path) {
		s := r.Event + " " + r.Action + " " + r.Host
		if r.Event == EventDropped {
			s = fmt.Sprintf("dropped %d", r.Count)
			if !strings.Contains(r.Reason, "no space left on device") {
				t.Errorf("the dropped record's reason does not name the error: %q", r.Reason)
			}
		}
		got = append(got, s)
	}
	want := []string{"decision allow before.test", "close  before.test", "policy  ", "dropped 3", "decision allow after.test"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the file holds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The other sinks never saw the failed commits' allows.
	lines, _ := ring.Since(0, 100)
	for _, line := range lines {
		if bytes.Contains(line, []byte(`"failed.test"`)) && bytes.Contains(line, []byte(`"allow"`)) {
			t.Errorf("the ring holds a failed commit: %s", line)
		}
	}
}

// TestFaultLogFlapIsOneOutage plays a filesystem that is nearly full: a
// commit fails, the next one fits, and the one after fails again, within
// a second. The reporter is told of one fault, not of a fault, a
// recovery and the fault again (what the user read on stderr twice per
// outage); a recovery that holds is told after it has held for a second.
func TestFaultLogFlapIsOneOutage(t *testing.T) {
	ff := &decisionlogtest.FlakyFile{}
	l, _, _, _ := openTestLog(t, ff.Write)
	reports := newFaultReports(l)
	rec := func() *Record { return &Record{Event: EventDecision, Kind: KindHTTP, Host: "a.test", Action: "allow"} }

	ff.Set(syscall.ENOSPC, false)
	if _, err := l.Commit(rec()); err == nil {
		t.Fatal("a commit on a full file succeeded")
	}
	if err := reports.next(t); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("report of the fault: got %v, want ENOSPC", err)
	}
	ff.Set(nil, false)
	if _, err := l.Commit(rec()); err != nil {
		t.Fatalf("commit that fits: %v", err)
	}
	time.Sleep(recoverySettle / 4)
	ff.Set(syscall.ENOSPC, false)
	if _, err := l.Commit(rec()); err == nil {
		t.Fatal("a commit on a full file succeeded")
	}
	time.Sleep(2 * recoverySettle)
	select {
	case err := <-reports.ch:
		t.Fatalf("reported %v while the file failed again within %v of one write that fitted; want one outage", err, recoverySettle)
	default:
	}

	ff.Set(nil, false)
	start := time.Now()
	if _, err := l.Commit(rec()); err != nil {
		t.Fatalf("commit once the file works: %v", err)
	}
	if err := reports.next(t); err != nil {
		t.Fatalf("report of the recovery: got %v, want nil", err)
	}
	if d := time.Since(start); d < recoverySettle {
		t.Errorf("the recovery was told %v after the first write that worked, before it held for %v", d, recoverySettle)
	}
}

// TestFaultLogShortFaultIsTold: a fault that is over before the sink's
// goroutine looks (a removed log made anew at the very next request) is
// still told, then its recovery: the user learns that the log at the
// path is a new file.
func TestFaultLogShortFaultIsTold(t *testing.T) {
	ff := &decisionlogtest.FlakyFile{}
	l, fs, _, _ := openTestLog(t, ff.Write)
	reports := newFaultReports(l)
	fs.watch.setFault(ErrLogFileRemoved)
	fs.watch.recovered() // before the sink's goroutine ran
	if err := reports.next(t); !errors.Is(err, ErrLogFileRemoved) {
		t.Fatalf("report of the short fault: got %v, want ErrLogFileRemoved", err)
	}
	if err := reports.next(t); err != nil {
		t.Fatalf("report of the recovery: got %v, want nil", err)
	}
}

// TestFaultLogConcurrentCommits commits and emits records from many
// goroutines while the file fails and works by turns, some writes failing
// half-way, and full batches going to the file from the sink's goroutine:
// the file ends up with exactly the commits that returned nil, whole
// records only, in increasing seq order.
func TestFaultLogConcurrentCommits(t *testing.T) {
	ff := &decisionlogtest.FlakyFile{}
	l, _, _, path := openTestLog(t, ff.Write)
	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				ff.Set(nil, false)
				return
			case <-time.After(200 * time.Microsecond):
			}
			switch i % 3 {
			case 0:
				ff.Set(syscall.EIO, i%2 == 0)
			default:
				ff.Set(nil, false)
			}
		}
	}()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed = map[string]bool{}
		failed    int
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				host := fmt.Sprintf("h%d-%d.test", g, i)
				_, err := l.Commit(&Record{Event: EventDecision, Host: host, Action: "allow", Reason: strings.Repeat("r", 200)})
				mu.Lock()
				if err == nil {
					committed[host] = true
				} else {
					failed++
				}
				mu.Unlock()
				// Enough to fill batches between commits, which the
				// sink's goroutine writes.
				for range 10 {
					l.Emit(&Record{Event: EventClose, Host: host, Error: strings.Repeat("e", 500)})
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flipped
	if err := l.Close(); err != nil {
		t.Fatalf("Close once the file works: %v", err)
	}
	logged := map[string]bool{}
	for _, r := range decisionlogtest.ReadLines(t, path) {
		if r.Event == EventDecision {
			if logged[r.Host] {
				t.Errorf("%s is in the file twice", r.Host)
			}
			logged[r.Host] = true
		}
	}
	for h := range committed {
		if !logged[h] {
			t.Errorf("the commit of %s returned nil, but it is not in the file", h)
		}
	}
	for h := range logged {
		if !committed[h] {
			t.Errorf("the commit of %s failed, but it is in the file", h)
		}
	}
	t.Logf("%d commits written, %d refused", len(committed), failed)
	if failed == 0 || len(committed) == 0 {
		t.Errorf("%d commits written and %d refused: want both, or the test did not test", len(committed), failed)
	}
}
