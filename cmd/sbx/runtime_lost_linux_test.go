package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// TestPrivilegedRunRuntimeLost: when sbx run's containerd (a private one)
// is killed and does not come back, sbx gives up after its bound (30 s):
// it exits 125 with a line that says containerd stopped answering and the
// command was killed, and no process of the sandbox outlives it.
func TestPrivilegedRunRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctd := sandboxtest.StartContainerd(t, sandbox.ContainerdNamespace)
	dir := t.TempDir()
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))

	// Once the command runs (its shim is up, and a moment more), the
	// daemon is killed for good.
	killed := make(chan bool, 1)
	go func() { // ends once it killed containerd, or after a minute
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if shims := sandboxtest.Shims(ctd.Socket); len(shims) > 0 {
				time.Sleep(time.Second)
				ctd.Stop(t, syscall.SIGKILL)
				killed <- true
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		killed <- false
	}()
	began := time.Now()
	stdout, stderr, code := runCLI(t, "run", "--runtime", "containerd", "--containerd", ctd.Socket, "--quiet",
		"--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.222.0/24", "--rootfs", root,
		"--log", filepath.Join(dir, "decisions.jsonl"),
		"--", "sh", "-c", "echo started; trap '' TERM; sleep 120")
	took := time.Since(began)
	t.Logf("sbx run: exit %d after %v\n%s%s", code, took.Round(time.Second), stdout, stderr)
	if !<-killed {
		t.Fatalf("the sandbox's shim never showed up")
	}
	id := sandboxIDIn(t, stderr)
	if left := sandboxtest.Leftovers(id, "/"+sandbox.ContainerdNamespace+"/"+id); len(left) > 0 {
		t.Errorf("left after sbx run ended:\n%s", strings.Join(left, "\n"))
	}
	if code != exitSbxFailed || !strings.Contains(stderr, "stopped answering") || !strings.Contains(stderr, "killed its command") {
		t.Errorf("sbx run whose containerd died: exit %d, stderr %q; want %d and a line saying the command was killed", code, stderr, exitSbxFailed)
	}
	if !strings.Contains(stdout, "started") || took > 90*time.Second {
		t.Errorf("the command did not start, or sbx took %v to give up", took)
	}
}
