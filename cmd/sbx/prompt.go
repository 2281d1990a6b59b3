package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// The prompt on sbx run's terminal (docs/cli.md, "Questions on the
// terminal"): a question the gateway holds requests on is asked on the
// controlling terminal, answered with one key, and the answer is given
// through the management API, as sbx approve gives it, with by tty.

// promptTerminal is the terminal questions are asked on: /dev/tty
// (openPromptTerminal), or a fake in tests.
type promptTerminal interface {
	io.ReadWriter
	// SetReadDeadline makes a Read blocked now or later fail at t (the
	// zero time: never).
	SetReadDeadline(t time.Time) error
	// Foreground reports whether sbx's process group is the terminal's
	// foreground group: only then may it read the terminal or change its
	// mode (else the kernel stops the whole process, gateway and all).
	Foreground() bool
	// KeyMode(true) makes each key readable as it is pressed, not echoed,
	// and drops what was typed before; KeyMode(false) restores the mode
	// KeyMode(true) found. Signal keys (Ctrl-C) stay signals.
	KeyMode(on bool) error
	Close() error
}

// maxHeld bounds the output a ttyGate holds while a question is on the
// screen.
const maxHeld = 1 << 20

// ttyGate is the way to the terminal of everything sbx run writes there
// besides the prompt: the command's output and sbx's own lines. It passes
// writes through, in the order they come (sbx's lines, like the prompt,
// start on a line of their own: when the command's last line is
// unfinished, a newline ends it first), except while a question is on
// the screen (hold to release): then it holds them, in order, and writes
// them when the question ends, so that the prompt is never cut by
// output. It holds at most maxHeld bytes: past that, the command's
// writes wait (its pipe fills, and the command waits on it) and sbx's own
// lines are left out, counted. Before each of sbx's own lines it
// restores what the command's output changed on the terminal (term,
// terminal.go). It is safe for concurrent use.
type ttyGate struct {
	mu      sync.Mutex
	changed *sync.Cond // broadcast when holding ends
	holding bool
	held    []heldWrite
	size    int
	// midLine: the last byte written to the terminal was not a newline.
	midLine bool
	// dropped counts sbx's lines left out while holding, said on dropW.
	dropped int
	dropW   io.Writer
	// term: sbx's own lines reach a terminal, so the terminal's state is
	// restored before each, when the command's output may have changed
	// it (state); blind: the command's output may reach the terminal
	// without passing the gate (its stdout is not the terminal, but may
	// be a pipe to one), so it is restored before each line.
	term, blind bool
	state       termState
}

type heldWrite struct {
	w   io.Writer
	p   []byte
	own bool // sbx's own line
}

func newTTYGate() *ttyGate {
	g := &ttyGate{}
	g.changed = sync.NewCond(&g.mu)
	return g
}

// writer returns the gate's writer to w, a stream that reaches the
// terminal. A drop writer (sbx's own lines, written where a goroutine
// must not wait: the decision log's sinks) leaves out what does not fit
// while the gate holds; else the write waits.
func (g *ttyGate) writer(w io.Writer, drop bool) io.Writer {
	if drop {
		g.dropW = w
	}
	return &gateWriter{g: g, w: w, drop: drop}
}

type gateWriter struct {
	g    *ttyGate
	w    io.Writer
	drop bool
}

func (gw *gateWriter) Write(p []byte) (int, error) {
	g := gw.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.holding {
		if g.size == 0 || g.size+len(p) <= maxHeld {
			g.held = append(g.held, heldWrite{gw.w, bytes.Clone(p), gw.drop})
			g.size += len(p)
			return len(p), nil
		}
		if gw.drop {
			g.dropped++
			return len(p), nil
		}
		g.changed.Wait()
	}
	if gw.drop {
		if err := g.own(gw.w); err != nil {
			return 0, err
		}
	}
	n, err := gw.w.Write(p)
	g.wrote(p[:n], !gw.drop)
	return n, err
}

// own readies the terminal for one of sbx's own lines, written next to
// w: it restores the terminal's state (termState.reset), and ends the
// command's unfinished line, so that sbx's line starts a line of its
// own, as the prompt does. g.mu is held.
func (g *ttyGate) own(w io.Writer) error {
	if g.term {
		if s := g.state.reset(g.blind); s != "" {
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
		}
	}
	if g.midLine {
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		g.midLine = false
	}
	return nil
}

// wrote notes the end of what was written to the terminal, and follows
// the terminal's state through what the command wrote. g.mu is held.
func (g *ttyGate) wrote(p []byte, command bool) {
	if len(p) > 0 {
		g.midLine = p[len(p)-1] != '\n'
	}
	if command {
		g.state.feed(p)
	}
}

// restore returns what restores the terminal's state before a question
// (termState.reset, in full), which the caller writes while the gate
// holds, and takes the terminal as restored.
func (g *ttyGate) restore() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state.reset(true)
}

// hold starts holding the output, and reports whether the terminal's
// last line is unfinished (the prompt must start on a new line). Every
// hold is followed by release.
func (g *ttyGate) hold() (midLine bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = true
	return g.midLine
}

// release writes what was held, in order, after the prompt, which has
// ended its last line, says how many of sbx's lines were left out, if
// any, and lets writes through again.
func (g *ttyGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.midLine = false
	for _, h := range g.held {
		// The writer was told it was written; a terminal that fails now
		// fails the next write too.
		if h.own {
			g.own(h.w)
		}
		n, _ := h.w.Write(h.p)
		g.wrote(h.p[:n], !h.own)
	}
	if g.dropped > 0 && g.dropW != nil {
		g.own(g.dropW)
		line := fmt.Sprintf("sbx: %d of sbx's lines were left out while a question was on the screen (sbx decisions has every decision)\n", g.dropped)
		n, _ := io.WriteString(g.dropW, line)
		g.wrote([]byte(line[:n]), false)
	}
	g.held, g.size, g.dropped, g.holding = nil, 0, 0, false
	g.changed.Broadcast()
}

// promptChoice is an answer a key gives.
type promptChoice struct {
	key   byte
	allow bool
	scope string
	text  string
}

// promptChoices are the answers, in the order the prompt offers them;
// the always ones only when the run has a file to write their rules to.
var promptChoices = []promptChoice{
	{'y', true, "once", "allow once"},
	{'s', true, "session", "allow for this session"},
	{'a', true, "always", "allow always"},
	{'n', false, "once", "deny once"},
	{'d', false, "session", "deny for this session"},
	{'x', false, "always", "deny always"},
}

// parseKey returns the answer that in, one Read of the terminal, gives:
// one byte, the key of an offered answer. A read of more bytes is a paste
// or an escape sequence (an arrow key is ESC [ A), never an answer; keys
// are lower case, so that no sequence's last letter is one.
func parseKey(in []byte, always bool) (promptChoice, bool) {
	if len(in) != 1 {
		return promptChoice{}, false
	}
	for _, c := range promptChoices {
		if c.key == in[0] && (always || c.scope != "always") {
			return c, true
		}
	}
	return promptChoice{}, false
}

// promptQuestion is the text of the prompt: the question's line, as the
// live line says it without the commands that answer it, and the line of
// keys, which the cursor stays at the end of.
func promptQuestion(q *decisionlog.Record, more int, always bool) string {
	why := printable(q.Reason)
	if more > 0 {
		why += fmt.Sprintf("; %d more waiting", more)
	}
	var keys []string
	for _, c := range promptChoices {
		if always || c.scope != "always" {
			keys = append(keys, string(c.key)+" "+c.text)
		}
	}
	return fmt.Sprintf("sbx: %-9s %s%s  (question %s, %s)\nsbx: answer: %s > ",
		"ask", printable(liveTarget(q)), printable(recordProcess(q)), printable(q.ApprovalID), why, strings.Join(keys, ", "))
}

// answerFunc gives an answer to question id, as the management API takes
// it, with by tty.
type answerFunc func(ctx context.Context, id string, allow bool, scope string) error

// prompter asks the gateway's questions on a terminal, one at a time,
// oldest first. Its sink (promptSink) gives it the questions and their
// answers from the decision log; run asks them. A question answered
// elsewhere (sbx approve, the API, sbx ui) or timed out leaves the
// screen with a line that says so. Where the terminal cannot be used
// (sbx is not in its foreground, or it fails), a question gets the live
// line naming sbx approve instead, on lines (when not nil).
type prompter struct {
	tty    promptTerminal
	gate   *ttyGate
	lines  io.Writer // the live lines, when the live sink leaves questions to the prompt; else nil
	always bool      // the run has a file to write always answers' rules to
	answer answerFunc
	// reset: tty is a terminal whose state is restored before each
	// question (ttyGate.restore); a test's fake terminal is not.
	reset bool

	mu      sync.Mutex
	queue   []*decisionlog.Record // questions not answered, oldest first
	shown   string                // the id of the question on the screen, "" when none
	outcome string                // its answer's reason, once the answer is logged
	lined   map[string]bool       // questions said on a live line instead
	broken  error                 // the terminal failed: no more prompts
	wake    chan struct{}         // a question, or the shown one's answer, came
}

func newPrompter(tty promptTerminal, gate *ttyGate, answer answerFunc) *prompter {
	return &prompter{tty: tty, gate: gate, answer: answer, lined: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// promptSink is the decision-log sink that gives a prompter its
// questions and their answers. It never waits on the terminal.
type promptSink struct{ p *prompter }

func (s promptSink) WriteRecord(_ uint64, line []byte) error {
	if !bytes.Contains(line, liveApproval) {
		return nil
	}
	var r decisionlog.Record
	if err := decisionlog.Decode(line, &r); err != nil || r.Event != decisionlog.EventApproval || r.ApprovalID == "" {
		return nil
	}
	s.p.record(&r)
	return nil
}

func (promptSink) Flush() error { return nil }
func (promptSink) Close() error { return nil }

// record takes an approval record: a question joins the queue; an answer
// ends its question, on the screen or in the queue.
func (p *prompter) record(r *decisionlog.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Answer == "" {
		p.queue = append(p.queue, r)
		p.signal()
		return
	}
	if p.lined[r.ApprovalID] {
		delete(p.lined, r.ApprovalID)
		if p.lines != nil {
			fmt.Fprintf(p.lines, "sbx: %s\n", approvalLine(r))
		}
		return
	}
	for i, q := range p.queue {
		if q.ApprovalID == r.ApprovalID {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			break
		}
	}
	if r.ApprovalID == p.shown {
		p.outcome = r.Reason
		p.signal()
	}
}

func (p *prompter) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// keyRead is one Read of the terminal.
type keyRead struct {
	b   []byte
	err error
}

// run asks the questions until ctx ends, then ends the prompt on the
// screen, if any ("not answered: sbx run ended"), restores the
// terminal's mode and returns. It reads the terminal only while a
// question is on the screen: what is typed at other times stays for
// whoever reads it next.
func (p *prompter) run(ctx context.Context) {
	arm := make(chan struct{})
	keys := make(chan keyRead)
	// The reader reads once for each arm; it ends when ctx ends, which
	// run waits for after ending the read it asked for, if any.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 64)
		for {
			select {
			case <-arm:
			case <-ctx.Done():
				return
			}
			n, err := p.tty.Read(buf)
			keys <- keyRead{bytes.Clone(buf[:n]), err}
		}
	}()
	defer func() { <-readerDone }()
	for {
		q := p.next(ctx)
		if q == nil {
			return
		}
		p.ask(ctx, q, arm, keys)
	}
}

// next waits for the oldest question not on the screen, and returns it
// with the number of others waiting, or nil when ctx ends.
func (p *prompter) next(ctx context.Context) *decisionlog.Record {
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			q := p.queue[0]
			p.mu.Unlock()
			return q
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// ask puts q on the screen and waits for its key, its answer from
// elsewhere, or ctx's end; then q leaves the queue.
func (p *prompter) ask(ctx context.Context, q *decisionlog.Record, arm chan<- struct{}, keys <-chan keyRead) {
	p.mu.Lock()
	if len(p.queue) == 0 || p.queue[0] != q { // answered since next found it
		p.mu.Unlock()
		return
	}
	more := len(p.queue) - 1
	if p.broken != nil || !p.tty.Foreground() {
		// Say it as the live line would, with the command that answers.
		p.queue = p.queue[1:]
		p.lined[q.ApprovalID] = true
		if p.lines != nil {
			fmt.Fprintf(p.lines, "sbx: %s\n", approvalLine(q))
		}
		p.mu.Unlock()
		return
	}
	p.shown, p.outcome = q.ApprovalID, ""
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if len(p.queue) > 0 && p.queue[0] == q {
			p.queue = p.queue[1:]
		}
		p.shown, p.outcome = "", ""
		p.mu.Unlock()
	}()

	midLine := p.gate.hold()
	defer p.gate.release()
	text := promptQuestion(q, more, p.always)
	if midLine {
		text = "\n" + text
	}
	if p.reset {
		// The command's output, or any that reached the terminal, may
		// hide the question or draw it garbled.
		text = p.gate.restore() + text
	}
	end := func(line string) { io.WriteString(p.tty, printable(line)+"\n") }
	if _, err := io.WriteString(p.tty, text); err != nil {
		p.fail(q, err, nil)
		return
	}
	if err := p.tty.KeyMode(true); err != nil {
		p.fail(q, err, end)
		return
	}
	defer p.tty.KeyMode(false)

	line, err := p.await(ctx, q, arm, keys)
	if err != nil {
		p.fail(q, err, end)
		return
	}
	end(line)
}

// await reads keys until one answers q, q is answered elsewhere or ctx
// ends, and returns what ends the prompt's line: the answer, as the
// decision log says it. An error is the terminal's, when it cannot be
// read. No read is in flight when it returns.
func (p *prompter) await(ctx context.Context, q *decisionlog.Record, arm chan<- struct{}, keys <-chan keyRead) (string, error) {
	reading := false
	// stopReading ends the read in flight, if any, and waits for it.
	stopReading := func() {
		if reading {
			p.tty.SetReadDeadline(time.Now())
			<-keys
			reading = false
		}
	}
	defer stopReading()
	const ended = "not answered: sbx run ended"
	for {
		if !reading {
			p.tty.SetReadDeadline(time.Time{})
			select {
			case arm <- struct{}{}:
				reading = true
			case <-ctx.Done():
				return ended, nil
			}
		}
		select {
		case k := <-keys:
			reading = false
			if k.err != nil {
				return "", k.err
			}
			c, ok := parseKey(k.b, p.always)
			if !ok {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := p.answer(actx, q.ApprovalID, c.allow, c.scope)
			cancel()
			// The gateway logs the answer before it replies: the
			// outcome is there, whoever answered first.
			switch outcome := p.takeOutcome(); {
			case outcome != "":
				return outcome, nil
			case err != nil:
				return fmt.Sprintf("not answered: %v; answer with: sbx approve --sandbox %s %s, or sbx deny", err, q.Sandbox, q.ApprovalID), nil
			}
			return c.text + " by tty", nil
		case <-p.wake:
			if outcome := p.takeOutcome(); outcome != "" {
				return outcome, nil
			}
		case <-ctx.Done():
			return ended, nil
		}
	}
}

// takeOutcome returns the shown question's answer, "" when none came.
func (p *prompter) takeOutcome() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcome
}

// fail ends q's prompt when the terminal fails: no more prompts, and q
// is said as the live line says it. end, when not nil, ends the prompt's
// line first.
func (p *prompter) fail(q *decisionlog.Record, err error, end func(string)) {
	if end != nil {
		end(fmt.Sprintf("the terminal cannot be read (%v): questions go to stderr from now on", err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.broken = err
	if p.outcome == "" {
		p.lined[q.ApprovalID] = true
		if p.lines != nil {
			fmt.Fprintf(p.lines, "sbx: %s\n", approvalLine(q))
		}
	}
}

// runPrompt is the prompt of one sbx run, from attach to stop.
type runPrompt struct {
	p           *prompter
	cancel      context.CancelFunc
	done        chan struct{}
	closeClient func() // closes the API client of the answers, after run ended
}

// newRunPrompt opens the prompt of a run: nil when there is none, that
// is with --no-prompt, with -t (the command owns the terminal), with -i
// from a terminal (the command reads it), or when sbx has no controlling
// terminal.
func (o runOptions) newRunPrompt(stdin io.Reader) *runPrompt {
	if o.noPrompt || o.tty || o.stdin && isTTY(stdin) {
		return nil
	}
	tty, err := openPromptTerminal()
	if err != nil {
		return nil
	}
	p := newPrompter(tty, newTTYGate(), nil)
	p.reset = true
	return &runPrompt{p: p}
}

// attach routes spec's streams that reach the terminal through the
// prompt's gate (stderr is sbx's own lines' writer, whose stream it
// replaces), leaves the questions of the live lines to the prompt when
// they reach the terminal, and adds the prompt's sink.
func (rp *runPrompt) attach(spec *run.Spec, stdout, errOut io.Writer, stderr *lockedWriter) {
	p := rp.p
	p.always = spec.Gateway.ApprovalsFile != ""
	if guardTerminal(p.gate, spec, stdout, errOut, stderr) {
		p.lines = stderr
		for _, s := range spec.Gateway.Sinks {
			if ls, ok := s.(*liveSink); ok {
				ls.noQuestions = true
			}
		}
	}
	spec.Gateway.Sinks = append(spec.Gateway.Sinks, promptSink{p})
}

// start starts asking, with answers given through the management API of
// the sandbox id, whose socket and token are in its state directory.
func (rp *runPrompt) start(stateDir, id string) {
	dir := filepath.Join(stateDir, id)
	var (
		once   sync.Once
		client *api.Client
		cerr   error
	)
	rp.p.answer = func(ctx context.Context, qid string, allow bool, scope string) error {
		once.Do(func() {
			tok, err := os.ReadFile(filepath.Join(dir, "token"))
			if err != nil {
				cerr = fmt.Errorf("reading the API token: %w", err)
				return
			}
			client, cerr = api.NewClient("unix:"+filepath.Join(dir, "api.sock"), strings.TrimSpace(string(tok)))
		})
		if cerr != nil {
			return cerr
		}
		answer := "deny"
		if allow {
			answer = "allow"
		}
		_, err := client.AnswerApproval(ctx, qid, api.ApprovalAnswer{Answer: answer, Scope: scope, By: "tty"})
		return err
	}
	rp.closeClient = func() {
		if client != nil {
			client.Close()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	rp.cancel, rp.done = cancel, make(chan struct{})
	go func() {
		defer close(rp.done)
		rp.p.run(ctx)
	}()
}

// stop ends the prompt (the one on the screen says the run ended),
// restores the terminal's mode and closes it.
func (rp *runPrompt) stop() {
	if rp.cancel != nil {
		rp.cancel()
		<-rp.done
		rp.closeClient()
	}
	rp.p.tty.Close()
}

// guardTerminal routes spec's streams that reach a terminal through g
// (stderr is sbx's own lines' writer, whose stream it replaces), so that
// sbx's lines start on a line of their own and the terminal's state is
// restored before each. It reports whether sbx's lines reach the
// terminal (errOut is one). sbx run calls it, or attach, unless the
// command owns the terminal (-t).
func guardTerminal(g *ttyGate, spec *run.Spec, stdout, errOut io.Writer, stderr *lockedWriter) bool {
	outTTY := isTTY(stdout)
	if outTTY {
		spec.Stdout = g.writer(stdout, false)
	}
	if !isTTY(errOut) {
		return false
	}
	g.mu.Lock()
	g.term, g.blind = true, !outTTY
	g.mu.Unlock()
	spec.Stderr = g.writer(errOut, false)
	stderr.w = g.writer(errOut, true)
	return true
}
