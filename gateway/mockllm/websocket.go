package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// The Responses API's WebSocket mode (docs/mock-llm.md): a client such as
// the Codex CLI opens GET /v1/responses with Upgrade: websocket, sends
// {"type": "response.create", ...} text messages carrying what a POST
// /v1/responses body carries, and reads back the events the event stream
// would carry, one JSON event per text message, until response.completed
// (or response.incomplete, response.failed, error). It keeps the socket
// for the next request, which may continue a response of the same socket
// by previous_response_id, giving only the input items that are new.

// maxSocketResponses is how many responses of one WebSocket are
// remembered for previous_response_id.
const maxSocketResponses = 64

// isWebSocketUpgrade reports whether hr asks to open a WebSocket: a GET
// with Upgrade: websocket and Connection: upgrade.
func isWebSocketUpgrade(hr *http.Request) bool {
	if hr.Method != http.MethodGet || !strings.EqualFold(strings.TrimSpace(hr.Header.Get("Upgrade")), "websocket") {
		return false
	}
	for _, v := range hr.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// canHijack reports whether w can hand over its connection, which a
// WebSocket needs.
func canHijack(w http.ResponseWriter) bool {
	for {
		if _, ok := w.(http.Hijacker); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// socketResponse is what a response of a WebSocket leaves for the request
// that continues it by previous_response_id: the conversation's last user
// message and the tool calls in it.
type socketResponse struct {
	user  string
	calls map[string]string
}

// socket is a WebSocket the Responder serves.
type socket struct {
	r       *Responder
	c       *websocket.Conn
	hr      *http.Request
	decided func(Journaled)
	// ctx ends when the client goes away (or the request's context does).
	ctx context.Context
	// responses are the latest responses sent, by id.
	responses map[string]socketResponse
}

// socketMessage is a message the client sent, or the error that ended
// the reading.
type socketMessage struct {
	typ  websocket.MessageType
	data []byte
	err  error
}

// serveWebSocket serves the Responses API's WebSocket mode on a GET
// /v1/responses that asks for it: each response.create message is
// answered as a POST /v1/responses with stream true would be, journaled
// and told to decided, one by one, until the client closes the socket, a
// fault cuts it or the request's context ends.
func (r *Responder) serveWebSocket(w http.ResponseWriter, hr *http.Request, decided func(Journaled)) {
	j := Journaled{Time: time.Now(), Method: hr.Method, Path: hr.URL.Path, Dialect: Responses, WebSocket: true}
	switch {
	case !canHijack(w):
		// 426 is what makes the Codex CLI fall back to HTTP at once.
		msg := "sbx mock LLM: the Responses API's WebSocket mode is not served on this connection (a plain http:// request through the proxy, or an HTTP/2 stream); use POST /v1/responses"
		r.unmatched(w, hr, decided, &j, nil, Responses, http.StatusUpgradeRequired, "WebSocket mode not served on this connection", msg)
		return
	case hr.Header.Get("Sec-WebSocket-Key") == "" || hr.Header.Get("Sec-WebSocket-Version") != "13":
		msg := "sbx mock LLM: the WebSocket handshake needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13"
		r.unmatched(w, hr, decided, &j, nil, Responses, http.StatusBadRequest, "bad WebSocket handshake", msg)
		return
	}
	// No Origin check: the mock answers only the sandbox's own clients
	// (it is reached on a mocked host through the gateway, never by a
	// browser of the host's), and agents send no Origin or any they like.
	c, err := websocket.Accept(w, hr, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		r.unmatched(nil, hr, decided, &j, nil, Responses, http.StatusInternalServerError, "accepting the WebSocket: "+err.Error(), "")
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(MaxRequestBody)
	ctx, cancel := context.WithCancel(hr.Context())
	defer cancel()
	s := &socket{r: r, c: c, hr: hr, decided: decided, ctx: ctx, responses: map[string]socketResponse{}}
	// The reader runs beside the answers, so that a client that goes
	// away during a delay or a stall ends it.
	msgs := make(chan socketMessage, 8)
	go func() {
		defer close(msgs)
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				cancel()
				msgs <- socketMessage{err: err}
				return
			}
			msgs <- socketMessage{typ: typ, data: data}
		}
	}()
	for m := range msgs {
		if m.err != nil || !s.handle(m) {
			break
		}
	}
	cancel()
	c.CloseNow()
	for range msgs { // the reader ends with the connection
	}
}

// handle answers a message; false when the socket is to close.
func (s *socket) handle(m socketMessage) bool {
	j := Journaled{Time: time.Now(), Method: s.hr.Method, Path: s.hr.URL.Path, Dialect: Responses, WebSocket: true, Stream: true}
	if m.typ != websocket.MessageText {
		s.refuse(&j, m.data, http.StatusBadRequest, "a binary message", "sbx mock LLM: the Responses WebSocket takes text messages of JSON, such as {\"type\": \"response.create\", ...}")
		return true
	}
	var env struct {
		Type               string `json:"type"`
		PreviousResponseID string `json:"previous_response_id"`
		Generate           *bool  `json:"generate"`
	}
	if err := json.Unmarshal(m.data, &env); err != nil {
		err = bodyError(err)
		s.refuse(&j, m.data, http.StatusBadRequest, err.Error(), "sbx mock LLM: "+err.Error())
		return true
	}
	switch env.Type {
	case "response.create":
	case "response.processed":
		return true // an acknowledgement the Codex CLI sends; nothing to answer
	default:
		msg := fmt.Sprintf("sbx mock LLM: the Responses WebSocket answers messages of type response.create, not %q", env.Type)
		s.refuse(&j, m.data, http.StatusBadRequest, fmt.Sprintf("message type %q", truncateRunes(env.Type, 60)), msg)
		return true
	}
	req, err := parseRequest(Responses, "", m.data)
	if err != nil {
		s.refuse(&j, m.data, http.StatusBadRequest, err.Error(), "sbx mock LLM: "+err.Error())
		return true
	}
	req.stream = true // a WebSocket always streams
	j.Model = req.model
	if prev, ok := s.responses[env.PreviousResponseID]; ok {
		// The request continues a response of this socket and carries
		// only the new input items: what it does not say, the
		// conversation did.
		if req.user == "" {
			req.user = prev.user
		}
		for id, name := range prev.calls {
			if _, ok := req.calls[id]; !ok {
				req.calls[id] = name
			}
		}
	}

	if env.Generate != nil && !*env.Generate {
		// A warm-up (the Codex CLI's, before each turn): the API answers
		// an empty response without generating, so no turn is used.
		j.Outcome, j.Status = "warm-up (generate: false): no turn used", http.StatusOK
		s.r.mu.Lock()
		s.r.record(&j, m.data)
		s.r.mu.Unlock()
		s.tell(j)
		return s.send(req, renderReply(req, &Reply{}), nil, nil, nil)
	}
	c, why, msg := s.r.choose(req, &j, m.data)
	if c == nil {
		s.refuse(&j, m.data, http.StatusBadRequest, why, msg)
		return true
	}
	s.tell(j)
	return s.send(req, c.a, c.fault, c.calls, c.reset)
}

// tell gives decided the journal entry j, its body left out.
func (s *socket) tell(j Journaled) {
	if s.decided != nil {
		j.Body = nil
		s.decided(j)
	}
}

// refuse journals a message no turn answers, tells OnUnmatched and
// decided, and answers it with an error event of status status.
func (s *socket) refuse(j *Journaled, body []byte, status int, why, msg string) {
	s.r.unmatched(nil, s.hr, s.decided, j, body, Responses, status, why, "")
	s.write(errorEvent(status, errorBody(Responses, status, msg), http.Header{"X-Should-Retry": {"false"}}))
}

// write sends a text message; false when the client is gone.
func (s *socket) write(msg []byte) bool {
	return s.c.Write(s.ctx, websocket.MessageText, msg) == nil
}

// send sends an answer as WebSocket messages, shaped by fault f if not
// nil, as send does over HTTP: a delay, then the events one message each,
// cut part-way (the socket closed without a close frame) or stalled. An
// error status is an error event, as the API sends over a WebSocket. A
// response sent is remembered for previous_response_id, with req's user
// message and calls and the reply's. It reports whether the socket stays
// open.
func (s *socket) send(req *request, a *answer, f *Fault, calls []ToolCall, reset <-chan struct{}) bool {
	cutBytes, cutEvents, stall := -1, -1, false
	if f != nil {
		if !wait(s.ctx, reset, time.Duration(f.DelayMS)*time.Millisecond) {
			return false
		}
		stall = f.Stall
		switch {
		case f.DisconnectAfterBytes != nil:
			cutBytes = *f.DisconnectAfterBytes
		case f.DisconnectAfterEvents != nil:
			cutEvents = *f.DisconnectAfterEvents
		case f.Stall:
			cutEvents = 1
		}
	}
	var msgs [][]byte
	switch {
	case a.status != http.StatusOK:
		msgs = [][]byte{errorEvent(a.status, bytes.Join(a.pieces, nil), a.header)}
	case a.stream:
		for _, p := range a.pieces {
			if d := sseData(p); d != nil {
				msgs = append(msgs, d)
			}
		}
	default: // a fault's own body with status 200: sent as it is
		msgs = a.pieces
	}
	cut := cutBytes >= 0 || cutEvents >= 0
	remaining := cutBytes
	id := ""
	for i, m := range msgs {
		if i == cutEvents || remaining >= 0 && len(m) > remaining {
			break // a message is whole or not sent: the cut falls before it
		}
		if remaining >= 0 {
			remaining -= len(m)
		}
		if i > 0 && !wait(s.ctx, reset, a.gap) {
			return false
		}
		if !s.write(m) {
			return false
		}
		if rid := responseID(m); rid != "" {
			id = rid
		}
	}
	if cut {
		if stall {
			wait(s.ctx, reset, -1)
		}
		return false
	}
	if id != "" {
		if len(s.responses) >= maxSocketResponses {
			clear(s.responses)
		}
		names := make(map[string]string, len(req.calls)+len(calls))
		for k, v := range req.calls {
			names[k] = v
		}
		for _, c := range calls {
			names[c.ID] = c.Name
		}
		s.responses[id] = socketResponse{user: req.user, calls: names}
	}
	return true
}

// errorEvent is the error event the Responses API sends over a WebSocket
// in place of an HTTP error: the status, the error document's error and
// the answer's headers (such as retry-after), which the Codex CLI reads
// as an HTTP error's.
func errorEvent(status int, body []byte, header http.Header) []byte {
	var doc struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil || len(doc.Error) == 0 {
		// A fault's own body that is not an error document.
		doc.Error = marshal(map[string]any{"type": "server_error", "message": string(body)})
	}
	headers := map[string]string{}
	for name, vs := range header {
		if len(vs) > 0 && !strings.EqualFold(name, "Content-Type") && !strings.EqualFold(name, "Cache-Control") {
			headers[strings.ToLower(name)] = vs[0]
		}
	}
	return marshal(struct {
		Type    string            `json:"type"`
		Status  int               `json:"status"`
		Error   json.RawMessage   `json:"error"`
		Headers map[string]string `json:"headers,omitempty"`
	}{"error", status, doc.Error, headers})
}

// sseData returns the data of a server-sent event, its data lines joined,
// or nil when it has none.
func sseData(event []byte) []byte {
	var data [][]byte
	for line := range bytes.SplitSeq(bytes.TrimRight(event, "\r\n"), []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(d, []byte(" ")))
		}
	}
	if data == nil {
		return nil
	}
	return bytes.Join(data, []byte("\n"))
}

// responseID returns the id of the response an event carries, or "".
func responseID(event []byte) string {
	var e struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(event, &e) != nil {
		return ""
	}
	return e.Response.ID
}

// truncateRunes returns s cut to n runes.
func truncateRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "..."
	}
	return s
}
