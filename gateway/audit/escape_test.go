package audit

import (
	"bytes"
	"context"
	"testing"
	"unicode/utf8"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/netpolicy"
)

// hostileChars holds every character that must not reach an output as itself:
// C0 and C1 controls, DEL, line and paragraph separators, NEL, bidi
// controls, zero-width characters, noncharacters and invalid UTF-8; and a
// newline followed by what would be a rule of a policy.
const hostileChars = "x\x1b[2J\r\x00\x7f\x9b\u0085\u2028\u2029\u202a\u202e\u2066\u2069\u200e\u200f\u061c\u200b\u200d\ufeff\ufffe\uffff\xff|`*\n- host: \"*\"\n  action: allow\n"

// checkVisible fails when out holds a character hidden reports, bar
// newlines, or invalid UTF-8.
func checkVisible(t *testing.T, what string, out []byte) {
	t.Helper()
	for i := 0; i < len(out); {
		c, size := utf8.DecodeRune(out[i:])
		if c == utf8.RuneError || c != '\n' && escape.Hidden(c) {
			t.Errorf("%s holds %U at byte %d: %q", what, c, i, out[max(0, i-40):min(len(out), i+40)])
			return
		}
		i += size
	}
}

// TestOutputsShowHiddenCharacters: every string from a log, whatever
// field it is in, reaches every text output through one escaper.
func TestOutputsShowHiddenCharacters(t *testing.T) {
	evil := func(r *decisionlog.Record) {
		r.Comm, r.PID, r.Exe, r.Sandbox, r.Rule = hostileChars, 9, "/bin/"+hostileChars, hostileChars, hostileChars
	}
	recs := []decisionlog.Record{
		{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: hostileChars},
		rec(1, "http", "GET", "ok.example", 80, "/a/"+hostileChars, "allow", "r", evil),
		rec(2, "http", hostileChars, "ok.example", 80, "/b", "block", "r", evil),
		rec(3, "connect", "CONNECT", hostileChars, 443, "", "block", "invalid", evil),
		rec(4, "dns", hostileChars, hostileChars, 53, "", "block", "default", evil),
		rec(5, "bypass", "", hostileChars, 7, "", "block", "guard", evil, func(r *decisionlog.Record) { r.Proto, r.Count = hostileChars, 2 }),
		rec(6, hostileChars, "GET", "ok.example", 80, "/", "allow", "r", evil),
	}
	s := NewSummary(Limits{})
	s.AddLog("log" + hostileChars)
	for i := range recs {
		s.Add(&recs[i])
	}
	rep := s.Report()
	for _, f := range []string{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := WriteReport(&b, rep, f); err != nil {
			t.Fatal(err)
		}
		checkVisible(t, "the "+f+" report", b.Bytes())
	}
	p := mustPolicy(t, "version: 1\nrules: []\n")
	e, err := Expect(context.Background(), p, "policy"+hostileChars, logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d := DiffReports(summarize(t, nil), rep, 10)
	for _, f := range []string{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := WriteExpectation(&b, e, f); err != nil {
			t.Fatal(err)
		}
		checkVisible(t, "the "+f+" expectation", b.Bytes())
		b.Reset()
		if err := WriteDiff(&b, d, f); err != nil {
			t.Fatal(err)
		}
		checkVisible(t, "the "+f+" diff", b.Bytes())
	}
	policy, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkVisible(t, "the suggested policy", policy)
	spec, err := netpolicy.Decode("suggested", policy)
	if err != nil {
		t.Fatalf("the suggested policy does not decode: %v\n%s", err, policy)
	}
	for _, r := range spec.Rules {
		if r.Host != "ok.example" {
			t.Errorf("a string from the log added a rule for %q:\n%s", r.Host, policy)
		}
	}
}

func TestVisible(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain.example /a?b", "plain.example /a?b"},
		{"a\nb", `a\x0ab`},
		{"\u0085\u2028\u202e\u2066\u200b\ufeff\ufffe\uffff", `\u0085\u2028\u202e\u2066\u200b\ufeff\ufffe\uffff`},
		{"\xff", `\xff`},
		{"é…×", "é…×"},
	} {
		if got := visible(tt.in); got != tt.want {
			t.Errorf("visible(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
