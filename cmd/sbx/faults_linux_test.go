package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Faults around running sandboxes: what breaks beside them must not end
// them, and what ends them must end them closed.

// TestPrivilegedFaultGCDuringStarts runs sbx gc in a loop while 20 sandboxes
// start, run and end, each as its own sbx run process: gc must never take
// a starting or running sandbox for a leftover, so every command ends
// with its own exit code. gc used to read the live sandboxes before the
// kernel's objects, and collected a sandbox that started between the two
// reads (its command then exited 127, 125 or 137).
func TestPrivilegedFaultGCDuringStarts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bin := buildSbx(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	dir := t.TempDir()
	state := filepath.Join(dir, "state")

	gcRuns, stopGC := gcLoop(t, bin, state)
	defer stopGC()

	const n = 20
	var wg sync.WaitGroup
	results := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := 10 + i
			cmd := exec.Command(bin, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.228.0/23",
				"--log", filepath.Join(dir, fmt.Sprintf("log%d.jsonl", i)), "--",
				"sh", "-c", fmt.Sprintf("sleep 0.$((RANDOM %% 9)); echo done; exit %d", want))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			switch {
			case !errors.As(err, &ee):
				results[i] = fmt.Sprintf("sandbox %d: %v\n%s", i, err, out)
			case ee.ExitCode() != want || !strings.Contains(string(out), "done"):
				results[i] = fmt.Sprintf("sandbox %d: exit %d, want %d\n%s", i, ee.ExitCode(), want, out)
			}
		}()
	}
	wg.Wait()
	stopGC()
	for _, r := range results {
		if r != "" {
			t.Error(r)
		}
	}
	t.Logf("%d sandboxes, %d gc runs during them", n, gcRuns.Load())
	if gcRuns.Load() < 2 {
		t.Errorf("gc ran %d times while the sandboxes ran; the test needs it to run throughout", gcRuns.Load())
	}
}
