package decisionlog

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of FileSinkOptions, and NoLimit, which turns a limit off.
const (
	DefaultLogRate     = 1000      // records per second a FileSink writes on average
	DefaultLogBurst    = 20_000    // records a FileSink writes at once after a quiet spell
	DefaultLogMaxBytes = 512 << 20 // bytes a FileSink lets its file grow to
	NoLimit            = -1        // as any FileSinkOptions field: no limit
)

// fileSinkFlushInterval bounds how long a written record waits in a
// FileSink's buffer, and so what a crash of the gateway can lose.
const fileSinkFlushInterval = 200 * time.Millisecond

// fileSinkBatch is the size of a FileSink's batches: a full one is written
// to the file at once.
const fileSinkBatch = 64 << 10

// fileSinkDroppedInterval is the least time between two dropped records
// of a FileSink (but for the one written at Close), so that a sandbox that
// keeps the sink over its rate gets one dropped record a second, not one
// between every two records.
const fileSinkDroppedInterval = time.Second

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

// FileSink is a Sink that appends records to a file. It gathers records in
// batches of up to 64 KiB and writes a batch out when it is full (in its
// own goroutine, so that a Log's writers do not wait for the file), at
// most 200 ms after a record arrives, on Flush and on Close: a crash of the
// process loses at most the last 200 ms of records, a clean Close loses
// nothing (it also syncs the file to disk). Batches reach the file in the
// order of their records. Make one with OpenFileSink; it is safe for
// concurrent use.
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
// that succeeded before Commit returns.
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
	f       *os.File // guarded by fileMu once open: a removed file is replaced by a new one
	path    string
	kick    chan struct{}    // a record is waiting to be flushed; capacity 1
	changed chan struct{}    // the fault changed; capacity 1
	batch   chan struct{}    // full holds a batch to write now; capacity 1
	done    chan struct{}    // closed by Close to end the flusher
	stopped chan struct{}    // closed by the flusher when it returns
	now     func() time.Time // the budget's clock; nil: see clock

	// The budget, fixed at open: rate is 0 when there is no rate limit,
	// maxBytes math.MaxInt64 when there is no size limit.
	rate     float64
	burst    float64
	maxBytes int64
	sizeFlag string // FileSinkOptions.MaxBytesFlag

	// uncounted is the number of records left out since the last dropped
	// record. It changes with mu held, and is read without it to skip
	// reserveDropped's work when it is 0.
	uncounted atomic.Uint64
	total     atomic.Uint64 // records left out since open

	// writeTo writes to f (f.Write; tests replace it). fileMu guards it.
	writeTo func(f *os.File, b []byte) (int, error)

	fileMu sync.Mutex // held while a batch is written to f; taken after mu, never before
	// Guarded by fileMu: what failed writes left, to be written before
	// full and buf; the bytes in the file; and whether a failed write
	// left a part of what it wrote in the file that truncating could not
	// take out (the file is truncated to written before it is written).
	unwritten []byte
	written   int64
	torn      bool
	lost      bool   // f is no longer at the path: a new file is made there before the next write
	dev, ino  uint64 // of f, to tell that the path names another file

	// fault is why the file cannot be written (a *LogFileError), nil when
	// it can. It changes with fileMu held, and is read without it.
	fault atomic.Pointer[LogFileError]
	// fullErr is set when the file reached its size limit (fill), nil
	// until then and after a new file was made at the path. It changes
	// with mu held (and in reopen, with fileMu too), and is read without.
	fullErr atomic.Pointer[LogFullError]
	// vanished is the fault of a file that was removed or replaced while
	// the sink wrote it, until a dropped record says so in the new file.
	vanished atomic.Pointer[LogFileError]

	reportMu sync.Mutex
	report   func(error) // told of faults and recoveries; nil: nobody
	reported string      // the last fault told, "" after a recovery

	mu             sync.Mutex
	buf            []byte // the batch being gathered
	full           []byte // a full batch the flusher is to write; nil when none
	spare          []byte // an empty batch's memory, for the next swap
	pending        bool   // written since the last flush, and the flusher was kicked
	closed         bool
	size           int64         // bytes in the file: at open, plus written since
	tokens         float64       // of the rate limit's bucket
	refilled       time.Time     // when tokens was brought up to date
	since          time.Time     // when the first uncounted record was left out
	overRate       bool          // an uncounted record was left out for the rate
	overSize       bool          // an uncounted record was left out for the size
	overFault      *LogFileError // an uncounted record was left out for this fault (the first)
	lastDrop       time.Time     // when the last dropped record was made
	lastSeq        uint64        // the highest seq written, left out or reserved
	staged         []byte        // a dropped record reserved by the Log, with its newline; nil when none
	stagedFor      uint64        // how many left-out records staged counts
	stagedVanished *LogFileError // the vanished file staged tells of, nil when none
	dropBuf        []byte        // staged's memory, reused

	// The flood (budget.go): the targets written while over the rate since
	// the bucket was last full, the bytes of their names, those whose
	// repeats were left out since the last dropped record, and those the
	// staged dropped record counts, with their counts then.
	flood         map[uint64]*floodTarget
	floodBytes    int
	repeats       []*floodTarget
	repeatBytes   int
	stagedRepeats []*floodTarget
	stagedCounts  []uint64
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
	s := &FileSink{
		f:        f,
		path:     path,
		writeTo:  (*os.File).Write,
		written:  size,
		kick:     make(chan struct{}, 1),
		changed:  make(chan struct{}, 1),
		batch:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		now:      now,
		maxBytes: o.MaxBytes,
		sizeFlag: o.MaxBytesFlag,
		size:     size,
		buf:      make([]byte, 0, fileSinkBatch),
	}
	switch {
	case o.MaxBytes == 0:
		s.maxBytes = DefaultLogMaxBytes
	case o.MaxBytes < 0:
		s.maxBytes = math.MaxInt64
	}
	rate, burst := o.RatePerSecond, o.Burst
	if rate == 0 {
		rate = DefaultLogRate
	}
	if burst == 0 {
		burst = DefaultLogBurst
	}
	if rate > 0 && burst > 0 && !math.IsInf(rate, 1) {
		s.rate, s.burst, s.tokens = rate, float64(burst), float64(burst)
		s.refilled = s.clock(time.Time{})
	}
	s.dev, s.ino, err = fileID(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("decision log %s: %w", path, err)
	}
	go s.flushLoop()
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
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.writeTo = fn
}

// Name returns the name of the file, as passed to OpenFileSink.
func (s *FileSink) Name() string { return s.path }

// Dropped returns how many records the sink has left out since it was
// opened to stay within its budget.
func (s *FileSink) Dropped() uint64 { return s.total.Load() }

// Fault returns why the file cannot be written now, a *LogFileError, or
// nil when it can (see FileSink).
func (s *FileSink) Fault() error {
	if e := s.fault.Load(); e != nil {
		return e
	}
	if e := s.fullErr.Load(); e != nil {
		return e
	}
	return nil
}

// reportFaults makes fn be told of each fault of the sink (a
// *LogFileError) as soon as it is found, and with nil of the write that
// ended it. fn is called from the sink's goroutine, one call at a time.
func (s *FileSink) reportFaults(fn func(error)) {
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	s.report = fn
}

// flushLoop writes each full batch as soon as write hands it over, and
// everything written at most fileSinkFlushInterval after a record arrives
// (the first since the last flush); every fileSinkCheckInterval it looks
// whether the file was removed or replaced, and tries a file at fault
// again when records wait for it; it tells the reporter of faults at
// once. It returns when Close closes s.done.
func (s *FileSink) flushLoop() {
	defer close(s.stopped)
	t := time.NewTimer(fileSinkFlushInterval)
	t.Stop()
	check := time.NewTicker(fileSinkCheckInterval)
	defer check.Stop()
	for {
		select {
		case <-s.kick:
			t.Reset(fileSinkFlushInterval)
		case <-s.batch:
			s.writeFull()
		case <-t.C:
			s.mu.Lock()
			if !s.closed {
				s.pending = false
				s.flushLocked(0)
			}
			s.mu.Unlock()
		case <-check.C:
			s.checkFile()
		case <-s.changed:
			s.tell()
		case <-s.done:
			t.Stop()
			return
		}
	}
}

// tell calls the reporter when the fault changed since it was last told.
func (s *FileSink) tell() {
	var text string
	e := s.Fault()
	if e != nil {
		text = e.Error()
	}
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	if text == s.reported {
		return
	}
	s.reported = text
	if s.report == nil {
		return
	}
	s.report(e)
}

// setFault marks the sink at fault for err and returns the fault. fileMu
// is held.
func (s *FileSink) setFault(err error) *LogFileError {
	e, ok := err.(*LogFileError)
	if !ok {
		e = &LogFileError{Path: s.path, Err: err}
	}
	if prev := s.fault.Swap(e); prev == nil || prev.Error() != e.Error() {
		s.signal()
	}
	return e
}

// signal wakes the flusher to tell the reporter.
func (s *FileSink) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// writeFile writes b to the file. A write that fails after a part of b
// reached the file (a filesystem filling up) is undone, so that the file
// always ends with a whole record: the file is truncated to what it held
// before, now or, when that fails too, before the next write. fileMu is
// held.
func (s *FileSink) writeFile(b []byte) error {
	n, err := s.writeTo(s.f, b)
	if err == nil {
		s.written += int64(n)
		return nil
	}
	if n > 0 && s.f.Truncate(s.written) != nil {
		s.torn = true
	}
	return err
}

// prepare makes the file ready to be written after a fault: a new file at
// the path when the sink's was removed or moved, none when another file
// is there; and no part of a failed commit's records in it. fileMu is
// held.
func (s *FileSink) prepare() error {
	if s.lost {
		if err := s.reopen(); err != nil {
			return err
		}
	}
	if s.torn {
		if err := s.f.Truncate(s.written); err != nil {
			return err
		}
		s.torn = false
	}
	return nil
}

// writeFull writes the full batch, if there is one, without holding s.mu
// while the file is written: the Log's writers go on gathering the next
// batch meanwhile. s.fileMu, taken before s.mu is released, keeps a later
// flush from writing its records first. A sink at fault leaves the batch
// to the next flush.
func (s *FileSink) writeFull() {
	s.mu.Lock()
	b := s.full
	if b == nil || s.closed || s.fault.Load() != nil {
		s.mu.Unlock()
		return
	}
	s.full = nil
	s.fileMu.Lock()
	s.mu.Unlock()
	if err := s.writeFile(b); err != nil {
		// What was not written is written first when the file is tried
		// again; the next flush sees it under fileMu.
		s.unwritten = b
		s.setFault(err) // an *os.PathError naming the file
		s.fileMu.Unlock()
		return
	}
	s.fileMu.Unlock()
	s.mu.Lock()
	s.spare = b[:0]
	s.mu.Unlock()
}

// flushLocked writes what waits for the file: what failed writes left,
// the full batch, then the one being gathered, after a write of writeFull
// that is under way. The last cut bytes of the batch being gathered are a
// commit's records: when they cannot be written, they are taken out of
// the batch, and out of the file when a part of them reached it (what
// else was not written stays for the next try). It returns nil when the
// file can be written (a write succeeded, or nothing had to be written
// and the sink is not at fault), else the fault. s.mu is held.
func (s *FileSink) flushLocked(cut int) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	fail := func(err error) error {
		if cut > 0 {
			s.buf = s.buf[:len(s.buf)-cut]
			s.size -= int64(cut)
		}
		return s.setFault(err)
	}
	if err := s.prepare(); err != nil {
		return fail(err)
	}
	wrote := false
	if len(s.unwritten) > 0 {
		if err := s.writeFile(s.unwritten); err != nil {
			return fail(err)
		}
		s.unwritten, wrote = nil, true
	}
	if s.full != nil {
		if err := s.writeFile(s.full); err != nil {
			s.unwritten, s.full = s.full, nil
			return fail(err)
		}
		s.spare, s.full, wrote = s.full[:0], nil, true
	}
	if len(s.buf) > 0 {
		if err := s.writeFile(s.buf); err != nil {
			// None of it is in the file (writeFile); what came before
			// the commit's records is written at the next try.
			if keep := len(s.buf) - cut; keep > 0 {
				s.unwritten = bytes.Clone(s.buf[:keep])
			}
			s.size -= int64(cut)
			s.buf = s.buf[:0]
			return s.setFault(err)
		}
		s.buf, wrote = s.buf[:0], true
	}
	if cut > 0 {
		// A commit's records are in the log only if the file written is
		// still the one at the path.
		if err := s.verify(); err != nil {
			return err
		}
	}
	if e := s.fault.Load(); e != nil {
		if !wrote {
			return e // nothing proved the file can be written again
		}
		s.fault.Store(nil)
		s.signal()
	}
	return nil
}

// WriteRecord appends line, the record numbered seq, to the buffer, or
// leaves it out when it is over the sink's budget (which is not an error).
func (s *FileSink) WriteRecord(seq uint64, line []byte) error {
	return s.writeBudgeted(seq, line, nil, time.Time{})
}

// clock returns the current time for the budget: from the sink's own
// clock when it has one (tests), else now, the time the Log stamped on
// the record, which saves reading the clock again for every record, or
// time.Now when now is zero.
func (s *FileSink) clock(now time.Time) time.Time {
	switch {
	case s.now != nil:
		return s.now()
	case now.IsZero():
		return time.Now()
	default:
		return now
	}
}

// writeBudgeted writes the dropped record reserved for this record, if
// any, then line, unless line is over the budget and policy is false.
// now is the current time, or zero.
func (s *FileSink) writeBudgeted(seq uint64, line []byte, r *Record, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("writing %s: %w", s.path, ErrSinkClosed)
	}
	s.lastSeq = max(s.lastSeq, seq)
	if s.staged != nil {
		s.writeStaged() // a failure puts the sink at fault
	}
	policy := r != nil && r.Event == EventPolicy
	if e := s.fault.Load(); e != nil && !policy {
		// Left out: what waits for the file stays bounded. A policy
		// record, which says how the next records were decided, waits.
		s.leaveOutFault(s.clock(now), e)
		return nil
	}
	if !policy && !s.admit(len(line), r, now) {
		return nil
	}
	if err := s.write(line); err != nil {
		s.leaveOutFault(s.clock(now), s.fault.Load())
	}
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
	if s.closed {
		return fmt.Errorf("writing %s: %w", s.path, ErrSinkClosed)
	}
	s.fileMu.Lock()
	lost := s.lost
	s.fileMu.Unlock()
	if err := s.commitFits(len(lines)+len(s.staged), lost); err != nil {
		return err // the Log gives the staged dropped record back
	}
	mark := len(s.buf)
	var stagedFor uint64
	staged := s.staged != nil
	if staged {
		s.buf = append(s.buf, s.staged...)
		stagedFor, s.staged = s.stagedFor, nil
	}
	start := 0
	for i, end := range ends {
		if s.fault.Load() != nil || s.admit(end-start, recs[i], now) {
			s.buf = append(s.buf, lines[start:end]...)
		}
		start = end
	}
	cut := len(s.buf) - mark
	if cut == 0 {
		return nil // left out by the budget
	}
	s.size += int64(cut)
	// pending stays as it is: when set, the flusher's timer is armed and
	// flushes what comes after these records. Were it cleared here, the
	// next record (most often this request's close) would wake the
	// flusher again, a goroutine handoff for every request.
	if err := s.flushLocked(cut); err != nil {
		return err
	}
	if staged {
		s.counted(stagedFor)
	}
	return nil
}

// unreserve gives back the dropped record reserved for a commit that did
// not take place.
func (s *FileSink) unreserve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.staged = nil
}

// reserveDropped implements budgetedSink: it makes a dropped record
// numbered seq when records were left out and the next record will be
// written (or the Log closes), unless the last dropped record is less
// than fileSinkDroppedInterval old (but after a fault, whose dropped
// record goes before the first record written again) or the record would
// not fit in the size limit. While the file is at fault, only a commit
// gets one, which is written with it if the file can be written again.
// It does nothing after Close.
func (s *FileSink) reserveDropped(seq uint64, at dropPoint, now time.Time) bool {
	vanished := s.vanished.Load() != nil
	if s.uncounted.Load() == 0 && !vanished {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.staged != nil || (s.fault.Load() != nil && at != dropBeforeCommit) {
		return false
	}
	now = s.clock(now)
	if at != dropAtClose {
		if s.overFault == nil && !vanished && !s.lastDrop.IsZero() && now.Sub(s.lastDrop) < fileSinkDroppedInterval {
			return false
		}
		if (at == dropBeforeRecord || at == dropBeforeCommit) && s.rate > 0 {
			s.refill(now)
			if s.tokens < 1 {
				return false // the record will be left out too
			}
		}
	}
	s.stage(seq, now)
	if at != dropAtClose && !vanished && int64(len(s.staged)) > s.maxBytes-s.size {
		s.staged = nil
		return false
	}
	s.lastSeq = max(s.lastSeq, seq)
	return true
}

// stage encodes the dropped record numbered seq, made at now, for the
// records left out so far. s.mu is held.
func (s *FileSink) stage(seq uint64, now time.Time) {
	r := Record{
		V: SchemaVersion, Seq: seq, Event: EventDropped, Time: now, Since: s.since,
		Count: s.uncounted.Load(), Reason: s.dropReason(),
	}
	if r.Count == 0 {
		r.Since = now // only the vanished file to tell
	}
	s.stageTargets(&r)
	s.stagedVanished = s.vanished.Load()
	s.dropBuf = append(r.AppendJSON(s.dropBuf[:0]), '\n')
	s.staged = s.dropBuf
	s.stagedFor = r.Count
	s.lastDrop = now
}

// writeStaged writes the staged dropped record and starts counting anew.
// s.mu is held.
func (s *FileSink) writeStaged() error {
	line := s.staged
	s.staged = nil
	if err := s.write(line); err != nil {
		return err
	}
	s.counted(s.stagedFor)
	return nil
}

// counted takes n records that a dropped record written now counts off
// the uncounted ones. s.mu is held.
func (s *FileSink) counted(n uint64) {
	s.countedTargets()
	if s.stagedVanished != nil {
		s.vanished.CompareAndSwap(s.stagedVanished, nil)
		s.stagedVanished = nil
	}
	s.uncounted.Store(s.uncounted.Load() - n)
	if s.uncounted.Load() == 0 {
		s.overRate, s.overSize, s.overFault = false, false, nil
	}
}

// write appends line to the batch, counts its size and kicks the flusher.
// A batch that line would take past fileSinkBatch is handed to the
// flusher first, or, when the flusher has not yet taken the one before,
// both are written here. s.mu is held.
func (s *FileSink) write(line []byte) error {
	if len(s.buf) > 0 && len(s.buf)+len(line) > fileSinkBatch {
		if s.full == nil {
			next := s.spare
			if next == nil {
				next = make([]byte, 0, fileSinkBatch)
			}
			s.full, s.buf, s.spare = s.buf, next, nil
			select {
			case s.batch <- struct{}{}:
			default: // the flusher has a signal it has not taken yet
			}
		} else if err := s.flushLocked(0); err != nil {
			return err
		}
	}
	s.buf = append(s.buf, line...)
	s.size += int64(len(line))
	if !s.pending {
		s.pending = true
		select {
		case s.kick <- struct{}{}:
		default: // the flusher has a kick it has not taken yet
		}
	}
	return nil
}

// Flush writes the buffer to the file (without syncing it to disk). It
// returns the sink's fault when the file cannot be written.
func (s *FileSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("flushing %s: %w", s.path, ErrSinkClosed)
	}
	s.pending = false
	return s.flushLocked(0)
}

// Close writes a last dropped record when records were left out since the
// previous one (numbered as the Log reserved, or one above the last seq
// the sink saw), flushes the buffer, syncs the file to disk, closes it and
// ends the flusher goroutine. Closing again returns nil.
func (s *FileSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	// What the file lacks if it cannot be written now.
	s.fileMu.Lock()
	lost := s.uncounted.Load() + uint64(bytes.Count(s.unwritten, []byte{'\n'})+bytes.Count(s.full, []byte{'\n'})+bytes.Count(s.buf, []byte{'\n'}))
	s.fileMu.Unlock()
	if s.staged == nil && (s.uncounted.Load() > 0 || s.vanished.Load() != nil) {
		s.stage(s.lastSeq+1, s.clock(time.Time{}))
	}
	var err error
	if s.staged != nil {
		err = s.writeStaged()
	}
	if err == nil {
		err = s.flushLocked(0)
	}
	if le, ok := err.(*LogFileError); ok {
		err = &LogFileError{Path: le.Path, Err: le.Err, Closing: true, Lost: lost}
	}
	s.fileMu.Lock()
	if err == nil {
		err = s.f.Sync()
	}
	err = Combine(err, s.f.Close())
	s.fileMu.Unlock()
	s.mu.Unlock()
	<-s.stopped
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
