package main

import (
	"os"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/sandbox/selftest"
)

func TestSelftestHelpAndErrors(t *testing.T) {
	stdout, stderr, code := runCLI(t, "selftest", "--help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "Examples:") || strings.Contains(stdout, "test-flush-rules") {
		t.Errorf("sbx selftest --help: exit %d, stderr %q, stdout %q; want help with examples and no hidden flags", code, stderr, stdout)
	}
	if stdout, _, _ := runCLI(t, "--help"); !strings.Contains(stdout, "selftest") || strings.Contains(stdout, selftest.ProbeCommand) {
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
