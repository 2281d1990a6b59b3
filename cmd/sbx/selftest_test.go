package main

import (
	"encoding/json"
	"os"
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
	check := func(hits int64) selftestCheck {
		return selftestCheck{what: "TCP to x", attempt: probeAttempt{ID: "a"}, reached: hasSecret(secret), hits: func() (int64, int64) { return hits, hits + 1 }}
	}
	tests := []struct {
		name          string
		c             selftestCase
		control, seen map[string]observation
		verdict, why  string
	}{
		{"blocked", selftestCase{checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, verdictPass, ""},
		{"reached", selftestCase{checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": got}, verdictFail, "reached the target"},
		{"its server saw it", selftestCase{checks: []selftestCheck{check(2)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, verdictFail, "its server saw 2 attempts"},
		{"target down", selftestCase{checks: []selftestCheck{check(0)}}, map[string]observation{"a": none}, map[string]observation{"a": none}, verdictFail, "so this case cannot tell"},
		{"no control", selftestCase{checks: []selftestCheck{check(0)}}, nil, map[string]observation{"a": none}, verdictFail, "so this case cannot tell"},
		{"not reported", selftestCase{checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, nil, verdictFail, "did not report"},
		{"allowed, reached", selftestCase{allowed: true, checks: []selftestCheck{check(1)}}, map[string]observation{"a": got}, map[string]observation{"a": got}, verdictPass, ""},
		{"allowed, not reached", selftestCase{allowed: true, checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": none}, verdictFail, "did not reach the allowed target"},
		{"skipped", selftestCase{skip: "no IPv6 here"}, nil, nil, verdictSkip, "no IPv6 here"},
		{"hung", selftestCase{failFast: true, checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": {Err: "i/o timeout", TimedOut: true}}, verdictFail, "instead of failing at once"},
		{"hung where the host drops", selftestCase{checks: []selftestCheck{check(0)}}, map[string]observation{"a": got}, map[string]observation{"a": {Err: "i/o timeout", TimedOut: true}}, verdictPass, ""},
		{"server counts nothing", selftestCase{checks: []selftestCheck{{what: "TCP to x", attempt: probeAttempt{ID: "a"}, reached: hasSecret(secret),
			hits: func() (int64, int64) { return 0, 0 }}}}, map[string]observation{"a": got}, map[string]observation{"a": none}, verdictFail, "proves nothing"},
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
	c := selftestCase{name: "x", checks: []selftestCheck{check(0)}}
	c.checks[0].extra = func(observation) string { return "no answer from the stub" }
	if r := judgeCase(c, map[string]observation{"a": got}, map[string]observation{"a": none}); r.verdict != verdictFail || !strings.Contains(r.why, "no answer from the stub") {
		t.Errorf("extra: got %s %q", r.verdict, r.why)
	}
	c.checks[0].extra, c.checks[0].note = nil, func(observation) string { return "made, but empty" }
	if r := judgeCase(c, map[string]observation{"a": got}, map[string]observation{"a": none}); r.verdict != verdictPass || r.why != "made, but empty" {
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
		{name: "tcp out", verdict: verdictPass, seen: []string{"TCP to x: probe: no answer"}},
		{name: "udp out", verdict: verdictFail, why: "UDP to x reached the target (got \"secret\")"},
		{name: "ipv6 out", verdict: verdictSkip, why: "IPv6 is off"},
		{name: "new namespaces", verdict: verdictPass, why: "made, but empty"},
	}
	var out strings.Builder
	if n := printResults(&out, results, false); n != 1 {
		t.Errorf("printResults returned %d failures, want 1", n)
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
	// What came from the sandbox is printed without its control
	// characters.
	if s := (observation{Data: "a\x1b[2Jb\r\nc\n"}).short(); s != `got "a?[2Jb | c"` {
		t.Errorf("short() = %q, want the control character replaced and the line break shown", s)
	}
}

func TestSelftestHelpAndErrors(t *testing.T) {
	stdout, stderr, code := runCLI(t, "selftest", "--help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "Examples:") || strings.Contains(stdout, "test-flush-rules") {
		t.Errorf("sbx selftest --help: exit %d, stderr %q, stdout %q; want help with examples and no hidden flags", code, stderr, stdout)
	}
	if stdout, _, _ := runCLI(t, "--help"); !strings.Contains(stdout, "selftest") || strings.Contains(stdout, selftestProbeCommand) {
		t.Errorf("sbx --help lists the probe or not selftest:\n%s", stdout)
	}
	if _, stderr, code := runCLI(t, "selftest", "extra"); code != exitUsage {
		t.Errorf("sbx selftest extra: exit %d (%s), want %d", code, stderr, exitUsage)
	}
	// A bad flag value is a usage error, root or not.
	if _, stderr, code := runCLI(t, "selftest", "--runtime", "podman"); code != exitUsage || !strings.Contains(stderr, "want containerd or docker") {
		t.Errorf("sbx selftest --runtime podman: exit %d (%s), want %d", code, stderr, exitUsage)
	}
	tests := []struct {
		args []string
		want string
	}{{[]string{"selftest"}, "needs root"}}
	if os.Geteuid() == 0 {
		tests = []struct {
			args []string
			want string
		}{
			{[]string{"selftest", "--runtime", "containerd", "--containerd", "/nonexistent/containerd.sock"}, "start containerd"},
		}
	}
	for _, tt := range tests {
		if _, stderr, code := runCLI(t, tt.args...); code != exitSbxFailed || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, exitSbxFailed, tt.want)
		}
	}
}
