package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestStartProblemLines: every refusal to start is one line that says
// what and how to fix it.
func TestStartProblemLines(t *testing.T) {
	for _, tc := range []struct {
		got  string
		want []string
	}{
		{accessProblem(&rootfs.AccessError{Code: 126, Op: "enter", Path: "/", Source: "/tmp/tmp.x", UID: 65534, GID: 65534, Mode: 0o700 | 1<<31, Owner: 0, Group: 0}, "/tmp/tmp.x"),
			[]string{"uid 65534 cannot enter /, the root filesystem /tmp/tmp.x", "owner 0:0", "chmod o+x /tmp/tmp.x", "--user 0"}},
		{accessProblem(&rootfs.AccessError{Code: 126, Op: "execute", Path: "/bin/tool", Source: "/r/bin/tool", UID: 1000, GID: 1000, Mode: 0o644, Owner: 1000, Group: 1000}, "/r"),
			[]string{"uid 1000 cannot execute /bin/tool (/r/bin/tool on the host)", "let its owner execute it (chmod u+x /r/bin/tool)"}},
		{accessProblem(&rootfs.AccessError{Code: 127, Op: "find", Path: "claude", SearchPath: "/usr/bin:/bin"}, "host"),
			[]string{"claude: command not found in the sandbox's PATH (/usr/bin:/bin)", "~/.local/bin", "-v"}},
		{startProblem(&sandbox.StartError{Code: 127, Err: errors.New(`OCI runtime create failed: runc create failed: unable to start container process: exec: "node": executable file not found in $PATH: unknown`)}, "node", 1000, true),
			[]string{`node could not be started: "node": executable file not found in $PATH; check that the image has it`}},
		{startProblem(&sandbox.StartError{Code: 126, Err: errors.New(`exec: "/app/run": permission denied`)}, "/app/run", 1000, false),
			[]string{"uid 1000 may enter every directory", "--user"}},
	} {
		if strings.Contains(tc.got, "\n") {
			t.Errorf("%q is more than one line", tc.got)
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.got, w) {
				t.Errorf("want %q in %q", w, tc.got)
			}
		}
	}
}

// TestReportErrorFlattensMultierror: errors combined by teardown are each
// one "sbx: " line, not multierror's "1 error occurred:" list with tabs
// and a blank line.
func TestReportErrorFlattensMultierror(t *testing.T) {
	var b strings.Builder
	err := multierror.Append(nil, errors.New("creating the task of 1a2b: mkdir /bin/busybox: not a directory"))
	reportError(&b, &exitError{code: exitSbxFailed, err: multierror.Append(err, errors.New("removing x: gone\nsecond line"))})
	want := "sbx: creating the task of 1a2b: mkdir /bin/busybox: not a directory\nsbx: removing x: gone\nsbx: second line\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	// Wrapped, each combined error keeps what wraps them.
	b.Reset()
	teardown := multierror.Append(nil, errors.New("containerd keeps a record of 1a2b"), errors.New("removing its veth: busy"))
	reportError(&b, &exitError{code: exitSbxFailed, err: fmt.Errorf("tearing down sandbox 1a2b: %w", teardown)})
	want = "sbx: tearing down sandbox 1a2b: containerd keeps a record of 1a2b\nsbx: tearing down sandbox 1a2b: removing its veth: busy\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
