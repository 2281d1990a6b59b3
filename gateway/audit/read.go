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

// Scan reads every record of every source, in order, and calls fn with
// each. The record is valid only during the call. It returns what it
// read of each source. It stops at the first error: a source that does
// not open, a line that is not a record (a *decisionlog.LineError naming
// the log and line), fn's error, or ctx's; but a last line cut short
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
		for {
			err = rd.Next(&rec)
			if err != nil {
				break
			}
			if read.Records++; read.Records%4096 == 0 && ctx.Err() != nil {
				err = ctx.Err()
				break
			}
			if err = fn(&rec); err != nil {
				break
			}
		}
		rc.Close()
		var le *decisionlog.LineError
		if errors.Is(err, decisionlog.ErrTruncated) && errors.As(err, &le) {
			read.TruncatedLine, err = le.Line, io.EOF
		}
		reads = append(reads, read)
		if !errors.Is(err, io.EOF) {
			return reads, err
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
	}
	return s, nil
}
