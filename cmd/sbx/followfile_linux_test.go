package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// lineWatcher gathers the lines a process prints, for a test to wait on.
type lineWatcher struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line comes
}

func watchLines(r io.Reader) *lineWatcher {
	w := &lineWatcher{more: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			close(w.more)
			w.more = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w
}

// waitFor waits up to 10 seconds for a line that holds s.
func (w *lineWatcher) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		w.mu.Lock()
		for _, l := range w.lines {
			if strings.Contains(l, s) {
				w.mu.Unlock()
				return
			}
		}
		more := w.more
		w.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("no line holding %q within 10s; got:\n%s", s, w.text())
		}
	}
}

func (w *lineWatcher) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// count returns how many lines hold s.
func (w *lineWatcher) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// userUID is the normal user a test run as root runs sbx as, where a user
// would run it without sudo.
const userUID = 1000

// asUser makes cmd run as userUID when the test runs as root; a test run
// as a normal user runs it as that user.
func asUser(cmd *exec.Cmd) {
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: userUID, Gid: userUID}}
	}
}

// userDir is a new directory of the user asUser runs commands as.
func userDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	return sharedDir(t, userUID, userUID, 0o755)
}

// startAsUser starts cmd as the user (asUser) and watches its standard
// output and error line by line.
func startAsUser(t *testing.T, cmd *exec.Cmd) (stdout, stderr *lineWatcher) {
	t.Helper()
	asUser(cmd)
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return watchLines(so), watchLines(se)
}

// startFollow starts sbx decisions --file path --follow as the user,
// and stops it with SIGINT at the test's end, checking it exits 0 then.
func startFollow(t *testing.T, bin, path string) (stdout, stderr *lineWatcher, stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "decisions", "--file", path, "--follow")
	stdout, stderr = startAsUser(t, cmd)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("sbx decisions --follow after SIGINT: %v, want exit 0; stderr:\n%s", err, stderr.text())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("sbx decisions --follow did not end within 10s of SIGINT")
			}
		})
	}
	t.Cleanup(stop)
	return stdout, stderr, stop
}

// TestDecisionsFileFollow: sbx decisions --file F --follow, run as a
// normal user, prints what F holds, then each record the user's own sbx
// gateway writes to it, across a rotation (the file moved away, the
// gateway making a new one at the path), and ends with exit 0 on SIGINT.
func TestDecisionsFileFollow(t *testing.T) {
	bin := buildSbx(t)
	path := filepath.Join(userDir(t), "decisions.jsonl")
	gw := startUserGateway(t, bin, "--log", path)
	// Each request is refused by the default rule and recorded; one
	// the gateway refuses because its log could not record it is asked
	// again.
	ask := func(host string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			if gw.status(t, "http://"+host+"/") == http.StatusForbidden {
				return
			}
		}
		t.Fatalf("the request to %s was not refused by the policy three times", host)
	}
	ask("before.test")
	stdout, stderr, stop := startFollow(t, bin, path)
	stdout.waitFor(t, "GET before.test:80/")
	ask("while.test")
	stdout.waitFor(t, "GET while.test:80/")

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	ask("rotated.test")
	stdout.waitFor(t, "GET rotated.test:80/")
	// The gateway notices the move after a record's write or within a
	// second, and makes the new file at its next record; until then its
	// records go to the moved file. Records come until the follower
	// follows the new file (one, where the gateway is quick).
	const rotated = "was rotated; following the new file"
	var after []string
	for i := 0; stderr.count(rotated) == 0; i++ {
		if i == 20 {
			t.Fatalf("the follower did not follow the new file after %d records; its errors:\n%s", i, stderr.text())
		}
		host := fmt.Sprintf("after%d.test", i)
		after = append(after, host)
		ask(host)
		stdout.waitFor(t, "GET "+host+":80/")
		time.Sleep(200 * time.Millisecond) // its error output, read apart from its output
	}
	stop()
	// Every record of the old file and the new is printed once.
	var want int
	for _, p := range []string{path + ".1", path} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		want += strings.Count(string(b), "\n")
	}
	if got := len(strings.Split(stdout.text(), "\n")); got != want {
		t.Errorf("got %d lines, want %d, one per record of the two files:\n%s", got, want, stdout.text())
	}
	for _, host := range append([]string{"before.test", "while.test", "rotated.test"}, after...) {
		if n := stdout.count("GET " + host + ":80/"); n != 1 {
			t.Errorf("%s printed %d times, want once:\n%s", host, n, stdout.text())
		}
	}
}

// TestDecisionsFileFollowWaitsForNewline: a record whose line is written
// in two parts is printed once its newline comes, not refused as half a
// record; a file cut shorter is read again from its start.
func TestDecisionsFileFollowWaitsForNewline(t *testing.T) {
	bin := buildSbx(t)
	path := filepath.Join(userDir(t), "decisions.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if os.Geteuid() == 0 {
		// The user's own log.
		if err := f.Chown(userUID, userUID); err != nil {
			t.Fatal(err)
		}
	}
	line := func(seq uint64, host string) string {
		r := &decisionlog.Record{Seq: seq, Event: decisionlog.EventDecision, Time: time.Now(), Kind: decisionlog.KindHTTP, Method: "GET", Host: host, Port: 80, Path: "/", Action: "block", Enforced: true, Rule: "default", Reason: "no rule matched"}
		return string(r.AppendJSON(nil)) + "\n"
	}
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(line(1, "one.test"))
	stdout, stderr, stop := startFollow(t, bin, path)
	stdout.waitFor(t, "GET one.test:80/")
	two := line(2, "two.test")
	write(two[:20])
	time.Sleep(3 * followPoll) // the follower reads the half meanwhile
	write(two[20:])
	stdout.waitFor(t, "GET two.test:80/")

	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * followPoll)
	write(line(1, "again.test"))
	stdout.waitFor(t, "GET again.test:80/")
	stop()
	if strings.Contains(stderr.text(), "not a decision record") {
		t.Errorf("stderr: got %q, want no refused record", stderr.text())
	}
}

// TestDecisionsRootLogSaysSudo: a normal user's sbx decisions --file of a
// log sbx run wrote (root's, mode 0600), followed or not, says to run it
// with sudo.
func TestDecisionsRootLogSaysSudo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to write a log of root's (CI runs as root)")
	}
	bin := buildSbx(t)
	path := filepath.Join(userDir(t), "decisions.jsonl")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"decisions", "--file", path}, {"decisions", "--file", path, "--follow"}} {
		cmd := exec.Command(bin, args...)
		asUser(cmd)
		out, err := cmd.CombinedOutput()
		want := "permission denied; a sandbox's decision log is root's (mode 0600), wherever --log put it: run sbx decisions with sudo"
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("sbx %s as uid %d: got %v, %q; want a failure saying %q", strings.Join(args, " "), userUID, err, out, want)
		}
	}
}
