package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const pkg = "example.com/p"

// stream renders events as go test -json prints them, one JSON object a line.
func stream(t *testing.T, evs ...event) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		j, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// testEvents are the events of one top-level test that ends with action
// ("pass", "fail" or "skip") after printing msg.
func testEvents(test, action, msg string) []event {
	end := map[string]string{"pass": "--- PASS: ", "fail": "--- FAIL: ", "skip": "--- SKIP: "}[action]
	evs := []event{
		{Action: "run", Package: pkg, Test: test},
		{Action: "output", Package: pkg, Test: test, Output: "=== RUN   " + test + "\n"},
	}
	if msg != "" {
		evs = append(evs, event{Action: "output", Package: pkg, Test: test, Output: "    x_test.go:7: " + msg + "\n"})
	}
	return append(evs,
		event{Action: "output", Package: pkg, Test: test, Output: end + test + " (0.00s)\n"},
		event{Action: action, Package: pkg, Test: test})
}

func join(parts ...[]event) []event {
	var evs []event
	for _, p := range parts {
		evs = append(evs, p...)
	}
	return evs
}

func pkgEnd(action string) []event {
	word := map[string]string{"pass": "ok  ", "fail": "FAIL"}[action]
	return []event{
		{Action: "output", Package: pkg, Output: word + "\t" + pkg + "\t0.01s\n"},
		{Action: action, Package: pkg},
	}
}

func TestRun(t *testing.T) {
	start := []event{{Action: "start", Package: pkg}}
	pass := testEvents("TestPass", "pass", "hello")
	fail := testEvents("TestFail", "fail", "got 1, want 2")
	privSkip := testEvents("TestPrivilegedX", "skip", "needs root (CI runs as root)")
	plainSkip := testEvents("TestPlain", "skip", "short mode")
	// A subtest of a privileged test skips; its parent passes.
	privSub := join(
		[]event{
			{Action: "run", Package: pkg, Test: "TestPrivilegedY"},
			{Action: "output", Package: pkg, Test: "TestPrivilegedY", Output: "=== RUN   TestPrivilegedY\n"},
		},
		testEvents("TestPrivilegedY/sub", "skip", "containerd is not running"),
		[]event{
			{Action: "output", Package: pkg, Test: "TestPrivilegedY", Output: "--- PASS: TestPrivilegedY (0.00s)\n"},
			{Action: "pass", Package: pkg, Test: "TestPrivilegedY"},
		})
	buildFail := []event{
		{Action: "build-output", ImportPath: pkg + " [" + pkg + ".test]", Output: "x.go:2:12: undefined: y\n"},
		{Action: "build-fail", ImportPath: pkg + " [" + pkg + ".test]"},
		{Action: "start", Package: pkg},
		{Action: "output", Package: pkg, Output: "FAIL\t" + pkg + " [build failed]\n"},
		{Action: "fail", Package: pkg, FailedBuild: pkg + " [" + pkg + ".test]"},
	}
	required := options{requirePrivileged: true, why: "running as root"}

	tests := []struct {
		name     string
		in       string
		opt      options
		wantCode int
		// wantOut are strings the output must contain, in this order.
		wantOut []string
		// notOut are strings it must not contain.
		notOut []string
	}{{
		name:     "pass, fail and two skips, privileged not required",
		in:       stream(t, join(start, pass, fail, privSkip, plainSkip, pkgEnd("fail"))...),
		wantCode: 1,
		wantOut: []string{
			// The stream, as it came.
			"    x_test.go:7: hello\n",
			"    x_test.go:7: got 1, want 2\n--- FAIL: TestFail (0.00s)\n",
			"FAIL\texample.com/p\t0.01s\n",
			// The summary.
			"\n==> 2 skipped:\n" +
				"SKIP example.com/p TestPrivilegedX\n" +
				"     x_test.go:7: needs root (CI runs as root)\n" +
				"SKIP example.com/p TestPlain\n" +
				"     x_test.go:7: short mode\n" +
				"==> 1 failed:\n" +
				"FAIL example.com/p TestFail\n",
		},
		notOut: []string{"privileged tests must run", "FAIL example.com/p\n"},
	}, {
		name:     "privileged skip when required",
		in:       stream(t, join(start, pass, privSkip, plainSkip, pkgEnd("pass"))...),
		opt:      required,
		wantCode: 1,
		wantOut: []string{
			"SKIP example.com/p TestPrivilegedX (privileged: not allowed to skip)\n     x_test.go:7: needs root (CI runs as root)\n",
			"SKIP example.com/p TestPlain\n",
			"==> privileged tests must run (running as root), but 1 skipped: example.com/p TestPrivilegedX\n",
		},
		notOut: []string{"failed:"},
	}, {
		name:     "privileged skip, not required",
		in:       stream(t, join(start, pass, privSkip, plainSkip, pkgEnd("pass"))...),
		wantCode: 0,
		wantOut:  []string{"==> 2 skipped:\n", "SKIP example.com/p TestPrivilegedX\n"},
		notOut:   []string{"privileged tests must run", "not allowed"},
	}, {
		name:     "ordinary skip when required",
		in:       stream(t, join(start, pass, plainSkip, pkgEnd("pass"))...),
		opt:      required,
		wantCode: 0,
		wantOut:  []string{"==> 1 skipped:\nSKIP example.com/p TestPlain\n     x_test.go:7: short mode\n"},
		notOut:   []string{"privileged tests must run"},
	}, {
		name:     "privileged subtest skip when required",
		in:       stream(t, join(start, privSub, pkgEnd("pass"))...),
		opt:      required,
		wantCode: 1,
		wantOut: []string{
			"SKIP example.com/p TestPrivilegedY/sub (privileged: not allowed to skip)\n     x_test.go:7: containerd is not running\n",
			"but 1 skipped: example.com/p TestPrivilegedY/sub\n",
		},
	}, {
		name:     "allowed privileged skip when required",
		in:       stream(t, join(start, pass, privSkip, pkgEnd("pass"))...),
		opt:      options{requirePrivileged: true, why: "x", allowSkip: map[string]bool{"TestPrivilegedX": true}},
		wantCode: 0,
		wantOut:  []string{"SKIP example.com/p TestPrivilegedX (allowed to skip)\n"},
		notOut:   []string{"privileged tests must run"},
	}, {
		name:     "allowing a test does not allow its namesakes",
		in:       stream(t, join(start, privSub, pkgEnd("pass"))...),
		opt:      options{requirePrivileged: true, why: "x", allowSkip: map[string]bool{"TestPrivilegedY": true}},
		wantCode: 1,
		wantOut:  []string{"but 1 skipped: example.com/p TestPrivilegedY/sub\n"},
	}, {
		name:     "build failure",
		in:       stream(t, buildFail...),
		wantCode: 1,
		wantOut: []string{
			"x.go:2:12: undefined: y\n",
			"FAIL\texample.com/p [build failed]\n",
			"==> no test skipped\n==> 1 failed:\nFAIL example.com/p\n",
		},
	}, {
		name:     "lines that are not events pass through",
		in:       "go: downloading example.com/q v1.0.0\n" + stream(t, join(start, pass, pkgEnd("pass"))...) + "no newline at the end",
		wantCode: 0,
		wantOut:  []string{"go: downloading example.com/q v1.0.0\n    x_test.go:7: hello\n", "ok  \texample.com/p\t0.01s\n", "no newline at the end", "==> no test skipped\n"},
		notOut:   []string{`"Action"`},
	}, {
		name:     "empty input",
		in:       "",
		opt:      required,
		wantCode: 0,
		wantOut:  []string{"==> no test skipped\n"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			code, err := run(strings.NewReader(tt.in), &out, tt.opt)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := out.String()
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d; output:\n%s", code, tt.wantCode, got)
			}
			rest := got
			for _, want := range tt.wantOut {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("output lacks %q (in this order); got:\n%s", want, got)
					break
				}
				rest = rest[i+len(want):]
			}
			for _, not := range tt.notOut {
				if strings.Contains(got, not) {
					t.Errorf("output has %q; got:\n%s", not, got)
				}
			}
		})
	}
}

// TestRunKeepsMessageOfLongTest checks that a test that prints a lot before
// skipping still reports its skip message.
func TestRunKeepsMessageOfLongTest(t *testing.T) {
	evs := []event{{Action: "run", Package: pkg, Test: "TestPrivilegedLong"}}
	for range 5000 {
		evs = append(evs, event{Action: "output", Package: pkg, Test: "TestPrivilegedLong", Output: "    x_test.go:3: chatter chatter chatter\n"})
	}
	evs = append(evs,
		event{Action: "output", Package: pkg, Test: "TestPrivilegedLong", Output: "    x_test.go:9: leftovers from an earlier run\n"},
		event{Action: "skip", Package: pkg, Test: "TestPrivilegedLong"})
	var out strings.Builder
	code, err := run(strings.NewReader(stream(t, evs...)), &out, options{requirePrivileged: true, why: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit code: got %d, want 1", code)
	}
	i := strings.Index(out.String(), "==> 1 skipped:")
	if i < 0 {
		t.Fatalf("no summary of one skipped test; got:\n%.2000s", out.String())
	}
	summary := out.String()[i:]
	if !strings.Contains(summary, "     x_test.go:9: leftovers from an earlier run\n==> privileged") {
		t.Errorf("summary lacks the skip message at its end; got:\n%.2000s", summary)
	}
	if n := len(summary); n > 2*maxKept {
		t.Errorf("summary is %d bytes, want at most %d", n, 2*maxKept)
	}
}

// TestProgressLinesAreLeftOut: the lines go test -json adds for every
// test are not echoed; a test's own lines and failures are.
func TestProgressLinesAreLeftOut(t *testing.T) {
	for line, want := range map[string]bool{
		"=== RUN   TestX\n": true, "    --- PASS: TestX/a (0.00s)\n": true, "=== CONT  TestX\n": true,
		"--- FAIL: TestX (0.00s)\n": false, "    x_test.go:7: hello\n": false, "ok  \tp\t0.1s\n": false,
	} {
		if got := progressLine(line); got != want {
			t.Errorf("progressLine(%q) = %v, want %v", line, got, want)
		}
	}
}
