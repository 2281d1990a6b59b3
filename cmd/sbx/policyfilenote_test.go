package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestPolicyFileNote: sbx run words a policy file the sandbox can write
// as one warning line naming the flag that gave it (--policy, which
// always answers may write to too, or --approvals), and prints nothing
// with --quiet.
func TestPolicyFileNote(t *testing.T) {
	writable := &run.WritableError{}
	for _, tt := range []struct {
		note run.WritablePolicyFile
		want string // the line's start
	}{
		{run.WritablePolicyFile{Path: "policy.yaml", Policy: true, Approvals: true, Reason: writable}, "sbx: warning: --policy policy.yaml (which always answers write to): "},
		{run.WritablePolicyFile{Path: "policy.yaml", Policy: true, Reason: writable}, "sbx: warning: --policy policy.yaml: "},
		{run.WritablePolicyFile{Path: "/w/approvals.yaml", Approvals: true, Reason: writable}, "sbx: warning: --approvals /w/approvals.yaml: "},
		{run.WritablePolicyFile{Path: "policy.yaml", Policy: true, Reason: errors.New("no mountinfo")},
			"sbx: warning: --policy policy.yaml: cannot tell whether the sandbox could change it for later runs (no mountinfo)"},
	} {
		var out strings.Builder
		runNotes(&out, false, true, "/w", nil)(tt.note)
		if got := out.String(); !strings.HasPrefix(got, tt.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("%+v: got %q, want one line starting %q", tt.note, got, tt.want)
		}
		if errors.As(tt.note.Reason, new(*run.WritableError)) && !strings.Contains(out.String(), "could change the rules later runs read from it; keep the file out of the working directory") {
			t.Errorf("%+v: got %q, want what it means and the fix", tt.note, out.String())
		}
		out.Reset()
		runNotes(&out, true, true, "/w", nil)(tt.note)
		if out.Len() != 0 {
			t.Errorf("%+v with --quiet: got %q, want nothing", tt.note, out.String())
		}
	}
}
