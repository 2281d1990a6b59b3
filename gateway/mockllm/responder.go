package mockllm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds of a Responder.
const (
	// MaxRequestBody is the largest request body answered; a larger one
	// gets 413, as the APIs refuse it.
	MaxRequestBody = 32 << 20
	// MaxJournalEntries is how many requests the journal keeps, the
	// latest.
	MaxJournalEntries = 1000
	// MaxJournalBody is how much of a request's body the journal keeps.
	MaxJournalBody = 1 << 20
	// maxJournalBytes bounds the bodies the journal holds in all; the
	// oldest entries go first.
	maxJournalBytes = 64 << 20
	// MaxQueuedTurns is how many turns Expect queues in all, until Reset.
	MaxQueuedTurns = 10000
	// maxCallNames is how many tool call ids a Responder remembers the
	// names of, for Match.ToolResult.
	maxCallNames = 10000
)

// Journaled is a request a Responder received, with what it answered: an
// entry of the journal that Requests returns.
type Journaled struct {
	// Seq numbers the requests since New or Reset, from 1; a gap before
	// the first entry says older entries were dropped.
	Seq  int       `json:"seq"`
	Time time.Time `json:"time"`
	// Method and Path are the request's; the query is left out.
	Method string `json:"method"`
	Path   string `json:"path"`
	// Dialect is the API the path names; empty for an unknown path.
	Dialect Dialect `json:"dialect,omitempty"`
	// WebSocket says the request is a message of the Responses API's
	// WebSocket mode (GET /v1/responses upgraded; see ServeHTTP): a
	// response.create, answered as a POST /v1/responses that streams.
	WebSocket bool `json:"websocket,omitempty"`
	// Model and Stream are the request's model and stream fields.
	Model  string `json:"model,omitempty"`
	Stream bool   `json:"stream,omitempty"`
	// Body is the request's body: its JSON as sent, or, when it is not
	// JSON or longer than MaxJournalBody, a JSON string of its first
	// MaxJournalBody bytes. The journal is the only place bodies are kept.
	Body json.RawMessage `json:"body,omitempty"`
	// BodyTruncated says the body was longer than MaxJournalBody.
	BodyTruncated bool `json:"body_truncated,omitempty"`
	// Turn is the 1-based position of the turn that answered (the
	// script's turns, then those queued by Expect); 0 when none did.
	Turn int `json:"turn,omitempty"`
	// Unmatched says no turn answered: the request got an error.
	Unmatched bool `json:"unmatched,omitempty"`
	// Default says the request was answered by the Responder's fixed rule,
	// not from the script: the models list, a token count, or a request
	// that is not for a model (see ServeHTTP). Its Outcome starts with
	// DefaultOutcome.
	Default bool `json:"default,omitempty"`
	// Status is the HTTP status answered; 0 when the client went away
	// while sending the request.
	Status int `json:"status"`
	// Outcome says in words what happened, such as "turn 2
	// (script.yaml:7): reply", "turn 3: fault 429" or "unmatched: no turn
	// fits ...".
	Outcome string `json:"outcome"`
}

// Responder answers LLM API requests from a script: it is an
// http.Handler for the Anthropic Messages, OpenAI Chat Completions and
// OpenAI Responses APIs (see Dialect). Each request takes the first turn
// not yet used up whose Match fits; a request no turn answers gets an API
// error (see ServeHTTP). Every request is kept in a journal.
//
// A Responder is safe for concurrent use. Each request is answered in the
// goroutine that calls ServeHTTP, which returns when the answer is sent,
// the client goes away, or the Responder is Reset during a delay or a
// stall; a WebSocket is served until it closes, with one more goroutine
// that reads its messages.
type Responder struct {
	// OnUnmatched, if not nil, is called with the journal entry of each
	// request that no turn answers, its Body left out (bodies stay in the
	// journal), before the error is sent, in the request's goroutine. Set
	// it before the Responder serves.
	OnUnmatched func(Journaled)
	// Journal, if not nil, keeps the journal elsewhere too, such as in a
	// file (JournalFile.Sink): it is told of each request as it is
	// journaled, before its answer is sent, and of each Reset. Set it
	// before the Responder serves.
	Journal JournalSink
	// QueueHint, if not empty, ends the error answered to a request no
	// turn fits: how the caller's user queues a turn, in the caller's
	// words (sbx names its command). Set it before the Responder serves.
	QueueHint string

	mu sync.Mutex
	// script are the turns New was given, which Reset restores.
	script []Turn
	// turns are the script's turns then those queued by Expect.
	turns []*entry
	// journal holds the latest requests, oldest first.
	journal      []Journaled
	journalBytes int
	seq          int
	// callNames maps the ids of the tool calls answered to their names.
	callNames map[string]string
	// reset is closed by Reset, to release delayed and stalled requests.
	reset chan struct{}
}

// entry is a turn and how often it has answered.
type entry struct {
	turn Turn
	// pos is the turn's 1-based position.
	pos int
	re  *regexp.Regexp
	// user is the turn's Match.User, normalized when it asks for
	// Match.Normalize.
	user string
	// invalid says why the turn cannot be used: New does not refuse a
	// script built in Go, but its bad turns never answer.
	invalid string
	used    int
}

// New returns a Responder that answers with script's turns (none when
// script is nil). The script is copied. A turn built in Go that does not
// pass CheckTurns never answers; why is in the outcome of the requests it
// would have fitted.
func New(script *Script) *Responder {
	r := &Responder{reset: make(chan struct{})}
	if script != nil {
		r.script = append([]Turn(nil), script.Turns...)
	}
	r.restart()
	return r
}

// restart sets the turns to the script's, unused, and clears the rest.
func (r *Responder) restart() {
	r.turns = nil
	r.appendTurns(r.script)
	r.journal, r.journalBytes, r.seq = nil, 0, 0
	r.callNames = map[string]string{}
}

func (r *Responder) appendTurns(turns []Turn) {
	for _, t := range turns {
		e := &entry{turn: t, pos: len(r.turns) + 1}
		if ps := checkTurn(&e.turn); len(ps) > 0 {
			e.invalid = ps[0].msg
			if ps[0].field != "" {
				e.invalid = ps[0].field + ": " + e.invalid
			}
		} else if m := t.Match; m != nil {
			if m.UserRegexp != "" {
				e.re = regexp.MustCompile(m.UserRegexp) // checkTurn compiled it
			}
			e.user = m.User
			if m.Normalize {
				e.user = NormalizeUser(m.User)
			}
		}
		r.turns = append(r.turns, e)
	}
}

// Expect queues turns after those already there (FIFO). It checks them as
// CheckTurns does and queues none if any is wrong; it refuses to queue
// more than MaxQueuedTurns in all until Reset.
func (r *Responder) Expect(turns []Turn) error {
	if err := CheckTurns(turns); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if queued := len(r.turns) - len(r.script); queued+len(turns) > MaxQueuedTurns {
		return fmt.Errorf("queueing %d turns: %d are queued already and at most %d may be; reset the mock first", len(turns), queued, MaxQueuedTurns)
	}
	r.appendTurns(turns)
	return nil
}

// Requests returns the journal, oldest first. The entries' Body must not
// be modified.
func (r *Responder) Requests() []Journaled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Journaled(nil), r.journal...)
}

// Reset restarts the script from its first turn, drops the turns Expect
// queued and clears the journal. Requests waiting out a delay or a stall
// are released: their connections are cut.
func (r *Responder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.reset)
	r.reset = make(chan struct{})
	r.restart()
	if r.Journal != nil {
		r.Journal.Reset()
	}
}

// ServeHTTP answers a request by its path: POST /v1/messages (Anthropic),
// /v1/chat/completions and /v1/responses (OpenAI) from the script. Other
// requests get a fixed answer (Journaled.Default), or an error when they
// are for a model:
//   - GET /v1/models: the models the turns match (Match.Model), in
//     Anthropic's list shape when the request has an anthropic-version
//     header, OpenAI's otherwise;
//   - POST /v1/messages/count_tokens: input_tokens estimated as a reply's
//     usage is, a token per four bytes of the body;
//   - a request for a model at an endpoint the mock does not know: a
//     method other than POST at one of the three paths, a path under one
//     of them, a POST to a path ending in /messages, /completions or
//     /responses, or a POST whose body is a JSON object with a "model"
//     string. It gets 404, as the APIs answer an unknown URL (the error is
//     in Anthropic's shape when the request has an anthropic-version
//     header, OpenAI's otherwise), and is unmatched;
//   - any other request is not for a model: a GET or a HEAD gets 404 in
//     the same error shape, as a path the API does not have; any other
//     method (telemetry, event batches) gets 200 with the body {}.
//
// The answer is an error in the dialect's shape when:
//   - the body is larger than MaxRequestBody: 413;
//   - the body is not JSON of the API's shape: 400;
//   - no turn fits, or the script is used up: 400 invalid_request_error,
//     with x-should-retry: false. A 4xx because the request is not what the
//     test expects, which SDKs do not retry (a 5xx would be retried into
//     the same wall and tell the agent the service is flaky); not 404,
//     which Anthropic uses for an unknown model and agents may act on;
//   - the turn that fits has a custom tool call (ToolCall.Custom) and the
//     API is not Responses: 400 as for no turn, naming the turn and the
//     fix; the turn is not used up.
//
// A GET /v1/responses that asks to upgrade to a WebSocket opens the
// Responses API's WebSocket mode, when w can be hijacked (426 otherwise):
// each response.create message is answered as a POST /v1/responses with
// stream true, its events one text message each, and journaled as a
// request of its own (Journaled.WebSocket). A request that continues a
// response of the same socket by previous_response_id, carrying only new
// input items, is matched with the conversation's last user message and
// calls. A warm-up (generate false) gets an empty response and uses no
// turn. An error status is an error event; a cut closes the socket.
//
// To cut a connection (Fault.DisconnectAfterBytes and the like), ServeHTTP
// panics with http.ErrAbortHandler, as net/http's servers expect of a
// handler that aborts a response; a caller serving it by other means must
// recover that value and close the connection.
func (r *Responder) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	r.Serve(w, hr, nil)
}

// Serve answers a request as ServeHTTP does, and calls decided, if not
// nil, with the request's journal entry (its Body left out) once the
// answer is chosen, before it is sent: a caller such as the gateway
// learns the outcome and the status of the request it passed on, even
// when sending the answer then panics with http.ErrAbortHandler. decided
// is called exactly once, in the request's goroutine; for a WebSocket,
// once for each message answered (none when the socket closes without
// one), in the goroutine that called Serve.
func (r *Responder) Serve(w http.ResponseWriter, hr *http.Request, decided func(Journaled)) {
	d, known := dialectOf(hr.URL.Path)
	if d == Responses && isWebSocketUpgrade(hr) {
		r.serveWebSocket(w, hr, decided)
		return
	}
	j := Journaled{Time: time.Now(), Method: hr.Method, Path: hr.URL.Path}
	j.Dialect = d
	body, err := io.ReadAll(io.LimitReader(hr.Body, MaxRequestBody+1))
	if err != nil {
		// The client went away while sending; there is no one to answer.
		r.unmatched(nil, hr, decided, &j, body, d, 0, "reading the request: "+err.Error(), "")
		return
	}
	if !known || hr.Method != http.MethodPost {
		if r.serveDefault(w, hr, decided, &j, body) {
			return
		}
		d = errorDialect(hr)
		msg := fmt.Sprintf("sbx mock LLM: no API at %s %s; the mock answers POST /v1/messages, /v1/chat/completions, /v1/responses and /v1beta/models/MODEL:generateContent", hr.Method, hr.URL.Path)
		r.unmatched(w, hr, decided, &j, body, d, http.StatusNotFound, "unknown endpoint", msg)
		return
	}
	if len(body) > MaxRequestBody {
		msg := fmt.Sprintf("sbx mock LLM: the request body is larger than %d MiB", MaxRequestBody>>20)
		r.unmatched(w, hr, decided, &j, body, d, http.StatusRequestEntityTooLarge, "request too large", msg)
		return
	}
	req, err := parseRequest(d, hr.URL.Path, body)
	if err != nil {
		r.unmatched(w, hr, decided, &j, body, d, http.StatusBadRequest, err.Error(), "sbx mock LLM: "+err.Error())
		return
	}
	j.Model, j.Stream = req.model, req.stream

	c, why, msg := r.choose(req, &j, body)
	if c == nil {
		r.unmatched(w, hr, decided, &j, body, d, http.StatusBadRequest, why, msg)
		return
	}
	if decided != nil {
		entry := j
		entry.Body = nil
		decided(entry)
	}

	send(w, hr, c.a, c.fault, c.reset)
}

// choice is the answer chosen for a request.
type choice struct {
	a     *answer
	fault *Fault
	// calls are the tool calls of a reply, with their ids.
	calls []ToolCall
	// reset is the Responder's reset channel when the answer was chosen.
	reset <-chan struct{}
}

// choose picks the turn that answers req and renders its answer,
// journaling the request as j with its body; nil, why and the client's
// error message when no turn answers, the request not journaled.
func (r *Responder) choose(req *request, j *Journaled, body []byte) (*choice, string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, why := r.pick(req)
	if e == nil {
		msg := "sbx mock LLM: " + why + "; add a turn to the script or queue one"
		if r.QueueHint != "" {
			msg += " (" + r.QueueHint + ")"
		}
		return nil, why, msg
	}
	t := e.turn
	if ps := apiProblems(req.dialect, t.Reply); len(ps) > 0 && !t.Reply.Raw.fits(req) {
		// The turn cannot answer this API: an error that says why, and
		// the turn stays for a request it can answer.
		e.used--
		why := e.name() + ": " + ps[0].field + ": " + ps[0].msg
		return nil, why, "sbx mock LLM: " + why
	}
	c := &choice{fault: t.Fault, reset: r.reset}
	switch {
	case t.Reply != nil:
		reply := *t.Reply
		reply.ToolCalls = withIDs(req.dialect, reply.ToolCalls)
		for _, call := range reply.ToolCalls {
			if req.dialect == Gemini {
				r.rememberCall(geminiCallKey(call.ID, call.Name), call.Name)
				continue
			}
			r.rememberCall(call.ID, call.Name)
		}
		c.a, c.calls = renderReply(req, &reply), reply.ToolCalls
		j.Outcome = e.name() + ": reply"
		if reply.Raw.fits(req) {
			j.Outcome = e.name() + ": recorded reply"
		}
	default:
		c.a = faultAnswer(req, t.Fault)
		j.Outcome = e.name() + ": " + describeFault(t.Fault, c.a.status)
	}
	j.Turn, j.Status = e.pos, c.a.status
	r.record(j, body)
	return c, "", ""
}

// unmatched journals a request no turn answers, tells OnUnmatched and
// decided, and answers status with msg in dialect d's error shape
// (nothing when w is nil).
func (r *Responder) unmatched(w http.ResponseWriter, hr *http.Request, decided func(Journaled), j *Journaled, body []byte, d Dialect, status int, why, msg string) {
	j.Unmatched, j.Status, j.Outcome = true, status, "unmatched: "+why
	r.mu.Lock()
	r.record(j, body)
	r.mu.Unlock()
	entry := *j
	entry.Body = nil
	if r.OnUnmatched != nil {
		r.OnUnmatched(entry)
	}
	if decided != nil {
		decided(entry)
	}
	if w == nil {
		return
	}
	a := errorAnswer(d, status, msg)
	a.header.Set("x-should-retry", "false")
	send(w, hr, a, nil, nil)
}

// record adds a request to the journal, dropping the oldest entries past
// the bounds. r.mu is held.
func (r *Responder) record(j *Journaled, body []byte) {
	r.seq++
	j.Seq = r.seq
	if len(body) > 0 {
		j.Body, j.BodyTruncated = journalBody(body)
	}
	r.journal = append(r.journal, *j)
	r.journalBytes += len(j.Body)
	r.journal, r.journalBytes = trimJournal(r.journal, r.journalBytes)
	if r.Journal != nil {
		r.Journal.Journaled(*j)
	}
}

// trimJournal drops the oldest entries of journal, whose bodies hold
// bytes in all, past the bounds (but the latest entry), and returns the
// rest and their bodies' size.
func trimJournal(journal []Journaled, bytes int) ([]Journaled, int) {
	drop := 0
	for len(journal)-drop > MaxJournalEntries || bytes > maxJournalBytes && drop < len(journal)-1 {
		bytes -= len(journal[drop].Body)
		drop++
	}
	// The dropped entries' bodies are let go; the array is copied only
	// when append outgrows it, not once a request.
	clear(journal[:drop])
	return journal[drop:], bytes
}

// journalBody returns what the journal keeps of a body.
func journalBody(body []byte) (json.RawMessage, bool) {
	if len(body) <= MaxJournalBody && json.Valid(body) {
		return json.RawMessage(append([]byte(nil), body...)), false
	}
	truncated := len(body) > MaxJournalBody
	if truncated {
		body = body[:MaxJournalBody]
	}
	return json.RawMessage(marshal(string(body))), truncated
}

// rememberCall keeps a tool call's name by its id, for Match.ToolResult
// when the conversation does not repeat the call (Responses'
// previous_response_id). r.mu is held.
func (r *Responder) rememberCall(id, name string) {
	if len(r.callNames) >= maxCallNames {
		clear(r.callNames)
	}
	r.callNames[id] = name
}

// pick returns the first turn not used up that fits req and counts it
// used, or nil and why none does. r.mu is held.
func (r *Responder) pick(req *request) (*entry, string) {
	names := make([]string, len(req.toolResults))
	for i, id := range req.toolResults {
		name, ok := req.calls[id]
		if !ok {
			name = r.callNames[id]
		}
		names[i] = name
	}
	var first *entry
	var firstWhy string
	available := 0
	for _, e := range r.turns {
		if e.turn.Times != Unlimited && e.used >= max(1, e.turn.Times) {
			continue
		}
		available++
		why := e.misfit(req, names)
		if why == "" {
			e.used++
			return e, ""
		}
		if first == nil {
			first, firstWhy = e, why
		}
	}
	if available == 0 {
		return nil, fmt.Sprintf("the script is used up (%d turns, all answered)", len(r.turns))
	}
	desc := fmt.Sprintf("model %q, last user message %s", req.model, quoteShort(req.user))
	if len(names) > 0 {
		desc += fmt.Sprintf(", results of tools %s", quoteList(names))
	}
	return nil, fmt.Sprintf("no turn fits this request (%s); the first turn left, %s, %s", desc, first.name(), firstWhy)
}

// misfit returns why req does not fit the turn, or "" when it does.
func (e *entry) misfit(req *request, toolNames []string) string {
	if e.invalid != "" {
		return "is invalid: " + e.invalid
	}
	m := e.turn.Match
	if m == nil {
		return ""
	}
	user, normalized := req.user, ""
	if m.Normalize {
		user, normalized = req.normalizedUser(), "normalized, "
	}
	switch {
	case m.Model != "" && m.Model != req.model:
		return fmt.Sprintf("wants model %q", m.Model)
	case e.user != "" && !strings.Contains(user, e.user):
		return fmt.Sprintf("wants a last user message %scontaining %q", normalized, e.user)
	case e.re != nil && !e.re.MatchString(user):
		return fmt.Sprintf("wants a last user message %smatching %q", normalized, m.UserRegexp)
	case m.ToolResult != "" && !slices.Contains(toolNames, m.ToolResult):
		return fmt.Sprintf("wants a result of tool %q in the last message", m.ToolResult)
	}
	return ""
}

// name names the turn for messages: "turn 2 (script.yaml:7)".
func (e *entry) name() string {
	if e.turn.Origin != "" {
		return fmt.Sprintf("turn %d (%s)", e.pos, e.turn.Origin)
	}
	return fmt.Sprintf("turn %d", e.pos)
}

// quoteShort quotes the start of a message for the journal.
func quoteShort(s string) string {
	const max = 60
	if s == "" {
		return "(none)"
	}
	if r := []rune(s); len(r) > max {
		return strconv.Quote(string(r[:max])) + "..."
	}
	return strconv.Quote(s)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			n = "(unknown)"
		}
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
