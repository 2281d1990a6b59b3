package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// This file is a FileSink's fault watcher: whether the file it writes can
// be written and is still the one at its path, looked at after every
// commit's write (when the path watch of watch_linux.go saw a change)
// and twice a second; what the sink does when it is not (docs/faults.md);
// and who is told.

// fileSinkCheckInterval is how often a FileSink looks whether its file is
// still the one at its path, and tries a file at fault again: twice a
// second, so that a removal or a replacement is noticed within a second
// with no busy loop.
const fileSinkCheckInterval = 500 * time.Millisecond

// recoverySettle is how long a FileSink's file must have been written
// without a fault before its reporter is told that the fault is over.
// A new fault is told at once.
const recoverySettle = time.Second

// A faultWatcher keeps a FileSink's fault: why its file cannot be written
// (a write failed, or the file was removed or replaced), which makes
// Log.Commit fail until a write succeeds again. It knows the file by its
// device and inode, tells that the path names another file or none
// (verify), makes the new file at the path in place of a vanished one
// (renew), and tells the reporter of each change. It writes nothing: the
// batch writer, which owns the file, asks it. Its lock guards the file's
// identity and the reporter; it is taken after the writer's and never
// held while another part of the sink is called.
type faultWatcher struct {
	path    string
	changed chan struct{} // the fault changed; capacity 1

	// fault is why the file cannot be written (a *LogFileError), nil
	// when it can. It is read and changed without the lock.
	fault atomic.Pointer[LogFileError]
	// vanished is the fault of a file that was removed or replaced while
	// the sink wrote it, until a dropped record says so in the new file.
	vanished atomic.Pointer[LogFileError]
	// missed is the last fault set, until the sink's goroutine takes it:
	// a fault that ended (a removed file made anew at the next request)
	// before that goroutine looked is still told.
	missed atomic.Pointer[LogFileError]

	mu       sync.Mutex
	dev, ino uint64      // of the file, to tell that the path names another file
	lost     bool        // the file is no longer at the path: a new one is made there before the next write
	paths    *pathWatch  // says when the path may name another file; nil: every look stats the path
	stale    bool        // paths was set after the file was opened: the next look stats the path
	report   func(error) // told of faults and recoveries; nil: nobody
	reported string      // the last fault told, "" after a recovery
}

// newFaultWatcher returns the watcher of f, the file opened at path. A
// relative path is made absolute first, from the working directory it
// was opened in: a path watch needs one, and without a watch every
// commit stats the path.
func newFaultWatcher(path string, f *os.File) (*faultWatcher, error) {
	dev, ino, err := fileID(f)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	w := &faultWatcher{path: path, changed: make(chan struct{}, 1), dev: dev, ino: ino}
	w.rewatch(f)
	return w, nil
}

// rewatch sets a pathWatch on the path for f, the file opened there, or
// none when it cannot (every look then stats the path). w.mu is held, or
// w is new.
func (w *faultWatcher) rewatch(f *os.File) {
	if w.paths != nil {
		w.paths.close()
	}
	w.paths, _ = newPathWatch(w.path, f)
	w.stale = true
}

// close releases what the watcher holds.
func (w *faultWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paths != nil {
		w.paths.close()
		w.paths = nil
	}
}

// isLost reports whether the file is no longer at the path.
func (w *faultWatcher) isLost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// look marks the sink at fault when its file f was removed or another
// file took its place at the path: what is written to it goes where
// nobody reads the log. It is the watch of an idle sink, twice a second.
func (w *faultWatcher) look(f *os.File) {
	if !w.isLost() {
		w.check(f, false)
	}
}

// verify returns nil when f, the sink's file, is still the one at its
// path. When it is not (removed, moved away, or another file put in its
// place), the sink is lost and at fault: what was written to the file
// went where nobody reads the log, and the next write makes a new file at
// the path, unless something is there (see renew). It is called after a
// commit's records were written, so that Log.Commit fails for records
// that did not reach the log: it stats the path only when the path watch
// saw something happen there (or there is none); look always does.
func (w *faultWatcher) verify(f *os.File) error {
	return w.check(f, true)
}

// check is verify; quick lets the path watch say that nothing happened.
func (w *faultWatcher) check(f *os.File, quick bool) error {
	w.mu.Lock()
	watched := quick && w.paths != nil && !w.stale
	if watched && w.paths.quiet() {
		w.mu.Unlock()
		return nil
	}
	// watched: the watch saw something happen on the path.
	w.stale = false
	err := fileGone(f, w.path, w.dev, w.ino)
	if err != nil {
		w.lost = true
	} else if watched {
		// The file is still at its path, but the path may now go through
		// other inodes than the watch watches (a directory moved away and
		// a symbolic link to it put at its name): watch the path as it
		// is, or, through a symbolic link, not at all.
		w.rewatch(f)
	}
	w.mu.Unlock()
	if err == nil {
		return nil
	}
	e := w.setFault(err)
	w.vanished.Store(e)
	return e
}

// renew makes a new log file at the path in place of the one that was
// removed or moved away (O_EXCL: a file sbx did not make there is
// another's, and is not written into) and returns it; the caller closes
// the old one and gives the sink a new size budget. The next dropped
// record, written before the first commit's records in the new file, says
// the old file vanished (see vanished).
func (w *faultWatcher) renew() (*os.File, error) {
	f, err := createLogFile(w.path)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, ErrLogFileReplaced
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w, and a new one cannot be made there: %w", ErrLogFileRemoved, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrLogFileReplaced, err)
	}
	dev, ino, err := fileID(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dev, w.ino, w.lost = dev, ino, false
	w.rewatch(f)
	return f, nil
}

// setFault marks the sink at fault for err and returns the fault.
func (w *faultWatcher) setFault(err error) *LogFileError {
	e, ok := err.(*LogFileError)
	if !ok {
		e = &LogFileError{Path: w.path, Err: err}
	}
	if prev := w.fault.Swap(e); prev == nil || prev.Error() != e.Error() {
		w.missed.Store(e)
		w.signal()
	}
	return e
}

// recovered ends the fault: a write succeeded.
func (w *faultWatcher) recovered() {
	w.fault.Store(nil)
	w.signal()
}

// signal wakes the sink's goroutine to tell the reporter.
func (w *faultWatcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// setReporter makes fn be told of faults and recoveries (see tell).
func (w *faultWatcher) setReporter(fn func(error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.report = fn
}

// tell calls the reporter with e, the sink's fault now (nil: none), when
// it changed since it was last told. Only the sink's goroutine calls it,
// so the reporter is called one call at a time.
func (w *faultWatcher) tell(e error) {
	var text string
	if e != nil {
		text = e.Error()
	}
	w.mu.Lock()
	if text == w.reported {
		w.mu.Unlock()
		return
	}
	w.reported = text
	report := w.report
	w.mu.Unlock()
	if report != nil {
		report(e)
	}
}
