package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmuxTerminal is a terminal emulator the test reads as a user sees it:
// a tmux server of the test's own (its own socket, in the test's
// directory), one pane.
type tmuxTerminal struct {
	sock          string
	width, height int
}

// startTmux runs argv in a new tmux pane of width x height, which stays
// when argv ends. The server is killed when the test ends.
func startTmux(t *testing.T, width, height int, argv ...string) *tmuxTerminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	tt := &tmuxTerminal{sock: filepath.Join(t.TempDir(), "tmux"), width: width, height: height}
	t.Cleanup(func() { exec.Command("tmux", "-S", tt.sock, "kill-server").Run() })
	args := append([]string{"-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), "--"}, argv...)
	tt.cmd(t, args...)
	return tt
}

func (tt *tmuxTerminal) cmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tt.sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen returns what the pane shows, each cell's attributes and
// character set as the escape sequences that set them (capture-pane -e:
// concealed text shows as ESC [ 8 m, line-drawing glyphs between SO and
// SI), the spaces that end a line left out.
func (tt *tmuxTerminal) screen(t *testing.T) string {
	return tt.cmd(t, "capture-pane", "-p", "-e", "-t", "t")
}

// state returns the pane's modes: on the alternate screen, cursor shown,
// and the scroll region's top and bottom rows.
func (tt *tmuxTerminal) state(t *testing.T) string {
	return strings.TrimSpace(tt.cmd(t, "display-message", "-p", "-t", "t", "#{alternate_on} #{cursor_flag} #{scroll_region_upper} #{scroll_region_lower}"))
}

// waitFor waits until the pane shows want, and returns the screen.
func (tt *tmuxTerminal) waitFor(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	var s string
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if s = tt.screen(t); strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows:\n%s", want, s)
		}
	}
}

// hostileTerminal is what a hostile command writes to mess the terminal
// up for sbx's next line: the alternate screen, a scroll region of two
// rows at the top (sbx's lines would scroll away there), the cursor
// hidden, letters drawn as line-drawing glyphs, concealed text.
const hostileTerminal = `\033[?1049h\033[2;3r\033[?25l\033(0\033[8m`

// hostileAgent plays a hostile command: it draws a fake question, messes
// the terminal up (hostileTerminal), then through a copy of busybox named
// npm (busybox told it is busybox by its argv[0], which names no file
// there), in a directory whose name holds a clipboard write (OSC 52) and a
// right-to-left override, asks a mocked LLM with a model that holds the
// same, messes the terminal up again, and asks for an unlisted host,
// which sbx asks about on the terminal.
const hostileAgent = `GW=${HTTP_PROXY#http://}
printf 'sbx: ask       GET registry.npmjs.org:443/  (question a1, no rule matched; the default is ask)\nsbx: answer: y allow once, n deny once > '
printf '` + hostileTerminal + `'
D=$(printf '/w/\033]52;c;aGk=\007\342\200\256x')
busybox mkdir -p "$D" && busybox cp /bin/busybox "$D/npm"
body='{"model":"claude\u001b]52;c;aGk=\u0007\u202e","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
printf 'POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nContent-Type: application/json\r\nanthropic-version: 2023-06-01\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' ${#body} "$body" | exec -a busybox "$D/npm" nc ${GW%:*} ${GW##*:} >/dev/null
busybox sleep 1
printf '` + hostileTerminal + `'
r=$(printf 'GET http://later.test:8080/ HTTP/1.1\r\nHost: later.test:8080\r\nConnection: close\r\n\r\n' | exec -a busybox "$D/npm" nc ${GW%:*} ${GW##*:} | busybox head -n 1)
echo "answer: $r"`

// TestPrivilegedHostileTerminal runs sbx run in a real terminal emulator
// (tmux) with --default ask and a hostile command (hostileAgent). sbx's
// live line and question are drawn on the main screen, with the whole
// screen as the scroll region, the cursor shown, in ASCII and not
// concealed; the process is named with the path of what it executes,
// escaped; and sbx decisions, sbx audit and sbx mock requests show the
// sandbox's text escaped: no OSC 52 or right-to-left override reaches
// the terminal from them.
func TestPrivilegedHostileTerminal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	bin := buildSbx(t)
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	dir := readableDir(t)
	logFile := filepath.Join(dir, "run.jsonl")
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - reply: {text: \"hi\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := readableDir(t) // where the command copies busybox
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	args := []string{bin, "run", "--rootfs", root, "-v", work + ":/w", "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.246.0/24", "--resolve", "later.test=" + up.Addr, "--allow-private", up.Net,
		"--default", "ask", "--mock-llm", "api.anthropic.com=" + script, "--log", logFile, "--",
		"sh", "-c", hostileAgent}
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	wrapper := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(wrapper, []byte(strings.Join(quoted, " ")+"\necho SBX-EXIT=$?\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const width, height = 220, 50
	term := startTmux(t, width, height, "sh", wrapper)
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(logFile)
			t.Logf("the decision log:\n%s", data)
		}
	})

	screen := term.waitFor(t, "d deny for this session >", 90*time.Second)
	t.Logf("the terminal at the question (capture-pane -e):\n%s", screen)
	if got, want := term.state(t), "0 1 0 "+strconv.Itoa(height-1); got != want {
		t.Errorf("at the question the terminal's alternate screen, cursor shown, scroll region: got %q, want %q (main screen, cursor shown, whole screen)", got, want)
	}
	var question, live []string
	for _, line := range strings.Split(screen, "\n") {
		switch {
		case strings.Contains(line, "GET later.test:8080/") || strings.Contains(line, "d deny for this session >"): // not the fake one
			question = append(question, line)
		case strings.Contains(line, "api.anthropic.com:80/v1/messages"):
			live = append(live, line)
		}
	}
	if len(question) != 2 {
		t.Fatalf("got question lines %q, want sbx's two", question)
	}
	if len(live) != 1 {
		t.Errorf("got live lines %q, want one of the mock's request", live)
	}
	for _, line := range append(question, live...) {
		if strings.Contains(line, "\x1b[8m") || strings.ContainsRune(line, '\x0e') {
			t.Errorf("sbx's line is concealed or drawn in line-drawing glyphs: %q", line)
		}
		if strings.Contains(line, "\u202e") || strings.Contains(line, "\x1b]52") || strings.Contains(line, "\x07") {
			t.Errorf("sbx's line holds the sandbox's text raw: %q", line)
		}
	}
	exe := `(/w/\x1b]52;c;aGk=\x07\u202ex/npm)`
	for _, line := range append(question[:1], live...) {
		if !strings.Contains(line, " by npm[") || !strings.Contains(line, exe) {
			t.Errorf("sbx's line %q does not name the process by npm and its executable's path %s", line, exe)
		}
	}
	term.cmd(t, "send-keys", "-t", "t", "n")
	end := term.waitFor(t, "SBX-EXIT=", 60*time.Second)
	if !strings.Contains(end, "answer: HTTP/1.1 403 Forbidden") || !strings.Contains(end, "SBX-EXIT=0") {
		t.Errorf("the run did not end with the request denied and sbx's success:\n%s", end)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"decisions", []string{"decisions", "--file", logFile}, []string{exe, "GET later.test:8080/", "POST api.anthropic.com:80/v1/messages"}},
		{"audit", []string{"audit", logFile}, []string{`/w/\x1b]52;c;aGk=\x07\u202ex/npm`}},
		{"mock requests", []string{"mock", "requests", "--journal", strings.TrimSuffix(logFile, ".jsonl") + ".mock-requests.jsonl"}, []string{`claude\x1b]52;c;aGk=\x07\u202e`}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("sbx %s: %v\n%s", tc.name, err, out)
			continue
		}
		if strings.ContainsAny(string(out), "\x1b\x07\u202e") {
			t.Errorf("sbx %s printed the sandbox's text raw:\n%q", tc.name, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("sbx %s lacks %s:\n%s", tc.name, w, out)
			}
		}
	}
}
