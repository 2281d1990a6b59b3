package selftest

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSelftestJudgeCase: a case passes only when every control reached
// its target and no probe attempt did (nor did the target's server see
// one); the allowed case passes only when every attempt reached it; a
// control that did not reach fails the case, whatever the probe saw.
func TestSelftestJudgeCase(t *testing.T) {
	const secret = "s3cret"
	got := observation{Data: "sbx-selftest " + secret}
	none := observation{Err: "connection refused"}
	check := func(hits int64) caseCheck {
		return caseCheck{what: "TCP to x", attempt: probeAttempt{ID: "a"}, reached: hasSecret(secret), hits: func() (int64, int64) { return hits, hits + 1 }}
	}
	tests := []struct {
		name          string
		c             testCase
		control, seen map[string]observation
		verdict       Verdict
		why           string
	}{
		{"blocked", testCase{checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, Pass, ""},
		{"reached", testCase{checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": got}, Fail, "reached the target"},
		{"its server saw it", testCase{checks: []caseCheck{check(2)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, Fail, "its server saw 2 attempts"},
		{"target down", testCase{checks: []caseCheck{check(0)}}, map[string]observation{"a": none}, map[string]observation{"a": none}, Fail, "so this case cannot tell"},
		{"no control", testCase{checks: []caseCheck{check(0)}}, nil, map[string]observation{"a": none}, Fail, "so this case cannot tell"},
		{"not reported", testCase{checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, nil, Fail, "did not report"},
		{"allowed, reached", testCase{allowed: true, checks: []caseCheck{check(1)}}, map[string]observation{"a": got}, map[string]observation{"a": got}, Pass, ""},
		{"allowed, not reached", testCase{allowed: true, checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, Fail, "did not reach the allowed target"},
		{"skipped", testCase{skip: "no IPv6 here"}, nil, nil, Skip, "no IPv6 here"},
		{"hung", testCase{failFast: true, checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": {Err: "i/o timeout", TimedOut: true}}, Fail, "instead of failing at once"},
		{"hung where the host drops", testCase{checks: []caseCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": {Err: "i/o timeout", TimedOut: true}}, Pass, ""},
		{"server counts nothing", testCase{checks: []caseCheck{{what: "TCP to x", attempt: probeAttempt{ID: "a"}, reached: hasSecret(secret),
			hits: func() (int64, int64) { return 0, 0 }}}}, map[string]observation{"a": got}, map[string]observation{"a": none}, Fail, "proves nothing"},
	}
	for _, tt := range tests {
		tt.c.name = tt.name
		r := judgeCase(tt.c, tt.control, tt.seen)
		if r.verdict != tt.verdict || !strings.Contains(r.why, tt.why) || (tt.why == "" && r.why != "") {
			t.Errorf("%s: got %s %q, want %s with %q", tt.name, r.verdict, r.why, tt.verdict, tt.why)
		}
	}

	// Extra findings fail a case that was not reached; notes go with a
	// pass.
	c := testCase{name: "x", checks: []caseCheck{check(0)}}
	c.checks[0].extra = func(observation) string { return "no answer from the stub" }
	if r := judgeCase(c, map[string]observation{"a": got}, map[string]observation{"a": none}); r.verdict != Fail || !strings.Contains(r.why, "no answer from the stub") {
		t.Errorf("extra: got %s %q", r.verdict, r.why)
	}
	c.checks[0].extra, c.checks[0].note = nil, func(observation) string { return "made, but empty" }
	if r := judgeCase(c, map[string]observation{"a": got}, map[string]observation{"a": none}); r.verdict != Pass || r.why != "made, but empty" {
		t.Errorf("note: got %s %q", r.verdict, r.why)
	}
}

func TestSelftestJudges(t *testing.T) {
	const secret = "s3cret"
	child := func(links []string, data string) observation {
		b, _ := json.Marshal(map[string]any{"links": links, "data": data})
		return observation{Created: true, Data: string(b)}
	}
	tests := []struct {
		name  string
		judge func(observation) bool
		o     observation
		want  bool
	}{
		{"root on the host", securityLoose, observation{Data: "CapEff=000001ffffffffff NoNewPrivs=0 Seccomp=0"}, true},
		{"sandboxed root", securityLoose, observation{Data: "CapEff=0000000020040520 NoNewPrivs=1 Seccomp=2"}, false},
		{"CAP_NET_RAW", securityLoose, observation{Data: "CapEff=0000000000002000 NoNewPrivs=1 Seccomp=2"}, true},
		{"CAP_NET_ADMIN", securityLoose, observation{Data: "CapEff=0000000000001000 NoNewPrivs=1 Seccomp=2"}, true},
		{"CAP_SYS_ADMIN", securityLoose, observation{Data: "CapEff=0000000000200000 NoNewPrivs=1 Seccomp=2"}, true},
		{"no seccomp", securityLoose, observation{Data: "CapEff=0000000000000000 NoNewPrivs=1 Seccomp=0"}, true},
		{"unreadable status", securityLoose, observation{Err: "no /proc"}, true},
		{"namespaces refused", namespacesUsable(secret), observation{Err: "operation not permitted"}, false},
		{"namespaces with lo only", namespacesUsable(secret), child([]string{"lo"}, ""), false},
		{"namespaces with a link", namespacesUsable(secret), child([]string{"lo", "eth0"}, ""), true},
		{"namespaces reaching out", namespacesUsable(secret), child([]string{"lo"}, "sbx-selftest "+secret), true},
		{"namespaces, garbled", namespacesUsable(secret), observation{Created: true, Data: "?"}, true},
		{"API answered", apiAnswered, observation{Data: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"}, true},
		{"gateway's 403", apiAnswered, observation{Data: "HTTP/1.1 403 Forbidden\r\n\r\nblocked: ok\n"}, false},
		{"DNS secret", hasAddr("198.51.100.7"), observation{Answered: true, Addrs: []string{"198.51.100.7"}}, true},
		{"DNS fake", hasAddr("198.51.100.7"), observation{Answered: true, Addrs: []string{"198.18.0.1"}}, false},
		{"empty secret never matches", hasSecret(""), observation{Data: "anything"}, false},
	}
	for _, tt := range tests {
		if got := tt.judge(tt.o); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}

	stub := stubAnswered("198.51.100.7")
	for _, tt := range []struct {
		o    observation
		want string
	}{
		{observation{Answered: true, Rcode: 3}, ""},
		{observation{Answered: true, Addrs: []string{"198.18.0.5"}}, ""},
		{observation{Answered: true, Addrs: []string{"198.51.100.7"}}, ""}, // reached, judged elsewhere
		{observation{Answered: true, Addrs: []string{"203.0.113.9"}}, "not a fake address"},
		{observation{Err: "i/o timeout"}, "no answer"},
	} {
		if got := stub(tt.o); tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("stubAnswered(%+v) = %q, want %q", tt.o, got, tt.want)
		}
	}
	for _, tt := range []struct {
		o    observation
		want string
	}{
		{observation{Addrs: []string{"198.18.0.1"}}, ""},
		{observation{Addrs: []string{"10.214.0.2"}}, "not a fake address"},
		{observation{Err: "no such host"}, "cannot tell"},
	} {
		if got := resolvedToFake(tt.o); tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("resolvedToFake(%+v) = %q, want %q", tt.o, got, tt.want)
		}
	}
}

// TestSelftestOutput: a line per case, PASS or FAIL (and SKIP) first,
// what each attempt saw under it with --verbose, a summary, and the
// number of failures back.
func TestSelftestOutput(t *testing.T) {
	results := []caseResult{
		{name: "tcp out", verdict: Pass, seen: []string{"TCP to x: probe: no answer"}},
		{name: "udp out", verdict: Fail, why: "UDP to x reached the target (got \"secret\")"},
		{name: "ipv6 out", verdict: Skip, why: "IPv6 is off"},
		{name: "new namespaces", verdict: Pass, why: "made, but empty"},
	}
	var out strings.Builder
	if got, want := printResults(&out, results, false), (Summary{Passed: 2, Failed: 1, Skipped: 1}); got != want {
		t.Errorf("printResults returned %+v, want %+v", got, want)
	}
	want := "PASS tcp out\n" +
		"FAIL udp out: UDP to x reached the target (got \"secret\")\n" +
		"SKIP ipv6 out: IPv6 is off\n" +
		"PASS new namespaces (made, but empty)\n" +
		"selftest: 2 passed, 1 failed, 1 skipped of 4 cases\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printResults(&out, results[:1], true)
	if want := "PASS tcp out\n    TCP to x: probe: no answer\nselftest: 1 passed, 0 failed of 1 case\n"; out.String() != want {
		t.Errorf("--verbose: got\n%s\nwant\n%s", out.String(), want)
	}
	// What came from the sandbox is printed with its control
	// characters escaped, once.
	if s := (observation{Data: "a\x1b[2Jb\r\nc\n"}).short(); s != `got "a\x1b[2Jb | c"` {
		t.Errorf("short() = %q, want the control character escaped and the line break shown", s)
	}
}
