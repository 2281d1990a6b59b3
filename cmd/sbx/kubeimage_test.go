package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runKubeImage runs sbx kube image with args, under a root and a kube
// command of the test's own (sbx kube's parent command wires it).
func runKubeImage(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := &cobra.Command{Use: "sbx", SilenceUsage: true, SilenceErrors: true}
	kube := &cobra.Command{Use: "kube"}
	kube.AddCommand(newKubeImageCmd())
	root.AddCommand(kube)
	var out, errOut strings.Builder
	root.SetArgs(append([]string{"kube", "image"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = execute(t.Context(), root)
	return out.String(), errOut.String(), code
}

// TestKubeImageCmd: sbx kube image writes the archive -o names, with the
// tag given or sbx:<version>; without -o, with a dynamic sbx or without
// CA certificates it fails with what to do.
func TestKubeImageCmd(t *testing.T) {
	const static = "/usr/bin/busybox" // busybox-static, as the tests' images use
	if _, err := os.Stat(static); err != nil {
		t.Skipf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "sbx.tar")
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // prefix
		wantStderr string // substring
	}{
		{"tag", []string{"-o", out, "--binary", static, "--tag", "localhost/sbx:test"}, 0, "wrote localhost/sbx:test to " + out + "\n", ""},
		{"default tag", []string{"-o", out, "--binary", static}, 0, "wrote sbx:dev", ""},
		{"no -o", []string{"--binary", static}, exitUsage, "", "name the archive to write with -o FILE"},
		{"argument", []string{"-o", out, "extra"}, exitUsage, "", "unknown command"},
		{"dynamic", []string{"-o", out, "--binary", "/bin/ls"}, exitFailure, "", "CGO_ENABLED=0"},
		{"no CA bundle", []string{"-o", out, "--binary", static, "--ca-certs", filepath.Join(dir, "none.crt")}, exitFailure, "", "none.crt"},
		{"bad tag", []string{"-o", out, "--binary", static, "--tag", "Bad:Tag:x"}, exitFailure, "", "give a name with a tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runKubeImage(t, tc.args...)
			if code != tc.wantCode || !strings.HasPrefix(stdout, tc.wantStdout) || !strings.Contains(stderr, tc.wantStderr) {
				t.Fatalf("sbx kube image %q: exit %d, stdout %q, stderr %q; want %d, stdout starting %q, stderr with %q",
					tc.args, code, stdout, stderr, tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
			if code != 0 {
				return
			}
			st, err := os.Stat(out)
			if err != nil || st.Mode().Perm() != 0o644 || st.Size() == 0 {
				t.Errorf("the archive %s: %v, %v; want a file of mode 0644", out, st, err)
			}
		})
	}
}
