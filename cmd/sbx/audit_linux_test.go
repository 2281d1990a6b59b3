package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrivilegedAuditReview is the README's security review, for real: a
// stand-in extension runs in a sandbox twice, version 2 contacting one
// more host; sbx audit reports the first run, suggests a policy that
// passes --expect of it, and both --expect and --diff fail version 2 on
// the new host.
func TestPrivilegedAuditReview(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	shared := readableDir(t)
	up := newCaptureUpstream(t, shared)
	root := busyboxRoot(t)
	dir := t.TempDir()
	// The README's stand-in extension, both versions.
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	v1, v2 := read("extension-v1.sh"), read("extension-v2.sh")
	run := func(name, script string) string {
		logFile := filepath.Join(dir, name+".jsonl")
		stdout, stderr, code := runCLI(t, "run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(dir, "state"),
			"--subnet-pool", "10.213.226.0/24", "--log", logFile, "--rootfs", root, "--host-dns", up.Addr,
			"--allow-private", up.Net, "--allow", "api.ext.test:8080", "--allow", "cdn.ext.test:8080", "--allow", "collect.ext.test:8080",
			"--", "sh", "-c", script)
		t.Logf("%s: exit %d\n%s%s", name, code, stdout, stderr)
		if code != 0 || strings.Count(stdout, "hello-upstream") != strings.Count(script, "\nwget") {
			t.Fatalf("%s: exit %d, want 0 and every request answered", name, code)
		}
		return logFile
	}
	log1, log2 := run("v1", v1), run("v2", v2)

	report, errOut, code := runCLI(t, "audit", log1)
	t.Logf("sbx audit v1.jsonl: exit %d\n%s%s", code, report, errOut)
	for _, want := range []string{"api.ext.test:8080", "cdn.ext.test:8080", "GET /v1/check×1", "busybox"} {
		if code != 0 || !strings.Contains(report, want) {
			t.Errorf("the report of v1 lacks %q", want)
		}
	}
	policy, errOut, code := runCLI(t, "audit", "--suggest", log1)
	t.Logf("sbx audit --suggest v1.jsonl: exit %d\n%s%s", code, policy, errOut)
	pfile := filepath.Join(dir, "reviewed.yaml")
	if err := os.WriteFile(pfile, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "audit", "--expect", pfile, log1); code != 0 {
		t.Errorf("--expect of v1 against the policy suggested from it: exit %d, want 0\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, "audit", "--expect", pfile, log2)
	t.Logf("sbx audit --expect reviewed.yaml v2.jsonl: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(out, "GET collect.ext.test:8080/upload") {
		t.Errorf("--expect of v2: exit %d, want 1 naming GET collect.ext.test:8080/upload", code)
	}
	out, errOut, code = runCLI(t, "audit", "--diff", log1, log2)
	t.Logf("sbx audit --diff v1.jsonl v2.jsonl: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(out, "collect.ext.test:8080") {
		t.Errorf("--diff v1 v2: exit %d, want 1 naming collect.ext.test:8080", code)
	}
	html := filepath.Join(dir, "v2.html")
	if _, errOut, code := runCLI(t, "audit", "-o", html, log2); code != 0 {
		t.Errorf("-o v2.html: exit %d: %s", code, errOut)
	} else if data, _ := os.ReadFile(html); !strings.Contains(string(data), "collect.ext.test") {
		t.Error("the HTML report of v2 does not name collect.ext.test")
	}
}

// TestAuditOutputPipeAndDevice: -o writes a named pipe or a character
// device directly, leaving it in place, instead of renaming a file over
// it.
func TestAuditOutputPipeAndDevice(t *testing.T) {
	dir := t.TempDir()
	log := auditLog(t, dir, "v1.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { // ends when the writer closes the pipe
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		data, _ := io.ReadAll(f)
		got <- string(data)
	}()
	if _, errOut, code := runCLI(t, "audit", "-o", fifo, log); code != 0 {
		t.Fatalf("-o a named pipe: exit %d: %s", code, errOut)
	}
	select {
	case s := <-got:
		if !strings.HasPrefix(s, "sbx audit of") {
			t.Errorf("-o a named pipe: the reader got %q, want the report", s)
		}
	case <-time.After(10 * time.Second):
		t.Error("-o a named pipe: nothing was written to it in 10 s")
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close() // lets the reader go
		}
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("-o a named pipe replaced it: %v, %v", fi.Mode(), err)
	}

	if os.Geteuid() != 0 {
		t.Skip("making a character device needs root")
	}
	null := filepath.Join(dir, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil { // 1:3, /dev/null
		t.Skipf("mknod: %v", err)
	}
	if _, errOut, code := runCLI(t, "audit", "-o", null, log); code != 0 {
		t.Errorf("-o a character device: exit %d: %s", code, errOut)
	}
	if fi, err := os.Lstat(null); err != nil || fi.Mode().Type() != os.ModeDevice|os.ModeCharDevice {
		t.Errorf("-o a character device replaced it: %v, %v", fi.Mode(), err)
	}
}
