package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/sandbox"
)

// fakeSandbox records a running sandbox of this test's process in a new
// state directory, as sbx run would, and returns the directory and the
// sandbox's own (where its api.sock and token go).
func fakeSandbox(t *testing.T, id string) (stateDir, dir string) {
	t.Helper()
	stateDir = t.TempDir()
	return stateDir, fakeSandboxIn(t, stateDir, id, "agent")
}

// fakeSandboxIn records a running sandbox named name, as fakeSandbox
// does, in stateDir, and returns its own directory.
func fakeSandboxIn(t *testing.T, stateDir, id, name string) (dir string) {
	t.Helper()
	dir = filepath.Join(stateDir, id)
	st := sandbox.State{ID: id, Name: name, Status: sandbox.StatusRunning, PID: os.Getpid(),
		Subnet: netip.MustParsePrefix("10.213.200.0/30"), GatewayPort: 3128, Command: []string{"sleep", "30"}, Created: time.Now()}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveSocket listens on dir/api.sock and answers each connection with
// answer, the bytes of a whole HTTP response or anything else, after
// reading the request's head.
func serveSocket(t *testing.T, dir, answer string) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// Ends when the listener is closed, at the test's end.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			for {
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			io.WriteString(c, answer)
			c.Close()
		}
	}()
}

// httpAnswer is a whole HTTP/1.1 response of status with body.
func httpAnswer(status, body string) string {
	return "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// TestPSSaysWhatFailed: when a running sandbox's management API cannot be
// asked for its status, sbx ps still lists it, with "?" for what it could
// not learn, says on stderr which sandbox and what failed (it printed
// "-" and said nothing), and exits 1 (it exited 0). A sandbox that
// answers shows its numbers and no message, and sbx ps exits 0.
func TestPSSaysWhatFailed(t *testing.T) {
	const id = "1a2b3c4d"
	status, _ := json.Marshal(api.Status{PolicyVersion: 3, Counts: api.Counts{Allowed: 7, Blocked: 2}})
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string)
		wantRow string // the row's last three columns
		wantErr string // on stderr, after "sbx: sandbox 1a2b3c4d (agent): "
	}{
		{"answers", func(t *testing.T, dir string) { serveSocket(t, dir, httpAnswer("200 OK", string(status))) }, "3 7 2", ""},
		{"no socket", func(*testing.T, string) {}, "? ? ?", "has no management API socket"},
		{"nothing listens", func(t *testing.T, dir string) {
			ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
		}, "? ? ?", "does not answer"},
		{"garbage", func(t *testing.T, dir string) { serveSocket(t, dir, "garbage\n") }, "? ? ?", "malformed HTTP response"},
		{"not JSON", func(t *testing.T, dir string) { serveSocket(t, dir, httpAnswer("200 OK", "<html>")) }, "? ? ?", "is not the management API's JSON"},
		{"wrong token", func(t *testing.T, dir string) {
			serveSocket(t, dir, httpAnswer("401 Unauthorized", `{"error":"missing or wrong bearer token; send Authorization: Bearer <token from the token file>"}`))
		}, "? ? ?", "missing or wrong bearer token"},
		{"no token", func(t *testing.T, dir string) {
			serveSocket(t, dir, httpAnswer("200 OK", string(status)))
			os.Remove(filepath.Join(dir, "token"))
		}, "? ? ?", "reading the API token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir, dir := fakeSandbox(t, id)
			tc.setup(t, dir)
			stdout, stderr, code := runCLI(t, "ps", "--state-dir", stateDir)
			if want := exitCodeFor(tc.wantErr); code != want {
				t.Errorf("sbx ps: exit %d, want %d\n%s%s", code, want, stdout, stderr)
			}
			var row string
			for l := range strings.Lines(stdout) {
				if strings.HasPrefix(l, id) {
					row = strings.TrimSpace(l)
				}
			}
			if f := strings.Fields(row); len(f) < 3 || strings.Join(f[len(f)-3:], " ") != tc.wantRow {
				t.Errorf("sbx ps: got the row %q, want POLICY, ALLOWED and BLOCKED %q", row, tc.wantRow)
			}
			t.Logf("stderr: %s", stderr)
			if tc.wantErr == "" {
				if stderr != "" {
					t.Errorf("sbx ps: got stderr %q, want nothing", stderr)
				}
				return
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "sbx: sandbox "+id+" (agent): ") || !strings.Contains(lines[0], tc.wantErr) {
				t.Errorf("sbx ps: got stderr %q, want one line naming sandbox %s (agent) and holding %q", stderr, id, tc.wantErr)
			}
		})
	}
}

// exitCodeFor is sbx ps's exit code when it says wantErr about a sandbox
// ("" for nothing).
func exitCodeFor(wantErr string) int {
	if wantErr == "" {
		return exitOK
	}
	return exitFailure
}

// TestPSListsEveryRowThenFails: a sandbox whose status cannot be asked
// does not stop sbx ps: the one listed after it is shown with its
// numbers, stderr names the one that failed, and the exit code is 1.
func TestPSListsEveryRowThenFails(t *testing.T) {
	stateDir := t.TempDir()
	fakeSandboxIn(t, stateDir, "1a2b3c4d", "broken") // no socket
	dir := fakeSandboxIn(t, stateDir, "2b3c4d5e", "fine")
	status, _ := json.Marshal(api.Status{PolicyVersion: 3, Counts: api.Counts{Allowed: 7, Blocked: 2}})
	serveSocket(t, dir, httpAnswer("200 OK", string(status)))

	stdout, stderr, code := runCLI(t, "ps", "--state-dir", stateDir)
	if code != exitFailure {
		t.Errorf("sbx ps: exit %d, want %d", code, exitFailure)
	}
	rows := map[string]string{}
	for l := range strings.Lines(stdout) {
		if f := strings.Fields(l); len(f) >= 3 && (f[0] == "1a2b3c4d" || f[0] == "2b3c4d5e") {
			rows[f[0]] = strings.Join(f[len(f)-3:], " ")
		}
	}
	if rows["1a2b3c4d"] != "? ? ?" || rows["2b3c4d5e"] != "3 7 2" {
		t.Errorf("sbx ps: got rows %v, want 1a2b3c4d with \"? ? ?\" and 2b3c4d5e with \"3 7 2\"\n%s", rows, stdout)
	}
	if !strings.HasPrefix(stderr, "sbx: sandbox 1a2b3c4d (broken): ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("sbx ps: got stderr %q, want one line naming sandbox 1a2b3c4d (broken)", stderr)
	}
}
