package gateway

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
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
// the decision log. Records over either bound are left out and counted;
// policy records are never left out. They also say whether the sink may
// add to a file that holds something already. The zero value means the
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
	// record, written at Close, may go past it; nothing else does.
	MaxBytes int64
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
// A FileSink keeps to the budget of its FileSinkOptions: a record over it
// is left out and counted, and a record with event "dropped" saying how
// many were left out since when is written before the next record that is
// written (at most one a second) and at Close. A Log numbers these dropped
// records (see Log.Emit); a FileSink written to directly with WriteRecord
// writes them only at Close, numbered one above the last seq it saw, and
// treats every record as one the budget applies to.
//
// A write error is sticky: every later write, Flush and Close returns it.
type FileSink struct {
	f       *os.File
	kick    chan struct{}    // a record is waiting to be flushed; capacity 1
	batch   chan struct{}    // full holds a batch to write now; capacity 1
	done    chan struct{}    // closed by Close to end the flusher
	stopped chan struct{}    // closed by the flusher when it returns
	now     func() time.Time // the budget's clock; nil: see clock

	// The budget, fixed at open: rate is 0 when there is no rate limit,
	// maxBytes math.MaxInt64 when there is no size limit.
	rate     float64
	burst    float64
	maxBytes int64

	// uncounted is the number of records left out since the last dropped
	// record. It changes with mu held, and is read without it to skip
	// reserveDropped's work when it is 0.
	uncounted atomic.Uint64
	total     atomic.Uint64 // records left out since open

	fileMu sync.Mutex // held while a batch is written to f; taken after mu, never before

	mu        sync.Mutex
	buf       []byte // the batch being gathered
	full      []byte // a full batch the flusher is to write; nil when none
	spare     []byte // an empty batch's memory, for the next swap
	err       error  // the first write error, sticky
	pending   bool   // written since the last flush, and the flusher was kicked
	closed    bool
	size      int64               // bytes in the file: at open, plus written since
	tokens    float64             // of the rate limit's bucket
	refilled  time.Time           // when tokens was brought up to date
	since     time.Time           // when the first uncounted record was left out
	overRate  bool                // an uncounted record was left out for the rate
	overSize  bool                // an uncounted record was left out for the size
	lastDrop  time.Time           // when the last dropped record was made
	lastSeq   uint64              // the highest seq written, left out or reserved
	staged    []byte              // a dropped record reserved by the Log, with its newline; nil when none
	stagedFor uint64              // how many left-out records staged counts
	dropBuf   []byte              // staged's memory, reused
	flood     map[uint64]struct{} // targets written over the rate since the bucket was full (novel)
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

// openFileSink is OpenFileSink with the clock the budget uses; nil means
// the time a Log stamps on each record, or time.Now.
func openFileSink(path string, o FileSinkOptions, now func() time.Time) (*FileSink, error) {
	if math.IsNaN(o.RatePerSecond) {
		return nil, fmt.Errorf("decision log %s: the rate limit is not a number", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("decision log %s: creating its directory: %w", path, err)
	}
	f, size, err := openLogFile(path)
	if err != nil {
		return nil, err
	}
	if size > 0 && !o.Append {
		f.Close()
		return nil, &NonEmptyLogFileError{Path: path, Size: size}
	}
	s := &FileSink{
		f:        f,
		kick:     make(chan struct{}, 1),
		batch:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		now:      now,
		maxBytes: o.MaxBytes,
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
	go s.flushLoop()
	return s, nil
}

// An UnsafeLogFileError is what OpenFileSink returns when what it finds at
// the log's path is not a regular file of the process's effective uid with
// exactly one link. Its message says what is wrong and what to do.
type UnsafeLogFileError struct {
	// Path is the log's path, as given to OpenFileSink.
	Path string
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

func (e *UnsafeLogFileError) Error() string {
	const fix = ": remove it or choose another --log path"
	switch {
	case e.Type == os.ModeSymlink:
		return "decision log " + e.Path + ": is a symbolic link; sbx never follows one there (a sandbox could have planted it)" + fix
	case e.Type == os.ModeDir:
		return "decision log " + e.Path + ": is a directory: name a file in it, or choose another --log path"
	case e.Type != 0:
		return "decision log " + e.Path + ": is " + fileTypeName(e.Type) +
			", not a regular file; sbx writes its log only to a regular file (a sandbox could have planted this one, and a pipe could hang sbx)" + fix
	case e.UID != e.EUID:
		return "decision log " + e.Path + ": is owned by uid " + strconv.Itoa(e.UID) + ", not by uid " + strconv.Itoa(e.EUID) +
			" that sbx runs as; sbx appends only to its own files (a sandbox could have planted this one)" + fix
	default:
		return "decision log " + e.Path + ": has " + strconv.FormatUint(e.Links, 10) +
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
	// Size is how many bytes the file holds.
	Size int64
}

func (e *NonEmptyLogFileError) Error() string {
	return "decision log " + e.Path + ": holds " + strconv.FormatInt(e.Size, 10) +
		" bytes already (an earlier run's records?), and sbx does not add to a log unless asked: choose another --log path, or give --log-append to add this run's records to it"
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

// Name returns the name of the file, as passed to OpenFileSink.
func (s *FileSink) Name() string { return s.f.Name() }

// Dropped returns how many records the sink has left out since it was
// opened to stay within its budget.
func (s *FileSink) Dropped() uint64 { return s.total.Load() }

// flushLoop writes each full batch as soon as write hands it over, and
// everything written at most fileSinkFlushInterval after a record arrives
// (the first since the last flush); it returns when Close closes s.done.
// A write error is kept in s.err, so the next WriteRecord, Flush or Close
// reports it.
func (s *FileSink) flushLoop() {
	defer close(s.stopped)
	t := time.NewTimer(fileSinkFlushInterval)
	t.Stop()
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
				s.flushLocked()
			}
			s.mu.Unlock()
		case <-s.done:
			t.Stop()
			return
		}
	}
}

// writeFull writes the full batch, if there is one, without holding s.mu
// while the file is written: the Log's writers go on gathering the next
// batch meanwhile. s.fileMu, taken before s.mu is released, keeps a later
// flush from writing its records first.
func (s *FileSink) writeFull() {
	s.mu.Lock()
	b := s.full
	if b == nil || s.closed || s.err != nil {
		s.mu.Unlock()
		return
	}
	s.full = nil
	s.fileMu.Lock()
	s.mu.Unlock()
	_, err := s.f.Write(b)
	s.fileMu.Unlock()
	s.mu.Lock()
	if err != nil && s.err == nil {
		s.err = err // an *os.PathError naming the file
	}
	s.spare = b[:0]
	s.mu.Unlock()
}

// flushLocked writes the full batch and then the one being gathered, after
// a write of writeFull that is under way. s.mu is held.
func (s *FileSink) flushLocked() error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.full != nil {
		if _, err := s.f.Write(s.full); err != nil {
			s.err = err
			return err
		}
		s.spare, s.full = s.full[:0], nil
	}
	if len(s.buf) > 0 {
		if _, err := s.f.Write(s.buf); err != nil {
			s.err = err
			return err
		}
		s.buf = s.buf[:0]
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
func (s *FileSink) writeBudgeted(seq uint64, line []byte, r *decisionlog.Record, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("writing %s: %w", s.f.Name(), ErrSinkClosed)
	}
	s.lastSeq = max(s.lastSeq, seq)
	if s.staged != nil {
		if err := s.writeStaged(); err != nil {
			return err
		}
	}
	if (r == nil || r.Event != decisionlog.EventPolicy) && !s.admit(len(line), r, now) {
		return nil
	}
	return s.write(line)
}

// admit reports whether a record r of n bytes is within the budget, and
// takes it from the budget if so; if not, it counts the record as left
// out. Over the rate, a record for a target the flood has not shown yet
// is still written (see novel): a flood of requests to one place cannot
// hide one to another. now is the current time, or zero. s.mu is held.
func (s *FileSink) admit(n int, r *decisionlog.Record, now time.Time) bool {
	if int64(n) > s.maxBytes-s.size {
		s.leaveOut(s.clock(now), &s.overSize)
		return false
	}
	if s.rate > 0 {
		now = s.clock(now)
		s.refill(now)
		if s.tokens < 1 {
			if !s.novel(r) {
				s.leaveOut(now, &s.overRate)
				return false
			}
			return true
		}
		s.tokens--
		if s.flood != nil {
			s.novel(r) // during a flood, what is written is seen
		}
	}
	return true
}

// maxNovel bounds the targets a flood can have written over the rate
// limit, each once, between two times the rate's bucket is full.
const maxNovel = 4096

// novel reports whether r names a target (event, kind, host, port,
// action) not seen since the rate's bucket was last full, and remembers
// it: once a flood has had maxNovel targets written this way, none is.
// The targets are forgotten when the bucket fills again. s.mu is held.
func (s *FileSink) novel(r *decisionlog.Record) bool {
	if r == nil || r.Host == "" || len(s.flood) >= maxNovel {
		return false // no target (a dropped or conn record), or too many
	}
	var h maphash.Hash
	h.SetSeed(floodSeed)
	h.WriteString(r.Event)
	h.WriteByte(0)
	h.WriteString(r.Kind)
	h.WriteByte(0)
	h.WriteString(r.Host)
	h.WriteByte(0)
	h.WriteString(r.Action)
	key := h.Sum64() ^ uint64(r.Port)<<48
	if s.flood == nil {
		s.flood = map[uint64]struct{}{}
	}
	if _, seen := s.flood[key]; seen {
		return false
	}
	s.flood[key] = struct{}{}
	return true
}

// floodSeed seeds the hash of novel's targets.
var floodSeed = maphash.MakeSeed()

// refill adds the tokens earned since the last refill, up to the burst.
func (s *FileSink) refill(now time.Time) {
	if d := now.Sub(s.refilled); d > 0 {
		s.tokens = min(s.burst, s.tokens+d.Seconds()*s.rate)
		s.refilled = now
		if s.tokens == s.burst && s.flood != nil {
			clear(s.flood) // the flood is over
		}
	}
}

// leaveOut counts a record left out at now, because of the budget whose
// flag over points to. s.mu is held.
func (s *FileSink) leaveOut(now time.Time, over *bool) {
	if s.uncounted.Load() == 0 {
		s.since = now
	}
	*over = true
	s.uncounted.Add(1)
	s.total.Add(1)
}

// reserveDropped implements budgetedSink: it makes a dropped record
// numbered seq when records were left out and the next record will be
// written (or the Log closes), unless the last dropped record is less
// than fileSinkDroppedInterval old or the record would not fit in the
// size limit. It does nothing after Close.
func (s *FileSink) reserveDropped(seq uint64, at dropPoint, now time.Time) bool {
	if s.uncounted.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.staged != nil {
		return false
	}
	now = s.clock(now)
	if at != dropAtClose {
		if !s.lastDrop.IsZero() && now.Sub(s.lastDrop) < fileSinkDroppedInterval {
			return false
		}
		if at == dropBeforeRecord && s.rate > 0 {
			s.refill(now)
			if s.tokens < 1 {
				return false // the record will be left out too
			}
		}
	}
	s.stage(seq, now)
	if at != dropAtClose && int64(len(s.staged)) > s.maxBytes-s.size {
		s.staged = nil
		return false
	}
	s.lastSeq = max(s.lastSeq, seq)
	return true
}

// stage encodes the dropped record numbered seq, made at now, for the
// records left out so far. s.mu is held.
func (s *FileSink) stage(seq uint64, now time.Time) {
	r := decisionlog.Record{
		V: decisionlog.SchemaVersion, Seq: seq, Event: decisionlog.EventDropped, Time: now, Since: s.since,
		Count: s.uncounted.Load(), Reason: s.dropReason(),
	}
	s.dropBuf = append(r.AppendJSON(s.dropBuf[:0]), '\n')
	s.staged = s.dropBuf
	s.stagedFor = r.Count
	s.lastDrop = now
}

// dropReason says which budgets the uncounted records exceeded.
func (s *FileSink) dropReason() string {
	var rate, size string
	if s.overRate {
		rate = "over the decision log's rate limit of " + strconv.FormatFloat(s.rate, 'g', -1, 64) +
			" records a second (burst " + strconv.FormatFloat(s.burst, 'g', -1, 64) + ")"
	}
	if s.overSize {
		size = "the decision log file reached its size limit of " + strconv.FormatInt(s.maxBytes, 10) + " bytes"
	}
	switch {
	case rate != "" && size != "":
		return rate + ", and " + size
	case rate != "":
		return rate
	default:
		return size
	}
}

// writeStaged writes the staged dropped record and starts counting anew.
// s.mu is held.
func (s *FileSink) writeStaged() error {
	line := s.staged
	s.staged = nil
	if err := s.write(line); err != nil {
		return err
	}
	s.uncounted.Store(s.uncounted.Load() - s.stagedFor)
	if s.uncounted.Load() == 0 {
		s.overRate, s.overSize = false, false
	}
	return nil
}

// write appends line to the batch, counts its size and kicks the flusher.
// A batch that line would take past fileSinkBatch is handed to the
// flusher first, or, when the flusher has not yet taken the one before,
// both are written here. s.mu is held.
func (s *FileSink) write(line []byte) error {
	if s.err != nil {
		return s.err
	}
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
		} else if err := s.flushLocked(); err != nil {
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

// Flush writes the buffer to the file (without syncing it to disk).
func (s *FileSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("flushing %s: %w", s.f.Name(), ErrSinkClosed)
	}
	s.pending = false
	return s.flushLocked()
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
	if s.staged == nil && s.uncounted.Load() > 0 {
		s.stage(s.lastSeq+1, s.clock(time.Time{}))
	}
	var err error
	if s.staged != nil {
		err = s.writeStaged()
	}
	if err == nil {
		err = s.flushLocked()
	}
	if err == nil {
		err = s.f.Sync()
	}
	err = errors.Join(err, s.f.Close())
	s.mu.Unlock()
	<-s.stopped
	return err
}
