package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUIOpenKeepsTokenOutOfArgv: sbx ui --open opens the view in a real
// browser (headless Chromium, as $BROWSER) through a file that redirects
// to the URL, and no process on the machine has the token in its command
// line meanwhile (every local user can read /proc/PID/cmdline); the
// browser's own has the file's path. Once the browser has used the token
// the file is gone, and the URL is refused to anyone else.
func TestUIOpenKeepsTokenOutOfArgv(t *testing.T) {
	needChromium(t)
	stateDir, logDir, dir := t.TempDir(), t.TempDir(), t.TempDir()
	pidFile := filepath.Join(dir, "browser.pid")
	script := filepath.Join(dir, "browser")
	// The browser: headless Chromium whose pid (and so its process
	// group's, which sbx ui gives it) is written down; nothing but
	// loopback reaches anything.
	err := os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
echo $$ >%s
TMPDIR=%s exec %s --headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --user-data-dir=%s \
  --disable-background-networking --disable-component-update --disable-sync --disable-extensions \
  --disable-default-apps --disable-dev-shm-usage --proxy-server=http://127.0.0.1:9 "$@"
`, pidFile, dir, chromiumBin, filepath.Join(dir, "profile"))), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BROWSER", script)
	t.Setenv("SUDO_UID", "") // the browser runs as this test's user
	t.Cleanup(func() {
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"ui", "--open", "--port", "0", "--state-dir", stateDir, "--log-dir", logDir})
	root.SetOut(pw)
	root.SetErr(&stderr)
	exited := make(chan int, 1)
	// Ends when ctx does: sbx ui stops then.
	go func() {
		code := execute(ctx, root)
		pw.Close()
		exited <- code
	}()
	sc := bufio.NewScanner(pr)
	var lines []string
	for len(lines) < 3 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	go io.Copy(io.Discard, pr) // the rest of its output; ends when it exits
	if len(lines) < 3 {
		t.Fatalf("sbx ui --open printed %q; stderr: %s", lines, stderr.String())
	}
	viewURL, ok := strings.CutPrefix(lines[0], "sbx ui: open ")
	u, err := url.Parse(viewURL)
	if !ok || err != nil || u.Host != "127.0.0.1:"+u.Port() || u.Query().Get("token") == "" {
		t.Fatalf("sbx ui --open: first line %q, want sbx ui: open http://127.0.0.1:PORT/?token=...", lines[0])
	}
	token := u.Query().Get("token")
	path, ok := strings.CutPrefix(lines[2], "sbx ui: opening it in your browser through ")
	path, _, _ = strings.Cut(path, " ")
	if !ok || !filepath.IsAbs(path) {
		t.Fatalf("sbx ui --open: third line %q, want the file it opens; stderr: %s", lines[2], stderr.String())
	}

	// Every process's command line, until the file is gone and a second
	// after: the token in none, the file in the browser's.
	sawFile := false
	deadline := time.Now().Add(30 * time.Second)
	var gone time.Time
	for {
		for pid, argv := range cmdlines(t) {
			if strings.Contains(argv, token) {
				t.Fatalf("process %d has the token in its command line: %q", pid, argv)
			}
			sawFile = sawFile || strings.Contains(argv, path)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && gone.IsZero() {
			gone = time.Now()
		}
		if !gone.IsZero() && time.Since(gone) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file %s is still there 30 s after sbx ui --open (did the browser open it?); stderr: %s", path, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawFile {
		t.Errorf("no process had the file %s in its command line: want the browser to have opened it", path)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file's directory after the token was used: got %v, want it removed", err)
	}
	// The browser used the token: the URL is of no use to anyone else.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(viewURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("GET the printed URL after --open: got %d, want 410 (used by the browser)", resp.StatusCode)
	}
	stop()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("sbx ui: exit %d after interrupt, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("sbx ui did not stop within 10 s of its context's end")
	}
}

// cmdlines returns the command line of every process, its arguments
// joined by spaces.
func cmdlines(t *testing.T) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		out[pid] = string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
	}
	return out
}
