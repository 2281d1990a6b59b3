package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedApprovalsFileSandboxCanWrite plays a sandbox whose
// approvals file lies where it can write (a read-write volume, as a
// --policy file in the working directory does). Its first run writes an
// "allow *" rule into the file and plants a link beside it to a host file
// outside; then a run is started with each as --approvals, asks a
// question and gets an always answer. sbx run must refuse both at start,
// with an error naming the problem and the fix, so that neither the
// sandbox's rule reaches a later run nor the answer writes the host file.
func TestPrivilegedApprovalsFileSandboxCanWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	dir := t.TempDir()
	state, work, outside := filepath.Join(dir, "state"), filepath.Join(dir, "work"), filepath.Join(dir, "outside")
	victim := filepath.Join(outside, "victim.yaml")
	const original = "version: 1\n"
	for _, err := range []error{
		os.Mkdir(work, 0o777), os.Chmod(work, 0o777), os.Mkdir(outside, 0o700), os.WriteFile(victim, []byte(original), 0o600),
		os.WriteFile(filepath.Join(work, "approvals.yaml"), []byte(original), 0o644), os.Chmod(filepath.Join(work, "approvals.yaml"), 0o666),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The earlier run: the sandbox, which can write /work, widens the
	// file and plants the link.
	hostile := `printf 'rules:\n  - host: "*"\n    ports: ["*"]\n    action: allow\n' >> /work/approvals.yaml && ln -s ` + victim + ` /work/link.yaml && echo planted`
	out, errOut, code := runCLI(t, "run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.252.0/24", "-v", work+":/work",
		"--log", filepath.Join(dir, "log0.jsonl"), "--", "sh", "-c", hostile)
	if code != 0 || !strings.Contains(out, "planted") {
		t.Fatalf("the earlier run: exit %d, %q %q", code, out, errOut)
	}
	ask := `GW=${HTTP_PROXY#http://}; printf 'GET http://name.test:8080/ HTTP/1.1\r\nHost: name.test:8080\r\nConnection: close\r\n\r\n' | nc ${GW%:*} ${GW##*:} | head -n 1`
	for i, approvals := range []string{filepath.Join(work, "approvals.yaml"), filepath.Join(work, "link.yaml")} {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		done := runInBackground(ctx, "run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.252.0/24",
			"-v", work+":/work", "--default", "ask", "--resolve", "name.test=127.0.0.1", "--ask-timeout", "30s",
			"--approvals", approvals, "--log", filepath.Join(dir, "log"+string(rune('1'+i))+".jsonl"), "--", "sh", "-c", ask)
		var r [3]string
	wait:
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			select {
			case r = <-done:
				break wait
			default:
			}
			// Started after all (as on main): answer its question always.
			if entries, _ := os.ReadDir(state); len(entries) > 0 {
				for _, e := range entries {
					runCLI(t, "approve", "--always", "name.test:8080", "--sandbox", e.Name(), "--state-dir", state)
				}
			}
		}
		cancel()
		t.Logf("sbx run --approvals %s: exit %s\n%s\n%s", approvals, r[2], r[0], r[1])
		if r[2] != "125" || !strings.Contains(r[1], "--approvals "+approvals+": ") || !strings.Contains(r[1], "--approvals ~/.config/sbx/approvals.yaml") {
			t.Errorf("sbx run --approvals %s: exit %s, %q; want 125 and an error naming the file and the fix", approvals, r[2], r[1])
		}
	}
	if data, _ := os.ReadFile(victim); string(data) != original {
		t.Errorf("the host file outside: got %q, want it as it was", data)
	}
	if data, _ := os.ReadFile(filepath.Join(work, "approvals.yaml")); strings.Contains(string(data), "name.test") {
		t.Errorf("the approvals file the sandbox widened got an always answer's rule, keeping its own: %q", data)
	}
}
