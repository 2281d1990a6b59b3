package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// screen is what a fake terminal shows: the prompt's writes and the
// gate's, in the order they came.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// fakeTerminal is a promptTerminal whose keys come from a net.Pipe (a
// synchronous in-memory pipe, with deadlines, as /dev/tty's reads have)
// and whose output goes to a screen.
type fakeTerminal struct {
	net.Conn // the prompt's end: Read, SetReadDeadline, Close
	screen   *screen
	keys     net.Conn // the typist's end

	mu         sync.Mutex
	foreground bool
	modes      []bool // KeyMode's calls
}

func (f *fakeTerminal) Write(p []byte) (int, error) { return f.screen.Write(p) }

func (f *fakeTerminal) Foreground() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.foreground
}

func (f *fakeTerminal) KeyMode(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.modes = append(f.modes, on)
	return nil
}

func (f *fakeTerminal) keyModes() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.modes...)
}

// type_ types s as one read of the terminal's input.
func (f *fakeTerminal) type_(t *testing.T, s string) {
	t.Helper()
	f.keys.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(f.keys, s); err != nil {
		t.Fatalf("typing %q: %v (the prompt is not reading)", s, err)
	}
}

// answered is an answer the prompt gave through its answerFunc.
type answered struct {
	id    string
	allow bool
	scope string
}

// promptRig is a prompter on a fake terminal whose answers act as the
// gateway's: they are logged, as approval records, before they return.
type promptRig struct {
	p      *prompter
	tty    *fakeTerminal
	screen *screen
	lines  *screen // the live lines the prompt writes where it cannot ask
	out    io.Writer
	mu     sync.Mutex
	got    []answered
	cancel context.CancelFunc
	done   chan struct{}
}

func newPromptRig(t *testing.T, always, foreground bool) *promptRig {
	t.Helper()
	a, b := net.Pipe()
	r := &promptRig{screen: &screen{}, lines: &screen{}}
	r.tty = &fakeTerminal{Conn: a, keys: b, screen: r.screen, foreground: foreground}
	gate := newTTYGate()
	r.out = gate.writer(r.screen, false)
	r.p = newPrompter(r.tty, gate, func(_ context.Context, id string, allow bool, scope string) error {
		r.mu.Lock()
		r.got = append(r.got, answered{id, allow, scope})
		r.mu.Unlock()
		verb := map[bool]string{true: "allowed", false: "denied"}[allow]
		how := map[string]string{"once": "once", "session": "for this session", "always": "always"}[scope]
		r.log(t, &decisionlog.Record{ApprovalID: id, Answer: map[bool]string{true: "allow", false: "deny"}[allow], Scope: scope, By: "tty",
			Reason: verb + " " + how + " by tty", Host: "later.test", Port: 8080})
		return nil
	})
	r.p.always = always
	r.p.lines = gate.writer(r.lines, true)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		r.p.run(ctx)
	}()
	t.Cleanup(func() {
		r.stop()
		a.Close()
		b.Close()
	})
	return r
}

// stop ends the prompter, as the end of sbx run does.
func (r *promptRig) stop() {
	r.cancel()
	<-r.done
}

// log gives the prompter rec through its sink, as the decision log does.
func (r *promptRig) log(t *testing.T, rec *decisionlog.Record) {
	t.Helper()
	rec.Event = decisionlog.EventApproval
	if rec.Sandbox == "" {
		rec.Sandbox = "1a2b3c4d"
	}
	line := rec.AppendJSON(nil)
	promptSink{r.p}.WriteRecord(1, line)
}

// ask logs a question about host:8080 by wget[42].
func (r *promptRig) ask(t *testing.T, id, host string) {
	t.Helper()
	r.log(t, &decisionlog.Record{ApprovalID: id, Kind: "proxy", Method: "GET", Host: host, Port: 8080, Path: "/",
		PID: 42, Comm: "wget", Rule: "default", Reason: "no rule matched; the default is ask", Action: "ask"})
}

func (r *promptRig) answers() []answered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]answered(nil), r.got...)
}

// waitScreen waits until the screen shows want n times.
func waitFor(t *testing.T, s *screen, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); strings.Count(s.String(), want) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("got screen %q, want %q %d times", s.String(), want, n)
		}
	}
}

// TestPromptAnswersWithKey: each key answers the question on the screen
// with its answer through the API's path (by tty), and the prompt's line
// ends with the answer; the terminal reads single keys only while the
// question is on the screen.
func TestPromptAnswersWithKey(t *testing.T) {
	for _, tc := range []struct {
		key   string
		want  answered
		shown string
	}{
		{"y", answered{"a1", true, "once"}, "> allowed once by tty\n"},
		{"s", answered{"a1", true, "session"}, "> allowed for this session by tty\n"},
		{"a", answered{"a1", true, "always"}, "> allowed always by tty\n"},
		{"n", answered{"a1", false, "once"}, "> denied once by tty\n"},
		{"d", answered{"a1", false, "session"}, "> denied for this session by tty\n"},
		{"x", answered{"a1", false, "always"}, "> denied always by tty\n"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			r := newPromptRig(t, true, true)
			r.ask(t, "a1", "later.test")
			waitFor(t, r.screen, " > ", 1)
			if want := "sbx: ask       GET later.test:8080/ by wget[42]  (question a1, no rule matched; the default is ask)\n" +
				"sbx: answer: y allow once, s allow for this session, a allow always, n deny once, d deny for this session, x deny always > "; r.screen.String() != want {
				t.Fatalf("got prompt %q, want %q", r.screen.String(), want)
			}
			r.tty.type_(t, tc.key)
			waitFor(t, r.screen, tc.shown, 1)
			if got := r.answers(); len(got) != 1 || got[0] != tc.want {
				t.Errorf("got answers %+v, want %+v", got, tc.want)
			}
			r.stop()
			if got := r.tty.keyModes(); fmt.Sprint(got) != "[true false]" {
				t.Errorf("got key modes %v, want [true false]: single keys while the question is on the screen, then the mode restored", got)
			}
		})
	}
}

// TestPromptIgnoresOtherInput: keys that answer nothing, pastes and
// escape sequences (an arrow key ends in A) are ignored, and the always
// answers are neither offered nor taken without a file to write to.
func TestPromptIgnoresOtherInput(t *testing.T) {
	r := newPromptRig(t, false, true)
	r.ask(t, "a1", "later.test")
	waitFor(t, r.screen, " > ", 1)
	if s := r.screen.String(); strings.Contains(s, "always") || !strings.Contains(s, "answer: y allow once, s allow for this session, n deny once, d deny for this session > ") {
		t.Fatalf("got prompt %q, want no always answer offered", s)
	}
	for _, in := range []string{"a", "x", "\x1b[A", "yes", "Y", "\n", "q"} {
		r.tty.type_(t, in)
	}
	r.tty.type_(t, "d")
	waitFor(t, r.screen, "> denied for this session by tty\n", 1)
	if got := r.answers(); len(got) != 1 || got[0] != (answered{"a1", false, "session"}) {
		t.Errorf("got answers %+v, want one deny for the session", got)
	}
}

// TestPromptHoldsOutput: the command's unfinished line is ended before
// the prompt, output that comes while the question is on the screen is
// held and written, in order, after the prompt's line ends.
func TestPromptHoldsOutput(t *testing.T) {
	r := newPromptRig(t, true, true)
	io.WriteString(r.out, "first line\nDownloading... ")
	r.ask(t, "a1", "later.test")
	waitFor(t, r.screen, " > ", 1)
	written := make(chan struct{})
	go func() {
		io.WriteString(r.out, "50%\n")
		io.WriteString(r.out, "last line\n")
		close(written)
	}()
	<-written
	time.Sleep(20 * time.Millisecond)
	if s := r.screen.String(); strings.Contains(s, "50%") {
		t.Fatalf("output reached the screen while the question was on it: %q", s)
	}
	r.tty.type_(t, "y")
	waitFor(t, r.screen, "last line\n", 1)
	got := r.screen.String()
	want := "first line\nDownloading... \nsbx: ask       GET later.test:8080/ by wget[42]  (question a1, no rule matched; the default is ask)\n" +
		"sbx: answer: y allow once, s allow for this session, a allow always, n deny once, d deny for this session, x deny always > allowed once by tty\n" +
		"50%\nlast line\n"
	if got != want {
		t.Errorf("got screen\n%q\nwant\n%q", got, want)
	}
	io.WriteString(r.out, "after\n")
	if !strings.HasSuffix(r.screen.String(), "last line\nafter\n") {
		t.Errorf("output after the prompt: got %q", r.screen.String())
	}
}

// TestPromptQueueAndElsewhere: questions queue, oldest first, the prompt
// saying how many more wait; a question answered elsewhere, or timed
// out, leaves the screen with its answer on the prompt's line, and one
// answered while it waited in the queue is never shown.
func TestPromptQueueAndElsewhere(t *testing.T) {
	r := newPromptRig(t, true, true)
	r.ask(t, "a1", "one.test")
	waitFor(t, r.screen, " > ", 1)
	r.ask(t, "a2", "two.test")
	r.ask(t, "a3", "three.test")
	// a2 is answered elsewhere while it waits; a1, on the screen, by sbx approve.
	r.log(t, &decisionlog.Record{ApprovalID: "a2", Answer: "allow", Scope: "once", By: "api", Reason: "allowed once by api", Host: "two.test", Port: 8080})
	r.log(t, &decisionlog.Record{ApprovalID: "a1", Answer: "allow", Scope: "session", By: "cli", Reason: "allowed for this session by cli", Host: "one.test", Port: 8080})
	waitFor(t, r.screen, "> allowed for this session by cli\n", 1)
	waitFor(t, r.screen, " > ", 2)
	s := r.screen.String()
	if strings.Contains(s, "two.test") || !strings.Contains(s, "GET three.test:8080/ by wget[42]  (question a3, no rule matched; the default is ask)\n") {
		t.Errorf("got screen %q, want a1 then a3, never a2", s)
	}
	if strings.Contains(s, "more waiting") {
		t.Errorf("got screen %q: a1 was shown before the others were asked, a3 after a2 was answered", s)
	}

	// Two more come while a3 is on the screen; a3 times out, and a4
	// says that one more waits.
	r.ask(t, "a4", "four.test")
	r.ask(t, "a5", "five.test")
	r.log(t, &decisionlog.Record{ApprovalID: "a3", Answer: "deny", Scope: "once", By: "timeout", Reason: "no answer came within 60s", Host: "three.test", Port: 8080})
	waitFor(t, r.screen, "> no answer came within 60s\n", 1)
	waitFor(t, r.screen, "(question a4, no rule matched; the default is ask; 1 more waiting)\n", 1)
	if got := r.answers(); len(got) != 0 {
		t.Errorf("the prompt answered %+v; want nothing: they were answered elsewhere", got)
	}
	r.tty.type_(t, "n")
	waitFor(t, r.screen, "(question a5, no rule matched; the default is ask)\n", 1)
	r.tty.type_(t, "y")
	waitFor(t, r.screen, "> allowed once by tty\n", 1)
	if got := r.answers(); fmt.Sprint(got) != "[{a4 false once} {a5 true once}]" {
		t.Errorf("got answers %v, want a4 denied, then a5 allowed", got)
	}
}

// TestPromptRunEnds: the end of sbx run ends the prompt on the screen,
// restores the terminal's mode and lets the held output out.
func TestPromptRunEnds(t *testing.T) {
	r := newPromptRig(t, true, true)
	r.ask(t, "a1", "later.test")
	waitFor(t, r.screen, " > ", 1)
	io.WriteString(r.out, "held\n")
	r.stop()
	if s := r.screen.String(); !strings.HasSuffix(s, "> not answered: sbx run ended\nheld\n") {
		t.Errorf("got screen %q, want the prompt ended, then the held output", s)
	}
	if got := r.tty.keyModes(); fmt.Sprint(got) != "[true false]" {
		t.Errorf("got key modes %v, want [true false]", got)
	}
}

// TestPromptNotForeground: sbx in the background of its terminal (sbx run
// ... &) asks nothing there, as reading it would stop sbx: the question
// gets the live line naming sbx approve, and its answer too.
func TestPromptNotForeground(t *testing.T) {
	r := newPromptRig(t, true, false)
	r.ask(t, "a1", "later.test")
	waitFor(t, r.lines, "answer with: sbx approve --sandbox 1a2b3c4d a1", 1)
	r.log(t, &decisionlog.Record{ApprovalID: "a1", Answer: "allow", Scope: "once", By: "cli", Reason: "allowed once by cli", Host: "later.test", Port: 8080})
	waitFor(t, r.lines, "(question a1: allowed once by cli)\n", 1)
	if s := r.screen.String(); s != "" {
		t.Errorf("got screen %q, want nothing asked there", s)
	}
	if got := r.tty.keyModes(); len(got) != 0 {
		t.Errorf("got key modes %v, want the terminal untouched", got)
	}
}

// TestTTYGateBounds: past maxHeld, the command's writes wait for the
// prompt's end and sbx's own lines are left out, counted.
func TestTTYGateBounds(t *testing.T) {
	var s screen
	g := newTTYGate()
	cmdOut, own := g.writer(&s, false), g.writer(&s, true)
	g.hold()
	big := bytes.Repeat([]byte("x"), maxHeld)
	cmdOut.Write(big)
	own.Write([]byte("sbx: a live line\n"))
	done := make(chan struct{})
	go func() {
		cmdOut.Write([]byte("\nmore\n"))
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a write past the bound returned while the gate held")
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	<-done
	want := string(big) + "\nsbx: 1 of sbx's lines were left out while a question was on the screen (sbx decisions has every decision)\n\nmore\n"
	if got := s.String(); got != want {
		t.Errorf("got %d bytes ending %q, want %d ending %q", len(got), got[max(0, len(got)-150):], len(want), want[len(want)-150:])
	}
}

// TestLiveSinkLeavesQuestions: with the prompt on the terminal, the live
// lines leave the questions and their answers to it.
func TestLiveSinkLeavesQuestions(t *testing.T) {
	rec := &decisionlog.Record{Event: decisionlog.EventApproval, ApprovalID: "a1", Host: "later.test", Port: 8080, Action: "ask", Reason: "no rule matched; the default is ask"}
	line := rec.AppendJSON(nil)
	for _, leave := range []bool{false, true} {
		var b bytes.Buffer
		s := &liveSink{w: &b, noQuestions: leave}
		s.WriteRecord(1, line)
		if got := strings.Contains(b.String(), "question a1"); got == leave {
			t.Errorf("noQuestions %v: got %q", leave, b.String())
		}
	}
}

// TestLiveSinkOnlyQuestions: with -t (onlyQuestions) a question still
// gets its line naming the command that answers it; a decision does not.
func TestLiveSinkOnlyQuestions(t *testing.T) {
	question := (&decisionlog.Record{Event: decisionlog.EventApproval, ApprovalID: "a1", Host: "later.test", Port: 8080, Action: "ask", Reason: "no rule matched; the default is ask"}).AppendJSON(nil)
	block := (&decisionlog.Record{Event: decisionlog.EventDecision, Kind: "http", Host: "blocked.test", Port: 80, Action: "block", Rule: "default", Reason: "no rule matched; the default is block"}).AppendJSON(nil)
	var b bytes.Buffer
	s := &liveSink{w: &b, onlyQuestions: true}
	s.WriteRecord(1, question)
	s.WriteRecord(2, block)
	if got := b.String(); !strings.Contains(got, "question a1") || strings.Contains(got, "blocked.test") {
		t.Errorf("got %q, want the question's line alone", got)
	}
}

// TestTTYGateOwnLines: sbx's own lines start on a line of their own, the
// command's unfinished line ended first, whether written at once or held
// while a question was on the screen.
func TestTTYGateOwnLines(t *testing.T) {
	var s screen
	g := newTTYGate()
	cmdOut, own := g.writer(&s, false), g.writer(&s, true)
	io.WriteString(cmdOut, "working... ")
	io.WriteString(own, "sbx: allow x\n")
	io.WriteString(cmdOut, "done\n")
	io.WriteString(own, "sbx: allow y\n")
	g.hold()
	io.WriteString(cmdOut, "more... ")
	io.WriteString(own, "sbx: allow z\n")
	g.release()
	if got, want := s.String(), "working... \nsbx: allow x\ndone\nsbx: allow y\nmore... \nsbx: allow z\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
