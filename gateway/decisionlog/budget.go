package decisionlog

import (
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is a FileSink's budget: the rate limit, which may count a
// repeat of a target instead of writing it, and the size limit, past
// which the sink is full and Log.Commit fails (docs/decision-log.md); and
// the dropped records that tell what it left out.

// fileSinkDroppedInterval is the least time between two dropped records
// of a FileSink (but for the one written at Close), so that a sandbox that
// keeps the sink over its rate gets one dropped record a second, not one
// between every two records.
const fileSinkDroppedInterval = time.Second

// A budget is what a FileSink may write: a token bucket of records a
// second, a size the file may reach, and the account of what it left out
// (counted, and by target over the rate) until a dropped record, which
// the budget encodes, tells it. It writes nothing itself: the FileSink
// asks it whether a record goes in (admit, commitFits), tells it what
// was written (grow) and writes the dropped records it stages. Its
// methods take its own lock, which is never held while another part of
// the sink is called.
type budget struct {
	// Fixed at open: rate is 0 when there is no rate limit, maxBytes
	// math.MaxInt64 when there is no size limit.
	path     string
	now      func() time.Time // the clock; nil: see clock
	signal   func()           // wakes the sink to tell its reporter that fullErr changed
	rate     float64
	burst    float64
	maxBytes int64
	sizeFlag string // FileSinkOptions.MaxBytesFlag

	// uncounted is the number of records left out since the last dropped
	// record. It changes with mu held, and is read without it to skip
	// reserve's work when it is 0.
	uncounted atomic.Uint64
	total     atomic.Uint64 // records left out since open
	// fullErr is set when the file reached its size limit (fill), nil
	// until then and after a new file was made at the path (restart). It
	// changes with mu held, and is read without.
	fullErr atomic.Pointer[LogFullError]

	mu             sync.Mutex
	size           int64         // bytes in the file: at open, plus written since (buffered included)
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

	// The flood: the targets written while over the rate since the
	// bucket was last full, the bytes of their names, those whose
	// repeats were left out since the last dropped record, and those the
	// staged dropped record counts, with their counts then.
	flood         map[uint64]*floodTarget
	floodBytes    int
	repeats       []*floodTarget
	repeatBytes   int
	stagedRepeats []*floodTarget
	stagedCounts  []uint64
}

// newBudget returns the budget of o for the file at path, which holds
// size bytes. now is its clock (nil: see clock); signal is called, with
// the budget's lock held, when it becomes full or has room again.
func newBudget(path string, o FileSinkOptions, size int64, now func() time.Time, signal func()) *budget {
	b := &budget{path: path, now: now, signal: signal, maxBytes: o.MaxBytes, sizeFlag: o.MaxBytesFlag, size: size}
	switch {
	case o.MaxBytes == 0:
		b.maxBytes = DefaultLogMaxBytes
	case o.MaxBytes < 0:
		b.maxBytes = math.MaxInt64
	}
	rate, burst := o.RatePerSecond, o.Burst
	if rate == 0 {
		rate = DefaultLogRate
	}
	if burst == 0 {
		burst = DefaultLogBurst
	}
	if rate > 0 && burst > 0 && !math.IsInf(rate, 1) {
		b.rate, b.burst, b.tokens = rate, float64(burst), float64(burst)
		b.refilled = b.clock(time.Time{})
	}
	return b
}

// clock returns the current time for the budget: from its own clock when
// it has one (tests), else now, the time the Log stamped on the record,
// which saves reading the clock again for every record, or time.Now when
// now is zero.
func (b *budget) clock(now time.Time) time.Time {
	switch {
	case b.now != nil:
		return b.now()
	case now.IsZero():
		return time.Now()
	default:
		return now
	}
}

// admit reports whether a record r of n bytes is within the budget, and
// takes it from the rate limit if so; if not, it counts the record as
// left out. now is the current time, or zero.
func (b *budget) admit(n int, r *Record, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admitLocked(n, r, now)
}

// admitCommit appends to dst the records of a commit, recs[i] encoded as
// lines[ends[i-1]:ends[i]], that are within the budget (all of them when
// atFault: the commit fails as a whole then), counting the others as
// left out, and returns dst.
func (b *budget) admitCommit(dst, lines []byte, ends []int, recs []*Record, now time.Time, atFault bool) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := 0
	for i, end := range ends {
		if atFault || b.admitLocked(end-start, recs[i], now) {
			dst = append(dst, lines[start:end]...)
		}
		start = end
	}
	return dst
}

// admitLocked is admit. A record that does not fit in the size limit
// makes the sink full (see fill). Over the rate, only a record that
// repeats a target written in full during the flood is left out (see
// remember), and counted on that target: a flood of requests to one
// place cannot hide one to another, nor one to another path. b.mu is
// held.
func (b *budget) admitLocked(n int, r *Record, now time.Time) bool {
	if int64(n) > b.maxBytes-b.size {
		b.leaveOut(b.clock(now), &b.overSize)
		b.fill()
		return false
	}
	if b.rate > 0 {
		now = b.clock(now)
		b.refill(now)
		if b.tokens < 1 {
			if r == nil || r.Host == "" {
				// No target: a record the Log did not give (WriteRecord),
				// or one that lets nothing through (a conn record).
				b.leaveOut(now, &b.overRate)
				return false
			}
			t, first := b.remember(r)
			if first || t == nil {
				return true // the flood's first record of r's target, or one it has no room to remember
			}
			if t.Count == 0 {
				if len(b.repeats) >= maxFloodTargets || b.repeatBytes+t.names > maxFloodBytes {
					return true // the next dropped record names as many targets as it can
				}
				b.repeats = append(b.repeats, t)
				b.repeatBytes += t.names
			}
			t.Count++
			b.leaveOut(now, &b.overRate)
			return false
		}
		b.tokens--
		if b.flood != nil && r != nil && r.Host != "" {
			b.remember(r) // during a flood, what is written is seen
		}
	}
	return true
}

// Bounds of the targets a FileSink remembers during a flood, and of those
// a dropped record names: past either, a record of a target it does not
// remember, or cannot name, is written in full (the size limit still
// bounds the file). They keep a dropped record under 1 MiB, the longest
// line a Reader takes, even with every byte of the names escaped.
const (
	maxFloodTargets = 1024      // targets
	maxFloodBytes   = 128 << 10 // bytes of their names
)

// A floodTarget is a target written in full during a flood; its Count is
// how many of its repeats were left out since the last dropped record.
type floodTarget struct {
	DroppedTarget
	names int // bytes of its strings
}

// is reports whether r is a record of t's target.
func (t *floodTarget) is(r *Record) bool {
	return t.Event == r.Event && t.Kind == r.Kind && t.Method == r.Method && t.Host == r.Host &&
		t.Port == r.Port && t.Path == r.Path && t.Action == r.Action
}

// remember looks up r's target (event, kind, method, host, port, path and
// action: the target as the record names it) among those the flood wrote
// in full, and adds it when it is new and there is room. It returns the
// target, and first set when r is its first record of the flood, which is
// written; or nil and first set when r is a new target the flood has no
// room left for (or another's that hashes alike), which is written too. b.mu
// is held.
func (b *budget) remember(r *Record) (t *floodTarget, first bool) {
	var h maphash.Hash
	h.SetSeed(floodSeed)
	for _, f := range [...]string{r.Event, r.Kind, r.Method, r.Host, r.Path, r.Action} {
		h.WriteString(f)
		h.WriteByte(0)
	}
	key := h.Sum64() ^ uint64(r.Port)<<48
	if t := b.flood[key]; t != nil {
		if t.is(r) {
			return t, false
		}
		return nil, true
	}
	n := len(r.Event) + len(r.Kind) + len(r.Method) + len(r.Host) + len(r.Path) + len(r.Action)
	if len(b.flood) >= maxFloodTargets || b.floodBytes+n > maxFloodBytes {
		return nil, true
	}
	if b.flood == nil {
		b.flood = map[uint64]*floodTarget{}
	}
	t = &floodTarget{DroppedTarget: DroppedTarget{Event: r.Event, Kind: r.Kind, Method: r.Method, Host: r.Host, Port: r.Port, Path: r.Path, Action: r.Action}, names: n}
	b.flood[key] = t
	b.floodBytes += n
	return t, true
}

// floodSeed seeds the hash of remember's targets.
var floodSeed = maphash.MakeSeed()

// refill adds the tokens earned since the last refill, up to the burst.
// When the bucket is full again the flood is over, and its targets are
// forgotten (but for the counts of their repeats, which the next dropped
// record names).
func (b *budget) refill(now time.Time) {
	if d := now.Sub(b.refilled); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.refilled = now
		if b.tokens == b.burst && b.flood != nil {
			clear(b.flood)
			b.floodBytes = 0
		}
	}
}

// stageTargets puts the targets whose repeats were left out, with their
// counts, in r, the dropped record being staged, and keeps them to be
// taken off once it is written (countedTargets). b.mu is held.
func (b *budget) stageTargets(r *Record) {
	b.stagedRepeats = b.stagedRepeats[:0]
	b.stagedCounts = b.stagedCounts[:0]
	for _, t := range b.repeats {
		if t.Count > 0 {
			r.Targets = append(r.Targets, t.DroppedTarget)
			b.stagedRepeats = append(b.stagedRepeats, t)
			b.stagedCounts = append(b.stagedCounts, t.Count)
		}
	}
}

// countedTargets takes the counts of the staged dropped record, which
// was written, off its targets. b.mu is held.
func (b *budget) countedTargets() {
	for i, t := range b.stagedRepeats {
		t.Count -= b.stagedCounts[i]
	}
	b.stagedRepeats, b.stagedCounts = b.stagedRepeats[:0], b.stagedCounts[:0]
	b.repeats = slices.DeleteFunc(b.repeats, func(t *floodTarget) bool {
		if t.Count == 0 {
			b.repeatBytes -= t.names
			return true
		}
		return false
	})
}

// leaveOut counts a record left out at now, because of the budget whose
// flag over points to. b.mu is held.
func (b *budget) leaveOut(now time.Time, over *bool) {
	if b.uncounted.Load() == 0 {
		b.since = now
	}
	*over = true
	b.uncounted.Add(1)
	b.total.Add(1)
}

// leaveOutFault counts a record left out at now (or the budget's clock's
// time when now is zero) because the file cannot be written (e).
func (b *budget) leaveOutFault(now time.Time, e *LogFileError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now = b.clock(now)
	if b.overFault == nil {
		b.overFault = e
	}
	var dummy bool
	b.leaveOut(now, &dummy)
}

// fill makes the sink full: a record did not fit in the size limit, so
// Log.Commit fails with a *LogFullError (and the gateway blocks) until a
// new file is made at the path (the full one moved away) or the sink is
// closed. The reporter is told once. b.mu is held.
func (b *budget) fill() {
	if b.fullErr.Load() == nil {
		b.fullErr.Store(&LogFullError{Path: b.path, MaxBytes: b.maxBytes, Flag: b.sizeFlag})
		b.signal()
	}
}

// commitFits returns the sink's *LogFullError, making it full, when n
// bytes of a commit's records and the dropped record staged for them do
// not fit in the size limit, or it is full already; nil otherwise. A
// file that is to be made anew at the path (lost) has room.
func (b *budget) commitFits(n int, lost bool) error {
	if lost {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if int64(n+len(b.staged)) > b.maxBytes-b.size {
		b.fill()
	}
	if e := b.fullErr.Load(); e != nil {
		return e
	}
	return nil
}

// A LogFullError is the fault of a FileSink whose file reached its size
// limit (FileSinkOptions.MaxBytes): Log.Commit fails with it, so the
// gateway blocks every request, until the file is moved away (the sink
// makes a new one at its path) or the sink is closed. Its message names
// the file, the limit and the flag that sets it, and the fixes.
type LogFullError struct {
	// Path is the log file's path.
	Path string
	// MaxBytes is the size limit.
	MaxBytes int64
	// Flag is how the user sets the limit, such as "--log-max-size"
	// (FileSinkOptions.MaxBytesFlag); "" when there is no such flag.
	Flag string
}

func (e *LogFullError) Error() string {
	limit, raise := "its size limit of "+strconv.FormatInt(e.MaxBytes, 10)+" bytes", "a larger size limit"
	if e.Flag != "" {
		limit, raise = e.Flag+" "+formatSize(e.MaxBytes), "a larger "+e.Flag
	}
	return ReasonLogFault + e.Path + " is full (" + limit + "), so every request is blocked until there is room: " +
		"move the file away and sbx starts a new log at its path within a second, or run again with " + raise
}

// formatSize writes n bytes as the size flags take it: 512m, 1g, 64k, or
// a number of bytes.
func formatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		unit  string
	}{{40, "t"}, {30, "g"}, {20, "m"}, {10, "k"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// dropReason says which budgets the uncounted records exceeded, the
// fault that kept them out of the file, and that the file before this one
// vanished (v, nil when it did not). b.mu is held.
func (b *budget) dropReason(v *LogFileError) string {
	var why []string
	if v != nil {
		why = append(why, "the decision log file at this path was removed or replaced while sbx wrote it ("+v.cause()+
			"): sbx made this file anew there, and the records before this one are in the old file, if it is anywhere")
	}
	if b.overRate {
		why = append(why, "over the decision log's rate limit of "+strconv.FormatFloat(b.rate, 'g', -1, 64)+
			" records a second (burst "+strconv.FormatFloat(b.burst, 'g', -1, 64)+
			"), counted by target in targets: each a repeat of a record written in full")
	}
	if b.overSize {
		why = append(why, "the decision log file reached its size limit of "+strconv.FormatInt(b.maxBytes, 10)+
			" bytes, and every request was blocked meanwhile")
	}
	if b.overFault != nil {
		why = append(why, "the decision log file could not be written ("+b.overFault.cause()+
			"), and every request was blocked meanwhile")
	}
	return strings.Join(why, ", and ")
}

// grow counts n more bytes in the file (buffered ones included); a
// negative n takes bytes back that were not written after all.
func (b *budget) grow(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.size += int64(n)
}

// restart gives the budget the room of a new file made at the path in
// place of one that held written bytes (what is buffered stays counted):
// a full file moved away is how room returns, and a full sink has room
// again.
func (b *budget) restart(written int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.size -= written
	if b.fullErr.Swap(nil) != nil {
		b.signal()
	}
}

// seen notes that the Log numbered a record seq, so that a dropped
// record made at Close is numbered above it.
func (b *budget) seen(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastSeq = max(b.lastSeq, seq)
}

// reserve stages a dropped record numbered seq when records were left
// out, or the file before this one vanished (v, nil when it did not), and
// the next record will be written (or the Log closes), unless the last
// dropped record is less than fileSinkDroppedInterval old (but after a
// fault, whose dropped record goes before the first record written
// again) or the record would not fit in the size limit. While the file is
// at fault (atFault), only a commit gets one, which is written with it if
// the file can be written again. It reports whether it staged one; see
// FileSink.reserveDropped.
func (b *budget) reserve(seq uint64, at dropPoint, now time.Time, atFault bool, v *LogFileError) bool {
	vanished := v != nil
	if b.uncounted.Load() == 0 && !vanished {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.staged != nil || (atFault && at != dropBeforeCommit) {
		return false
	}
	now = b.clock(now)
	if at != dropAtClose {
		if b.overFault == nil && !vanished && !b.lastDrop.IsZero() && now.Sub(b.lastDrop) < fileSinkDroppedInterval {
			return false
		}
		if (at == dropBeforeRecord || at == dropBeforeCommit) && b.rate > 0 {
			b.refill(now)
			if b.tokens < 1 {
				return false // the record will be left out too
			}
		}
	}
	b.stage(seq, now, v)
	if at != dropAtClose && !vanished && int64(len(b.staged)) > b.maxBytes-b.size {
		b.staged = nil
		return false
	}
	b.lastSeq = max(b.lastSeq, seq)
	return true
}

// stageAtClose stages the last dropped record, numbered one above the
// last seq the budget saw, when records were left out since the one
// before or the file before this one vanished (v), and none is staged.
func (b *budget) stageAtClose(v *LogFileError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.staged == nil && (b.uncounted.Load() > 0 || v != nil) {
		b.stage(b.lastSeq+1, b.clock(time.Time{}), v)
	}
}

// stage encodes the dropped record numbered seq, made at now, for the
// records left out so far and the vanished file v. b.mu is held.
func (b *budget) stage(seq uint64, now time.Time, v *LogFileError) {
	r := Record{
		V: SchemaVersion, Seq: seq, Event: EventDropped, Time: now, Since: b.since,
		Count: b.uncounted.Load(), Reason: b.dropReason(v),
	}
	if r.Count == 0 {
		r.Since = now // only the vanished file to tell
	}
	b.stageTargets(&r)
	b.stagedVanished = v
	b.dropBuf = append(r.AppendJSON(b.dropBuf[:0]), '\n')
	b.staged = b.dropBuf
	b.stagedFor = r.Count
	b.lastDrop = now
}

// takeStaged returns the staged dropped record, if any (ok), and how
// many left-out records it counts, and unstages it. The line is valid
// until the next dropped record is staged; once it is written, counted
// takes its count off.
func (b *budget) takeStaged() (line []byte, n uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line, n = b.staged, b.stagedFor
	b.staged = nil
	return line, n, line != nil
}

// unreserve gives back the staged dropped record, if any.
func (b *budget) unreserve() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.staged = nil
}

// counted takes the n records that the dropped record taken last, which
// was written, counts off the uncounted ones, with the counts of its
// targets. It returns the vanished file that record told of, nil when
// none: it no longer needs telling.
func (b *budget) counted(n uint64) *LogFileError {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.countedTargets()
	v := b.stagedVanished
	b.stagedVanished = nil
	b.uncounted.Store(b.uncounted.Load() - n)
	if b.uncounted.Load() == 0 {
		b.overRate, b.overSize, b.overFault = false, false, nil
	}
	return v
}
