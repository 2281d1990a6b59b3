package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a new pseudo-terminal: its master, where the test reads
// what is shown and types, and its slave, which becomes sbx's terminal.
// Both are closed when the test ends.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pty's number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// askScript prints lines before and after a request for an unlisted
// host through the gateway, an unfinished line while it waits, and its
// status line.
const askScript = `GW=${HTTP_PROXY#http://}
echo "before the question"
printf 'working... '
r=$(printf 'GET http://later.test:8080/ HTTP/1.1\r\nHost: later.test:8080\r\nConnection: close\r\n\r\n' | nc ${GW%:*} ${GW##*:} | head -n 1)
echo done
echo "answer: $r"
echo "after the question"
echo "to stderr" >&2`

// ptyRun is sbx run started on a pty of its own.
type ptyRun struct {
	cmd    *exec.Cmd
	master *os.File
	screen syncBuffer
	copied chan struct{}
}

// startOnPTY starts bin with args on a new pty, its controlling terminal
// and its stdin, stdout and stderr, as a shell starts a command in the
// foreground of a terminal.
func startOnPTY(t *testing.T, ctx context.Context, bin string, args ...string) *ptyRun {
	t.Helper()
	master, slave := openPTY(t)
	r := &ptyRun{cmd: exec.CommandContext(ctx, bin, args...), master: master, copied: make(chan struct{})}
	r.cmd.Stdin, r.cmd.Stdout, r.cmd.Stderr = slave, slave, slave
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // sbx holds it: the master reads EIO when sbx ends
	go func() {
		io.Copy(&r.screen, master)
		close(r.copied)
	}()
	return r
}

// wait waits for sbx's end and returns what the terminal showed, its
// lines ended by \n alone, starting with one, without the resets sbx
// wrote (termReset).
func (r *ptyRun) wait(t *testing.T) string {
	t.Helper()
	err := r.cmd.Wait()
	<-r.copied
	// The terminal ends lines with \r\n; the status line has its own \r.
	// The resets sbx writes before its lines show nothing.
	out := "\n" + strings.ReplaceAll(strings.ReplaceAll(r.screen.String(), termReset, ""), "\r", "")
	t.Logf("the terminal:\n%s", out)
	if err != nil {
		t.Fatalf("sbx run: %v", err)
	}
	return out
}

// TestPrivilegedApprovalPrompt runs sbx run (the binary) on a pty of its
// own, its controlling terminal, with its stdout and stderr there too, and
// --default ask: the command asks for an unlisted host on an upstream in
// a network namespace of the test's own, the question comes up on the
// terminal, and the test types the key. An allow once lets the request
// through, a deny once refuses it; the decision log's answer is by tty;
// and the command's output lines, before and after the question, are on
// the terminal whole, none cut by the prompt.
func TestPrivilegedApprovalPrompt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bin := buildSbx(t)
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	for _, tc := range []struct {
		name, key, status, answer string
	}{
		{"allow", "y", "200 OK", "allow"},
		{"deny", "n", "403 Forbidden", "deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logFile := filepath.Join(dir, "decisions.jsonl")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := startOnPTY(t, ctx, bin, "run", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
				"--subnet-pool", "10.213.249.0/24", "--resolve", "later.test="+up.Addr, "--allow-private", up.Net,
				"--default", "ask", "--approvals", filepath.Join(dir, "approvals.yaml"), "--log", logFile, "--",
				"sh", "-c", askScript)
			for deadline := time.Now().Add(60 * time.Second); !strings.Contains(run.screen.String(), "x deny always > "); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					run.cmd.Process.Kill()
					t.Fatalf("no question on the terminal:\n%s", run.screen.String())
				}
			}
			if _, err := io.WriteString(run.master, tc.key); err != nil {
				t.Fatal(err)
			}
			out := run.wait(t)

			// The question: host and port, question id, the keys.
			prompt := regexp.MustCompile(`(?m)^sbx: ask +GET later\.test:8080/.*\(question a1, no rule matched; the default is ask\)\nsbx: answer: y allow once, .* x deny always > (allowed|denied) once by tty\n`)
			if !prompt.MatchString(out) {
				t.Errorf("the terminal shows no prompt ended by the answer by tty")
			}
			// The command's lines are whole and in order: its
			// unfinished line (which may reach sbx after the question
			// does, and is then held) is ended before the prompt or a
			// line of sbx's; what it printed after the answer comes
			// after the prompt.
			var at []int
			for _, line := range []string{"before the question", "working... ", "done", "answer: HTTP/1.1 " + tc.status, "after the question", "to stderr"} {
				i := strings.Index(out, "\n"+line+"\n")
				if i < 0 {
					t.Errorf("the terminal lacks the whole line %q", line)
					continue
				}
				at = append(at, i)
			}
			if loc := prompt.FindStringIndex(out); len(at) == 6 && loc != nil && !(at[0] < at[1] && at[1] < at[2] && loc[1] <= at[2]+1 && at[2] < at[3] && at[3] < at[4]) {
				t.Errorf("the lines are not in order around the prompt (%v, prompt at %v)", at, loc)
			}
			if strings.Contains(out, "sbx approve --sandbox") {
				t.Errorf("the terminal shows the live line naming sbx approve; want the prompt instead")
			}
			recs := readApprovalRecords(t, logFile)
			if len(recs) != 2 || recs[1].Answer != tc.answer || recs[1].Scope != "once" || recs[1].By != "tty" || recs[1].Host != "later.test" {
				t.Errorf("approval records: got %+v, want a question about later.test and an answer %s once by tty", recs, tc.answer)
			}
			if data, _ := os.ReadFile(filepath.Join(dir, "approvals.yaml")); len(data) != 0 {
				t.Errorf("a once answer wrote the approvals file:\n%s", data)
			}
		})
	}
	if n := up.requestsFromElsewhere(); n != 0 {
		t.Errorf("the upstream had %d requests from elsewhere than the gateway", n)
	}
}

// TestPrivilegedApprovalPromptOff runs sbx run on a pty of its own as
// TestPrivilegedApprovalPrompt does, where nothing must be asked on the
// terminal: with --no-prompt and with -t (the command owns the terminal)
// the question gets the live line naming sbx approve, the terminal is
// never put into single-key mode, and the question times out; with -t
// no other decision gets a line.
func TestPrivilegedApprovalPromptOff(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bin := buildSbx(t)
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	for _, tc := range []struct {
		name, flag, line string
	}{
		{"no-prompt", "--no-prompt", "answer with: sbx approve --sandbox "},
		{"tty", "-t", "answer with: sbx approve --sandbox "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logFile := filepath.Join(dir, "decisions.jsonl")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := startOnPTY(t, ctx, bin, "run", tc.flag, "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
				"--subnet-pool", "10.213.249.0/24", "--resolve", "later.test="+up.Addr, "--allow-private", up.Net,
				"--default", "ask", "--ask-timeout", "2s", "--approvals", filepath.Join(dir, "approvals.yaml"), "--log", logFile, "--",
				"sh", "-c", askScript)
			out := run.wait(t)
			if strings.Contains(out, "x deny always > ") {
				t.Errorf("%s: the terminal shows the prompt", tc.flag)
			}
			if tc.line != "" && !strings.Contains(out, tc.line) {
				t.Errorf("%s: the terminal lacks the live line naming sbx approve", tc.flag)
			}
			if !strings.Contains(out, "answer: HTTP/1.1 403 Forbidden\n") {
				t.Errorf("%s: the request was not refused", tc.flag)
			}
			recs := readApprovalRecords(t, logFile)
			if len(recs) != 2 || recs[1].By != "timeout" {
				t.Errorf("approval records: got %+v, want a question ended by timeout", recs)
			}
		})
	}
}
