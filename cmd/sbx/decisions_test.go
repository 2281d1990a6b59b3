package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// TestFormatDecisionAligned: lines of different lengths start their rule
// and reason columns at the same place, and plain HTTP shows its method.
func TestFormatDecisionAligned(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.Local)
	lines := []string{
		formatDecision(&decisionlog.Record{Event: "decision", Time: at, Kind: "connect", Method: "CONNECT", Host: "registry.npmjs.org", Port: 443, Action: "allow", Rule: "r1", Reason: "rule r1: allow registry.npmjs.org"}, false),
		formatDecision(&decisionlog.Record{Event: "decision", Time: at, Kind: "http", Method: "GET", Host: "x.test", Port: 80, Path: "/a", Action: "block", Enforced: true, Rule: "default", Reason: "no rule matched; the default is block"}, false),
		formatDecision(&decisionlog.Record{Event: "decision", Time: at, Kind: "http", Method: "POST", Host: "x.test", Port: 80, Path: "/b", Action: "block", Rule: "default", Reason: "no rule matched; the default is block"}, false),
	}
	want := []string{
		"12:00:00.000  allow     connect     registry.npmjs.org:443                    r1        rule r1: allow registry.npmjs.org",
		"12:00:00.000  block     http        GET x.test:80/a                           default   no rule matched; the default is block",
		"12:00:00.000  block     http        POST x.test:80/b                          default   no rule matched; the default is block; audit mode let it through",
	}
	for i := range lines {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, lines[i], want[i])
		}
	}
	if strings.Index(lines[0], "rule r1") != strings.Index(lines[1], "no rule") {
		t.Errorf("reason columns differ:\n%s\n%s", lines[0], lines[1])
	}
}

// TestFormatDecisionReplacesControlCharacters: hosts, paths and reasons
// come from the sandbox; none of their control characters reach the
// terminal.
func TestFormatDecisionReplacesControlCharacters(t *testing.T) {
	line := formatDecision(&decisionlog.Record{Event: "decision", Kind: "http", Method: "GET", Host: "x.test\x1b[2J", Port: 80,
		Path: "/\x1b]0;pwned\x07\u009b", Action: "block", Enforced: true, Rule: "default", Reason: "no rule\r\n"}, false)
	if strings.ContainsAny(line, "\x1b\x07\r\n\u009b") {
		t.Errorf("a control character reached the line: %q", line)
	}
	if !strings.Contains(line, "GET x.test?[2J:80/?]0;pwned??") {
		t.Errorf("line %q", line)
	}
}

// TestFormatDroppedAndConn: a dropped record says how many records the
// log left out, and a connection refused before any request shows who
// it came from.
func TestFormatDroppedAndConn(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.Local)
	for _, tc := range []struct {
		r    decisionlog.Record
		want string
	}{
		{decisionlog.Record{Event: "dropped", Time: at, Count: 3804, Reason: "over the decision log's rate limit of 1000 records a second (burst 20000)"},
			"12:00:00.000  dropped   3804 records left out of the log: over the decision log's rate limit of 1000 records a second (burst 20000)"},
		{decisionlog.Record{Event: "decision", Time: at, Kind: "conn", Client: "10.213.0.6:4242", Action: "block", Enforced: true, Rule: "guard", Reason: "client 10.213.0.6 is not this gateway's sandbox"},
			"12:00:00.000  block     conn        from 10.213.0.6:4242                      guard     client 10.213.0.6 is not this gateway's sandbox"},
	} {
		if got := formatDecision(&tc.r, false); got != tc.want {
			t.Errorf("\n got %q\nwant %q", got, tc.want)
		}
	}
}
