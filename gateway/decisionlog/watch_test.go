package decisionlog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wtOpen opens a log file in a new directory and its watcher.
func wtOpen(t *testing.T) (*faultWatcher, *os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	f, _, err := openLogFile(path, logFileName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w, err := newFaultWatcher(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return w, f, path
}

// TestFaultWatcherAlone moves a watched file away: verify says it was
// removed, the watcher is lost and at fault with the vanished file kept
// for the next dropped record, and the reporter is told once; renew then
// makes a new file at the path, which it watches, and refuses to take
// another file put there.
func TestFaultWatcherAlone(t *testing.T) {
	w, f, path := wtOpen(t)
	var told []error
	w.setReporter(func(err error) { told = append(told, err) })
	if err := w.verify(f); err != nil || w.isLost() {
		t.Fatalf("verify of the file at the path: got %v (lost %v), want nil", err, w.isLost())
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	err := w.verify(f)
	if !errors.Is(err, ErrLogFileRemoved) || !w.isLost() || w.fault.Load() == nil || w.vanished.Load() == nil {
		t.Fatalf("verify of a file moved away: got %v (lost %v, fault %v, vanished %v), want ErrLogFileRemoved, lost, both set",
			err, w.isLost(), w.fault.Load(), w.vanished.Load())
	}
	select {
	case <-w.changed:
	default:
		t.Error("the fault was not signalled")
	}
	w.tell(w.fault.Load())
	w.tell(w.fault.Load())
	if len(told) != 1 || !errors.Is(told[0], ErrLogFileRemoved) {
		t.Errorf("reported: got %v, want the removal once", told)
	}

	nf, err := w.renew()
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	defer nf.Close()
	if err := w.verify(nf); err != nil || w.isLost() {
		t.Errorf("verify of the new file: got %v (lost %v), want nil", err, w.isLost())
	}
	w.recovered()
	w.tell(nil)
	if len(told) != 2 || told[1] != nil {
		t.Errorf("reported: got %v, want the removal then nil", told)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.verify(nf); !errors.Is(err, ErrLogFileReplaced) {
		t.Errorf("verify with another file at the path: got %v, want ErrLogFileReplaced", err)
	}
	if _, err := w.renew(); !errors.Is(err, ErrLogFileReplaced) {
		t.Errorf("renew with another file at the path: got %v, want ErrLogFileReplaced", err)
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

// TestFileSinkAncestorMovedAtCommit moves the directory above the log's
// directory away between two commits, which makes no event on the file
// or on its directory: the second commit fails all the same, the path
// naming no file now, and the next makes a new file once the path's
// directories are there again.
func TestFileSinkAncestorMovedAtCommit(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	defer l.Close()
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileRemoved) {
		t.Fatalf("Commit once the directory above was moved: got %v, want ErrLogFileRemoved", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/3")); err != nil {
		t.Fatalf("Commit once the directories are back: got %v, want a new file", err)
	}
}
