package audit

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// A Source is one decision log to read: a file, a sandbox's log or
// standard input.
type Source struct {
	// Name names the log in reports and errors.
	Name string
	// Open opens the log; Scan closes what it returns.
	Open func() (io.ReadCloser, error)
}

// LogRead is what Scan read of one source.
type LogRead struct {
	Name string
	// Records is how many records were read.
	Records uint64
	// TruncatedLine is the number of the log's last line when it ends
	// without a newline and is not a whole record (see Truncated), 0
	// otherwise.
	TruncatedLine int
	// Missing is how many records the log's seqs skip that no dropped
	// record accounts for (see Gaps); FirstGap is the first run of seqs
	// they are in, [from, to].
	Missing  uint64
	FirstGap [2]uint64
}

// Gaps says, when the log's seqs skip records no dropped record accounts
// for, how many, where and what that means; "" otherwise.
func (l LogRead) Gaps() string {
	if l.Missing == 0 {
		return ""
	}
	where := fmt.Sprintf("seq %d", l.FirstGap[0])
	if l.FirstGap[1] != l.FirstGap[0] {
		where = fmt.Sprintf("seqs %d to %d", l.FirstGap[0], l.FirstGap[1])
	}
	return fmt.Sprintf("%s lacks %s that no dropped record accounts for (the first: %s): lines were taken out of it, or its gateway has not said yet (a running sandbox's) or stopped before it could say what it left out; what they recorded is not known",
		l.Name, plural(l.Missing, "record", "records"), where)
}

// seqCheck follows the seqs of one log to find the records it lacks. A
// gateway numbers every record 1, 2, 3, ... (docs/decision-log.md); a
// record its file left out leaves a gap, which the next dropped record
// counts. So the seqs a log skips between two dropped records (or before
// its end) should be what the second one counts; those no dropped record
// counts are missing. Where seq goes back, another gateway's records
// begin (a log appended to). A record without seq (0) is not numbered
// and is not checked.
type seqCheck struct {
	prev     uint64    // the last seq seen, 0 at the start of a run
	skipped  uint64    // seqs skipped since the last dropped record of the run
	skipFrom uint64    // the first of them
	skipTo   uint64    // the last of them
	missing  uint64    // seqs skipped that no dropped record counts
	firstGap [2]uint64 // where the first of those is
	gapSet   bool      // firstGap is set
}

// add checks r's seq.
func (c *seqCheck) add(r *decisionlog.Record) {
	if r.Seq == 0 {
		return
	}
	if r.Seq <= c.prev { // another gateway's records
		c.settle(0)
		c.prev = 0
	}
	if gap := r.Seq - c.prev - 1; gap > 0 {
		if c.skipped == 0 {
			c.skipFrom = c.prev + 1
		}
		c.skipped = satAdd(c.skipped, gap)
		c.skipTo = r.Seq - 1
	}
	c.prev = r.Seq
	if r.Event == decisionlog.EventDropped {
		c.settle(r.Count)
	}
}

// settle counts the seqs skipped since the last dropped record that
// counted records do not account for, and starts again.
func (c *seqCheck) settle(counted uint64) {
	if c.skipped > counted {
		c.missing = satAdd(c.missing, c.skipped-counted)
		if !c.gapSet {
			c.gapSet = true
			c.firstGap = [2]uint64{c.skipFrom, c.skipTo}
		}
	}
	c.skipped = 0
}

// Truncated says, when the log's last line was cut short, where, what it
// means and what it likely comes from; "" otherwise.
func (l LogRead) Truncated() string {
	if l.TruncatedLine == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d, the log's last line, ends without a newline and is not a whole record: the log is still being written (a running sandbox) or its gateway stopped in the middle of a record; what that line recorded is not counted",
		l.Name, l.TruncatedLine)
}

// errNoEvent is the error of a line that is a JSON object without the
// "event" every record has.
var errNoEvent = errors.New(`it has no "event", which every record of a decision log has: is this a decision log?`)

// Scan reads every record of every source, in order, and calls fn with
// each. The record is valid only during the call. It returns what it
// read of each source, with the records each lacks by its seqs (see
// LogRead.Gaps). It stops at the first error: a source that does
// not open, a line that is not a record (a *decisionlog.LineError naming
// the log and line; a JSON object without "event" is none), a log
// without a record (ErrNoRecords), fn's error, or ctx's; but a last line cut short
// (decisionlog.ErrTruncated) ends its log without an error, and is
// reported in its LogRead.
func Scan(ctx context.Context, sources []Source, fn func(*decisionlog.Record) error) ([]LogRead, error) {
	var rec decisionlog.Record
	reads := make([]LogRead, 0, len(sources))
	for _, src := range sources {
		rc, err := src.Open()
		if err != nil {
			return reads, err
		}
		rd := decisionlog.NewReader(rc, src.Name)
		read := LogRead{Name: src.Name}
		var seqs seqCheck
		for {
			err = rd.Next(&rec)
			if err != nil {
				break
			}
			if read.Records++; read.Records%4096 == 0 && ctx.Err() != nil {
				err = ctx.Err()
				break
			}
			if rec.Event == "" {
				// Every record a gateway writes names its event: this
				// line is JSON of something else (a package.json).
				err = &decisionlog.LineError{Name: src.Name, Line: rd.Line(), Err: errNoEvent}
				break
			}
			seqs.add(&rec)
			if err = fn(&rec); err != nil {
				break
			}
		}
		rc.Close()
		seqs.settle(0)
		read.Missing, read.FirstGap = seqs.missing, seqs.firstGap
		var le *decisionlog.LineError
		if errors.Is(err, decisionlog.ErrTruncated) && errors.As(err, &le) {
			read.TruncatedLine, err = le.Line, io.EOF
		}
		reads = append(reads, read)
		if !errors.Is(err, io.EOF) {
			return reads, err
		}
		if read.Records == 0 && read.TruncatedLine == 0 {
			return reads, fmt.Errorf("%w in %s: is this a decision log? (a gateway's log starts with a policy record)", ErrNoRecords, src.Name)
		}
	}
	return reads, ctx.Err()
}

// Summarize reads sources into a new Summary with the given limits.
func Summarize(ctx context.Context, sources []Source, lim Limits) (*Summary, error) {
	s := NewSummary(lim)
	for _, src := range sources {
		s.AddLog(src.Name)
	}
	reads, err := Scan(ctx, sources, func(r *decisionlog.Record) error {
		s.Add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range reads {
		if l.TruncatedLine != 0 {
			s.AddTruncated(l)
		}
		if l.Missing != 0 {
			s.AddGaps(l)
		}
	}
	return s, nil
}
