package audit

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// askLog is a run under default: ask, as the gateway logs it: each
// question (an approval record of action ask), its answer (an approval
// record with answer, scope and by), then the decisions of the requests
// held on it.
func askLog() []decisionlog.Record {
	question := func(id string) func(*decisionlog.Record) {
		return func(r *decisionlog.Record) {
			r.Event, r.ApprovalID, r.Enforced = decisionlog.EventApproval, id, false
		}
	}
	answer := func(id, answer, scope, by string) func(*decisionlog.Record) {
		return func(r *decisionlog.Record) {
			r.Event, r.ApprovalID, r.Answer, r.Scope, r.By = decisionlog.EventApproval, id, answer, scope, by
		}
	}
	return []decisionlog.Record{
		// allowed for the session by cli: the held CONNECT, then one the session rule allowed
		rec(1, "connect", "CONNECT", "pypi.org", 443, "", "ask", "default", question("a1")),
		rec(2, "connect", "CONNECT", "pypi.org", 443, "", "allow", "default", answer("a1", "allow", "session", "cli")),
		rec(2, "connect", "CONNECT", "pypi.org", 443, "", "allow", "default"),
		rec(3, "connect", "CONNECT", "pypi.org", 443, "", "allow", "r1"),
		// allowed once on the terminal
		rec(4, "connect", "CONNECT", "files.example", 443, "", "ask", "default", question("a2")),
		rec(5, "connect", "CONNECT", "files.example", 443, "", "allow", "default", answer("a2", "allow", "once", "tty")),
		rec(5, "connect", "CONNECT", "files.example", 443, "", "allow", "default"),
		// denied once through the API; its name was answered by the DNS stub first
		rec(6, "dns", "A", "evil.example", 53, "", "allow", "default"),
		rec(6, "http", "GET", "evil.example", 80, "/x", "ask", "default", question("a3")),
		rec(7, "http", "GET", "evil.example", 80, "/x", "block", "default", answer("a3", "deny", "once", "api")),
		rec(7, "http", "GET", "evil.example", 80, "/x", "block", "default"),
		// no answer came
		rec(8, "connect", "CONNECT", "slow.example", 443, "", "ask", "default", question("a4")),
		rec(68, "connect", "CONNECT", "slow.example", 443, "", "block", "default", answer("a4", "deny", "once", "timeout")),
		rec(68, "connect", "CONNECT", "slow.example", 443, "", "block", "default"),
		// allowed once in the web view, then denied once by sbx deny
		rec(70, "connect", "CONNECT", "mixed.example", 443, "", "ask", "default", question("a5")),
		rec(71, "connect", "CONNECT", "mixed.example", 443, "", "allow", "default", answer("a5", "allow", "once", "ui")),
		rec(71, "connect", "CONNECT", "mixed.example", 443, "", "allow", "default"),
		rec(72, "connect", "CONNECT", "mixed.example", 443, "", "ask", "default", question("a6")),
		rec(73, "connect", "CONNECT", "mixed.example", 443, "", "block", "default", answer("a6", "deny", "once", "cli")),
		rec(73, "connect", "CONNECT", "mixed.example", 443, "", "block", "default"),
		// allowed by a rule, never asked
		rec(74, "connect", "CONNECT", "ruled.example", 443, "", "allow", "r9"),
	}
}

// sbx audit --suggest of a run with approvals reproduces the answers: an
// allow is an allow rule whose comment names who answered, how and when;
// a target a person denied is a block rule, first; no answer is a target
// blocked when logged. --expect of the log against it holds, the denied
// attempts counted as such.
func TestSuggestReproducesApprovals(t *testing.T) {
	recs := askLog()
	for _, wild := range []bool{false, true} {
		out, err := Suggest(summarize(t, recs), SuggestOptions{Wildcards: wild})
		if err != nil {
			t.Fatal(err)
		}
		s := string(out)
		for _, want := range []string{
			"  # allowed session by cli at 2026-11-25 09:00:02Z (question a1)\n  - host: \"pypi.org\"\n    ports: [443]\n    action: allow\n",
			"  # allowed once by tty at 2026-11-25 09:00:05Z (question a2)\n  - host: \"files.example\"\n    ports: [443]\n    action: allow\n",
			"  # denied once by api at 2026-11-25 09:00:07Z (question a3)\n  - host: \"evil.example\"\n    ports: [80]\n    action: block\n",
			"  # allowed once by ui at 2026-11-25 09:01:11Z (question a5)\n  # denied once by cli at 2026-11-25 09:01:13Z (question a6)\n  - host: \"mixed.example\"\n    ports: [443]\n    action: allow\n",
			"  # asked (question a4), no answer came: blocked at 2026-11-25 09:01:08Z\n  - host: \"slow.example\"\n    ports: [443]\n    action: allow\n",
			"# Denied when asked",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("wildcards %v: the suggested policy lacks %q:\n%s", wild, want, s)
			}
		}
		if d, r := strings.Index(s, "# Denied when asked"), strings.Index(s, `"pypi.org"`); d > r {
			t.Errorf("wildcards %v: the denied section comes after the allow rules:\n%s", wild, s)
		}
		if b, r := strings.Index(s, "# Blocked when the log"), strings.Index(s, `"slow.example"`); b < 0 || r < b {
			t.Errorf("wildcards %v: slow.example, which no one answered, is not in the blocked section:\n%s", wild, s)
		}
		p := mustPolicy(t, s)
		if d := p.Verdict(netpolicy.Target{Host: "evil.example", Port: 80, Method: "GET", Path: "/x"}); d.Action != netpolicy.Block || d.Rule == netpolicy.RuleDefault {
			t.Errorf("wildcards %v: evil.example under the suggested policy: got %s by %s, want a block rule", wild, d.Action, d.Rule)
		}
		e, err := Expect(context.Background(), p, "suggested", logSource(recs), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !e.Holds() || e.Denied != 2 {
			t.Errorf("wildcards %v: --expect of the suggested policy: holds %v, %d denied (want 2: the request and its DNS query), unexpected %+v:\n%s", wild, e.Holds(), e.Denied, e.Unexpected, s)
		}
		var b bytes.Buffer
		if err := WriteExpectation(&b, e, "text"); err != nil {
			t.Fatal(err)
		}
		if want := "but 2 that a person denied when asked, which it blocks as they were"; !strings.Contains(b.String(), want) {
			t.Errorf("the expectation's text lacks %q:\n%s", want, b.String())
		}
	}
}

// --expect of a log against a policy that asks: an ask is expected only
// where a person's answer in the log allowed every attempt; a deny, a
// timeout, or an attempt never asked is unexpected, and says so. The DNS
// stub answers a name that is asked about.
func TestExpectWeighsAnswersAgainstAsk(t *testing.T) {
	p := mustPolicy(t, "version: 1\ndefault: ask\nrules: []\n")
	e, err := Expect(context.Background(), p, "ask.yaml", logSource(askLog()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range e.Unexpected {
		got = append(got, u.Kind+" "+unexpectedTarget(u))
		if !strings.Contains(u.Reason, "the policy asks, and no answer in the logs allowed it") {
			t.Errorf("%s %s: reason %q does not say no answer allowed it", u.Kind, unexpectedTarget(u), u.Reason)
		}
	}
	want := []string{"connect mixed.example:443", "connect ruled.example:443", "connect slow.example:443", "http GET evil.example:80/x"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("unexpected: got %q, want %q", got, want)
	}
	if e.Denied != 0 {
		t.Errorf("denied: got %d, want 0 (an ask that a person denied is unexpected)", e.Denied)
	}
	// A block rule for what a person denied, but not for what timed out.
	p = mustPolicy(t, `version: 1
default: block
rules:
  - host: evil.example
    action: block
  - host: "*.example"
    action: allow
  - host: pypi.org
    action: allow
`)
	e, err = Expect(context.Background(), p, "block.yaml", logSource(askLog()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() || e.Denied != 2 {
		t.Errorf("a block rule for the denied host: holds %v, denied %d (want 2), unexpected %+v", e.Holds(), e.Denied, e.Unexpected)
	}
}

// A question the gateway ended as it closed (by closed) is no person's
// answer: --suggest blocks its target as logged, with a comment saying
// the gateway closed, not as denied when asked; --expect does not take
// it for a person's deny.
func TestSuggestClosedIsNoAnswer(t *testing.T) {
	recs := []decisionlog.Record{
		rec(1, "connect", "CONNECT", "late.example", 443, "", "ask", "default", func(r *decisionlog.Record) {
			r.Event, r.ApprovalID, r.Enforced = decisionlog.EventApproval, "a1", false
		}),
		rec(2, "connect", "CONNECT", "late.example", 443, "", "block", "default", func(r *decisionlog.Record) {
			r.Event, r.ApprovalID, r.Answer, r.Scope, r.By = decisionlog.EventApproval, "a1", "deny", "once", "closed"
		}),
		rec(2, "connect", "CONNECT", "late.example", 443, "", "block", "default"),
	}
	out, err := Suggest(summarize(t, recs), SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if want := "# asked (question a1), the gateway closed before an answer came: blocked at 2026-11-25 09:00:02Z\n"; !strings.Contains(s, want) {
		t.Errorf("the suggested policy lacks %q:\n%s", want, s)
	}
	if strings.Contains(s, "# Denied when asked") || strings.Contains(s, "denied once by closed") {
		t.Errorf("a question the gateway closed is taken for a person's deny:\n%s", s)
	}
	e, err := Expect(context.Background(), mustPolicy(t, "version: 1\ndefault: block\nrules: []\n"), "block.yaml", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Denied != 0 {
		t.Errorf("--expect: got %d denied by a person, want 0", e.Denied)
	}
}
