package mockllm_test

// The Responses API's WebSocket mode, as the Codex CLI speaks it: a
// warm-up response.create with generate false, then requests that
// continue the previous response by previous_response_id with only the
// new input items, all on one socket.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// wsMock serves a Responder for script, telling decided of each request.
func wsMock(t *testing.T, script string, decided func(mockllm.Journaled)) (*mockllm.Responder, *httptest.Server) {
	t.Helper()
	s, err := mockllm.ParseScript(t.Name()+".yaml", []byte(script))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	r := mockllm.New(s)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		r.Serve(w, hr, decided)
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

// dialResponses opens the Responses WebSocket of srv.
func dialResponses(t *testing.T, srv *httptest.Server) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/responses", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer sk-test"}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}},
	})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dialing the Responses WebSocket: got %v (status %d), want it open", err, status)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// wsEvent is what the tests read of an event.
type wsEvent struct {
	Type     string `json:"type"`
	Delta    string `json:"delta"`
	Status   int    `json:"status"`
	Response struct {
		ID     string `json:"id"`
		Output []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
		} `json:"output"`
	} `json:"response"`
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
	Headers map[string]string `json:"headers"`
}

// exchange sends msg and reads events until one ends the response
// (response.completed, response.incomplete, error); it returns them all.
func exchange(t *testing.T, c *websocket.Conn, msg string) []wsEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("sending %s: %v", msg, err)
	}
	var events []wsEvent
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading the answer to %s: got %v after %d events, want events to response.completed", msg, err, len(events))
		}
		var e wsEvent
		if typ != websocket.MessageText || json.Unmarshal(data, &e) != nil || e.Type == "" {
			t.Fatalf("got message %q (type %v), want a JSON event as text", data, typ)
		}
		events = append(events, e)
		switch e.Type {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return events
		}
	}
}

// replyOf returns the text the events carry and the final event.
func replyOf(events []wsEvent) (string, wsEvent) {
	var text strings.Builder
	for _, e := range events {
		if e.Type == "response.output_text.delta" {
			text.WriteString(e.Delta)
		}
	}
	return text.String(), events[len(events)-1]
}

const codexScript = `turns:
  - match: {model: gpt-5-codex, user: "list the files"}
    reply:
      text: "Let me look."
      tool_calls:
        - {name: shell, input: {command: ["ls"]}}
  - match: {user: "list the files", tool_result: shell}
    reply: {text: "There are three files."}
`

// codexCreate is a response.create as the Codex CLI sends it, with extra
// fields after the input.
func codexCreate(input, extra string) string {
	return `{"type":"response.create","model":"gpt-5-codex","instructions":"You are Codex.","input":` + input +
		`,"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],"tool_choice":"auto","parallel_tool_calls":false,"store":false,"stream":true,"include":[]` + extra + `}`
}

// TestWebSocketCodexTurns: the Codex CLI's WebSocket exchange gets the
// script's turns: a warm-up (generate false) answered without using a
// turn, then a request continuing it with no new input, which matches by
// the warm-up's user message, then the tool result alone, which matches
// by the call the mock made and the conversation's user message. Each
// response.create is one journal entry and one decision.
func TestWebSocketCodexTurns(t *testing.T) {
	var mu sync.Mutex
	var decided []mockllm.Journaled
	r, srv := wsMock(t, codexScript, func(j mockllm.Journaled) {
		mu.Lock()
		defer mu.Unlock()
		decided = append(decided, j)
	})
	c := dialResponses(t, srv)
	user := `[{"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]}]`

	warm := exchange(t, c, codexCreate(user, `,"generate":false`))
	if text, last := replyOf(warm); text != "" || last.Type != "response.completed" || len(last.Response.Output) != 0 || last.Response.ID == "" {
		t.Fatalf("warm-up: got text %q and final event %+v, want an empty completed response with an id", text, last)
	}
	if warm[0].Type != "response.created" {
		t.Errorf("warm-up: got first event %s, want response.created", warm[0].Type)
	}

	first := exchange(t, c, codexCreate(`[]`, `,"previous_response_id":"`+replyOfID(warm)+`"`))
	text, last := replyOf(first)
	if text != "Let me look." || last.Type != "response.completed" || len(last.Response.Output) != 2 || last.Response.Output[1].Name != "shell" {
		t.Fatalf("first turn: got text %q and final event %+v, want the script's text and a shell call", text, last)
	}
	call := last.Response.Output[1].CallID

	second := exchange(t, c, codexCreate(`[{"type":"function_call_output","call_id":"`+call+`","output":"a b c"}]`, `,"previous_response_id":"`+last.Response.ID+`"`))
	if text, last := replyOf(second); text != "There are three files." || last.Type != "response.completed" {
		t.Fatalf("tool result: got text %q and final event %+v, want the script's second turn", text, last)
	}

	type entry struct {
		Method, Path, Outcome string
		Turn, Status          int
		WebSocket, Stream     bool
	}
	want := []entry{
		{"GET", "/v1/responses", "warm-up (generate: false): no turn used", 0, 200, true, true},
		{"GET", "/v1/responses", "turn 1 (TestWebSocketCodexTurns.yaml:2): reply", 1, 200, true, true},
		{"GET", "/v1/responses", "turn 2 (TestWebSocketCodexTurns.yaml:7): reply", 2, 200, true, true},
	}
	var got []entry
	journal := r.Requests()
	for _, j := range journal {
		got = append(got, entry{j.Method, j.Path, j.Outcome, j.Turn, j.Status, j.WebSocket, j.Stream})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
	if len(journal) == 3 && !strings.Contains(string(journal[2].Body), `"function_call_output"`) {
		t.Errorf("got journaled body %s, want the message as sent", journal[2].Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(decided) != 3 || decided[1].Outcome != want[1].Outcome || decided[1].Body != nil {
		t.Errorf("got decided %+v, want one call per response.create, without bodies", decided)
	}
}

// replyOfID is the id of the response events end with.
func replyOfID(events []wsEvent) string {
	_, last := replyOf(events)
	return last.Response.ID
}

// TestWebSocketErrorsAndFaults: over a WebSocket, what an HTTP request
// would get as an error status comes as an error event carrying the
// status and the headers, and the socket stays open; a disconnect fault
// closes the socket after its events.
func TestWebSocketErrorsAndFaults(t *testing.T) {
	r, srv := wsMock(t, `turns:
  - match: {user: limit}
    fault: {status: 429, headers: {retry-after: "1"}}
  - match: {user: cut}
    fault: {disconnect_after_events: 2}
`, nil)
	var unmatched []string
	r.OnUnmatched = func(j mockllm.Journaled) { unmatched = append(unmatched, j.Outcome) }
	c := dialResponses(t, srv)
	create := func(user string) string {
		return `{"type":"response.create","model":"gpt-5","input":"` + user + `"}`
	}
	for _, tc := range []struct {
		msg, header, value string
		status             int
	}{
		{create("nothing fits"), "x-should-retry", "false", 400},
		{`{"type":"session.update"}`, "x-should-retry", "false", 400},
		{`not json`, "x-should-retry", "false", 400},
		{create("limit"), "retry-after", "1", 429},
	} {
		events := exchange(t, c, tc.msg)
		e := events[len(events)-1]
		if len(events) != 1 || e.Type != "error" || e.Status != tc.status || e.Headers[tc.header] != tc.value || !strings.Contains(e.Error.Message, "sbx mock LLM") {
			t.Errorf("%s: got %+v, want one error event of status %d with %s: %s", tc.msg, events, tc.status, tc.header, tc.value)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(create("cut"))); err != nil {
		t.Fatal(err)
	}
	n := 0
	var err error
	for {
		if _, _, err = c.Read(ctx); err != nil {
			break
		}
		n++
	}
	if n != 2 || errors.Is(err, context.DeadlineExceeded) || websocket.CloseStatus(err) != -1 {
		t.Errorf("cut: got %d events and %v, want 2 and the connection closed without a close frame", n, err)
	}

	var outcomes []string
	for _, j := range r.Requests() {
		outcomes = append(outcomes, j.Outcome)
	}
	wantOutcomes := []string{
		"unmatched: no turn fits this request (model \"gpt-5\", last user message \"nothing fits\"); the first turn left, turn 1 (TestWebSocketErrorsAndFaults.yaml:2), wants a last user message containing \"limit\"",
		`unmatched: message type "session.update"`,
		"unmatched: the request body is not valid JSON: invalid character 'o' in literal null (expecting 'u')",
		"turn 1 (TestWebSocketErrorsAndFaults.yaml:2): fault 429",
		"turn 2 (TestWebSocketErrorsAndFaults.yaml:4): fault 200: disconnect after 2 events",
	}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Errorf("journal outcomes (-want +got):\n%s", diff)
	}
	if len(unmatched) != 3 {
		t.Errorf("got OnUnmatched for %q, want the three unmatched messages", unmatched)
	}
}

// TestWebSocketNotUpgraded: an upgrade of another path is the 404 it was;
// a writer that cannot hand over its connection gets 426, which makes the
// Codex CLI use HTTP at once.
func TestWebSocketNotUpgraded(t *testing.T) {
	r := mockllm.New(nil)
	for _, tc := range []struct {
		path   string
		w      http.ResponseWriter
		status int
	}{
		{"/v1/chat/completions", httptest.NewRecorder(), http.StatusNotFound},
		{"/v1/responses", httptest.NewRecorder(), http.StatusUpgradeRequired},
	} {
		hr := httptest.NewRequest(http.MethodGet, tc.path, nil)
		hr.Header = http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Version": {"13"}}
		r.ServeHTTP(tc.w, hr)
		if got := tc.w.(*httptest.ResponseRecorder).Code; got != tc.status {
			t.Errorf("GET %s upgrade: got %d, want %d", tc.path, got, tc.status)
		}
	}
}

// TestOpenAIResponsesSDKWebSocket: the OpenAI Go SDK's own WebSocket
// client of the Responses API decodes the mock's events, typed.
func TestOpenAIResponsesSDKWebSocket(t *testing.T) {
	r, srv := mock(t, `turns:
  - match: {user: hello}
    reply: {text: "Hello over a WebSocket.", chunk_size: 5}
`)
	client := openaiClient(srv, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		t.Fatalf("Responses.Connect: %v", err)
	}
	defer conn.Close()
	create := responses.ResponsesClientEventResponseCreateParam{Model: "gpt-5"}
	create.Input.OfString = openai.String("hello")
	if err := conn.Create(ctx, create); err != nil {
		t.Fatalf("Create: %v", err)
	}
	var deltas []string
	for {
		ev, err := conn.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv: %v after deltas %q", err, deltas)
		}
		if ev.Type == "response.output_text.delta" {
			deltas = append(deltas, ev.OfResponsesServerEventResponseTextWsDelta.Delta)
		}
		if ev.Type == "response.completed" {
			resp := ev.OfResponsesServerEventResponseWsCompleted.Response
			if got := resp.OutputText(); got != "Hello over a WebSocket." || resp.Status != "completed" {
				t.Errorf("got response %q (%s), want the script's text, completed", got, resp.Status)
			}
			break
		}
	}
	if want := []string{"Hello", " over", " a We", "bSock", "et."}; !cmp.Equal(deltas, want) {
		t.Errorf("got deltas %q, want %q", deltas, want)
	}
	if j := r.Requests(); len(j) != 1 || !j[0].WebSocket || j[0].Turn != 1 {
		t.Errorf("got journal %+v, want one WebSocket request answered by turn 1", j)
	}
}

// TestWebSocketStall: a stall sends the first event and holds the socket
// until the mock is reset, which closes it.
func TestWebSocketStall(t *testing.T) {
	s, err := mockllm.ParseScript("stall.yaml", []byte("turns:\n  - fault: {stall: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := mockllm.New(s)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		r.ServeHTTP(w, hr)
		close(done)
	}))
	t.Cleanup(srv.Close)
	c := dialResponses(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-5","input":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), `"response.created"`) {
		t.Fatalf("got %s (%v), want the first event", data, err)
	}
	select {
	case <-done:
		t.Fatal("the socket's handler returned during the stall, want it held")
	case <-time.After(200 * time.Millisecond):
	}
	r.Reset()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the stall outlived Reset")
	}
	if _, data, err := c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after Reset: got %s (%v), want the socket closed", data, err)
	}
}
