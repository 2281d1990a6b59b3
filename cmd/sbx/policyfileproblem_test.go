package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestPolicyFileProblem: sbx run refuses a policy or approvals file it
// cannot trust in one line naming the flag that gave it, what is wrong
// and the fix.
func TestPolicyFileProblem(t *testing.T) {
	writable := &run.WritableError{}
	for _, tt := range []struct {
		err  *run.PolicyFileError
		want []string
	}{
		{&run.PolicyFileError{Path: "policy.yaml", Policy: true, Approvals: true, Reason: writable},
			[]string{"--policy policy.yaml: ", "could change the rules later runs read from it", "--policy ~/.config/sbx/policy.yaml"}},
		{&run.PolicyFileError{Path: "policy.yaml", Policy: true, Reason: writable}, []string{"--policy policy.yaml: ", "--policy ~/.config/sbx/policy.yaml"}},
		{&run.PolicyFileError{Path: "/w/approvals.yaml", Approvals: true, Reason: writable},
			[]string{"--approvals /w/approvals.yaml: ", "keep approvals outside the project and read-write -v volumes: --approvals ~/.config/sbx/approvals.yaml"}},
		{&run.PolicyFileError{Path: "/h/a.yaml", Approvals: true, Reason: &run.UntrustedFileError{Why: "its mode 0664 lets its group or others write it", Fix: "chmod go-w /h/a.yaml"}},
			[]string{"--approvals /h/a.yaml: its mode 0664", "; chmod go-w /h/a.yaml"}},
		{&run.PolicyFileError{Path: "policy.yaml", Policy: true, Reason: errors.New("no mountinfo")},
			[]string{"--policy policy.yaml: sbx cannot tell whether the sandbox could change it (no mountinfo)", "--policy ~/.config/sbx/policy.yaml"}},
	} {
		got := policyFileProblem(tt.err).Error()
		if strings.Contains(got, "\n") {
			t.Errorf("%q is more than one line", got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("got %q, want %q in it", got, w)
			}
		}
	}
}
