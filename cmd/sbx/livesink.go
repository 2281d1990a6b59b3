package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// liveSink prints each decision as one short line while the sandbox runs.
type liveSink struct {
	w io.Writer
}

// WriteRecord prints a decision record. Host and path come from the
// sandbox, so control characters are replaced before they reach the
// user's terminal.
func (s *liveSink) WriteRecord(_ uint64, line []byte) error {
	if !strings.Contains(string(line), `"event":"decision"`) {
		return nil
	}
	var r decisionlog.Record
	if err := decisionlog.Decode(line, &r); err != nil {
		return nil
	}
	why := recordReason(&r) // "rule r1: allow x", "address guard: ...", "no rule matched; the default is block"
	if !strings.Contains(why, r.Rule) {
		why = r.Rule + ": " + why
	}
	target := recordTarget(&r)
	switch {
	case r.Method == "CONNECT":
		target = "CONNECT " + target
	case r.Kind == "transparent":
		if r.Method == "" {
			target = "transparent " + target
		} else {
			target += " (transparent)"
		}
	case r.Kind == "bypass":
		target = "bypass " + target
	}
	_, err := fmt.Fprintf(s.w, "sbx: %-9s %s%s  (%s)\n", r.Action, printable(target), printable(recordProcess(&r)), printable(why))
	return err
}

func (s *liveSink) Flush() error { return nil }
func (s *liveSink) Close() error { return nil }
