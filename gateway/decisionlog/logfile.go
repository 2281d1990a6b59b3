package decisionlog

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Defaults of FileSinkOptions, and NoLimit, which turns a limit off.
const (
	DefaultLogRate     = 1000      // records per second a FileSink writes on average
	DefaultLogBurst    = 20_000    // records a FileSink writes at once after a quiet spell
	DefaultLogMaxBytes = 512 << 20 // bytes a FileSink lets its file grow to
	NoLimit            = -1        // as any FileSinkOptions field: no limit
)

// FileSinkOptions bound what a FileSink writes, so that a sandbox that
// makes requests as fast as it can does not fill the host's disk through
// the decision log: over the rate, repeats of a target written in full
// are left out and counted by target; at the size limit the sink is full
// and Log.Commit fails, so that nothing goes upstream unrecorded. Policy
// records are never left out. They also say whether the sink may add to
// a file that holds something already. The zero value means the
// defaults, and a new or empty file.
type FileSinkOptions struct {
	// Append lets OpenFileSink open a file that is not empty, and add to
	// what it holds. Without it, such a file is refused with a
	// *NonEmptyLogFileError: two runs' records are never mixed in one
	// log unless asked.
	Append bool
	// RatePerSecond is how many records per second the sink writes on
	// average (a token bucket of Burst tokens refilled at this rate).
	// 0 means DefaultLogRate (1000); a negative value (NoLimit) means no
	// rate limit. It must not be NaN.
	RatePerSecond float64
	// Burst is how many records the sink writes at once when it has been
	// quiet long enough. 0 means DefaultLogBurst (20 000); a negative
	// value (NoLimit) means no rate limit.
	Burst int
	// MaxBytes is the size the file may reach, counting what it held when
	// opened. 0 means DefaultLogMaxBytes (512 MiB); a negative value
	// (NoLimit) means no limit. Policy records and the last dropped
	// record, written at Close, may go past it; nothing else does. Once
	// a record does not fit, the sink is full: records emitted are left
	// out and counted, and Log.Commit fails with a *LogFullError, until
	// the file is moved away (a new one is made at the path) or the sink
	// is closed.
	MaxBytes int64
	// MaxBytesFlag is how messages name the setting of MaxBytes, such as
	// "--log-max-size"; "" names none.
	MaxBytesFlag string
}

// FileSink is a Sink that appends records to a file. It gathers records
// in batches of up to 64 KiB and writes a batch out when it is full (in
// its own goroutine, so that a Log's writers do not wait for the file),
// at most 200 ms after a record arrives, on Flush and on Close: a crash of
// the process loses at most the last 200 ms of records, a clean Close
// loses nothing (it also syncs the file to disk). Batches reach the file
// in the order of their records. Make one with OpenFileSink; it is safe
// for concurrent use.
//
// A FileSink composes three parts, each with its own state and lock: its
// budget (budget.go), its fault watcher (watch.go) and its batch writer
// (batch.go). It adds the order of their calls for each record, and its
// goroutine (loop).
//
// A FileSink keeps to the budget of its FileSinkOptions (budget.go): a
// record over it is left out and counted, and a record with event
// "dropped" saying how many were left out since when (and, for repeats
// over the rate, of which targets) is written before the next record
// that is written (at most one a second) and at Close. A record that
// lets a request go on is never left out but as a counted repeat of a
// target written in full: when the file is full, Log.Commit fails. A Log numbers these dropped
// records (see Log.Emit); a FileSink written to directly with WriteRecord
// writes them only at Close, numbered one above the last seq it saw, and
// treats every record as one the budget applies to.
//
// A record that lets a request be carried out is written with Log.Commit:
// it reaches the file, with what the sink buffered before it, by a write
// that succeeded before Commit returns (batch.go).
//
// After every commit's write, and twice a second besides (watch.go), the
// sink looks whether its file is still the one at its path: a commit
// whose records went into a file removed or replaced fails. When the
// file cannot be written (its filesystem is full, an I/O error,
// or it was removed or replaced: see LogFileError), the sink is at fault:
// what it buffered stays buffered, every record written meanwhile is left
// out and counted, Log.Commit fails (the gateway blocks the request), and
// each Commit and Flush tries the file again (a removed file is made
// anew with O_EXCL, and the next dropped record, written before the next
// commit's records, says the old one vanished; a replaced one is not
// written into, nor is any file found at the path). When a write succeeds again,
// the records left out are told by a dropped record naming the error. A
// function given by reportFaults is told of each fault and of the
// recovery, from the sink's goroutine, at once.
type FileSink struct {
	path    string
	budget  *budget
	watch   *faultWatcher
	writer  *batchWriter
	done    chan struct{} // closed by Close to end the sink's goroutine
	stopped chan struct{} // closed by the goroutine when it returns

	// mu is held by each of the sink's writes and by Close, which a Log
	// makes one at a time: it keeps them whole (a record's budget and
	// its write) and after Close. The parts' locks are taken after it.
	mu      sync.Mutex
	scratch []byte // a commit's records within the budget, reused
}

// OpenFileSink opens the file at path for appending, creating its missing
// parent directories with mode 0700 and the file with mode 0600 (an
// existing file keeps its mode), and bounds what it writes by o. A file
// that is not empty is refused with a *NonEmptyLogFileError unless
// o.Append is set (the size is that of the file opened, not of what the
// name pointed to a moment before). It
// starts a goroutine that flushes the buffer in the background; Close ends
// it, so the caller must call Close.
//
// OpenFileSink never follows a symbolic link at path, never blocks on what
// is there, and appends only to a regular file that the process's
// effective uid owns and that has exactly one link: a sandbox that can
// write the log's directory could have put a symbolic link to another
// file, a named pipe, or a hard link there. It refuses anything else with
// an *UnsafeLogFileError. On platforms other than Linux it returns an error
// wrapping errors.ErrUnsupported.
func OpenFileSink(path string, o FileSinkOptions) (*FileSink, error) {
	return openFileSink(path, o, nil)
}

// logFileName is what the decision log's file is called in messages.
const logFileName = "decision log"

// fileName is what a file kept as the log is called in messages: what,
// or the decision log's name when what is "".
func fileName(what string) string {
	if what == "" {
		return logFileName
	}
	return what
}

// OpenFile opens path for appending as OpenFileSink opens the decision
// log, for another file that must be kept as safely (sbx keeps the mock
// LLMs' journal so): its missing parent directories are made with mode
// 0700 and the file with mode 0600, and it refuses what OpenFileSink
// refuses, with the same errors, whose File is what (how messages name
// the file, such as "mock journal"): an *UnsafeLogFileError, and a
// *NonEmptyLogFileError for a file that holds something unless appendTo.
// The file is opened write-only; the caller closes it. On platforms
// other than Linux it returns an error wrapping errors.ErrUnsupported.
func OpenFile(path, what string, appendTo bool) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%s %s: creating its directory: %w", what, path, err)
	}
	f, size, err := openLogFile(path, what)
	if err != nil {
		return nil, err
	}
	if size > 0 && !appendTo {
		f.Close()
		return nil, &NonEmptyLogFileError{Path: path, File: what, Size: size}
	}
	return f, nil
}

// openFileSink is OpenFileSink with the clock the budget uses; nil means
// the time a Log stamps on each record, or time.Now.
func openFileSink(path string, o FileSinkOptions, now func() time.Time) (*FileSink, error) {
	if math.IsNaN(o.RatePerSecond) {
		return nil, fmt.Errorf("decision log %s: the rate limit is not a number", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("decision log %s: creating its directory: %w", path, err)
	}
	f, size, err := openLogFile(path, logFileName)
	if err != nil {
		return nil, err
	}
	if size > 0 && !o.Append {
		f.Close()
		return nil, &NonEmptyLogFileError{Path: path, Size: size}
	}
	watch, err := newFaultWatcher(path, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("decision log %s: %w", path, err)
	}
	b := newBudget(path, o, size, now, watch.signal)
	s := &FileSink{
		path:    path,
		budget:  b,
		watch:   watch,
		writer:  newBatchWriter(f, size, watch, b.restart),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go s.loop()
	return s, nil
}

// An UnsafeLogFileError is what OpenFileSink returns when what it finds at
// the log's path is not a regular file of the process's effective uid with
// exactly one link. Its message says what is wrong and what to do.
type UnsafeLogFileError struct {
	// Path is the log's path, as given to OpenFileSink.
	Path string
	// File says what the file is, for OpenFile's: "" for the decision
	// log.
	File string
	// Type is the type of what is at Path: os.ModeSymlink,
	// os.ModeNamedPipe, os.ModeSocket, os.ModeDevice (with
	// os.ModeCharDevice for a character device), os.ModeDir,
	// os.ModeIrregular, or 0 for a regular file, which was refused for
	// its owner or its links.
	Type os.FileMode
	// UID is the owner of the regular file, and Links its number of
	// links; both are 0 when Type is not 0.
	UID   int
	Links uint64
	// EUID is the process's effective uid, which must own the file.
	EUID int
}

func (e *UnsafeLogFileError) Error() string { return e.Say("another path for the log") }

// Say words the error with another, how to say "another path" for the log
// (a caller whose user gives the path as a flag names the flag).
func (e *UnsafeLogFileError) Say(another string) string {
	fix := ": remove it or choose " + another
	name := fileName(e.File) + " "
	switch {
	case e.Type == os.ModeSymlink:
		return name + e.Path + ": is a symbolic link; sbx never follows one there (a sandbox could have planted it)" + fix
	case e.Type == os.ModeDir:
		return name + e.Path + ": is a directory: name a file in it, or choose " + another
	case e.Type != 0:
		return name + e.Path + ": is " + fileTypeName(e.Type) +
			", not a regular file; sbx writes its log only to a regular file (a sandbox could have planted this one, and a pipe could hang sbx)" + fix
	case e.UID != e.EUID:
		return name + e.Path + ": is owned by uid " + strconv.Itoa(e.UID) + ", not by uid " + strconv.Itoa(e.EUID) +
			" that sbx runs as; sbx appends only to its own files (a sandbox could have planted this one)" + fix
	default:
		return name + e.Path + ": has " + strconv.FormatUint(e.Links, 10) +
			" links; sbx appends only to a file with a single name (a sandbox could have linked another file there)" + fix
	}
}

// A NonEmptyLogFileError is what OpenFileSink returns for a file that
// already holds something when FileSinkOptions.Append is not set (in sbx,
// a --log FILE of an earlier run without --log-append). Its message names
// the file and both fixes.
type NonEmptyLogFileError struct {
	// Path is the log's path, as given to OpenFileSink.
	Path string
	// File says what the file is, as UnsafeLogFileError's.
	File string
	// Size is how many bytes the file holds.
	Size int64
}

func (e *NonEmptyLogFileError) Error() string {
	return e.Say("another path for the log", "ask for this run's records to be added to it")
}

// Say words the error with the two fixes: another, how to say "another
// path" for the log, and appending, how to ask to add to it (a caller
// whose user gives them as flags names the flags).
func (e *NonEmptyLogFileError) Say(another, appending string) string {
	return fileName(e.File) + " " + e.Path + ": holds " + strconv.FormatInt(e.Size, 10) +
		" bytes already (an earlier run's records?), and sbx does not add to a log unless asked: choose " + another + ", or " + appending
}

// fileTypeName names the file type t with its article, as in "is a named
// pipe".
func fileTypeName(t os.FileMode) string {
	switch {
	case t&os.ModeNamedPipe != 0:
		return "a named pipe"
	case t&os.ModeSocket != 0:
		return "a socket"
	case t&os.ModeCharDevice != 0:
		return "a character device"
	case t&os.ModeDevice != 0:
		return "a block device"
	case t&os.ModeDir != 0:
		return "a directory"
	case t&os.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "a file of an unknown type"
	}
}

// SetWriteFunc makes s write its file through fn instead of
// (*os.File).Write; nil restores that. It is the seam of the fault tests,
// which make the file fail as a full or broken filesystem does.
func (s *FileSink) SetWriteFunc(fn func(f *os.File, b []byte) (int, error)) {
	if fn == nil {
		fn = (*os.File).Write
	}
	s.writer.setWriteFunc(fn)
}

// Name returns the name of the file, as passed to OpenFileSink.
func (s *FileSink) Name() string { return s.path }

// Dropped returns how many records the sink has left out since it was
// opened to stay within its budget.
func (s *FileSink) Dropped() uint64 { return s.budget.total.Load() }

// Fault returns why the file cannot be written now, a *LogFileError, or
// nil when it can (see FileSink).
func (s *FileSink) Fault() error {
	if e := s.watch.fault.Load(); e != nil {
		return e
	}
	if e := s.budget.fullErr.Load(); e != nil {
		return e
	}
	return nil
}

// reportFaults makes fn be told of each fault of the sink (a
// *LogFileError) as soon as it is found, and with nil of the write that
// ended it. fn is called from the sink's goroutine, one call at a time.
func (s *FileSink) reportFaults(fn func(error)) { s.watch.setReporter(fn) }

// loop is the sink's goroutine: it writes each full batch as soon as the
// writer hands it over, and everything written at most
// fileSinkFlushInterval after a record arrives (the first since the last
// flush); every fileSinkCheckInterval it looks whether the file was
// removed or replaced, and tries a file at fault again when records wait
// for it; it tells the reporter of faults at once, and of a recovery once
// it has held for recoverySettle. It returns when Close
// closes s.done.
func (s *FileSink) loop() {
	defer close(s.stopped)
	t := time.NewTimer(fileSinkFlushInterval)
	t.Stop()
	check := time.NewTicker(fileSinkCheckInterval)
	defer check.Stop()
	// settle holds back the report of a recovery until the file has
	// been written without a fault for recoverySettle: on a filesystem
	// that is nearly full, a small record fits after a batch did not,
	// and the next batch fails again, which is one outage, not several.
	settle := time.NewTimer(recoverySettle)
	settle.Stop()
	for {
		select {
		case <-s.writer.kick:
			t.Reset(fileSinkFlushInterval)
		case <-s.writer.batch:
			s.writer.writeFull()
		case <-t.C:
			s.writer.flushIdle()
		case <-check.C:
			s.writer.look()
			s.writer.retry()
		case <-s.watch.changed:
			missed := s.watch.missed.Swap(nil)
			if err := s.Fault(); err != nil {
				settle.Stop()
				s.watch.tell(err)
			} else {
				if missed != nil {
					s.watch.tell(missed) // it ended before it was told
				}
				settle.Reset(recoverySettle)
			}
		case <-settle.C:
			if err := s.Fault(); err == nil {
				s.watch.tell(nil)
			}
		case <-s.done:
			t.Stop()
			if settle.Stop() && s.Fault() == nil {
				s.watch.tell(nil) // the recovery is told before the sink ends
			}
			return
		}
	}
}

// WriteRecord appends line, the record numbered seq, to the buffer, or
// leaves it out when it is over the sink's budget (which is not an error).
func (s *FileSink) WriteRecord(seq uint64, line []byte) error {
	return s.writeBudgeted(seq, line, nil, time.Time{})
}

// writeBudgeted writes the dropped record reserved for this record, if
// any, then line, unless line is over the budget and policy is false.
// now is the current time, or zero.
func (s *FileSink) writeBudgeted(seq uint64, line []byte, r *Record, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer.isClosed() {
		return fmt.Errorf("writing %s: %w", s.path, ErrSinkClosed)
	}
	s.budget.seen(seq)
	s.writeStaged() // a failure puts the sink at fault
	policy := r != nil && r.Event == EventPolicy
	if e := s.watch.fault.Load(); e != nil && !policy {
		// Left out: what waits for the file stays bounded. A policy
		// record, which says how the next records were decided, waits.
		s.budget.leaveOutFault(now, e)
		return nil
	}
	if !policy && !s.budget.admit(len(line), r, now) {
		return nil
	}
	if err := s.writer.append(line); err != nil {
		s.budget.leaveOutFault(now, s.watch.fault.Load())
		return nil
	}
	s.budget.grow(len(line))
	return nil
}

// commitRecords implements budgetedSink: it writes the dropped record
// reserved for these records, if any, and the records, with everything
// buffered before them, to the file before it returns, leaving out those
// over the budget (counted as any record; that is not an error). When
// the file cannot be written, none of them is kept (the records left out
// stay uncounted for a later dropped record) and the fault, a
// *LogFileError, is returned.
func (s *FileSink) commitRecords(lines []byte, ends []int, recs []*Record, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer.isClosed() {
		return fmt.Errorf("writing %s: %w", s.path, ErrSinkClosed)
	}
	if err := s.budget.commitFits(len(lines), s.watch.isLost()); err != nil {
		return err // the Log gives the staged dropped record back
	}
	staged, stagedFor, isStaged := s.budget.takeStaged()
	b := append(s.scratch[:0], staged...)
	b = s.budget.admitCommit(b, lines, ends, recs, now, s.watch.fault.Load() != nil)
	s.scratch = b
	if len(b) == 0 {
		return nil // left out by the budget
	}
	s.budget.grow(len(b))
	if removed, err := s.writer.commit(b); err != nil {
		if removed {
			s.budget.grow(-len(b))
		}
		return err
	}
	if isStaged {
		s.counted(stagedFor)
	}
	return nil
}

// unreserve gives back the dropped record reserved for a commit that did
// not take place.
func (s *FileSink) unreserve() { s.budget.unreserve() }

// reserveDropped implements budgetedSink: it makes a dropped record
// numbered seq when records were left out, or the file before this one
// vanished, and the next record will be written (or the Log closes), as
// the budget allows (see budget.reserve). It does nothing after Close.
func (s *FileSink) reserveDropped(seq uint64, at dropPoint, now time.Time) bool {
	v := s.watch.vanished.Load()
	if s.budget.uncounted.Load() == 0 && v == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer.isClosed() {
		return false
	}
	return s.budget.reserve(seq, at, now, s.watch.fault.Load() != nil, v)
}

// writeStaged writes the staged dropped record, if any, and starts
// counting anew. s.mu is held.
func (s *FileSink) writeStaged() error {
	line, n, ok := s.budget.takeStaged()
	if !ok {
		return nil
	}
	if err := s.writer.append(line); err != nil {
		return err
	}
	s.budget.grow(len(line))
	s.counted(n)
	return nil
}

// counted takes n records that a dropped record written now counts off
// the uncounted ones; the vanished file it told of needs no more telling.
// s.mu is held.
func (s *FileSink) counted(n uint64) {
	if v := s.budget.counted(n); v != nil {
		s.watch.vanished.CompareAndSwap(v, nil)
	}
}

// Flush writes the buffer to the file (without syncing it to disk). It
// returns the sink's fault when the file cannot be written.
func (s *FileSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer.isClosed() {
		return fmt.Errorf("flushing %s: %w", s.path, ErrSinkClosed)
	}
	return s.writer.flush()
}

// Close writes a last dropped record when records were left out since the
// previous one (numbered as the Log reserved, or one above the last seq
// the sink saw), flushes the buffer, syncs the file to disk, closes it and
// ends the sink's goroutine. Closing again returns nil.
func (s *FileSink) Close() error {
	s.mu.Lock()
	if !s.writer.close() {
		s.mu.Unlock()
		return nil
	}
	close(s.done)
	// What the file lacks if it cannot be written now.
	lost := s.budget.uncounted.Load() + s.writer.waiting()
	s.budget.stageAtClose(s.watch.vanished.Load())
	err := s.writeStaged()
	if err == nil {
		err = s.writer.flush()
	}
	if le, ok := err.(*LogFileError); ok {
		err = &LogFileError{Path: le.Path, Err: le.Err, Closing: true, Lost: lost}
	}
	err = s.writer.closeFile(err)
	s.mu.Unlock()
	<-s.stopped
	s.watch.close()
	return err
}

// ErrLogFileRemoved and ErrLogFileReplaced are the faults of a FileSink
// whose file was removed (or moved away) while it wrote it, and whose
// path names another file: a LogFileError wraps them.
var (
	ErrLogFileRemoved  = errors.New("the file was removed while sbx wrote it")
	ErrLogFileReplaced = errors.New("another file is at its path now, which sbx does not write into")
)

// A LogFileError says why a FileSink cannot write its file; while it
// cannot, the gateway lets no request through. Its message names the
// file, the cause and the fix.
type LogFileError struct {
	// Path is the log file's path.
	Path string
	// Err is the error of the write (an *os.PathError with the errno,
	// such as ENOSPC), or wraps ErrLogFileRemoved or ErrLogFileReplaced.
	Err error
	// Closing is set by Close, which could not write what the file
	// lacked, Lost records (written while the file was at fault, or
	// waiting for it).
	Closing bool
	Lost    uint64
}

func (e *LogFileError) Error() string {
	if e.Closing {
		return "decision log " + e.Path + " lacks its last " + strconv.FormatUint(e.Lost, 10) +
			" records: the file could not be written (" + e.cause() + ")"
	}
	fix := "free space on its filesystem (or repair it); sbx tries again at every request"
	switch {
	case errors.Is(e.Err, ErrLogFileReplaced):
		fix = "remove what is at " + e.Path + " now, and sbx starts a new log there at the next request"
	case errors.Is(e.Err, ErrLogFileRemoved):
		fix = "sbx starts a new log at " + e.Path + " at the next request, when it can make one there"
	}
	return ReasonLogFault + e.Path + " cannot be written (" + e.cause() + "), so every request is blocked until it can be: " + fix
}

func (e *LogFileError) Unwrap() error { return e.Err }

// cause is the error without the path the message already names.
func (e *LogFileError) cause() string {
	var pe *os.PathError
	if errors.As(e.Err, &pe) && pe.Path == e.Path {
		return pe.Op + ": " + pe.Err.Error()
	}
	return e.Err.Error()
}
