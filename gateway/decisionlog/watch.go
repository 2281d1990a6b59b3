package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// This file is a FileSink's watch over its file: that the file it writes
// is still the one at its path, looked at after every commit's write and
// twice a second; and what the sink does when it is not (docs/faults.md).

// fileSinkCheckInterval is how often a FileSink looks whether its file is
// still the one at its path, and tries a file at fault again: twice a
// second, so that a removal or a replacement is noticed within a second
// with no busy loop.
const fileSinkCheckInterval = 500 * time.Millisecond

// checkFile marks the sink at fault when its file was removed or another
// file took its place at the path: what is written to it goes where
// nobody reads the log. A sink at fault with records waiting is tried
// again.
func (s *FileSink) checkFile() {
	s.fileMu.Lock()
	if !s.lost {
		s.verify()
	}
	s.fileMu.Unlock()
	if s.fault.Load() != nil {
		s.mu.Lock()
		if !s.closed && (len(s.buf) > 0 || s.full != nil || s.hasUnwritten()) {
			s.flushLocked(0)
		}
		s.mu.Unlock()
	}
}

// verify returns nil when the sink's file is still the one at its path.
// When it is not (removed, moved away, or another file put in its place),
// the sink is lost and at fault: what was written to the file went where
// nobody reads the log, and the next write makes a new file at the path,
// unless something is there (see reopen). It is called after a commit's
// records were written, so that Log.Commit fails for records that did
// not reach the log, and by checkFile. fileMu is held.
func (s *FileSink) verify() error {
	err := fileGone(s.f, s.path, s.dev, s.ino)
	if err == nil {
		return nil
	}
	s.lost = true
	e := s.setFault(err)
	s.vanished.Store(e)
	return e
}

// hasUnwritten reports whether failed writes left bytes to write.
func (s *FileSink) hasUnwritten() bool {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	return len(s.unwritten) > 0
}

// reopen makes a new log file at the path in place of the one that was
// removed or moved away (O_EXCL: a file sbx did not make there is
// another's, and is not written into), and gives the sink a new size
// budget: a full file moved away is how room returns. The next dropped
// record, written before the first commit's records in the new file,
// says the old file vanished (see vanished). fileMu and mu are held.
func (s *FileSink) reopen() error {
	f, err := createLogFile(s.path)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrLogFileReplaced
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w, and a new one cannot be made there: %w", ErrLogFileRemoved, err)
		}
		return fmt.Errorf("%w: %w", ErrLogFileReplaced, err)
	}
	dev, ino, err := fileID(f)
	if err != nil {
		f.Close()
		return err
	}
	s.f.Close()
	s.size -= s.written // what is buffered stays counted
	s.f, s.dev, s.ino, s.written, s.lost, s.torn = f, dev, ino, 0, false, false
	if s.fullErr.Swap(nil) != nil {
		s.signal()
	}
	return nil
}
