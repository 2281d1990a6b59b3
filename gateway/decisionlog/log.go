package decisionlog

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Sink receives the encoded records of a Log.
//
// Log calls WriteRecord with one record at a time, in increasing seq order,
// never concurrently with another call of the same Log; line is one JSON
// object followed by '\n' and is valid only during the call (the Log reuses
// its memory), so a sink that keeps it must copy it. A sink shared with
// other goroutines (a FileSink's flusher, a Ring's readers) does its own
// locking.
type Sink interface {
	// WriteRecord writes the record numbered seq, encoded as line.
	WriteRecord(seq uint64, line []byte) error
	// Flush pushes what the sink buffers to where it goes.
	Flush() error
	// Close flushes the sink and releases what it holds. Writes after
	// Close fail with an error wrapping ErrSinkClosed.
	Close() error
}

// ErrSinkClosed is returned by a sink's writes after it was closed, and by
// Subscription.Err when the Ring it follows was closed.
var ErrSinkClosed = errors.New("decision log sink closed")

// Log numbers decision records, encodes them and writes them to its sinks
// (docs/decision-log.md). Make one with NewLog. A Log is safe for concurrent use:
// Emit from many goroutines writes every record to every sink in seq
// order. The caller that made the Log must Close it.
type Log struct {
	sandbox string
	sinks   []Sink
	budgets []budgetedSink // budgets[i] is sinks[i] when that leaves records out over a budget, else nil
	nerrs   atomic.Uint64

	mu     sync.Mutex // held while a record is numbered, encoded and written
	seq    uint64     // last assigned
	buf    []byte     // the line being written (a commit batch's lines), reused
	ends   []int      // where each of a commit batch's lines ends in buf
	one    [1]*Record // the batch of a commit written alone (commitOneLocked)
	closed bool

	// Records Post handed to the holder of mu, emitted before it lets
	// go (unlock); nposted is how many, read without postMu. emitting is
	// the memory of the records being emitted, reused once they are;
	// it is touched only with mu held.
	postMu   sync.Mutex // taken alone or after mu, never before it
	posted   []Record
	nposted  atomic.Int32
	emitting []Record

	hasFile bool         // a sink is a budgetedSink: Commit batches
	groupMu sync.Mutex   // guards open; taken alone or after mu, never before it
	open    *commitBatch // the batch commits join, nil when none waits
	spare   *commitBatch // a batch of one written, for the next; guarded by groupMu

	errMu    sync.Mutex // separate from mu, so Err does not wait for a slow sink
	firstErr error
}

// NewLog returns a Log for the sandbox with the given id (empty for a
// standalone gateway) that writes to sinks, skipping nil ones. Closing the
// Log closes the sinks.
func NewLog(sandbox string, sinks ...Sink) *Log {
	l := &Log{sandbox: sandbox, buf: make([]byte, 0, 1024)}
	for _, s := range sinks {
		if s != nil {
			l.sinks = append(l.sinks, s)
			b, _ := s.(budgetedSink)
			l.budgets = append(l.budgets, b)
			l.hasFile = l.hasFile || b != nil
		}
	}
	return l
}

// A budgetedSink is a Sink that leaves out the records over its budget
// and later writes a dropped record saying how many (FileSink). The Log
// numbers those dropped records as it numbers its own, so that a seq names
// one record wherever it appears; the other sinks see a gap in the seqs
// instead.
type budgetedSink interface {
	Sink
	// reserveDropped is called, with the Log's lock held, before the Log
	// numbers a record (at is dropBeforeRecord or dropBeforePolicy) or
	// closes the sink (dropAtClose). It reports whether the sink took seq
	// for a dropped record that it writes before that record, or when it
	// is closed; the Log then numbers its record seq+1. now is the
	// current time, or zero when the sink is to read its clock.
	reserveDropped(seq uint64, at dropPoint, now time.Time) bool
	// writeBudgeted is WriteRecord for r, encoded as line, which the sink
	// may leave out when it is over budget (never a policy record). now
	// is as for reserveDropped.
	writeBudgeted(seq uint64, line []byte, r *Record, now time.Time) error
	// commitRecords is writeBudgeted for records that let requests be
	// carried out, recs[i] encoded as lines[ends[i-1]:ends[i]] (from 0
	// for the first): the records (after the dropped record reserved
	// before them, if any) are in the file when it returns nil, taken
	// there by one write. When they cannot be written, the sink keeps
	// none of them and returns the error, a *LogFileError.
	commitRecords(lines []byte, ends []int, recs []*Record, now time.Time) error
	// unreserve gives back the dropped record reserved before a commit
	// that failed.
	unreserve()
	// reportFaults makes fn be told of the sink's faults (with the
	// error) and recoveries (with nil), at once.
	reportFaults(fn func(error))
}

// dropPoint says when a budgetedSink is asked to write a dropped record.
type dropPoint uint8

const (
	dropBeforeRecord dropPoint = iota // before a record the budget applies to
	dropBeforePolicy                  // before a policy record, which is never left out
	dropAtClose                       // when the Log closes
	dropBeforeCommit                  // before a record that Commit writes
)

// Emit assigns r the next seq (1 for the first record), sets r.V, sets
// r.Sandbox to the Log's sandbox and r.Time to the current time when it is
// zero, writes r to every sink and returns the seq. Emit does not keep r.
//
// A FileSink over its budget leaves r out (unless it is a policy record),
// and before the next record it writes, it may write a dropped record
// saying how many it left out. That record takes a seq of its own, before
// r's: seqs always increase, and the sinks that did not get it skip it.
//
// A sink's error does not stop the other sinks or later records; it is
// counted by Errors and the first one is kept for Err. After Close, Emit
// writes nothing and returns 0.
func (l *Log) Emit(r *Record) uint64 {
	l.mu.Lock()
	defer l.unlock()
	return l.emitLocked(r)
}

// Post is Emit for a record whose seq its caller does not need (a
// request's close record): it does not wait for the Log while another
// goroutine holds it, a commit's write above all. Then Post hands a copy
// of r to that goroutine, which numbers and writes it, as Emit would,
// before it lets go of the Log; r's time is stamped now when it is zero.
// Records are still numbered and written in order, and a commit that
// fails gives its seqs back before any posted record is numbered. The
// copy shares r.Targets, which the caller must not change afterwards.
// Flush and Close write what was posted before them.
func (l *Log) Post(r *Record) {
	if l.mu.TryLock() {
		l.emitLocked(r)
		l.unlock()
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	l.postMu.Lock()
	l.posted = append(l.posted, *r)
	l.nposted.Add(1)
	l.postMu.Unlock()
	// Whoever holds the Log looks for posted records after letting go of
	// it (unlock); when it let go before r came, r is written here.
	if l.mu.TryLock() {
		l.unlock()
	}
}

// unlock writes the posted records and lets go of the Log, and writes
// those posted meanwhile (Post) unless another goroutine took the Log,
// which writes them when it lets go. Every holder of l.mu lets go of it
// through unlock.
func (l *Log) unlock() {
	for {
		l.emitPostedLocked()
		l.mu.Unlock()
		if l.nposted.Load() == 0 || !l.mu.TryLock() {
			return
		}
	}
}

// emitPostedLocked emits the records Post handed over, in the order they
// came. l.mu is held.
func (l *Log) emitPostedLocked() {
	for l.nposted.Load() > 0 {
		l.postMu.Lock()
		recs := l.posted
		l.posted, l.emitting = l.emitting[:0], nil
		l.nposted.Store(0)
		l.postMu.Unlock()
		for i := range recs {
			l.emitLocked(&recs[i])
			recs[i] = Record{}
		}
		l.emitting = recs[:0]
	}
}

// emitLocked is Emit. l.mu is held.
func (l *Log) emitLocked(r *Record) uint64 {
	if l.closed {
		return 0
	}
	// now is the time stamped on r, which budgeted sinks take for the
	// current time rather than read the clock again; zero when r came
	// with a time of its own.
	var now time.Time
	if r.Time.IsZero() {
		now = time.Now()
		r.Time = now
	}
	policy := r.Event == EventPolicy
	for _, b := range l.budgets {
		if b != nil && b.reserveDropped(l.seq+1, dropPointFor(policy), now) {
			l.seq++
		}
	}
	l.seq++
	r.Seq = l.seq
	r.V = SchemaVersion
	r.Sandbox = l.sandbox
	if len(l.sinks) == 0 {
		return r.Seq
	}
	l.buf = append(r.AppendJSON(l.buf[:0]), '\n')
	for i, s := range l.sinks {
		var err error
		if b := l.budgets[i]; b != nil {
			err = b.writeBudgeted(r.Seq, l.buf, r, now)
		} else {
			err = s.WriteRecord(r.Seq, l.buf)
		}
		if err != nil {
			l.sinkFailed(i, err)
		}
	}
	return r.Seq
}

// Commit is Emit for a record that lets a request be carried out: an
// allowed request or tunnel, or a block that audit mode lets through. The
// request may go on only when Commit returns nil: then r is in the log's
// file, handed to the kernel by a write that succeeded (with the records
// buffered before it), before the other sinks get it.
//
// Concurrent commits share that write (group commit): a Commit that comes
// while another batch waits to be written, or is being written, joins
// the next batch, which one write takes to the file once the one before
// has been written; each returns when its batch has been written, or has
// failed. The commit that opens a batch lets the goroutines ready to run
// go first (yield), so that those about to commit join it.
//
// When the file cannot be written (full, an I/O error, removed or
// replaced) or has reached its size limit, Commit writes r to no sink,
// gives its seq back, and returns the error, a *LogFileError or a
// *LogFullError; the caller refuses the request and logs that with Emit.
// A failed batch fails every Commit in it, and each Commit tries the
// file again. A repeat of a target that the file sink leaves out over its
// rate is not an error: it is counted on its target (see FileSink). Without
// a file sink, Commit is Emit. After Close it returns an error wrapping
// ErrSinkClosed.
func (l *Log) Commit(r *Record) (uint64, error) {
	if !l.hasFile {
		return l.commitAlone(r)
	}
	l.groupMu.Lock()
	b := l.open
	lead := b == nil
	if lead {
		b = l.newBatch()
		l.open = b
	} else if b.done == nil {
		b.done = make(chan struct{})
	}
	b.recs = append(b.recs, r)
	l.groupMu.Unlock()
	if !lead {
		<-b.done
		return r.Seq, b.err
	}
	// The goroutines ready to run go first: those that come to commit
	// meanwhile join b, and one write takes them all, where each would
	// have made a write (and the look at the path after it) of its own;
	// with nothing else to run, the leader goes on at once. Then it waits
	// for the batch being written, if any (it holds l.mu), while later
	// commits still join b; then b is closed to them and written with
	// one write.
	yield()
	l.mu.Lock()
	l.groupMu.Lock()
	l.open = nil
	l.groupMu.Unlock()
	b.err = l.commitLocked(b.recs)
	err := b.err
	if b.done != nil {
		// Its commits go on before the posted records are written.
		close(b.done)
	} else {
		l.groupMu.Lock()
		l.spare = b // nobody else holds it
		l.groupMu.Unlock()
	}
	l.unlock()
	return r.Seq, err
}

// A commitBatch is the records of the commits that one write takes to
// the file (Log.Commit).
type commitBatch struct {
	recs []*Record
	err  error // set before done is closed
	// done is closed once the batch is written or has failed. It is
	// made when a second commit joins the batch: the leader waits for
	// none, and a batch of one is used again (Log.spare).
	done chan struct{}
}

// newBatch returns an empty commitBatch: the last batch of one, when
// there is one. l.groupMu is held.
func (l *Log) newBatch() *commitBatch {
	if b := l.spare; b != nil {
		l.spare = nil
		clear(b.recs)
		b.recs, b.err = b.recs[:0], nil
		return b
	}
	return &commitBatch{recs: make([]*Record, 0, 8)}
}

// commitAlone commits r by a write of its own: Commit without a file
// sink, and, in the benchmark, the path that Commit's batches are
// measured against.
func (l *Log) commitAlone(r *Record) (uint64, error) {
	l.mu.Lock()
	defer l.unlock()
	return r.Seq, l.commitOneLocked(r)
}

// commitOneLocked is commitLocked for r alone, through l.one rather than
// a slice of its own, which would go to the heap on every commit (the
// sinks take it through an interface). l.mu is held.
func (l *Log) commitOneLocked(r *Record) error {
	l.one[0] = r
	err := l.commitLocked(l.one[:])
	l.one[0] = nil
	return err
}

// commitLocked numbers recs, encodes them and writes them to the files
// (a FileSink commits them with one write), then, once the files hold
// them, to the other sinks. When the first file cannot take them, no
// sink gets any of them, their seqs (and that of a dropped record
// reserved before them) are given back, each one's Seq is set to 0, and
// the file's error is returned. l.mu is held.
func (l *Log) commitLocked(recs []*Record) error {
	if l.closed {
		for _, r := range recs {
			r.Seq = 0
		}
		return fmt.Errorf("decision log: %w", ErrSinkClosed)
	}
	now := time.Now()
	before := l.seq
	var reserved uint64 // bit i: budgets[i] reserved a dropped record
	for i, b := range l.budgets {
		if b != nil && b.reserveDropped(l.seq+1, dropBeforeCommit, now) {
			l.seq++
			reserved |= 1 << i
		}
	}
	l.buf, l.ends = l.buf[:0], l.ends[:0]
	for _, r := range recs {
		if r.Time.IsZero() {
			r.Time = now
		}
		l.seq++
		r.Seq = l.seq
		r.V = SchemaVersion
		r.Sandbox = l.sandbox
		if len(l.sinks) > 0 {
			l.buf = append(r.AppendJSON(l.buf), '\n')
			l.ends = append(l.ends, len(l.buf))
		}
	}
	if len(l.sinks) == 0 {
		return nil
	}
	// The files first: the others get recs only once the files hold them.
	for i, b := range l.budgets {
		if b == nil {
			continue
		}
		if err := b.commitRecords(l.buf, l.ends, recs, now); err != nil {
			if i == l.firstBudget() {
				// No sink got recs or a dropped record reserved for
				// them: their seqs are given back.
				for j, b := range l.budgets {
					if reserved&(1<<j) != 0 {
						b.unreserve()
					}
				}
				l.seq = before
			}
			for _, r := range recs {
				r.Seq = 0
			}
			return err
		}
	}
	for i, s := range l.sinks {
		if l.budgets[i] != nil {
			continue
		}
		start := 0
		for k, end := range l.ends {
			if err := s.WriteRecord(recs[k].Seq, l.buf[start:end]); err != nil {
				l.sinkFailed(i, err)
			}
			start = end
		}
	}
	return nil
}

// firstBudget is the index of the first budgetedSink, or -1.
func (l *Log) firstBudget() int {
	for i, b := range l.budgets {
		if b != nil {
			return i
		}
	}
	return -1
}

// ReportFileFaults makes fn be told, at once, when a file sink of the Log
// cannot write its file (with the *LogFileError) or has reached its size
// limit (with the *LogFullError; while either lasts, Commit fails), and
// when it writes it again (with nil). fn is called from the
// sink's own goroutine, one call at a time.
func (l *Log) ReportFileFaults(fn func(error)) {
	for _, b := range l.budgets {
		if b != nil {
			b.reportFaults(fn)
		}
	}
}

// dropPointFor returns where a budgetedSink is asked for a dropped record
// before a record that is a policy record or not.
func dropPointFor(policy bool) dropPoint {
	if policy {
		return dropBeforePolicy
	}
	return dropBeforeRecord
}

// sinkFailed counts a failed write and keeps the first error.
func (l *Log) sinkFailed(i int, err error) {
	if l.nerrs.Add(1) == 1 {
		l.errMu.Lock()
		l.firstErr = fmt.Errorf("decision log sink %d: %w", i, err)
		l.errMu.Unlock()
	}
}

// Errors returns how many sink writes have failed.
func (l *Log) Errors() uint64 { return l.nerrs.Load() }

// Err returns the first sink write error, or nil when every write worked.
func (l *Log) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.firstErr
}

// Flush flushes every sink and returns their errors joined. It does
// nothing after Close.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return nil
	}
	l.emitPostedLocked()
	var errs []error
	for i, s := range l.sinks {
		if err := s.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("flushing decision log sink %d: %w", i, err))
		}
	}
	return Combine(errs...)
}

// Close closes every sink (which flushes it, and makes a FileSink write
// a last dropped record when it left out records it has not counted yet)
// and returns their errors joined. Later calls of Emit do nothing;
// closing again returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.unlock()
	if l.closed {
		return nil
	}
	l.emitPostedLocked()
	l.closed = true
	for _, b := range l.budgets {
		if b != nil && b.reserveDropped(l.seq+1, dropAtClose, time.Time{}) {
			l.seq++
		}
	}
	var errs []error
	for i, s := range l.sinks {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing decision log sink %d: %w", i, err))
		}
	}
	return Combine(errs...)
}
