package decisionlog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// TestFileSinkMountedOverAtCommit mounts a filesystem over the log's
// directory between two commits, which makes no inotify event at all:
// the second commit fails, the path naming no file now. It needs root.
func TestFileSinkMountedOverAtCommit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := filepath.Join(t.TempDir(), "logs")
	path := filepath.Join(dir, "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	decisionlogtest.MountTinyTmpfs(t, dir)
	t.Cleanup(func() { l.Close() }) // before the unmount
	if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileRemoved) {
		t.Fatalf("Commit once a filesystem is mounted over the directory: got %v, want ErrLogFileRemoved", err)
	}
}

// TestPathWatch says what a path watch takes for a change that may have
// taken the file from its path: one of the file's own (a new link,
// another file renamed over it) and a move of a directory of the path;
// not another entry of those directories, nor a write. Each is told once.
// It refuses a path it cannot watch soundly: relative, not clean, or
// through a symbolic link.
func TestPathWatch(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "logs", "decisions.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	f, _, err := openLogFile(path, logFileName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pw, err := newPathWatch(path, f)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.close()
	steps := []struct {
		name  string
		do    func() error
		quiet bool
	}{
		{"nothing", func() error { return nil }, true},
		{"another file in the log's directory", func() error { return os.WriteFile(filepath.Join(root, "logs", "other"), nil, 0o600) }, true},
		{"another directory beside the log's", func() error { return os.Mkdir(filepath.Join(root, "logs2"), 0o700) }, true},
		{"the file written", func() error { return os.WriteFile(path, []byte("x\n"), 0o600) }, true},
		{"a link to the file", func() error { return os.Link(path, filepath.Join(root, "link")) }, false},
		{"then nothing", func() error { return nil }, true},
		{"a file put where the log's directory's name was", func() error {
			if err := os.Rename(filepath.Join(root, "logs"), filepath.Join(root, "logs3")); err != nil {
				return err
			}
			return os.Rename(filepath.Join(root, "logs3"), filepath.Join(root, "logs"))
		}, false},
		{"the file's name", func() error { return os.Rename(filepath.Join(root, "logs", "other"), path) }, false},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := pw.quiet(); got != s.quiet {
			t.Errorf("%s: quiet %v, want %v", s.name, got, s.quiet)
		}
	}
	if err := os.Symlink(filepath.Join(root, "logs"), filepath.Join(root, "link-to-logs")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"relative/decisions.jsonl", root + "/logs/../logs/decisions.jsonl", filepath.Join(root, "link-to-logs", "decisions.jsonl")} {
		if pw, err := newPathWatch(bad, f); err == nil {
			pw.close()
			t.Errorf("newPathWatch(%q): got nil error, want one", bad)
		}
	}
}

// TestFileSinkWithoutPathWatch opens a log through a symbolic link to its
// directory, which a path watch refuses: the sink has none, and every
// commit stats the path, so a removal is seen at the next commit still.
func TestFileSinkWithoutPathWatch(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "logs"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "link", "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	defer l.Close()
	if fs.watch.paths != nil {
		t.Error("a path watch through a symbolic link: got one, want none")
	}
	commitFailsOnceRemoved(t, l, path)
}

// TestFileSinkSymlinkOnPathThenReplaced moves the log's directory away
// and puts a symbolic link to it at its name (a commit then still finds
// the file at its path), then puts another directory, with another file,
// at that name. No inotify event comes from the second step on anything
// the first watch saw, so the path watch must not stay as it was after
// the first: the commit after the second step fails, as it did when
// every commit stated the path.
func TestFileSinkSymlinkOnPathThenReplaced(t *testing.T) {
	root := t.TempDir()
	logs, moved := filepath.Join(root, "logs"), filepath.Join(root, "moved")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(logs, "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	defer l.Close()
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(logs, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, logs); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/2")); err != nil {
		t.Fatalf("Commit with the file still at its path through a symbolic link: got %v, want nil", err)
	}
	if err := os.Remove(logs); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/3")); !errors.Is(err, ErrLogFileReplaced) {
		t.Errorf("Commit once another file is at the path: got %v, want ErrLogFileReplaced", err)
	}
}

// TestFileSinkRelativePathIsWatched opens the log by a relative path, as
// `sbx gateway --log decisions.jsonl` does: the sink still has a path
// watch (without one every commit stats the path), and a removal is still
// seen at the next commit.
func TestFileSinkRelativePathIsWatched(t *testing.T) {
	t.Chdir(t.TempDir())
	path := filepath.Join("logs", "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	defer l.Close()
	if fs.watch.paths == nil {
		t.Error("a log opened by a relative path: no path watch, want one")
	}
	commitFailsOnceRemoved(t, l, path)
}

// commitFailsOnceRemoved commits a record to l, whose file is at path,
// removes the file and wants the next commit to fail with
// ErrLogFileRemoved.
func commitFailsOnceRemoved(t *testing.T, l *Log, path string) {
	t.Helper()
	if _, err := l.Commit(allowRecord("a.test", "/1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(allowRecord("a.test", "/2")); !errors.Is(err, ErrLogFileRemoved) {
		t.Errorf("Commit into the removed file: got %v, want ErrLogFileRemoved", err)
	}
}
