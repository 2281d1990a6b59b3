package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// TestPrivilegedFaultRunLogFull runs sbx run --quiet with its decision log
// on a 64 KiB tmpfs, and a command that asks for an allowed upstream 400
// times: once the filesystem is full, the requests get 403, every request
// the upstream got has its allow record in the log, and stderr says at
// once, --quiet or not, that the log cannot be written and why. sbx run
// used to let the requests through unrecorded, and say nothing until it
// exited 125.
func TestPrivilegedFaultRunLogFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables, containerd and a tmpfs (CI runs as root)")
	}
	up := upstreamNamespace(t)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	if err := os.Mkdir(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	decisionlogtest.MountTinyTmpfs(t, logDir)
	logFile := filepath.Join(logDir, "decisions.jsonl")
	script := `GW=${HTTP_PROXY#http://}
i=0
while [ $i -lt 400 ]; do
	printf 'GET http://allowed.test:8080/%d HTTP/1.1\r\nHost: allowed.test:8080\r\nConnection: close\r\n\r\n' $i | nc ${GW%:*} ${GW##*:} | grep '^HTTP/'
	i=$((i+1))
done
exit 0`
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", busyboxRoot(t), "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.251.0/24", "--log", logFile,
		"--allow", "allowed.test:8080", "--resolve", "allowed.test="+up.Addr, "--allow-private", up.Net,
		"--", "sh", "-c", script)
	ok, refused := strings.Count(stdout, "HTTP/1.1 200"), strings.Count(stdout, "HTTP/1.1 403")
	t.Logf("exit %d; %d answered 200, %d refused 403; stderr:\n%s", code, ok, refused, stderr)

	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r struct{ Event, Action, Host string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("the log holds a line that is not a record (%v): %q", err, sc.Bytes())
		}
		if r.Event == "decision" && r.Action == "allow" && r.Host == "allowed.test" {
			allowed++
		}
	}
	up.mu.Lock()
	reached := up.remotes[up.Host]
	up.mu.Unlock()
	if reached != allowed || ok != allowed {
		t.Errorf("the upstream got %d requests and %d were answered 200, but the log holds %d allow records", reached, ok, allowed)
	}
	if refused == 0 || ok+refused != 400 {
		t.Errorf("%d answered 200 and %d refused, want 400 in all, some refused once the log is full", ok, refused)
	}
	const said = "cannot be written (write: no space left on device), so every request is blocked"
	if n := strings.Count(stderr, said); n != 1 {
		t.Errorf("stderr says %q %d times, want once:\n%s", said, n, stderr)
	}
}

// TestPrivilegedRunLogMaxSizeBlocks plays a sandbox that fills its
// decision log up to --log-max-size with junk requests and then sends the
// request that matters: sbx run blocks it with a 403 naming the full log
// and the flag, the upstream gets only requests the log holds, and stderr
// says once, --quiet or not, that the log is full. sbx run used to let
// every request through once the log was full, with only a count written.
func TestPrivilegedRunLogMaxSizeBlocks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log", "decisions.jsonl")
	script := `GW=${HTTP_PROXY#http://}
i=0
while [ $i -lt 100 ]; do
	printf 'GET http://allowed.test:8080/junk/%d HTTP/1.1\r\nHost: allowed.test:8080\r\nConnection: close\r\n\r\n' $i | nc ${GW%:*} ${GW##*:} | grep '^HTTP/'
	i=$((i+1))
done
printf 'GET http://allowed.test:8080/exfil HTTP/1.1\r\nHost: allowed.test:8080\r\nConnection: close\r\n\r\n' | nc ${GW%:*} ${GW##*:} | sed 's/^/exfil: /'
exit 0`
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", busyboxRoot(t), "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.252.0/24", "--log", logFile, "--log-max-size", "16k",
		"--allow", "allowed.test:8080", "--resolve", "allowed.test="+up.Addr, "--allow-private", up.Net,
		"--", "sh", "-c", script)
	ok, refused := strings.Count(stdout, "\nHTTP/1.1 200")+boolInt(strings.HasPrefix(stdout, "HTTP/1.1 200")), strings.Count(stdout, "HTTP/1.1 403")
	t.Logf("exit %d; %d answered 200, %d refused 403; stderr:\n%s", code, ok, refused, stderr)
	if code != 0 {
		t.Errorf("sbx run exited %d, want 0", code)
	}
	full := "is full (--log-max-size 16k), so every request is blocked"
	if !strings.Contains(stdout, "exfil: HTTP/1.1 403") || !strings.Contains(stdout, full) {
		t.Errorf("the request after the junk: want a 403 saying %q; stdout:\n%s", full, stdout)
	}
	allowed, exfil := 0, 0
	for _, r := range decisionlogtest.ReadLines(t, logFile) {
		if r.Event == "decision" && r.Action == "allow" && r.Host == "allowed.test" {
			allowed++
			if r.Path == "/exfil" {
				exfil++
			}
		}
	}
	up.mu.Lock()
	reached := up.remotes[up.Host]
	up.mu.Unlock()
	if reached != allowed || ok != allowed || exfil != 0 {
		t.Errorf("the upstream got %d requests and %d were answered 200; the log holds %d allow records (%d of /exfil), want all equal and none of /exfil", reached, ok, allowed, exfil)
	}
	if refused == 0 || ok+refused != 101 {
		t.Errorf("%d answered 200 and %d refused, want 101 in all, some refused once the log is full", ok, refused)
	}
	if n := strings.Count(stderr, full); n != 1 {
		t.Errorf("stderr says %q %d times, want once:\n%s", full, n, stderr)
	}
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPrivilegedRunLogRemovedWhileRequestsGo removes a running sandbox's
// decision log while its command sends requests, and tells the command so
// through a file in a mount: every request the command sent after the
// removal that was answered has its decision in the log at the path (a
// new file, made by sbx), and stderr says the log was removed. sbx run
// used to answer the requests of the next second with their records only
// in the removed file.
func TestPrivilegedRunLogRemovedWhileRequestsGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log", "decisions.jsonl")
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `GW=${HTTP_PROXY#http://}
i=0 after=0
while [ $after -lt 100 ] && [ $i -lt 5000 ]; do
	tag=before
	if [ -e /t/removed ]; then tag=after; after=$((after+1)); fi
	printf 'GET http://allowed.test:8080/%s/%d HTTP/1.1\r\nHost: allowed.test:8080\r\nConnection: close\r\n\r\n' $tag $i | nc ${GW%:*} ${GW##*:} | grep '^HTTP/' | sed "s|^|$tag/$i |"
	i=$((i+1))
done
exit 0`
	removed := make(chan error, 1)
	go func() { // ends once the log was removed, or after 60 s
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if data, err := os.ReadFile(logFile); err == nil && bytes.Count(data, []byte("/before/")) >= 20 {
				err := os.Remove(logFile)
				if err == nil {
					err = os.WriteFile(filepath.Join(shared, "removed"), nil, 0o644)
				}
				removed <- err
				return
			}
		}
		removed <- errors.New("the log never held 20 requests")
	}()
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", busyboxRoot(t), "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.253.0/24", "--log", logFile, "-v", shared+":/t:ro",
		"--allow", "allowed.test:8080", "--resolve", "allowed.test="+up.Addr, "--allow-private", up.Net,
		"--", "sh", "-c", script)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d; stderr:\n%s", code, stderr)
	inLog := map[string]bool{}
	for _, r := range decisionlogtest.ReadLines(t, logFile) {
		if r.Event == "decision" && r.Action == "allow" {
			inLog[r.Path] = true
		}
	}
	var answered, unlogged []string
	for _, line := range strings.Split(stdout, "\n") {
		path, status, _ := strings.Cut(line, " ")
		if strings.HasPrefix(path, "after/") && strings.HasPrefix(status, "HTTP/1.1 200") {
			answered = append(answered, path)
			if !inLog["/"+path] {
				unlogged = append(unlogged, path)
			}
		}
	}
	if len(answered) == 0 || len(unlogged) > 0 {
		t.Errorf("%d requests sent after the removal were answered, %d with no decision in the log at its path: %q; want some answered, none unlogged",
			len(answered), len(unlogged), unlogged)
	}
	if !strings.Contains(stderr, "was removed while sbx wrote it") {
		t.Errorf("stderr does not say the log was removed:\n%s", stderr)
	}
}
