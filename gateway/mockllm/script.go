package mockllm

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Dialect is an LLM API the Responder speaks, chosen by the request's path.
type Dialect string

// The dialects, by path.
const (
	// Anthropic is the Anthropic Messages API, POST /v1/messages.
	Anthropic Dialect = "anthropic"
	// ChatCompletions is the OpenAI Chat Completions API,
	// POST /v1/chat/completions.
	ChatCompletions Dialect = "openai-chat"
	// Responses is the OpenAI Responses API, POST /v1/responses.
	Responses Dialect = "openai-responses"
	// Gemini is Google's Gemini API, POST /v1beta/models/MODEL:generateContent
	// and :streamGenerateContent.
	Gemini Dialect = "gemini"
)

// dialects are the known dialects, for messages.
var dialects = []Dialect{Anthropic, ChatCompletions, Responses, Gemini}

// Defaults of a reply's streaming.
const (
	// DefaultChunkSize is how many characters of text (or of a tool call's
	// JSON input) a streamed delta carries when a reply does not say.
	DefaultChunkSize = 16
)

// Script is what a mock model answers: its turns, in order. The zero
// Script answers nothing (every request is unmatched).
type Script struct {
	Turns []Turn
}

// Turn is one scripted answer. It has exactly one of Reply and Fault.
type Turn struct {
	// Match, if not nil, is what a request must look like to take this
	// turn; a turn without it takes any request.
	Match *Match
	// Reply is a model's answer.
	Reply *Reply
	// Fault is an error or a broken connection in place of an answer.
	Fault *Fault
	// Times is how many requests the turn answers before it is used up;
	// 0 means 1, and Unlimited every request it fits.
	Times int
	// Origin says where the turn was written, such as "script.yaml:12", for
	// messages and the journal. The decoders set it; it is never written
	// back to a script.
	Origin string
}

// Unlimited is the Times of a turn that is never used up: it answers
// every request it fits (times: unlimited in a script).
const Unlimited = -1

// Match is what a request must look like to take a turn. Every field that
// is set must fit; the zero Match fits any request.
type Match struct {
	// Model is the request's model, exactly.
	Model string
	// User is a substring of the last user message: the text of the last
	// message from the user that has text (a message carrying only tool
	// results is skipped).
	User string
	// UserRegexp is a regular expression (Go syntax) that must match in the
	// last user message.
	UserRegexp string
	// ToolResult is the name of a tool whose result is in the request's
	// last message: an Anthropic tool_result block, an OpenAI tool message,
	// a Responses function_call_output or custom_tool_call_output. The name is found from the tool
	// call in the conversation, or from the calls this Responder made.
	ToolResult string
	// Normalize matches User and UserRegexp against the last user message
	// normalized by NormalizeUser (dates, times, UUIDs, temporary paths and
	// the like replaced by placeholders), and User normalized too: a turn
	// recorded one day then fits the same request the next. The recorder
	// sets it; without it the message is matched as it is.
	Normalize bool
}

// Reply is a model's answer. It is rendered in the request's dialect, as
// one JSON document or, for a streaming request, as the dialect's event
// stream.
type Reply struct {
	// Text is the answer's text; empty for none.
	Text string
	// ToolCalls are the tools the model calls, after the text.
	ToolCalls []ToolCall
	// StopReason is why the model stopped, written in any dialect's terms:
	// end_turn, stop or completed; tool_use or tool_calls; max_tokens,
	// length or incomplete; refusal or content_filter. Known names are
	// translated to the request's dialect, others are sent as they are.
	// Empty means the end of a turn, or a tool call when there are
	// ToolCalls.
	StopReason string
	// Usage is the token usage reported; nil estimates it as a token per
	// four bytes of the request body and of the answer.
	Usage *Usage
	// ChunkSize is how many characters a streamed delta carries; 0 means
	// DefaultChunkSize.
	ChunkSize int
	// ChunkDelayMS is how long to wait between streamed events, in
	// milliseconds.
	ChunkDelayMS int
	// Raw, if not nil, is an answer recorded from a real API. A request of
	// the recorded dialect that streams when the recording does is answered
	// with it byte for byte; any other request gets the answer rendered from
	// the fields above.
	Raw *Raw
}

// ToolCall is a tool the model calls.
type ToolCall struct {
	// ID is the call's id; empty generates one for each answer
	// ("toolu_..." for Anthropic, "call_..." for OpenAI).
	ID string
	// Name is the tool's name.
	Name string
	// Input is the tool's arguments, a JSON object; nil means {}.
	Input json.RawMessage
	// Custom, if not nil, makes this a call of a custom tool (one defined
	// with a free-form or grammar format, such as Codex's apply_patch) with
	// this text as its input, in place of Input: a custom_tool_call of the
	// OpenAI Responses API, which only that API has (see CheckAPI).
	Custom *string
}

// Usage is the token usage a reply reports.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Fault is what goes wrong in place of an answer: an error status, a
// delay, a connection cut or stalled part-way. A fault with status 200
// (the status when only a cut or a stall is given) sends a stand-in reply
// in the request's dialect, so that the cut falls inside a real stream.
type Fault struct {
	// Status is the answer's HTTP status: 200, or 400 to 599. 0 means 200
	// when DisconnectAfterBytes, DisconnectAfterEvents or Stall is set.
	Status int
	// Headers are added to the answer, such as retry-after.
	Headers map[string]string
	// Body replaces the answer's body; empty means an error in the
	// dialect's shape for an error status and the stand-in reply for 200.
	Body string
	// DelayMS is how long to wait before answering, in milliseconds.
	DelayMS int
	// DisconnectAfterBytes, if not nil, closes the connection after this
	// many bytes of the body (0: right after the headers), with no proper
	// end of the body.
	DisconnectAfterBytes *int
	// DisconnectAfterEvents, if not nil, closes the connection after this
	// many events of a stream (a JSON body counts as one event).
	DisconnectAfterEvents *int
	// Stall stops sending at the cut point (the first event of a stream,
	// the headers otherwise, unless DisconnectAfter* says) and holds the
	// connection open until the client gives up, the server closes it or the
	// Responder is Reset.
	Stall bool
}

// Raw is an answer recorded from a real API, kept byte for byte.
type Raw struct {
	// Dialect is the API it was recorded from.
	Dialect Dialect
	// Events is a recorded event stream, split after each event's blank
	// line: joined, they are the stream exactly as it was received.
	Events []string
	// Body is a recorded JSON answer; a Raw has Events or Body, not both.
	Body string
}

// problem is one thing wrong with a turn: field is the path of the field
// it concerns ("reply.chunk_size", "" for the turn itself), for decoders to
// find its line.
type problem struct {
	field string
	msg   string
}

// checkTurn returns what is wrong with a turn, in the terms of the script
// format.
func checkTurn(t *Turn) []problem {
	var ps []problem
	add := func(field, format string, args ...any) {
		ps = append(ps, problem{field, fmt.Sprintf(format, args...)})
	}
	switch {
	case t.Reply == nil && t.Fault == nil:
		add("", "a turn needs a reply or a fault")
	case t.Reply != nil && t.Fault != nil:
		add("fault", "a turn has a reply or a fault, not both; put them in two turns")
	}
	strs := turnStrings(t)
	for _, field := range slices.Sorted(maps.Keys(strs)) {
		if !utf8.ValidString(strs[field]) {
			add(field, "not valid UTF-8; a script holds text")
		}
	}
	if t.Times < 0 && t.Times != Unlimited {
		add("times", "%d: want 1 or more, or unlimited (leave it out for 1)", t.Times)
	}
	if m := t.Match; m != nil {
		if m.UserRegexp != "" {
			if _, err := regexp.Compile(m.UserRegexp); err != nil {
				add("match.user_regexp", "%v; write a Go regular expression (https://pkg.go.dev/regexp/syntax)", err)
			}
		}
		if m.Normalize && m.User == "" && m.UserRegexp == "" {
			add("match.normalize", "there is nothing to normalize; give user or user_regexp, or leave normalize out")
		}
	}
	if r := t.Reply; r != nil {
		for i, c := range r.ToolCalls {
			field := "reply.tool_calls"
			if c.Name == "" {
				add(field, "tool call %d: name is missing; say which tool the model calls", i+1)
			}
			if len(c.Input) > 0 && !isJSONObject(c.Input) {
				add(field, "tool call %d: input must be a JSON object of argument names to values", i+1)
			}
			if len(c.Input) > 0 && c.Custom != nil {
				add(field, "tool call %d: give input (a function tool's arguments) or custom (a custom tool's input text), not both", i+1)
			}
		}
		if r.Usage != nil && (r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0) {
			add("reply.usage", "token counts must be 0 or more")
		}
		if r.ChunkSize < 0 {
			add("reply.chunk_size", "%d: want 1 or more (leave it out for %d)", r.ChunkSize, DefaultChunkSize)
		}
		if r.ChunkDelayMS < 0 {
			add("reply.chunk_delay_ms", "%d: want 0 or more milliseconds", r.ChunkDelayMS)
		}
		if raw := r.Raw; raw != nil {
			if !knownDialect(raw.Dialect) {
				add("reply.raw.dialect", "%q is not a dialect; want one of %s", raw.Dialect, dialectList())
			}
			switch {
			case len(raw.Events) == 0 && raw.Body == "":
				add("reply.raw", "give the recorded events or body")
			case len(raw.Events) > 0 && raw.Body != "":
				add("reply.raw", "give events (a stream) or body (a JSON answer), not both")
			}
		}
	}
	if f := t.Fault; f != nil {
		cut := f.DisconnectAfterBytes != nil || f.DisconnectAfterEvents != nil || f.Stall
		switch {
		case f.Status == 0 && !cut:
			add("fault", "say what goes wrong: a status (such as 429 or 500), disconnect_after_bytes, disconnect_after_events or stall")
		case f.Status != 0 && f.Status != http.StatusOK && (f.Status < 400 || f.Status > 599):
			add("fault.status", "%d: want 200 (a reply cut short) or an error from 400 to 599", f.Status)
		}
		for name := range f.Headers {
			if !validHeaderName(name) {
				add("fault.headers", "%q is not a header name; use letters, digits and '-'", name)
			}
		}
		for name, v := range f.Headers {
			if strings.ContainsAny(v, "\r\n\x00") {
				add("fault.headers", "header %s: a value may not contain line breaks", name)
			}
		}
		if f.DelayMS < 0 {
			add("fault.delay_ms", "%d: want 0 or more milliseconds", f.DelayMS)
		}
		if f.DisconnectAfterBytes != nil && f.DisconnectAfterEvents != nil {
			add("fault.disconnect_after_events", "give disconnect_after_bytes or disconnect_after_events, not both")
		}
		if n := f.DisconnectAfterBytes; n != nil && *n < 0 {
			add("fault.disconnect_after_bytes", "%d: want 0 (right after the headers) or more", *n)
		}
		if n := f.DisconnectAfterEvents; n != nil && *n < 0 {
			add("fault.disconnect_after_events", "%d: want 0 (right after the headers) or more", *n)
		}
	}
	return ps
}

// turnStrings returns a turn's strings by field, for the UTF-8 check.
func turnStrings(t *Turn) map[string]string {
	fields := map[string]string{}
	if m := t.Match; m != nil {
		fields["match.model"], fields["match.user"], fields["match.user_regexp"], fields["match.tool_result"] = m.Model, m.User, m.UserRegexp, m.ToolResult
	}
	if r := t.Reply; r != nil {
		fields["reply.text"], fields["reply.stop_reason"] = r.Text, r.StopReason
		for _, c := range r.ToolCalls {
			fields["reply.tool_calls"] += c.ID + c.Name + string(c.Input)
			if c.Custom != nil {
				fields["reply.tool_calls"] += *c.Custom
			}
		}
		if raw := r.Raw; raw != nil {
			fields["reply.raw.events"] = strings.Join(raw.Events, "")
			fields["reply.raw.body"] = raw.Body
		}
	}
	if f := t.Fault; f != nil {
		fields["fault.body"] = f.Body
		for name, v := range f.Headers {
			fields["fault.headers"] += name + v
		}
	}
	return fields
}

// CheckTurns checks turns built in Go the way the decoders check a
// script's, returning an ErrorList that names each turn by its Origin or
// its position.
func CheckTurns(turns []Turn) error {
	var errs ErrorList
	for i := range turns {
		for _, p := range checkTurn(&turns[i]) {
			what := fmt.Sprintf("turn %d", i+1)
			if turns[i].Origin != "" {
				what += " (" + turns[i].Origin + ")"
			}
			if p.field != "" {
				what += ": " + p.field
			}
			errs = append(errs, &ParseError{Msg: what + ": " + p.msg, Err: ErrInvalidScript})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func knownDialect(d Dialect) bool {
	for _, k := range dialects {
		if d == k {
			return true
		}
	}
	return false
}

func dialectList() string {
	names := make([]string, len(dialects))
	for i, d := range dialects {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// validHeaderName reports whether s is an HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isJSONObject reports whether data is one JSON object.
func isJSONObject(data []byte) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(data, &v) == nil && v != nil
}
