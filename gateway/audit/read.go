package audit

import (
	"context"
	"errors"
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

// Scan reads every record of every source, in order, and calls fn with
// each. The record is valid only during the call. It stops at the first
// error: a source that does not open, a line that is not a record (a
// *decisionlog.LineError naming the log and line), fn's error, or ctx's.
func Scan(ctx context.Context, sources []Source, fn func(*decisionlog.Record) error) error {
	var rec decisionlog.Record
	for _, src := range sources {
		rc, err := src.Open()
		if err != nil {
			return err
		}
		rd := decisionlog.NewReader(rc, src.Name)
		n := 0
		for {
			err = rd.Next(&rec)
			if err != nil {
				break
			}
			if n++; n%4096 == 0 && ctx.Err() != nil {
				err = ctx.Err()
				break
			}
			if err = fn(&rec); err != nil {
				break
			}
		}
		rc.Close()
		if !errors.Is(err, io.EOF) {
			return err
		}
	}
	return ctx.Err()
}

// Summarize reads sources into a new Summary with the given limits.
func Summarize(ctx context.Context, sources []Source, lim Limits) (*Summary, error) {
	s := NewSummary(lim)
	for _, src := range sources {
		s.AddLog(src.Name)
	}
	err := Scan(ctx, sources, func(r *decisionlog.Record) error {
		s.Add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
