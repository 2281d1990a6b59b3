package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// nonEmptyLog writes a log of one record in a new directory and returns
// its path and content.
func nonEmptyLog(t *testing.T) (string, string) {
	t.Helper()
	old := `{"v":1,"seq":1,"event":"policy","time":"2026-01-01T00:00:00Z","policy_version":1,"change":"an earlier run"}` + "\n"
	return writeFile(t, "decisions.jsonl", old), old
}

// checkNonEmptyRefusal checks the error of a --log file of an earlier run:
// it names the file and both fixes, and the file is left as it was.
func checkNonEmptyRefusal(t *testing.T, what, stderr, path, old string) {
	t.Helper()
	for _, want := range []string{path, "another --log path", "--log-append"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: stderr %q does not say %q", what, stderr, want)
		}
	}
	if data, _ := os.ReadFile(path); string(data) != old {
		t.Errorf("%s: the log holds %q, want %q as before", what, data, old)
	}
}

// TestCheckExisting: a --log path that is missing, or an empty file, is
// let through; a file that holds something only with --log-append; what
// is not a regular file is left to the gateway, which refuses it.
func TestCheckExisting(t *testing.T) {
	full, _ := nonEmptyLog(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(full, link)
	for _, tc := range []struct {
		path    string
		append  bool
		refused bool
	}{
		{filepath.Join(dir, "new.jsonl"), false, false},
		{empty, false, false},
		{full, false, true},
		{full, true, false},
		{link, false, false}, // the gateway refuses a link, whatever it points to
	} {
		l := logLimitFlags{append: tc.append, maxSize: "1m"}
		err := l.checkExisting(tc.path)
		var ne *decisionlog.NonEmptyLogFileError
		if errors.As(err, &ne) != tc.refused || !tc.refused && err != nil {
			t.Errorf("checkExisting(%s) with append %v = %v, want refused %v", tc.path, tc.append, err, tc.refused)
		}
		o, err := l.Options()
		if err != nil || o.Append != tc.append {
			t.Errorf("Options() with append %v: Append %v, %v", tc.append, o.Append, err)
		}
	}
}

// TestGatewayLogAppend: sbx gateway refuses a --log file of an earlier run
// before it starts, and adds to it with --log-append.
func TestGatewayLogAppend(t *testing.T) {
	path, old := nonEmptyLog(t)
	// start runs sbx gateway until it fails, or until it says where its
	// log is and is stopped; started says which.
	start := func(args ...string) (stdout, stderr string, code int, started bool) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errOut syncBuffer
		root := newRootCmd()
		root.SetArgs(append([]string{"gateway", "--listen", "127.0.0.1:0", "--allow", "x.test"}, args...))
		root.SetOut(&out)
		root.SetErr(&errOut)
		done := make(chan int, 1)
		go func() { done <- execute(ctx, root) }()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case code := <-done:
				return out.String(), errOut.String(), code, false
			case <-deadline:
				t.Fatalf("sbx gateway %s neither failed nor started in 10 s: %q %q", strings.Join(args, " "), out.String(), errOut.String())
			case <-time.After(10 * time.Millisecond):
			}
			if strings.Contains(out.String(), "decision log in") {
				cancel()
				code := <-done
				return out.String(), errOut.String(), code, true
			}
		}
	}

	stdout, stderr, code, started := start("--log", path)
	if code != exitFailure || started || strings.Contains(stdout, "proxy on") {
		t.Errorf("sbx gateway --log of an earlier run: exit %d, stdout %q; want %d and nothing started", code, stdout, exitFailure)
	}
	checkNonEmptyRefusal(t, "sbx gateway", stderr, path, old)

	if _, stderr, code, started := start("--log", path, "--log-append"); code != 0 || !started {
		t.Fatalf("sbx gateway --log-append: exit %d, started %v, %s", code, started, stderr)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), old) || len(data) == len(old) {
		t.Errorf("with --log-append the log holds %q, want the earlier run's record and this run's after it", data)
	}
}

// TestRunRefusesNonEmptyLog: sbx run refuses a --log file of an earlier
// run before it makes anything.
func TestRunRefusesNonEmptyLog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sbx run says it needs root before it looks at --log (CI runs as root)")
	}
	t.Chdir(t.TempDir())
	path, old := nonEmptyLog(t)
	state := filepath.Join(t.TempDir(), "state")
	_, stderr, code := runCLI(t, "run", "--log", path, "--state-dir", state, "--", "true")
	if code != exitSbxFailed {
		t.Errorf("sbx run --log of an earlier run: exit %d, want %d\n%s", code, exitSbxFailed, stderr)
	}
	checkNonEmptyRefusal(t, "sbx run", stderr, path, old)
	if entries, _ := os.ReadDir(state); len(entries) > 0 {
		t.Errorf("sbx run made %v in its state directory before refusing the log", entries)
	}
}
