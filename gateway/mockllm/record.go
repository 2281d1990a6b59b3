package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxRecordedAnswer is the largest answer a Recorder keeps; a longer one
// is passed through and not recorded.
const maxRecordedAnswer = 16 << 20

// maxMatchUser is how much of the last user message a recorded turn
// matches on: its start, a substring of the whole.
const maxMatchUser = 200

// recordedHeaders are the headers of an error answer a recorded fault
// keeps: those that tell a client whether and when to retry.
var recordedHeaders = []string{"Retry-After", "Retry-After-Ms", "X-Should-Retry"}

// Recorder is an http.RoundTripper that passes requests to an upstream
// RoundTripper and records each LLM API exchange (POST /v1/messages,
// /v1/chat/completions, /v1/responses) as a Turn that a Responder replays:
// it matches the request's model and the start of its last user message,
// normalized (Match.Normalize: a recording replays when the date, the
// time, ids and temporary paths in it have changed), and the tool whose
// result it carries, and replies with the text, tool
// calls, stop reason and usage of the answer, which it also keeps verbatim
// (Reply.Raw), so that the same request replayed gets the same bytes. An
// error answer is recorded as a fault with its status, body and retry
// headers. Other requests pass through unrecorded.
//
// An exchange is recorded once its answer has been read to the end, or
// closed after the end of its stream (a [DONE], message_stop or
// response.completed event); an answer cut short or abandoned, one longer
// than 16 MiB or compressed, and a failed request are not recorded.
// The request sent upstream asks for an uncompressed answer.
//
// A Recorder is safe for concurrent use and starts no goroutines; turns
// are kept in the order their requests were sent.
type Recorder struct {
	upstream http.RoundTripper

	mu        sync.Mutex
	exchanges []*exchange
	// callNames maps the ids of the tool calls recorded to their names,
	// for Match.ToolResult when a request does not repeat the call.
	callNames map[string]string
}

// exchange is one recorded request, and its turn once complete.
type exchange struct {
	done bool
	turn *Turn
}

// NewRecorder returns a Recorder that sends requests with upstream
// (http.DefaultTransport when nil).
func NewRecorder(upstream http.RoundTripper) *Recorder {
	if upstream == nil {
		upstream = http.DefaultTransport
	}
	return &Recorder{upstream: upstream, callNames: map[string]string{}}
}

// Turns returns the turns recorded so far, in the order their requests
// were sent; exchanges still under way are left out.
func (r *Recorder) Turns() []Turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var turns []Turn
	for _, x := range r.exchanges {
		if x.done && x.turn != nil {
			turns = append(turns, *x.turn)
		}
	}
	return turns
}

// Script returns the turns recorded so far as a Script.
func (r *Recorder) Script() *Script {
	return &Script{Turns: r.Turns()}
}

// RoundTrip sends req upstream and records the exchange, as Recorder says.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	return r.roundTrip(req, r.upstream)
}

// Through returns a RoundTripper that records into r what it sends with
// upstream instead of r's own: for a caller whose transport changes (the
// gateway makes one per policy version).
func (r *Recorder) Through(upstream http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return r.roundTrip(req, upstream) })
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *Recorder) roundTrip(req *http.Request, upstream http.RoundTripper) (*http.Response, error) {
	d, ok := dialectOf(req.URL.Path)
	if !ok || req.Method != http.MethodPost || req.Body == nil || req.Body == http.NoBody {
		return upstream.RoundTrip(req)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxRequestBody+1))
	if err != nil {
		req.Body.Close()
		return nil, fmt.Errorf("recording %s %s: reading the request body: %w", req.Method, req.URL.Path, err)
	}
	out := req.Clone(req.Context())
	if len(body) > MaxRequestBody {
		// Too large to record: send it on as it is.
		out.Body = readCloser{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
		return upstream.RoundTrip(out)
	}
	req.Body.Close()
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.Header.Del("Accept-Encoding")
	parsed, err := parseRequest(d, req.URL.Path, body)
	if err != nil {
		return upstream.RoundTrip(out) // the API will say what is wrong
	}

	x := &exchange{}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, x)
	r.mu.Unlock()
	resp, err := upstream.RoundTrip(out)
	if err != nil {
		r.finish(x, nil)
		return nil, err
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		r.finish(x, nil)
		return resp, nil
	}
	resp.Body = &teeBody{rc: resp.Body, done: func(answer []byte, complete bool) {
		var t *Turn
		if complete || answerComplete(d, resp, answer) {
			t = r.turnOf(parsed, resp, answer)
		}
		r.finish(x, t)
	}}
	return resp, nil
}

// finish marks an exchange done, with its turn if it has one.
func (r *Recorder) finish(x *exchange, t *Turn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x.done, x.turn = true, t
	if t != nil && t.Reply != nil {
		for _, c := range t.Reply.ToolCalls {
			if len(r.callNames) >= maxCallNames {
				clear(r.callNames)
			}
			r.callNames[c.ID] = c.Name
		}
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// teeBody keeps what is read of an answer and calls done once: at the
// end, with complete true; on an error or Close before the end, with what
// was read and complete false (nil if it was too long to keep).
type teeBody struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	over bool
	once sync.Once
	done func(answer []byte, complete bool)
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 && !t.over {
		if t.buf.Len()+n > maxRecordedAnswer {
			t.over = true
			t.buf = bytes.Buffer{}
		} else {
			t.buf.Write(p[:n])
		}
	}
	switch {
	case err == io.EOF:
		t.end(true)
	case err != nil:
		t.end(false)
	}
	return n, err
}

func (t *teeBody) Close() error {
	t.end(false)
	return t.rc.Close()
}

func (t *teeBody) end(complete bool) {
	t.once.Do(func() {
		if t.over {
			t.done(nil, false)
			return
		}
		t.done(t.buf.Bytes(), complete)
	})
}

// isStream reports whether an answer is an event stream.
func isStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// answerComplete reports whether an answer closed before its end was
// whole all the same: a stream that reached its last event, or JSON.
func answerComplete(d Dialect, resp *http.Response, answer []byte) bool {
	if answer == nil {
		return false
	}
	if !isStream(resp) {
		return json.Valid(answer)
	}
	events := splitEvents(answer)
	if len(events) == 0 {
		return false
	}
	name, data := parseEvent(events[len(events)-1])
	switch d {
	case Anthropic:
		return name == "message_stop"
	case ChatCompletions:
		return strings.TrimSpace(data) == "[DONE]"
	case Gemini:
		return geminiStreamDone(data)
	}
	return name == "response.completed" || name == "response.incomplete" || name == "response.failed"
}

// turnOf makes the turn that replays an answer to req, or nil when it
// cannot: an answer that is neither 200 nor an error.
func (r *Recorder) turnOf(req *request, resp *http.Response, answer []byte) *Turn {
	t := &Turn{}
	if m := r.matchOf(req); m != (Match{}) {
		t.Match = &m
	}
	switch {
	case resp.StatusCode >= 400:
		f := &Fault{Status: resp.StatusCode, Body: string(answer)}
		for _, name := range recordedHeaders {
			if v := resp.Header.Get(name); v != "" {
				if f.Headers == nil {
					f.Headers = map[string]string{}
				}
				f.Headers[strings.ToLower(name)] = v
			}
		}
		t.Fault = f
	case resp.StatusCode == http.StatusOK:
		var reply *Reply
		if isStream(resp) {
			events := splitEvents(answer)
			reply = replyOfStream(req.dialect, events)
			reply.Raw = &Raw{Dialect: req.dialect, Events: events}
		} else {
			reply = replyOfJSON(req.dialect, answer)
			reply.Raw = &Raw{Dialect: req.dialect, Body: string(answer)}
		}
		if !utf8.Valid(answer) {
			reply.Raw = nil // a script holds text; the reply's fields replay it
		}
		t.Reply = reply
	default:
		return nil
	}
	if CheckTurns([]Turn{*t}) != nil {
		return nil // an answer too odd to replay, such as an empty stream
	}
	return t
}

// matchOf is what a recorded turn matches: the request's model, the start
// of its last user message normalized (Match.Normalize: what changes from
// one run to the next, such as the date, does not count) and the tool
// whose result it carries.
func (r *Recorder) matchOf(req *request) Match {
	m := Match{Model: req.model}
	m.User = userStart(req.normalizedUser())
	m.Normalize = m.User != ""
	if len(req.toolResults) > 0 {
		id := req.toolResults[0]
		name, ok := req.calls[id]
		if !ok {
			r.mu.Lock()
			name = r.callNames[id]
			r.mu.Unlock()
		}
		m.ToolResult = name
	}
	return m
}

// userStart returns the start of a normalized user message that a
// recorded turn matches: its first maxMatchUser characters, cut after a
// word, and cut further while normalizing it again would change it (a
// cut "Oct 12345" ends in "Oct 12", which reads as a date), so that the
// Responder, which normalizes Match.User, matches what was recorded.
func userStart(user string) string {
	u := []rune(user)
	if len(u) <= maxMatchUser {
		return user
	}
	cut := string(u[:maxMatchUser])
	if i := strings.LastIndexByte(cut, ' '); i > len(cut)/2 {
		cut = cut[:i]
	}
	for cut != "" && NormalizeUser(cut) != cut {
		i := strings.LastIndexByte(cut, ' ')
		if i < 0 {
			return ""
		}
		cut = cut[:i]
	}
	return cut
}
