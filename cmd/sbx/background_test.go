package main

import (
	"strings"
	"testing"
	"time"
)

// TestLineLogger: warnings are one printable line each; info is not said.
func TestLineLogger(t *testing.T) {
	var b strings.Builder
	l := newLineLogger(&b, "gateway: ")
	l.Info("chatty")
	l.With("what", "proxy").Warn("accepting clients", "err", "too many open files\x1b[2J", "retry_in", time.Second)
	if want := "sbx: gateway: accepting clients: what=proxy err=too many open files\\x1b[2J retry_in=1s\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
