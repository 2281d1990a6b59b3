package decisionlog

import (
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is a FileSink's budget: the rate limit, which may count a
// repeat of a target instead of writing it, and the size limit, past
// which the sink is full and Log.Commit fails (docs/decision-log.md).

// admit reports whether a record r of n bytes is within the budget, and
// takes it from the budget if so; if not, it counts the record as left
// out. A record that does not fit in the size limit makes the sink full
// (see fill). Over the rate, only a record that repeats a target written
// in full during the flood is left out (see remember), and counted on
// that target: a flood of requests to one place cannot hide one to
// another, nor one to another path. now is the current time, or zero.
// s.mu is held.
func (s *FileSink) admit(n int, r *Record, now time.Time) bool {
	if int64(n) > s.maxBytes-s.size {
		s.leaveOut(s.clock(now), &s.overSize)
		s.fill()
		return false
	}
	if s.rate > 0 {
		now = s.clock(now)
		s.refill(now)
		if s.tokens < 1 {
			if r == nil || r.Host == "" {
				// No target: a record the Log did not give (WriteRecord),
				// or one that lets nothing through (a conn record).
				s.leaveOut(now, &s.overRate)
				return false
			}
			t, first := s.remember(r)
			if first || t == nil {
				return true // the flood's first record of r's target, or one it has no room to remember
			}
			if t.Count == 0 {
				if len(s.repeats) >= maxFloodTargets || s.repeatBytes+t.names > maxFloodBytes {
					return true // the next dropped record names as many targets as it can
				}
				s.repeats = append(s.repeats, t)
				s.repeatBytes += t.names
			}
			t.Count++
			s.leaveOut(now, &s.overRate)
			return false
		}
		s.tokens--
		if s.flood != nil && r != nil && r.Host != "" {
			s.remember(r) // during a flood, what is written is seen
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
// room left for (or another's that hashes alike), which is written too. s.mu
// is held.
func (s *FileSink) remember(r *Record) (t *floodTarget, first bool) {
	var h maphash.Hash
	h.SetSeed(floodSeed)
	for _, f := range [...]string{r.Event, r.Kind, r.Method, r.Host, r.Path, r.Action} {
		h.WriteString(f)
		h.WriteByte(0)
	}
	key := h.Sum64() ^ uint64(r.Port)<<48
	if t := s.flood[key]; t != nil {
		if t.is(r) {
			return t, false
		}
		return nil, true
	}
	n := len(r.Event) + len(r.Kind) + len(r.Method) + len(r.Host) + len(r.Path) + len(r.Action)
	if len(s.flood) >= maxFloodTargets || s.floodBytes+n > maxFloodBytes {
		return nil, true
	}
	if s.flood == nil {
		s.flood = map[uint64]*floodTarget{}
	}
	t = &floodTarget{DroppedTarget: DroppedTarget{Event: r.Event, Kind: r.Kind, Method: r.Method, Host: r.Host, Port: r.Port, Path: r.Path, Action: r.Action}, names: n}
	s.flood[key] = t
	s.floodBytes += n
	return t, true
}

// floodSeed seeds the hash of remember's targets.
var floodSeed = maphash.MakeSeed()

// refill adds the tokens earned since the last refill, up to the burst.
// When the bucket is full again the flood is over, and its targets are
// forgotten (but for the counts of their repeats, which the next dropped
// record names).
func (s *FileSink) refill(now time.Time) {
	if d := now.Sub(s.refilled); d > 0 {
		s.tokens = min(s.burst, s.tokens+d.Seconds()*s.rate)
		s.refilled = now
		if s.tokens == s.burst && s.flood != nil {
			clear(s.flood)
			s.floodBytes = 0
		}
	}
}

// stageTargets puts the targets whose repeats were left out, with their
// counts, in r, the dropped record being staged, and keeps them to be
// taken off once it is written (countedTargets). s.mu is held.
func (s *FileSink) stageTargets(r *Record) {
	s.stagedRepeats = s.stagedRepeats[:0]
	s.stagedCounts = s.stagedCounts[:0]
	for _, t := range s.repeats {
		if t.Count > 0 {
			r.Targets = append(r.Targets, t.DroppedTarget)
			s.stagedRepeats = append(s.stagedRepeats, t)
			s.stagedCounts = append(s.stagedCounts, t.Count)
		}
	}
}

// countedTargets takes the counts of the staged dropped record, which
// was written, off its targets. s.mu is held.
func (s *FileSink) countedTargets() {
	for i, t := range s.stagedRepeats {
		t.Count -= s.stagedCounts[i]
	}
	s.stagedRepeats, s.stagedCounts = s.stagedRepeats[:0], s.stagedCounts[:0]
	s.repeats = slices.DeleteFunc(s.repeats, func(t *floodTarget) bool {
		if t.Count == 0 {
			s.repeatBytes -= t.names
			return true
		}
		return false
	})
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

// leaveOutFault counts a record left out at now because the file cannot
// be written (e). s.mu is held.
func (s *FileSink) leaveOutFault(now time.Time, e *LogFileError) {
	if s.overFault == nil {
		s.overFault = e
	}
	var dummy bool
	s.leaveOut(now, &dummy)
}

// fill makes the sink full: a record did not fit in the size limit, so
// Log.Commit fails with a *LogFullError (and the gateway blocks) until a
// new file is made at the path (the full one moved away) or the sink is
// closed. The reporter is told once. s.mu is held.
func (s *FileSink) fill() {
	if s.fullErr.Load() == nil {
		s.fullErr.Store(&LogFullError{Path: s.path, MaxBytes: s.maxBytes, Flag: s.sizeFlag})
		s.signal()
	}
}

// commitFits returns the sink's *LogFullError, making it full, when n
// bytes (a commit's records and the dropped record staged for them) do
// not fit in the size limit, or it is full already; nil otherwise. A
// file that is to be made anew at the path (lost) has room. s.mu is held.
func (s *FileSink) commitFits(n int, lost bool) error {
	if lost {
		return nil
	}
	if int64(n) > s.maxBytes-s.size {
		s.fill()
	}
	if e := s.fullErr.Load(); e != nil {
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
// vanished.
func (s *FileSink) dropReason() string {
	var why []string
	if v := s.vanished.Load(); v != nil {
		why = append(why, "the decision log file at this path was removed or replaced while sbx wrote it ("+v.cause()+
			"): sbx made this file anew there, and the records before this one are in the old file, if it is anywhere")
	}
	if s.overRate {
		why = append(why, "over the decision log's rate limit of "+strconv.FormatFloat(s.rate, 'g', -1, 64)+
			" records a second (burst "+strconv.FormatFloat(s.burst, 'g', -1, 64)+
			"), counted by target in targets: each a repeat of a record written in full")
	}
	if s.overSize {
		why = append(why, "the decision log file reached its size limit of "+strconv.FormatInt(s.maxBytes, 10)+
			" bytes, and every request was blocked meanwhile")
	}
	if s.overFault != nil {
		why = append(why, "the decision log file could not be written ("+s.overFault.cause()+
			"), and every request was blocked meanwhile")
	}
	return strings.Join(why, ", and ")
}
