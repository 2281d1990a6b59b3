package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrivilegedApprovalsFilePlantedLinks runs a sandbox whose approvals
// file lies in a read-write volume (as a --policy file in the working
// directory does): sbx run warns about it, and its command plants a link
// to a host directory outside the volume, first at the file's name, then
// in place of the file's directory, and asks each time. Each always
// answer fails with an error that says the path changed and nothing was
// written; nothing appears outside, and the file keeps its contents.
func TestPrivilegedApprovalsFilePlantedLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	dir := t.TempDir()
	state, work, outside := filepath.Join(dir, "state"), filepath.Join(dir, "work"), filepath.Join(dir, "outside")
	approvals := filepath.Join(work, "sub", "approvals.yaml")
	const original = "version: 1\n"
	victim := filepath.Join(outside, "victim.yaml")
	for _, err := range []error{
		os.MkdirAll(filepath.Dir(approvals), 0o777), os.Chmod(work, 0o777), os.Chmod(filepath.Dir(approvals), 0o777),
		os.WriteFile(approvals, []byte(original), 0o666), os.Mkdir(outside, 0o700), os.WriteFile(victim, []byte(original), 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ask := `GW=${HTTP_PROXY#http://}
ask() { printf 'GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" "$1" | nc ${GW%:*} ${GW##*:} | head -n 1; }
`
	script := ask + `rm /work/sub/approvals.yaml && ln -s ` + victim + ` /work/sub/approvals.yaml && echo "name $(ask name.test:8080)"
rm /work/sub/approvals.yaml && echo 'version: 1' > /work/sub/approvals.yaml && mv /work/sub /work/sub.old && ln -s ` + outside + ` /work/sub && echo "dir $(ask dir.test:8080)"`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := runInBackground(ctx, "run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.252.0/24",
		"-v", work+":/work", "--default", "ask",
		// Were an answer to let a request through, it would go nowhere: the
		// guard refuses loopback.
		"--resolve", "name.test=127.0.0.1", "--resolve", "dir.test=127.0.0.1", "--ask-timeout", "45s", "--approvals", approvals, "--log", filepath.Join(dir, "log.jsonl"),
		"--", "sh", "-c", script)
	id := waitForSandbox(t, state, "")
	target := []string{"--sandbox", id, "--state-dir", state}
	for _, host := range []string{"name.test", "dir.test"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, _, _ := runCLI(t, append([]string{"approve"}, target...)...)
			if strings.Contains(out, host+":8080") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no question about %s: %q", host, out)
			}
		}
		out, errOut, code := runCLI(t, append([]string{"approve", "--always", host + ":8080"}, target...)...)
		t.Logf("sbx approve --always %s: exit %d, %q %q", host, code, out, errOut)
		if code == 0 || !strings.Contains(errOut, "path changed") || !strings.Contains(errOut, "nothing was written") {
			t.Errorf("sbx approve --always %s: exit %d, %q; want a failure that says the path changed and nothing was written", host, code, errOut)
		}
		// The question is still pending: denied once, the command goes on.
		if _, errOut, code := runCLI(t, append([]string{"deny", host + ":8080"}, target...)...); code != 0 {
			t.Errorf("sbx deny %s: exit %d %s", host, code, errOut)
		}
	}
	r := <-done
	t.Logf("sbx run: exit %s\n%s\n%s", r[2], r[0], r[1])
	for _, want := range []string{"name HTTP/1.1 403", "dir HTTP/1.1 403"} {
		if !strings.Contains(r[0], want) {
			t.Errorf("the command's output lacks %q", want)
		}
	}
	warning := "sbx: warning: --approvals " + approvals + ": reaching it goes through " + work + ", which the sandbox can write, so the command could change the rules later runs read from it"
	if n := strings.Count(r[1], "sbx: warning: "); n != 1 || !strings.Contains(r[1], warning) {
		t.Errorf("sbx run's stderr: got %d warnings about --approvals, want one line %q", n, warning)
	}
	entries, _ := os.ReadDir(outside)
	if data, _ := os.ReadFile(victim); len(entries) != 1 || string(data) != original {
		t.Errorf("outside the volume: got %d entries and the victim %q, want the victim alone, as it was", len(entries), data)
	}
	if data, _ := os.ReadFile(filepath.Join(work, "sub.old", "approvals.yaml")); string(data) != original {
		t.Errorf("the approvals file: got %q, want %q", data, original)
	}
}
