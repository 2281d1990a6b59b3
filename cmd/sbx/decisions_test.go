package main

import (
	"os"
	"path/filepath"
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

// TestFormatDroppedAndConn: a dropped record says how many records the
// log left out, and of which targets (escaped), and a connection refused before any request shows who
// it came from.
func TestFormatDroppedAndConn(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.Local)
	for _, tc := range []struct {
		r    decisionlog.Record
		want string
	}{
		{decisionlog.Record{Event: "dropped", Time: at, Count: 3804, Reason: "over the decision log's rate limit of 1000 records a second (burst 20000)"},
			"12:00:00.000  dropped   3804 records left out of the log: over the decision log's rate limit of 1000 records a second (burst 20000)"},
		{decisionlog.Record{Event: "dropped", Time: at, Count: 12, Reason: "over the rate", Targets: []decisionlog.DroppedTarget{
			{Event: "decision", Method: "GET", Host: "a.test", Port: 80, Path: "/x\x1b[2J", Count: 7}, {Event: "close", Method: "GET", Host: "a.test", Port: 80, Path: "/x\x1b[2J", Count: 5}}},
			"12:00:00.000  dropped   12 records left out of the log: over the rate; repeats of decision GET a.test:80/x\\x1b[2J ×7, close GET a.test:80/x\\x1b[2J ×5"},
		{decisionlog.Record{Event: "decision", Time: at, Kind: "conn", Client: "10.213.0.6:4242", Action: "block", Enforced: true, Rule: "guard", Reason: "client 10.213.0.6 is not this gateway's sandbox"},
			"12:00:00.000  block     conn        from 10.213.0.6:4242                      guard     client 10.213.0.6 is not this gateway's sandbox"},
	} {
		if got := formatDecision(&tc.r, false); got != tc.want {
			t.Errorf("\n got %q\nwant %q", got, tc.want)
		}
	}
}

// TestDecisionsEndedSandbox: sbx decisions --sandbox ID for a sandbox that
// ended reads the log it kept, by id or unique prefix, as sbx audit
// --sandbox finds it; --follow says the sandbox ended and prints what is
// there; --since skips the records up to N.
func TestDecisionsEndedSandbox(t *testing.T) {
	state, logs := t.TempDir(), t.TempDir() // no running sandbox in state
	const id = "1a2b3c4d5e6f"
	if err := os.MkdirAll(filepath.Join(logs, id), 0o755); err != nil {
		t.Fatal(err)
	}
	records := `{"v":1,"seq":1,"id":"c1","event":"decision","time":"2026-01-02T03:04:05Z","sandbox":"1a2b3c4d5e6f","client":"10.213.0.2:4000","kind":"connect","method":"CONNECT","host":"registry.npmjs.org","port":443,"action":"allow","enforced":true,"rule":"r1","reason":"rule r1: allow registry.npmjs.org"}
{"v":1,"seq":2,"id":"c1","event":"close","time":"2026-01-02T03:04:06Z","client":"10.213.0.2:4000","kind":"connect","host":"registry.npmjs.org","port":443}
{"v":1,"seq":3,"id":"c2","event":"decision","time":"2026-01-02T03:04:07Z","sandbox":"1a2b3c4d5e6f","client":"10.213.0.2:4001","kind":"http","method":"GET","host":"evil.test","port":80,"path":"/x","action":"block","enforced":true,"rule":"default","reason":"no rule matched; the default is block"}
`
	if err := os.WriteFile(filepath.Join(logs, id, "decisions.jsonl"), []byte(records), 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := []string{"--state-dir", state, "--log-dir", logs}
	tests := []struct {
		name       string
		args       []string
		wantLines  []string // stdout's lines hold these, in order
		wantStderr string
	}{
		{"by id", []string{"--sandbox", id}, []string{"allow     connect     registry.npmjs.org:443", "block     http        GET evil.test:80/x"}, ""},
		{"by prefix", []string{"--sandbox", "1a2b"}, []string{"registry.npmjs.org:443", "GET evil.test:80/x"}, ""},
		{"follow", []string{"--sandbox", "1a2b", "--follow"}, []string{"registry.npmjs.org:443", "GET evil.test:80/x"},
			"sbx: sandbox " + id + " ended, so no new decisions will come; its decision log " + filepath.Join(logs, id, "decisions.jsonl") + " holds:"},
		{"since", []string{"--sandbox", id, "--since", "1"}, []string{"GET evil.test:80/x"}, ""},
		{"json", []string{"--sandbox", id, "--json", "--since", "2"}, []string{`"seq":3`}, ""},
	}
	for _, tt := range tests {
		stdout, stderr, code := runCLI(t, append(append([]string{"decisions"}, tt.args...), dirs...)...)
		if code != 0 {
			t.Errorf("%s: got exit %d, stderr %q; want 0", tt.name, code, stderr)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if len(lines) != len(tt.wantLines) {
			t.Errorf("%s: got %d lines %q, want %d", tt.name, len(lines), stdout, len(tt.wantLines))
			continue
		}
		for i, want := range tt.wantLines {
			if !strings.Contains(lines[i], want) {
				t.Errorf("%s: line %d: got %q, want it to hold %q", tt.name, i, lines[i], want)
			}
		}
		if strings.TrimSpace(stderr) != tt.wantStderr {
			t.Errorf("%s: got stderr %q, want %q", tt.name, stderr, tt.wantStderr)
		}
	}

	// No running sandbox and no log of that id: an error that says where
	// it looked.
	_, stderr, code := runCLI(t, append([]string{"decisions", "--sandbox", "9f"}, dirs...)...)
	if code != exitFailure || !strings.Contains(stderr, "no running sandbox of that id or name, and no log of one in "+logs) {
		t.Errorf("unknown sandbox: got exit %d, stderr %q; want %d and where it looked", code, stderr, exitFailure)
	}
}
