package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/netpolicy"
)

// hostile is text a sandbox controls, as it may send it: a clipboard
// write (OSC 52), a screen clear, concealed text, a right-to-left
// override, a zero-width space, a C1 CSI, a newline that starts a line
// posing as sbx's, and invalid UTF-8.
const hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[8m\u202egpj.exe\u200b\u009b\nsbx: allow  evil.test\xff"

// checkEscaped fails when out holds a character escape.Text escapes,
// bar the newlines that end its lines, or lacks the escapes that show
// hostile's.
func checkEscaped(t *testing.T, what, out string) {
	t.Helper()
	for i, c := range out {
		if c != '\n' && (escape.Hidden(c) || c == '\ufffd') {
			t.Errorf("%s holds %U at byte %d: %q", what, c, i, out)
			return
		}
	}
	for _, want := range []string{`\x1b]52;c;`, `\x1b[2J`, `\x1b[8m`, `\u202egpj.exe`, `\u200b`, `\u009b`, `\x0asbx: allow`} {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %s: %q", what, want, out)
		}
	}
	// Invalid UTF-8 shows as itself, or as the replacement JSON made of it.
	if !strings.Contains(out, `evil.test\xff`) && !strings.Contains(out, `evil.test\ufffd`) {
		t.Errorf("%s lacks \\xff or \\ufffd: %q", what, out)
	}
}

// TestPrintersEscapeSandboxText: every printer of a record, a question,
// a mock's journal or a rule shows the text the sandbox controls through
// one escaper: no control, format or bidirectional character reaches the
// output, and each shows as its escape.
func TestPrintersEscapeSandboxText(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.Local)
	evil := func(r decisionlog.Record) *decisionlog.Record {
		r.Time, r.Sandbox, r.Host, r.Port, r.Path, r.Method = at, "1a2b3c4d", "evil.test"+hostile, 80, "/"+hostile, "GET"+hostile
		r.PID, r.Comm, r.Exe, r.Rule, r.Reason, r.Change, r.ApprovalID = 42, "npm"+hostile, "/tmp/"+hostile, "r"+hostile, "why"+hostile, "change"+hostile, "a1"+hostile
		return &r
	}
	records := map[string]*decisionlog.Record{
		"decision":  evil(decisionlog.Record{Event: decisionlog.EventDecision, Kind: "http", Action: "block", Enforced: true}),
		"ca-reject": evil(decisionlog.Record{Event: decisionlog.EventClose, Kind: "connect", Error: decisionlog.ErrorCARejected + hostile}),
		"question":  evil(decisionlog.Record{Event: decisionlog.EventApproval, Kind: "http", Action: "ask"}),
		"answer":    evil(decisionlog.Record{Event: decisionlog.EventApproval, Kind: "http", Answer: "allow", Scope: "once", By: "cli"}),
		"policy":    evil(decisionlog.Record{Event: decisionlog.EventPolicy}),
		"dropped":   evil(decisionlog.Record{Event: "dropped", Count: 3}),
	}
	for name, r := range records {
		line := r.AppendJSON(nil)
		if name != "policy" && name != "dropped" {
			var b bytes.Buffer
			(&liveSink{w: &b}).WriteRecord(1, line)
			checkEscaped(t, "the live line of a "+name, b.String())
		}
		checkEscaped(t, "sbx decisions' line of a "+name, formatDecision(r, false))
	}
	checkEscaped(t, "the prompt's question", promptQuestion(records["question"], 0, true))

	var b bytes.Buffer
	printMockRequests(&b, &api.MockRequests{Host: "api.test", Mock: "api.test" + hostile, Requests: []api.MockRequest{
		{Seq: 1, Time: at, Method: "POST" + hostile, Path: "/v1/messages" + hostile, Model: "claude" + hostile, Status: 200, Outcome: "turn 1" + hostile},
	}}, false)
	checkEscaped(t, "sbx mock requests", b.String())
	b.Reset()
	printMockRequests(&b, &api.MockRequests{Mock: "api.test" + hostile}, false)
	checkEscaped(t, "sbx mock requests of no request", b.String())

	b.Reset()
	writeRules(&b, []netpolicy.Rule{{ID: "s1" + hostile, Action: netpolicy.Allow, Host: "evil.test" + hostile, Methods: []string{"GET" + hostile}, Path: "/" + hostile}})
	checkEscaped(t, "sbx policy show", b.String())
}

// TestLiveSinkNamesTheRuleOnce: a reason that names its rule is not
// prefixed with it again.
func TestLiveSinkNamesTheRuleOnce(t *testing.T) {
	var out strings.Builder
	s := &liveSink{w: &out}
	s.WriteRecord(2, []byte(`{"event":"decision","action":"allow","method":"CONNECT","host":"x.test","port":443,"rule":"r1","reason":"rule r1: allow x.test"}`))
	if want := "sbx: allow     CONNECT x.test:443  (rule r1: allow x.test)\n"; out.String() != want {
		t.Errorf("got live line %q, want %q (the rule named once)", out.String(), want)
	}
}

// TestRecordProcess: a process is named by what it executes, with the
// executable's path unless that is the name in a directory of system
// programs: a copy of a program under another name, or anywhere else,
// shows where it is.
func TestRecordProcess(t *testing.T) {
	for _, tc := range []struct {
		comm, exe string
		pid       int
		want      string
	}{
		{"", "", 0, ""},
		{"wget", "", 42, " by wget[42]"},
		{"node", "/usr/bin/node", 42, " by node[42]"},
		{"npm", "/usr/local/bin/npm", 42, " by npm[42]"},
		{"npm", "/tmp/x/npm", 42, " by npm[42] (/tmp/x/npm)"},
		{"npm", "/usr/bin/node", 42, " by npm[42] (/usr/bin/node)"},
		{"wget", "/bin/busybox", 42, " by wget[42] (/bin/busybox)"},
		{"npm", "/usr/bin/npm (deleted)", 42, " by npm[42] (/usr/bin/npm (deleted))"},
		{"npm", "/usr/bin/../../tmp/npm", 42, " by npm[42] (/usr/bin/../../tmp/npm)"},
		{"", "/tmp/x", 42, " by ?[42] (/tmp/x)"},
	} {
		r := &decisionlog.Record{PID: tc.pid, Comm: tc.comm, Exe: tc.exe}
		if got := recordProcess(r); got != tc.want {
			t.Errorf("comm %q, exe %q: got %q, want %q", tc.comm, tc.exe, got, tc.want)
		}
	}
}
