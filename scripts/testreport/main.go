// Command testreport reads the JSON events of `go test -json` on standard
// input, prints the tests' output as it comes and, at the end, every test
// that skipped with its skip message and every test that failed.
// scripts/test.sh runs it.
//
// It exits 1 when a test or a package failed, and when privileged tests are
// required and a test named TestPrivileged*, or a subtest of one, skipped:
// privileged tests skip without root, so where they can run (as root, or
// with SBX_REQUIRE_PRIVILEGED=1, which .ci/run sets) a skip means the test
// did not test anything, and CI must not count it as a pass. -allow-skip
// names a test that may skip all the same (a helper that only does its work
// when another test starts it).
//
// The event format is test2json's (go doc cmd/test2json). Lines that are
// not JSON events are printed as they are.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	var opt options
	opt.allowSkip = map[string]bool{}
	flag.Func("allow-skip", "a `TEST` (its full name) that may skip even when privileged tests are required; repeatable", func(s string) error {
		opt.allowSkip[s] = true
		return nil
	})
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "testreport: unexpected arguments %q; it reads `go test -json` on standard input\n", flag.Args())
		os.Exit(2)
	}
	switch {
	case os.Getenv("SBX_REQUIRE_PRIVILEGED") == "1":
		opt.requirePrivileged, opt.why = true, "SBX_REQUIRE_PRIVILEGED=1"
	case os.Geteuid() == 0:
		opt.requirePrivileged, opt.why = true, "running as root"
	}
	code, err := run(os.Stdin, os.Stdout, opt)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// options says what run holds against the tests. The zero value requires
// nothing beyond passing.
type options struct {
	// requirePrivileged makes a skipped TestPrivileged* test a failure;
	// why says in the report what required it.
	requirePrivileged bool
	why               string
	// allowSkip holds full test names (TestX or TestX/sub) that may skip
	// even when requirePrivileged is set; nil allows none.
	allowSkip map[string]bool
}

// event is one test2json event; see go doc cmd/test2json. ImportPath is set
// on the build events ("build-output", "build-fail") of go test -json.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

type testID struct{ pkg, test string }

func (id testID) String() string {
	if id.test == "" {
		return id.pkg
	}
	return id.pkg + " " + id.test
}

// skip is a test that skipped and what it said.
type skip struct {
	testID
	message []string
}

// maxKept is how much of a running test's output is kept to find its skip
// message: the message is the last thing a skipping test prints.
const maxKept = 16 << 10

// report collects the outcome of the events given to add.
type report struct {
	running map[testID]*strings.Builder // output of tests still running
	skipped []skip
	failed  []testID
	// failedPkgs are packages that failed; those with a failed test are
	// not listed again in the summary.
	failedPkgs []testID
	pkgHasFail map[string]bool
}

func (r *report) add(ev event) {
	if r.running == nil {
		r.running = map[testID]*strings.Builder{}
		r.pkgHasFail = map[string]bool{}
	}
	id := testID{ev.Package, ev.Test}
	switch ev.Action {
	case "output":
		if ev.Test == "" {
			return
		}
		b := r.running[id]
		if b == nil {
			b = new(strings.Builder)
			r.running[id] = b
		}
		if b.Len() > maxKept {
			s := b.String()
			cut := len(s) - maxKept/2
			if i := strings.IndexByte(s[cut:], '\n'); i >= 0 {
				cut += i + 1
			}
			b.Reset()
			b.WriteString(s[cut:])
		}
		b.WriteString(ev.Output)
	case "skip":
		if ev.Test == "" {
			return // a package without tests
		}
		var out string
		if b := r.running[id]; b != nil {
			out = b.String()
		}
		delete(r.running, id)
		r.skipped = append(r.skipped, skip{id, skipMessage(out)})
	case "pass":
		delete(r.running, id)
	case "fail":
		delete(r.running, id)
		if ev.Test != "" {
			r.failed = append(r.failed, id)
			r.pkgHasFail[ev.Package] = true
		} else {
			r.failedPkgs = append(r.failedPkgs, id)
		}
	}
}

// skipMessage returns what a skipped test printed, without the lines the
// testing package frames it with, each line trimmed.
func skipMessage(out string) []string {
	var msg []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		if line = strings.TrimSpace(line); line != "" {
			msg = append(msg, line)
		}
	}
	return msg
}

// privileged reports whether a test, or the top-level test it is a subtest
// of, is a privileged test.
func privileged(test string) bool {
	return strings.HasPrefix(test, "TestPrivileged")
}

// run copies the output in the go test -json stream in to w as it comes,
// then writes the summary. It returns the exit code: 1 when a test or
// package failed or, with opt.requirePrivileged, a privileged test not in
// opt.allowSkip skipped; 0 otherwise. Its error is for reading in.
func run(in io.Reader, w io.Writer, opt options) (int, error) {
	var r report
	br := bufio.NewReader(in)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			var ev event
			if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &ev) == nil && ev.Action != "" {
				if (ev.Action == "output" || ev.Action == "build-output") && !progressLine(ev.Output) {
					io.WriteString(w, ev.Output)
				}
				r.add(ev)
			} else {
				io.WriteString(w, line)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("reading go test -json: %w", err)
		}
	}
	return r.summarize(w, opt), nil
}

// summarize writes the skipped and failed tests to w and returns the exit
// code run describes.
func (r *report) summarize(w io.Writer, opt options) int {
	code := 0
	var badSkips []string
	fmt.Fprintln(w)
	if len(r.skipped) == 0 {
		fmt.Fprintln(w, "==> no test skipped")
	} else {
		fmt.Fprintf(w, "==> %d skipped:\n", len(r.skipped))
	}
	for _, s := range r.skipped {
		note := ""
		if privileged(s.test) {
			switch {
			case opt.allowSkip[s.test]:
				note = " (allowed to skip)"
			case opt.requirePrivileged:
				note = " (privileged: not allowed to skip)"
				badSkips = append(badSkips, s.String())
			}
		}
		fmt.Fprintf(w, "SKIP %s%s\n", s, note)
		if len(s.message) == 0 {
			fmt.Fprintln(w, "     (no message)")
		}
		for _, m := range s.message {
			fmt.Fprintf(w, "     %s\n", m)
		}
	}
	var failed []testID
	failed = append(failed, r.failed...)
	for _, p := range r.failedPkgs {
		if !r.pkgHasFail[p.pkg] {
			failed = append(failed, p)
		}
	}
	if len(failed) > 0 {
		code = 1
		fmt.Fprintf(w, "==> %d failed:\n", len(failed))
		for _, f := range failed {
			fmt.Fprintf(w, "FAIL %s\n", f)
		}
	}
	if len(badSkips) > 0 {
		code = 1
		fmt.Fprintf(w, "==> privileged tests must run (%s), but %d skipped: %s\n", opt.why, len(badSkips), strings.Join(badSkips, ", "))
	}
	return code
}

// progressLine reports whether an output line is one that go test -json
// adds for every test (=== RUN, --- PASS and the like): left out, the
// stream reads like go test without -v, with every failure and log line.
func progressLine(line string) bool {
	t := strings.TrimLeft(line, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS:"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}
