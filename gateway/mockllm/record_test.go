package mockllm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Streams as the APIs send them, with what a real stream has and a
// synthesized one does not: CRLF line ends, comments, a ping, an event
// split over two data lines, fields in another order.
var upstreamStreams = map[Dialect][]string{
	Anthropic: {
		"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5-20250929\",\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":2,\"service_tier\":\"standard\"}}}\r\n\r\n",
		": keep-alive comment\r\n\r\n",
		"event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n",
		"event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n",
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"I'll check the wéather\"}}\r\n\r\n",
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" in Paris.\"}}\r\n\r\n",
		"event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
		"event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\r\n\r\n",
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\r\n\r\n",
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"Pa\"}}\r\n\r\n",
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\r\n\r\n",
		"event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":1}\r\n\r\n",
		"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\r\n\r\n",
		"event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n",
	},
	ChatCompletions: {
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"gpt-4.1-2025-04-14\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}],\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"location\\\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n",
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[],\"usage\":{\"prompt_tokens\":80,\"completion_tokens\":17,\"total_tokens\":97}}\n\n",
		"data: [DONE]\n\n",
	},
	Responses: {
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\n",
		"data: \"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Sunny \"}\n\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"and 21°C.\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Sunny and 21°C.\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":30,\"output_tokens\":6,\"total_tokens\":36}}}\n\n",
	},
	// As generativelanguage.googleapis.com sends it: data lines ended by
	// CRLF, usage in every chunk, the function call whole in the last.
	Gemini: {
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me check\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 61,\"totalTokenCount\": 61,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 61}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"o2ZMaJ_PBsaT7dcP7pnC6Qk\"}\r\n\r\n",
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" the wéather.\"},{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"location\": \"Paris\"}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 61,\"candidatesTokenCount\": 15,\"totalTokenCount\": 76,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 61}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"o2ZMaJ_PBsaT7dcP7pnC6Qk\"}\r\n\r\n",
	},
}

// The replies the streams above say.
var upstreamReplies = map[Dialect]*Reply{
	Anthropic: {
		Text:       "I'll check the wéather in Paris.",
		ToolCalls:  []ToolCall{{ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "get_weather", Input: json.RawMessage(`{"location": "Paris"}`)}},
		StopReason: "tool_use",
		Usage:      &Usage{InputTokens: 472, OutputTokens: 89},
	},
	ChatCompletions: {
		ToolCalls:  []ToolCall{{ID: "call_abc", Name: "get_weather", Input: json.RawMessage(`{"location":"Paris"}`)}},
		StopReason: "tool_calls",
		Usage:      &Usage{InputTokens: 80, OutputTokens: 17},
	},
	Responses: {
		Text:  "Sunny and 21°C.",
		Usage: &Usage{InputTokens: 30, OutputTokens: 6},
	},
	Gemini: {
		Text:      "Let me check the wéather.",
		ToolCalls: []ToolCall{{Name: "get_weather", Input: json.RawMessage(`{"location": "Paris"}`)}},
		Usage:     &Usage{InputTokens: 61, OutputTokens: 15},
	},
}

// streamUpstream serves a fixed stream, event by event.
func streamUpstream(t *testing.T, events []string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for _, e := range events {
			io.WriteString(w, e)
			http.NewResponseController(w).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fetch posts body to url with client and returns the whole answer.
func fetch(t *testing.T, client *http.Client, url, body string) []byte {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replay writes turns as a script, reads it back and serves it.
func replay(t *testing.T, turns []Turn) (*Responder, *httptest.Server) {
	t.Helper()
	var script bytes.Buffer
	if err := WriteScript(&script, turns); err != nil {
		t.Fatalf("WriteScript: %v", err)
	}
	s, err := ParseScript("recorded.yaml", script.Bytes())
	if err != nil {
		t.Fatalf("ParseScript of the recording: %v\n%s", err, script.String())
	}
	r := New(s)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

// TestRecordReplayByteIdentical records a stream from an upstream and
// replays the written script offline: the same request gets the same
// bytes, and the recorded turn says what the stream says.
func TestRecordReplayByteIdentical(t *testing.T) {
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			up := streamUpstream(t, upstreamStreams[d])
			rec := NewRecorder(nil)
			body := userBody(d, "model-x", "What is the weather in Paris?", true)
			sent := fetch(t, &http.Client{Transport: rec}, up.URL+pathOf(d, "model-x", true), body)
			if want := strings.Join(upstreamStreams[d], ""); string(sent) != want {
				t.Fatalf("the client got through the Recorder\n%q\nwant what the upstream sent\n%q", sent, want)
			}

			turns := rec.Turns()
			if len(turns) != 1 {
				t.Fatalf("got %d turns recorded, want 1", len(turns))
			}
			wantTurn := Turn{
				Match: &Match{Model: "model-x", User: "What is the weather in Paris?", Normalize: true},
				Reply: upstreamReplies[d],
			}
			if diff := cmp.Diff(wantTurn, turns[0], cmpopts.IgnoreFields(Reply{}, "Raw")); diff != "" {
				t.Errorf("recorded turn (-want +got):\n%s", diff)
			}

			_, srv := replay(t, turns)
			got := fetch(t, srv.Client(), srv.URL+pathOf(d, "model-x", true), body)
			if !bytes.Equal(got, sent) {
				t.Errorf("replayed\n%q\nwant the bytes recorded\n%q", got, sent)
			}
		})
	}
}

// TestRecordEveryShape records what a Responder renders, for each dialect
// streaming and not: the recorded reply is the scripted one.
func TestRecordEveryShape(t *testing.T) {
	scripted := &Reply{
		Text:       "Let me look at the files.",
		ToolCalls:  []ToolCall{{ID: "call_1", Name: "bash", Input: json.RawMessage(`{"command":"ls -la","timeout":30}`)}, {ID: "call_2", Name: "read", Input: json.RawMessage(`{}`)}},
		StopReason: "tool_use",
		Usage:      &Usage{InputTokens: 100, OutputTokens: 20},
		ChunkSize:  5,
	}
	for _, d := range dialects {
		for _, stream := range []bool{false, true} {
			name := string(d) + map[bool]string{false: "/json", true: "/stream"}[stream]
			t.Run(name, func(t *testing.T) {
				upstream := httptest.NewServer(New(&Script{Turns: []Turn{{Reply: scripted}}}))
				defer upstream.Close()
				rec := NewRecorder(nil)
				body := userBody(d, "m", "list", stream)
				if d == ChatCompletions && stream {
					body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
				}
				sent := fetch(t, &http.Client{Transport: rec}, upstream.URL+pathOf(d, "m", stream), body)
				turns := rec.Turns()
				if len(turns) != 1 || turns[0].Reply == nil {
					t.Fatalf("got turns %+v, want one reply", turns)
				}
				want := *scripted
				want.StopReason = stopReason(d, scripted)
				if d == Responses || d == Gemini {
					want.StopReason = "" // "completed", "STOP"
				}
				want.ChunkSize = 0
				if diff := cmp.Diff(&want, turns[0].Reply, cmpopts.IgnoreFields(Reply{}, "Raw")); diff != "" {
					t.Errorf("recorded reply (-want +got):\n%s", diff)
				}
				_, srv := replay(t, turns)
				if got := fetch(t, srv.Client(), srv.URL+pathOf(d, "m", stream), body); !bytes.Equal(got, sent) {
					t.Errorf("replayed\n%s\nwant\n%s", got, sent)
				}
			})
		}
	}
}

// TestRecordOtherDialect: a recorded turn answers a request of another
// dialect, or one that does not stream, from its fields.
func TestRecordOtherDialect(t *testing.T) {
	up := streamUpstream(t, upstreamStreams[Anthropic])
	rec := NewRecorder(nil)
	fetch(t, &http.Client{Transport: rec}, up.URL+"/v1/messages", userBody(Anthropic, "model-x", "weather?", true))
	turns := rec.Turns()
	turns[0].Times = 2
	_, srv := replay(t, turns)
	got := fetch(t, srv.Client(), srv.URL+"/v1/messages", userBody(Anthropic, "model-x", "weather?", false))
	reply := replyOfJSON(Anthropic, got)
	if reply.Text != upstreamReplies[Anthropic].Text || len(reply.ToolCalls) != 1 || reply.ToolCalls[0].ID != "toolu_01T1x1fJ34qAmk2tNTrN7Up6" {
		t.Errorf("got %s, want the recorded reply as JSON", got)
	}
	got = fetch(t, srv.Client(), srv.URL+"/v1/chat/completions", userBody(ChatCompletions, "model-x", "weather?", false))
	if reply := replyOfJSON(ChatCompletions, got); reply.Text != upstreamReplies[Anthropic].Text || reply.StopReason != "tool_calls" {
		t.Errorf("got %s, want the recorded reply in Chat Completions' shape", got)
	}
}

func TestRecordFault(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Request-Id", "req_secretish")
		w.WriteHeader(429)
		io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`)
	}))
	defer up.Close()
	rec := NewRecorder(nil)
	body := userBody(Anthropic, "m", "hi", false)
	sent := fetch(t, &http.Client{Transport: rec}, up.URL+"/v1/messages", body)
	turns := rec.Turns()
	want := []Turn{{
		Match: &Match{Model: "m", User: "hi", Normalize: true},
		Fault: &Fault{Status: 429, Headers: map[string]string{"retry-after": "7"}, Body: string(sent)},
	}}
	if diff := cmp.Diff(want, turns); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
	_, srv := replay(t, turns)
	resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || !bytes.Equal(got, sent) {
		t.Errorf("replayed %d retry-after %q %s, want 429 retry-after 7 %s", resp.StatusCode, resp.Header.Get("Retry-After"), got, sent)
	}
}

// TestRecordWhatCounts: only whole LLM exchanges are recorded.
func TestRecordWhatCounts(t *testing.T) {
	up := streamUpstream(t, upstreamStreams[ChatCompletions])
	rec := NewRecorder(nil)
	client := &http.Client{Transport: rec}
	body := userBody(ChatCompletions, "m", "hi", true)

	// Another path passes through unrecorded.
	fetch(t, client, up.URL+"/v1/embeddings", body)

	// A stream abandoned part-way is not recorded.
	resp, err := client.Post(up.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 10)
	io.ReadFull(resp.Body, b)
	resp.Body.Close()

	// A stream closed after [DONE], before the body's end (as the OpenAI
	// SDK does), is.
	resp, err = client.Post(up.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(upstreamStreams[ChatCompletions], "")
	b = make([]byte, len(want))
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	turns := rec.Turns()
	if len(turns) != 1 || turns[0].Reply == nil || strings.Join(turns[0].Reply.Raw.Events, "") != want {
		t.Errorf("got %d turns recorded (%+v), want the one whole stream", len(turns), turns)
	}
}

// TestRecordMatch: a follow-up that carries a tool result matches on the
// tool, and a long user message on its start.
func TestRecordMatch(t *testing.T) {
	upstream := httptest.NewServer(New(&Script{Turns: []Turn{
		{Reply: &Reply{ToolCalls: []ToolCall{{ID: "call_9", Name: "bash"}}}},
		{Reply: &Reply{Text: "done"}},
	}}))
	defer upstream.Close()
	rec := NewRecorder(nil)
	client := &http.Client{Transport: rec}
	long := strings.Repeat("ü", 300)
	fetch(t, client, upstream.URL+"/v1/responses", userBody(Responses, "m", long, false))
	fetch(t, client, upstream.URL+"/v1/responses", `{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"call_9","output":"x"}]}`)
	turns := rec.Turns()
	if len(turns) != 2 {
		t.Fatalf("got %d turns, want 2", len(turns))
	}
	if got, want := turns[0].Match, (&Match{Model: "m", User: strings.Repeat("ü", maxMatchUser), Normalize: true}); !cmp.Equal(got, want) {
		t.Errorf("got match %+v, want %+v", got, want)
	}
	if got, want := turns[1].Match, (&Match{Model: "m", ToolResult: "bash"}); !cmp.Equal(got, want) {
		t.Errorf("got match %+v, want %+v (the call's name from the recorded answer)", got, want)
	}
}

func TestSplitEvents(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}},
		{"data: a\r\n\r\ndata: b\r\r", []string{"data: a\r\n\r\n", "data: b\r\r"}},
		{"\n\ndata: a\n\n", []string{"\n", "\n", "data: a\n\n"}},
		{"event: x\ndata: 1\ndata: 2\n\ntail", []string{"event: x\ndata: 1\ndata: 2\n\n", "tail"}},
	}
	for _, tt := range tests {
		got := splitEvents([]byte(tt.in))
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("splitEvents(%q) (-want +got):\n%s", tt.in, diff)
		}
		if strings.Join(got, "") != tt.in {
			t.Errorf("splitEvents(%q) joined is %q", tt.in, strings.Join(got, ""))
		}
	}
}
