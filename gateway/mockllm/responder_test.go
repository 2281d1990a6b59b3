package mockllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serve serves a Responder for script on a test server.
func serve(t *testing.T, script string) (*Responder, *httptest.Server) {
	t.Helper()
	s := &Script{}
	if script != "" {
		var err error
		if s, err = ParseScript(t.Name()+".yaml", []byte(script)); err != nil {
			t.Fatalf("ParseScript: %v", err)
		}
	}
	r := New(s)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

// post sends a request and reads the whole answer.
func post(t *testing.T, srv *httptest.Server, method, path, body string, header ...string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// userBody is a request in dialect d with one user message.
func userBody(d Dialect, model, user string, stream bool) string {
	switch d {
	case Anthropic:
		return fmt.Sprintf(`{"model":%q,"max_tokens":100,"stream":%t,"messages":[{"role":"user","content":%q}]}`, model, stream, user)
	case ChatCompletions:
		return fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":%q}]}]}`, model, stream, user)
	case Gemini:
		// The model and streaming are in the path (pathOf).
		return fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":%q}]}],"systemInstruction":{"parts":[{"text":"be brief"}]}}`, user)
	}
	return fmt.Sprintf(`{"model":%q,"stream":%t,"input":%q}`, model, stream, user)
}

var paths = map[Dialect]string{
	Anthropic:       "/v1/messages",
	ChatCompletions: "/v1/chat/completions",
	Responses:       "/v1/responses",
}

// pathOf is the path of a request in dialect d: paths', or for Gemini
// one that names the model and whether the answer streams.
func pathOf(d Dialect, model string, stream bool) string {
	if d != Gemini {
		return paths[d]
	}
	if stream {
		return "/v1beta/models/" + model + ":streamGenerateContent?alt=sse"
	}
	return "/v1beta/models/" + model + ":generateContent"
}

func TestUnmatched(t *testing.T) {
	tests := []struct {
		name          string
		script        string
		method, path  string
		body          string
		header        []string
		queueHint     string // the Responder's QueueHint
		wantStatus    int
		wantBody      string // an exact JSON body, or "" to skip
		wantOutcome   string
		wantDialect   Dialect
		wantNoJournal bool
	}{
		{
			name: "unknown model endpoint, Anthropic client", method: "POST", path: "/v1/complete", header: []string{"anthropic-version", "2023-06-01"},
			body:        `{"model":"claude-2.1","prompt":"\n\nHuman: hi\n\nAssistant:","max_tokens_to_sample":10}`,
			wantStatus:  404,
			wantBody:    `{"type":"error","error":{"type":"not_found_error","message":"sbx mock LLM: no API at POST /v1/complete; the mock answers POST /v1/messages, /v1/chat/completions, /v1/responses and /v1beta/models/MODEL:generateContent"}}`,
			wantOutcome: "unmatched: unknown endpoint",
		},
		{
			name: "unknown model endpoint, OpenAI client", method: "POST", path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":"hi"}`,
			wantStatus:  404,
			wantBody:    `{"error":{"message":"sbx mock LLM: no API at POST /v1/embeddings; the mock answers POST /v1/messages, /v1/chat/completions, /v1/responses and /v1beta/models/MODEL:generateContent","type":"invalid_request_error","param":null,"code":"not_found"}}`,
			wantOutcome: "unmatched: unknown endpoint",
		},
		{
			name: "a model API's path under another prefix", method: "POST", path: "/api/v1/messages", body: "{}",
			wantStatus: 404, wantOutcome: "unmatched: unknown endpoint",
		},
		{
			name: "Codex's ChatGPT backend", method: "POST", path: "/backend-api/codex/responses", body: "{}",
			wantStatus: 404, wantOutcome: "unmatched: unknown endpoint",
		},
		{
			name: "a path under a model API's", method: "GET", path: "/v1/responses/resp_123",
			wantStatus: 404, wantOutcome: "unmatched: unknown endpoint",
		},
		{
			name: "wrong method", method: "GET", path: "/v1/chat/completions",
			wantStatus: 404, wantOutcome: "unmatched: unknown endpoint", wantDialect: ChatCompletions,
		},
		{
			name: "count_tokens, not JSON", method: "POST", path: "/v1/messages/count_tokens", body: "{", header: []string{"anthropic-version", "2023-06-01"},
			wantStatus:  400,
			wantBody:    `{"type":"error","error":{"type":"invalid_request_error","message":"sbx mock LLM: the request body is not valid JSON: unexpected end of JSON input"}}`,
			wantOutcome: "unmatched: the request body is not valid JSON: unexpected end of JSON input", wantDialect: Anthropic,
		},
		{
			name: "not JSON", method: "POST", path: "/v1/messages", body: "{", header: []string{"anthropic-version", "2023-06-01"},
			wantStatus:  400,
			wantBody:    `{"type":"error","error":{"type":"invalid_request_error","message":"sbx mock LLM: the request body is not valid JSON: unexpected end of JSON input"}}`,
			wantOutcome: "unmatched: the request body is not valid JSON: unexpected end of JSON input", wantDialect: Anthropic,
		},
		{
			name: "wrong shape", method: "POST", path: "/v1/chat/completions", body: `{"messages": "hi"}`,
			wantStatus:  400,
			wantOutcome: "unmatched: the request body does not have the API's shape: messages may not be a JSON string", wantDialect: ChatCompletions,
		},
		{
			name:   "no turn fits",
			script: "turns:\n  - match: {model: claude-opus-4}\n    reply: {text: hi}\n",
			method: "POST", path: "/v1/messages", body: userBody(Anthropic, "claude-haiku-4", "what is in this directory?", false),
			wantStatus:  400,
			wantBody:    `{"type":"error","error":{"type":"invalid_request_error","message":"sbx mock LLM: no turn fits this request (model \"claude-haiku-4\", last user message \"what is in this directory?\"); the first turn left, turn 1 (TestUnmatched/no_turn_fits.yaml:2), wants model \"claude-opus-4\"; add a turn to the script or queue one"}}`,
			wantOutcome: `unmatched: no turn fits this request (model "claude-haiku-4", last user message "what is in this directory?"); the first turn left, turn 1 (TestUnmatched/no_turn_fits.yaml:2), wants model "claude-opus-4"`, wantDialect: Anthropic,
		},
		{
			name:   "script used up",
			method: "POST", path: "/v1/responses", body: userBody(Responses, "gpt-5", "hi", true),
			wantStatus:  400,
			wantBody:    `{"error":{"message":"sbx mock LLM: the script is used up (0 turns, all answered); add a turn to the script or queue one","type":"invalid_request_error","param":null,"code":null}}`,
			wantOutcome: "unmatched: the script is used up (0 turns, all answered)", wantDialect: Responses,
		},
		{
			name:   "script used up, with a hint",
			method: "POST", path: "/v1/responses", body: userBody(Responses, "gpt-5", "hi", true), queueHint: "with the caller's command",
			wantStatus:  400,
			wantBody:    `{"error":{"message":"sbx mock LLM: the script is used up (0 turns, all answered); add a turn to the script or queue one (with the caller's command)","type":"invalid_request_error","param":null,"code":null}}`,
			wantOutcome: "unmatched: the script is used up (0 turns, all answered)", wantDialect: Responses,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, srv := serve(t, tt.script)
			var heard []Journaled
			r.OnUnmatched = func(j Journaled) { heard = append(heard, j) }
			r.QueueHint = tt.queueHint
			resp, body, err := post(t, srv, tt.method, tt.path, tt.body, tt.header...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := resp.Header.Get("x-should-retry"); got != "false" {
				t.Errorf("got x-should-retry %q, want false", got)
			}
			if tt.wantBody != "" && body != tt.wantBody {
				t.Errorf("got body\n%s\nwant\n%s", body, tt.wantBody)
			}
			journal := r.Requests()
			if len(journal) != 1 {
				t.Fatalf("got %d journal entries, want 1", len(journal))
			}
			j := journal[0]
			if j.Outcome != tt.wantOutcome || !j.Unmatched || j.Turn != 0 || j.Status != tt.wantStatus || j.Dialect != tt.wantDialect {
				t.Errorf("got journal entry %+v, want outcome %q, unmatched, status %d, dialect %q", j, tt.wantOutcome, tt.wantStatus, tt.wantDialect)
			}
			if string(j.Body) != strings.TrimSpace(tt.body) && json.Valid([]byte(tt.body)) {
				t.Errorf("got journaled body %s, want %s", j.Body, tt.body)
			}
			if len(heard) != 1 || heard[0].Body != nil || heard[0].Outcome != j.Outcome {
				t.Errorf("OnUnmatched heard %+v, want the journal entry without its body", heard)
			}
		})
	}
}

// replyText reads the text of a non-streaming answer in any dialect.
func replyText(t *testing.T, d Dialect, body string) string {
	t.Helper()
	r := replyOfJSON(d, []byte(body))
	return r.Text
}

func TestTurnOrder(t *testing.T) {
	r, srv := serve(t, `turns:
  - match: {user: second}
    reply: {text: B}
  - reply: {text: A}
  - match: {model: m}
    reply: {text: C}
    times: 2
`)
	ask := func(model, user string) string {
		t.Helper()
		resp, body, err := post(t, srv, "POST", "/v1/chat/completions", userBody(ChatCompletions, model, user, false))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			return fmt.Sprintf("status %d", resp.StatusCode)
		}
		return replyText(t, ChatCompletions, body)
	}
	steps := []struct{ model, user, want string }{
		{"x", "first", "A"},  // turn 1 does not fit; turn 2 does
		{"x", "second", "B"}, // turn 1 was skipped, not used up
		{"m", "third", "C"},
		{"m", "fourth", "C"}, // times: 2
		{"m", "fifth", "status 400"},
	}
	for _, s := range steps {
		if got := ask(s.model, s.user); got != s.want {
			t.Errorf("%s/%s: got %q, want %q", s.model, s.user, got, s.want)
		}
	}
	var outcomes []string
	for _, j := range r.Requests() {
		outcomes = append(outcomes, fmt.Sprintf("%d %d %s", j.Seq, j.Turn, j.Outcome))
	}
	want := []string{
		"1 2 turn 2 (TestTurnOrder.yaml:4): reply",
		"2 1 turn 1 (TestTurnOrder.yaml:2): reply",
		"3 3 turn 3 (TestTurnOrder.yaml:5): reply",
		"4 3 turn 3 (TestTurnOrder.yaml:5): reply",
		"5 0 unmatched: the script is used up (3 turns, all answered)",
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}

	turns, err := DecodeTurns("expect", []byte(`[{"reply": {"text": "D"}}, {"reply": {"text": "E"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Expect(turns); err != nil {
		t.Fatalf("Expect: %v", err)
	}
	if got := ask("m", "sixth"); got != "D" {
		t.Errorf("after Expect: got %q, want D", got)
	}
	if err := r.Expect([]Turn{{}}); !errors.Is(err, ErrInvalidScript) {
		t.Errorf("Expect of a turn with neither reply nor fault: got %v, want ErrInvalidScript", err)
	}

	r.Reset()
	if got := len(r.Requests()); got != 0 {
		t.Errorf("after Reset: got %d journal entries, want 0", got)
	}
	for _, s := range []struct{ user, want string }{{"first", "A"}, {"second", "B"}, {"third", "C"}, {"fourth", "C"}, {"fifth", "status 400"}} {
		if got := ask("m", s.user); got != s.want {
			t.Errorf("after Reset, %s: got %q, want %q (the queued turns are dropped, the script restarts)", s.user, got, s.want)
		}
	}
}

func TestExpectBound(t *testing.T) {
	r := New(nil)
	turns := make([]Turn, MaxQueuedTurns)
	for i := range turns {
		turns[i] = Turn{Reply: &Reply{}}
	}
	if err := r.Expect(turns); err != nil {
		t.Fatalf("Expect of %d turns: %v", MaxQueuedTurns, err)
	}
	if err := r.Expect(turns[:1]); err == nil {
		t.Errorf("Expect past MaxQueuedTurns: got no error")
	}
	r.Reset()
	if err := r.Expect(turns[:1]); err != nil {
		t.Errorf("Expect after Reset: %v", err)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name   string
		match  string
		d      Dialect
		body   string
		fits   bool
		reason string
	}{
		{"model", "{model: a}", Anthropic, userBody(Anthropic, "a", "hi", false), true, ""},
		{"other model", "{model: a}", Anthropic, userBody(Anthropic, "ab", "hi", false), false, `wants model "a"`},
		{"user substring", "{user: files}", ChatCompletions, userBody(ChatCompletions, "m", "list the files please", false), true, ""},
		{"user substring is case sensitive", "{user: Files}", ChatCompletions, userBody(ChatCompletions, "m", "list the files", false), false, `wants a last user message containing "Files"`},
		{"user regexp", `{user_regexp: "^list .* files$"}`, Responses, userBody(Responses, "m", "list the files", false), true, ""},
		{"user regexp misses", `{user_regexp: "^files"}`, Responses, userBody(Responses, "m", "list the files", false), false, `wants a last user message matching "^files"`},
		{
			"last user message, not an earlier one", "{user: second}", Anthropic,
			`{"model":"m","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"second"}]}]}`, true, "",
		},
		{
			"Anthropic tool result", "{tool_result: bash, user: run}", Anthropic,
			`{"model":"m","messages":[{"role":"user","content":"run ls"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a b"}]}]}`, true, "",
		},
		{
			"Anthropic tool result of another tool", "{tool_result: read}", Anthropic,
			`{"model":"m","messages":[{"role":"user","content":"run ls"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a b"}]}]}`, false, `wants a result of tool "read" in the last message`,
		},
		{
			"Anthropic tool result not in the last message", "{tool_result: bash}", Anthropic,
			`{"model":"m","messages":[{"role":"user","content":"run ls"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a b"}]},{"role":"assistant","content":"done"},{"role":"user","content":"thanks"}]}`, false, `wants a result of tool "bash" in the last message`,
		},
		{
			"Chat tool results, parallel", "{tool_result: read}", ChatCompletions,
			`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"tool","tool_call_id":"c2","content":"y"}]}`, true, "",
		},
		{
			"Responses function call output", "{tool_result: bash, user: go}", Responses,
			`{"model":"m","input":[{"role":"user","content":"go"},{"type":"function_call","call_id":"c1","name":"bash","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"x"}]}`, true, "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScript("s.yaml", []byte("turns:\n  - match: "+tt.match+"\n    reply: {text: ok}\n"))
			if err != nil {
				t.Fatal(err)
			}
			r := New(s)
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest("POST", pathOf(tt.d, "m", false), strings.NewReader(tt.body)))
			j := r.Requests()[0]
			if fits := !j.Unmatched; fits != tt.fits {
				t.Fatalf("got fits %t (%s), want %t", fits, j.Outcome, tt.fits)
			}
			if !tt.fits && !strings.HasSuffix(j.Outcome, tt.reason) {
				t.Errorf("got outcome %q, want it to end in %q", j.Outcome, tt.reason)
			}
		})
	}
}

// TestMatchRememberedCall: a Responses request that continues with
// previous_response_id does not repeat the function call; the Responder
// knows the call's name from its own answer.
func TestMatchRememberedCall(t *testing.T) {
	r, srv := serve(t, `turns:
  - reply:
      tool_calls: [{id: call_42, name: bash, input: {command: ls}}]
  - match: {tool_result: bash}
    reply: {text: done}
`)
	if resp, _, err := post(t, srv, "POST", "/v1/responses", userBody(Responses, "m", "go", false)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	body := `{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_42","output":"a b"}]}`
	resp, got, err := post(t, srv, "POST", "/v1/responses", body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("follow-up: %v %v %s (%s)", resp, err, got, r.Requests()[1].Outcome)
	}
	if text := replyText(t, Responses, got); text != "done" {
		t.Errorf("got %q, want done", text)
	}
}

func TestJournal(t *testing.T) {
	r := New(&Script{Turns: []Turn{{Reply: &Reply{Text: "ok"}, Times: 3}}})
	serveOne := func(path, body string) {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, strings.NewReader(body)))
	}
	small := userBody(Anthropic, "claude", "hi", true)
	serveOne("/v1/messages?beta=true", small)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", MaxJournalBody) + `"}]}`
	serveOne("/v1/messages", big)
	serveOne("/v1/messages", "not json")

	got := r.Requests()
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3", len(got))
	}
	if j := got[0]; j.Seq != 1 || j.Method != "POST" || j.Path != "/v1/messages" || j.Dialect != Anthropic || j.Model != "claude" || !j.Stream || string(j.Body) != small || j.BodyTruncated || j.Turn != 1 || j.Status != 200 {
		t.Errorf("got first entry %+v", j)
	}
	if j := got[1]; !j.BodyTruncated || !json.Valid(j.Body) {
		t.Errorf("got second entry truncated %t, body valid JSON %t; want a truncated body kept as a JSON string", j.BodyTruncated, json.Valid(j.Body))
	} else {
		var s string
		if err := json.Unmarshal(j.Body, &s); err != nil || len(s) != MaxJournalBody || !strings.HasPrefix(s, `{"model":"m"`) {
			t.Errorf("got a truncated body of %d bytes (%v), want the first %d bytes as a string", len(s), err, MaxJournalBody)
		}
	}
	if j := got[2]; string(j.Body) != `"not json"` || !j.Unmatched {
		t.Errorf("got third entry body %s unmatched %t, want \"not json\" as a string, unmatched", j.Body, j.Unmatched)
	}

	for i := 0; i < MaxJournalEntries; i++ {
		serveOne("/v1/nothing", "")
	}
	got = r.Requests()
	if len(got) != MaxJournalEntries || got[0].Seq != 4 || got[len(got)-1].Seq != MaxJournalEntries+3 {
		t.Errorf("got %d entries, seq %d to %d; want the latest %d, seq 4 to %d", len(got), got[0].Seq, got[len(got)-1].Seq, MaxJournalEntries, MaxJournalEntries+3)
	}
}

// events returns the names of a stream's events (the data of nameless
// ones).
func events(body string) []string {
	var names []string
	for _, e := range splitEvents([]byte(body)) {
		name, data := parseEvent(e)
		var gemini struct {
			Candidates []struct {
				Content struct {
					Parts []map[string]any `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
		}
		if name == "" && json.Unmarshal([]byte(data), &gemini) == nil && len(gemini.Candidates) == 1 {
			name = "chunk"
			for _, p := range gemini.Candidates[0].Content.Parts {
				for k := range p {
					name += " " + k
				}
			}
			if f := gemini.Candidates[0].FinishReason; f != "" {
				name += " finish " + f
			}
		}
		if name == "" {
			var chunk struct {
				Choices []struct {
					Delta        map[string]any `json:"delta"`
					FinishReason *string        `json:"finish_reason"`
				} `json:"choices"`
				Usage any `json:"usage"`
			}
			switch {
			case data == "[DONE]":
				name = "[DONE]"
			case json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) == 1:
				keys := []string{}
				for k := range chunk.Choices[0].Delta {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				name = "delta " + strings.Join(keys, ",")
				if f := chunk.Choices[0].FinishReason; f != nil {
					name += " finish " + *f
				}
			case chunk.Usage != nil:
				name = "usage"
			}
		}
		names = append(names, name)
	}
	return names
}

// TestStreamEvents shows the event sequence of each dialect for a reply
// with text and a tool call.
func TestStreamEvents(t *testing.T) {
	script := `turns:
  - reply:
      text: "Hello, world"
      tool_calls: [{name: bash, input: {command: ls}}]
      chunk_size: 6
    times: 4
`
	want := map[Dialect][]string{
		Anthropic: {
			"message_start",
			"content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
			"message_delta", "message_stop",
		},
		ChatCompletions: {
			"delta content,role", "delta content", "delta content",
			"delta tool_calls", "delta tool_calls", "delta tool_calls", "delta tool_calls",
			"delta  finish tool_calls", "usage", "[DONE]",
		},
		Responses: {
			"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done",
			"response.completed",
		},
		// Text in chunks, the function call whole in the last chunk.
		Gemini: {"chunk text", "chunk text", "chunk functionCall finish STOP"},
	}
	_, srv := serve(t, script)
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			body := userBody(d, "m", "hi", true)
			if d == ChatCompletions {
				body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
			}
			resp, got, err := post(t, srv, "POST", pathOf(d, "m", true), body)
			if err != nil {
				t.Fatal(err)
			}
			if ct := resp.Header.Get("Content-Type"); ct != contentSSE {
				t.Errorf("got Content-Type %q, want %q", ct, contentSSE)
			}
			if diff := cmp.Diff(want[d], events(got)); diff != "" {
				t.Errorf("events (-want +got):\n%s\n%s", diff, got)
			}
			// What the stream says is what the script says.
			reply := replyOfStream(d, splitEvents([]byte(got)))
			if reply.Text != "Hello, world" || len(reply.ToolCalls) != 1 || reply.ToolCalls[0].Name != "bash" || string(reply.ToolCalls[0].Input) != `{"command":"ls"}` {
				t.Errorf("got reply %+v from the stream", reply)
			}
		})
	}
}

func TestStopReasons(t *testing.T) {
	tests := []struct {
		stop  string
		calls bool
		want  map[Dialect]string
	}{
		// Gemini's STOP reads back as no reason (the default); MAX_TOKENS
		// and SAFETY as the reasons of other dialects.
		{"", false, map[Dialect]string{Anthropic: "end_turn", ChatCompletions: "stop", Responses: "", Gemini: ""}},
		{"", true, map[Dialect]string{Anthropic: "tool_use", ChatCompletions: "tool_calls", Responses: "", Gemini: ""}},
		{"length", false, map[Dialect]string{Anthropic: "max_tokens", ChatCompletions: "length", Responses: "incomplete", Gemini: "max_tokens"}},
		{"refusal", false, map[Dialect]string{Anthropic: "refusal", ChatCompletions: "content_filter", Responses: "content_filter", Gemini: "content_filter"}},
		{"model_context_window_exceeded", false, map[Dialect]string{Anthropic: "model_context_window_exceeded", ChatCompletions: "model_context_window_exceeded", Responses: "model_context_window_exceeded", Gemini: "model_context_window_exceeded"}},
	}
	for _, tt := range tests {
		for _, d := range dialects {
			t.Run(fmt.Sprintf("%s/%t/%s", tt.stop, tt.calls, d), func(t *testing.T) {
				reply := &Reply{Text: "x", StopReason: tt.stop}
				if tt.calls {
					reply.ToolCalls = []ToolCall{{Name: "f"}}
				}
				r := New(&Script{Turns: []Turn{{Reply: reply}}})
				w := httptest.NewRecorder()
				r.ServeHTTP(w, httptest.NewRequest("POST", pathOf(d, "m", false), strings.NewReader(userBody(d, "m", "hi", false))))
				if got := replyOfJSON(d, w.Body.Bytes()).StopReason; got != tt.want[d] {
					t.Errorf("got stop reason %q, want %q\n%s", got, tt.want[d], w.Body)
				}
			})
		}
	}
}

func TestFaultCuts(t *testing.T) {
	tests := []struct {
		name      string
		fault     string
		stream    bool
		wantBody  func(full string) string // what the client gets before the cut, from the uncut answer
		wantState string
	}{
		{"bytes of a stream", "{disconnect_after_bytes: 100}", true, func(full string) string { return full[:100] }, "fault 200: disconnect after 100 bytes"},
		{"bytes of JSON", "{disconnect_after_bytes: 10}", false, func(full string) string { return full[:10] }, "fault 200: disconnect after 10 bytes"},
		{"right after the headers", "{disconnect_after_bytes: 0}", true, func(string) string { return "" }, "fault 200: disconnect after 0 bytes"},
		{"events", "{disconnect_after_events: 3}", true, func(full string) string { return strings.Join(splitEvents([]byte(full))[:3], "") }, "fault 200: disconnect after 3 events"},
		{"past the end", "{disconnect_after_events: 1000}", true, func(full string) string { return full }, "fault 200: disconnect after 1000 events"},
		{"an error cut", "{status: 500, disconnect_after_bytes: 5}", false, func(string) string { return `{"typ` }, "fault 500: disconnect after 5 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, srv := serve(t, "turns:\n  - fault: "+tt.fault+"\n  - fault: {status: 200}\n")
			resp, got, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", tt.stream))
			if err == nil {
				t.Fatalf("got a whole answer %q, want a read error", got)
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("got error %v, want io.ErrUnexpectedEOF", err)
			}
			// The uncut answer, from the next turn; ids differ, lengths do not.
			_, full, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", tt.stream))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantBody(full)
			if len(got) != len(want) || !strings.HasPrefix(want, got[:min(len(got), 5)]) {
				t.Errorf("got %d bytes before the cut:\n%q\nwant %d:\n%q", len(got), got, len(want), want)
			}
			if outcome := r.Requests()[0].Outcome; !strings.HasSuffix(outcome, tt.wantState) {
				t.Errorf("got outcome %q, want it to end in %q", outcome, tt.wantState)
			}
			_ = resp
		})
	}
}

func TestFaultError(t *testing.T) {
	_, srv := serve(t, `turns:
  - fault: {status: 529, headers: {retry-after: "3"}}
  - fault: {status: 429, body: '{"error": "custom"}'}
  - fault: {status: 503}
`)
	resp, body, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", true))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"error","error":{"type":"overloaded_error","message":"sbx mock LLM: scripted fault: 529 Overloaded"}}`; resp.StatusCode != 529 || body != want || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("got %d %s retry-after %q, want 529 %s retry-after 3", resp.StatusCode, body, resp.Header.Get("Retry-After"), want)
	}
	resp, body, err = post(t, srv, "POST", "/v1/chat/completions", userBody(ChatCompletions, "m", "hi", false))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || body != `{"error": "custom"}` {
		t.Errorf("got %d %s, want 429 with the script's body", resp.StatusCode, body)
	}
	resp, body, err = post(t, srv, "POST", "/v1/responses", userBody(Responses, "m", "hi", false))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"error":{"message":"sbx mock LLM: scripted fault: 503 Service Unavailable","type":"server_error","param":null,"code":"overloaded"}}`; resp.StatusCode != 503 || body != want {
		t.Errorf("got %d %s, want 503 %s", resp.StatusCode, body, want)
	}
}

func TestFaultDelay(t *testing.T) {
	r, srv := serve(t, "turns:\n  - fault: {status: 500, delay_ms: 150}\n  - fault: {status: 500, delay_ms: 5000}\n")
	start := time.Now()
	resp, _, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", false))
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); resp.StatusCode != 500 || elapsed < 150*time.Millisecond {
		t.Errorf("got %d after %v, want 500 after at least 150ms", resp.StatusCode, elapsed)
	}
	// Reset releases a request that waits out a delay: its connection is cut.
	done := make(chan error, 1)
	go func() { // ends when the request does: at the Reset below
		_, _, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", false))
		done <- err
	}()
	waitFor(t, func() bool { return len(r.Requests()) == 2 })
	r.Reset()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("got an answer after Reset, want the connection cut")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a delayed request was not released by Reset")
	}
}

// waitFor polls cond for up to 2 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func TestFaultStall(t *testing.T) {
	r, srv := serve(t, "turns:\n  - fault: {stall: true}\n    times: 2\n")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/messages", strings.NewReader(userBody(Anthropic, "m", "hi", true)))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("got %v before the headers, want the headers and the first event", err)
	}
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	if first := string(b[:n]); !strings.HasPrefix(first, "event: message_start\n") {
		t.Errorf("got first bytes %q, want the message_start event", first)
	}
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v reading on, want the client's deadline", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("the client's timeout took %v to fire", elapsed)
	}
	resp.Body.Close()
	if got := r.Requests()[0].Outcome; !strings.HasSuffix(got, "fault 200: stall") {
		t.Errorf("got outcome %q", got)
	}

	// Reset releases a stalled request.
	done := make(chan error, 1)
	go func() { // ends when the request does: at the Reset below
		_, _, err := post(t, srv, "POST", "/v1/chat/completions", userBody(ChatCompletions, "m", "hi", false))
		done <- err
	}()
	waitFor(t, func() bool { return len(r.Requests()) == 2 })
	r.Reset()
	select {
	case err := <-done:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("got %v after Reset, want io.ErrUnexpectedEOF (the connection cut)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a stalled request was not released by Reset")
	}
}

// TestConcurrent serves turns to many clients at once, with the runtime
// controls in use: each turn answers once (run with -race).
func TestConcurrent(t *testing.T) {
	const n = 40
	var turns []Turn
	for i := range n {
		turns = append(turns, Turn{Reply: &Reply{Text: fmt.Sprint(i)}})
	}
	r, srv := serve(t, "")
	if err := r.Expect(turns); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	texts := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() { // ends when its request is answered
			defer wg.Done()
			_, body, err := post(t, srv, "POST", "/v1/responses", userBody(Responses, "m", "hi", false))
			if err != nil {
				t.Error(err)
			}
			texts <- replyText(t, Responses, body)
		}()
		_ = r.Requests()
	}
	wg.Wait()
	close(texts)
	seen := map[string]bool{}
	for text := range texts {
		if seen[text] {
			t.Errorf("turn %s answered twice", text)
		}
		seen[text] = true
	}
	if len(seen) != n {
		t.Errorf("got %d turns answered, want %d", len(seen), n)
	}
}

// TestInvalidTurnInGo: a turn built in Go that CheckTurns refuses never
// answers, and says why.
func TestInvalidTurnInGo(t *testing.T) {
	r := New(&Script{Turns: []Turn{{Fault: &Fault{Status: 302}}}})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/messages", strings.NewReader(userBody(Anthropic, "m", "hi", false))))
	want := "turn 1, is invalid: fault.status: 302: want 200 (a reply cut short) or an error from 400 to 599"
	if got := r.Requests()[0].Outcome; !strings.HasSuffix(got, want) {
		t.Errorf("got outcome %q, want it to end in %q", got, want)
	}
}

// TestServeDecided checks that Serve tells its caller each request's
// outcome before the answer is sent, once, without the body, and also
// when the answer is then cut (the panic comes after the callback).
func TestServeDecided(t *testing.T) {
	s, err := ParseScript("s.yaml", []byte("turns:\n  - reply: {text: hi}\n  - fault: {disconnect_after_bytes: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := New(s)
	var got []Journaled
	serveOne := func() (aborted bool) {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				aborted = true
			}
		}()
		req := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(userBody(Anthropic, "m", "hi", false)))
		r.Serve(httptest.NewRecorder(), req, func(j Journaled) { got = append(got, j) })
		return false
	}
	for i, wantAbort := range []bool{false, true, false} {
		if aborted := serveOne(); aborted != wantAbort {
			t.Errorf("request %d: got aborted %v, want %v", i+1, aborted, wantAbort)
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %d calls of decided, want 3: %+v", len(got), got)
	}
	want := []struct {
		turn    int
		status  int
		outcome string
	}{
		{1, 200, "turn 1 (s.yaml:2): reply"},
		{2, 200, "turn 2 (s.yaml:3): fault 200: disconnect after 0 bytes"},
		{0, 400, "unmatched: the script is used up"},
	}
	for i, w := range want {
		j := got[i]
		if j.Turn != w.turn || j.Status != w.status || !strings.HasPrefix(j.Outcome, w.outcome) || j.Body != nil {
			t.Errorf("call %d: got turn %d status %d outcome %q body %d bytes, want turn %d status %d outcome %q and no body",
				i+1, j.Turn, j.Status, j.Outcome, len(j.Body), w.turn, w.status, w.outcome)
		}
	}
	if n := len(r.Requests()); n != 3 || r.Requests()[0].Body == nil {
		t.Errorf("got %d journal entries (first body %q), want 3 with bodies", n, r.Requests()[0].Body)
	}
}
