package mockllm_test

// The Responder against clients nobody here wrote: the official Go SDKs of
// Anthropic and OpenAI, pointed at a test server. What each test shows is
// the SDK's own observed behaviour (its parsing, accumulators, retries and
// error types).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// mock serves a Responder for script.
func mock(t *testing.T, script string) (*mockllm.Responder, *httptest.Server) {
	t.Helper()
	s, err := mockllm.ParseScript(t.Name()+".yaml", []byte(script))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	r := mockllm.New(s)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

// anthropicClient is an Anthropic SDK client of srv that retries retries
// times and reads nothing from the environment.
func anthropicClient(srv *httptest.Server, retries int) *anthropic.Client {
	c := anthropic.NewClient(
		aoption.WithoutEnvironmentDefaults(),
		aoption.WithBaseURL(srv.URL),
		aoption.WithAPIKey("sk-ant-test"),
		aoption.WithMaxRetries(retries),
	)
	return &c
}

// openaiClient is an OpenAI SDK client of srv that retries retries times.
func openaiClient(srv *httptest.Server, retries int) *openai.Client {
	c := openai.NewClient(
		ooption.WithBaseURL(srv.URL+"/v1/"),
		ooption.WithAPIKey("sk-test"),
		ooption.WithMaxRetries(retries),
	)
	return &c
}

func anthropicParams(user string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(user))},
		Tools: []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"command": map[string]any{"type": "string"}},
		}, "bash")},
	}
}

// outcomes returns the journal's outcomes.
func outcomes(r *mockllm.Responder) []string {
	var out []string
	for _, j := range r.Requests() {
		out = append(out, j.Outcome)
	}
	return out
}

func TestAnthropicSDKText(t *testing.T) {
	r, srv := mock(t, `turns:
  - match: {model: claude-sonnet-4-5, user: hello}
    reply: {text: "Hello! How can I help?", usage: {input_tokens: 12, output_tokens: 7}}
`)
	client := anthropicClient(srv, 0)
	msg, err := client.Messages.New(context.Background(), anthropicParams("hello there"))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != "Hello! How can I help?" {
		t.Errorf("got content %+v, want one text block", msg.Content)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.InputTokens != 12 || msg.Usage.OutputTokens != 7 || msg.Model != "claude-sonnet-4-5" || !strings.HasPrefix(msg.ID, "msg_") {
		t.Errorf("got stop %q usage %d/%d model %q id %q", msg.StopReason, msg.Usage.InputTokens, msg.Usage.OutputTokens, msg.Model, msg.ID)
	}
	j := r.Requests()[0]
	var body struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(j.Body, &body); err != nil || len(body.Messages) != 1 || len(body.Tools) != 1 || body.Tools[0].Name != "bash" {
		t.Errorf("got journaled body %s (%v), want what the SDK sent", j.Body, err)
	}
}

func TestAnthropicSDKStreaming(t *testing.T) {
	_, srv := mock(t, `turns:
  - reply:
      text: "Streaming works, one chunk at a time: ✓ ünïcode included."
      chunk_size: 7
      usage: {input_tokens: 30, output_tokens: 15}
`)
	client := anthropicClient(srv, 0)
	stream := client.Messages.NewStreaming(context.Background(), anthropicParams("stream please"))
	defer stream.Close()
	var msg anthropic.Message
	deltas := 0
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.Type, err)
		}
		if ev.Type == "content_block_delta" {
			deltas++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got, want := msg.Content[0].Text, "Streaming works, one chunk at a time: ✓ ünïcode included."; got != want {
		t.Errorf("got text %q, want %q", got, want)
	}
	if deltas != 9 || msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.InputTokens != 30 || msg.Usage.OutputTokens != 15 {
		t.Errorf("got %d deltas, stop %q, usage %d/%d; want 9, end_turn, 30/15", deltas, msg.StopReason, msg.Usage.InputTokens, msg.Usage.OutputTokens)
	}
}

// TestAnthropicSDKToolUse: a tool_use turn, streamed, then the follow-up
// that carries the tool's result takes the turn that matches it.
func TestAnthropicSDKToolUse(t *testing.T) {
	r, srv := mock(t, `turns:
  - match: {tool_result: bash}
    reply: {text: "There are two files: a and b."}
  - match: {user: files}
    reply:
      text: "Let me look."
      tool_calls:
        - name: bash
          input: {command: "ls -la", timeout: 30}
      chunk_size: 5
`)
	client := anthropicClient(srv, 0)
	params := anthropicParams("which files are here?")
	stream := client.Messages.NewStreaming(context.Background(), params)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 2 {
		t.Fatalf("got stop %q, content %+v; want tool_use with text and a tool_use block", msg.StopReason, msg.Content)
	}
	use := msg.Content[1].AsToolUse()
	if use.Name != "bash" || !strings.HasPrefix(use.ID, "toolu_") {
		t.Errorf("got tool_use %q id %q, want bash with a toolu_ id", use.Name, use.ID)
	}
	var input map[string]any
	if err := json.Unmarshal(use.Input, &input); err != nil || !cmp.Equal(input, map[string]any{"command": "ls -la", "timeout": 30.0}) {
		t.Errorf("got input %s (%v), want the script's", use.Input, err)
	}

	params.Messages = append(params.Messages, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "a\nb\n", false)))
	follow, err := client.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatalf("follow-up: %v", err)
	}
	if follow.Content[0].Text != "There are two files: a and b." {
		t.Errorf("got %q, want the turn that matches the tool result", follow.Content[0].Text)
	}
	want := []string{
		"turn 2 (TestAnthropicSDKToolUse.yaml:4): reply",
		"turn 1 (TestAnthropicSDKToolUse.yaml:2): reply",
	}
	if diff := cmp.Diff(want, outcomes(r)); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
}

func chatParams(user string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage(user)},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:       "bash",
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}},
		})},
	}
}

func TestOpenAIChatSDK(t *testing.T) {
	_, srv := mock(t, `turns:
  - match: {model: gpt-4.1}
    reply: {text: "Hi from the mock.", usage: {input_tokens: 9, output_tokens: 5}}
`)
	client := openaiClient(srv, 0)
	c, err := client.Chat.Completions.New(context.Background(), chatParams("hi"))
	if err != nil {
		t.Fatalf("Chat.Completions.New: %v", err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content != "Hi from the mock." || c.Choices[0].FinishReason != "stop" {
		t.Errorf("got %+v", c.Choices)
	}
	if c.Usage.PromptTokens != 9 || c.Usage.CompletionTokens != 5 || c.Usage.TotalTokens != 14 || c.Model != "gpt-4.1" || c.Object != "chat.completion" {
		t.Errorf("got usage %+v model %q object %q", c.Usage, c.Model, c.Object)
	}
}

func TestOpenAIChatSDKStreaming(t *testing.T) {
	_, srv := mock(t, `turns:
  - reply:
      text: "A streamed answer, in pieces."
      chunk_size: 4
      usage: {input_tokens: 20, output_tokens: 8}
`)
	client := openaiClient(srv, 0)
	params := chatParams("stream")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	defer stream.Close()
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("the accumulator refused chunk %d: %s", chunks, stream.Current().RawJSON())
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got := acc.Choices[0].Message.Content; got != "A streamed answer, in pieces." {
		t.Errorf("got %q", got)
	}
	// The role, 8 pieces of text, the finish reason, the usage.
	if acc.Choices[0].FinishReason != "stop" || acc.Usage.PromptTokens != 20 || acc.Usage.CompletionTokens != 8 || chunks != 11 {
		t.Errorf("got finish %q usage %d/%d after %d chunks, want stop, 20/8, 11 chunks", acc.Choices[0].FinishReason, acc.Usage.PromptTokens, acc.Usage.CompletionTokens, chunks)
	}
}

func TestOpenAIChatSDKToolCalls(t *testing.T) {
	_, srv := mock(t, `turns:
  - match: {user: list}
    reply:
      tool_calls:
        - {name: bash, input: {command: ls}}
        - {id: call_fixed, name: read_file, input: {path: README.md}}
  - match: {tool_result: read_file}
    reply: {text: "Read it."}
`)
	client := openaiClient(srv, 0)
	params := chatParams("list and read")
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var finished []string
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc.Name+" "+tc.Arguments)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	msg := acc.Choices[0].Message
	if acc.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 2 {
		t.Fatalf("got finish %q, %d tool calls; want tool_calls, 2", acc.Choices[0].FinishReason, len(msg.ToolCalls))
	}
	if c := msg.ToolCalls[0]; c.Function.Name != "bash" || c.Function.Arguments != `{"command":"ls"}` || !strings.HasPrefix(c.ID, "call_") {
		t.Errorf("got first call %+v", c)
	}
	if c := msg.ToolCalls[1]; c.ID != "call_fixed" || c.Function.Name != "read_file" || c.Function.Arguments != `{"path":"README.md"}` {
		t.Errorf("got second call %+v", c)
	}
	if want := []string{`bash {"command":"ls"}`}; !cmp.Equal(finished[:1], want) {
		t.Errorf("JustFinishedToolCall gave %q, want %q first", finished, want)
	}

	params.Messages = append(params.Messages, msg.ToParam(),
		openai.ToolMessage("file list", msg.ToolCalls[0].ID),
		openai.ToolMessage("# README", "call_fixed"))
	c, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatalf("follow-up: %v", err)
	}
	if c.Choices[0].Message.Content != "Read it." {
		t.Errorf("got %q, want the turn that matches the read_file result", c.Choices[0].Message.Content)
	}
}

func responsesParams(input string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: "gpt-5",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		}, false)},
	}
}

func TestOpenAIResponsesSDK(t *testing.T) {
	_, srv := mock(t, `turns:
  - match: {user: weather}
    reply:
      tool_calls: [{name: get_weather, input: {city: Paris}}]
  - match: {tool_result: get_weather}
    reply: {text: "It is sunny in Paris.", usage: {input_tokens: 40, output_tokens: 6}}
`)
	client := openaiClient(srv, 0)
	params := responsesParams("what is the weather in Paris?")
	resp, err := client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatalf("Responses.New: %v", err)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "function_call" {
		t.Fatalf("got output %+v, want one function_call", resp.Output)
	}
	call := resp.Output[0].AsFunctionCall()
	if call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(call.CallID, "call_") || resp.Status != "completed" {
		t.Errorf("got call %q %q %q, status %q", call.Name, call.Arguments, call.CallID, resp.Status)
	}

	out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21°C")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("what is the weather in Paris?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
		out,
	}}
	resp, err = client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatalf("follow-up: %v", err)
	}
	if got := resp.OutputText(); got != "It is sunny in Paris." || resp.Usage.InputTokens != 40 || resp.Usage.OutputTokens != 6 || resp.Usage.TotalTokens != 46 {
		t.Errorf("got %q usage %+v", got, resp.Usage)
	}
}

func TestOpenAIResponsesSDKStreaming(t *testing.T) {
	_, srv := mock(t, `turns:
  - reply: {text: "Streamed through the Responses API.", chunk_size: 10}
  - reply:
      tool_calls: [{name: get_weather, input: {city: Oslo}}]
      chunk_size: 4
`)
	client := openaiClient(srv, 0)
	var text strings.Builder
	var completed responses.Response
	var types []string
	stream := client.Responses.NewStreaming(context.Background(), responsesParams("stream"))
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if text.String() != "Streamed through the Responses API." || completed.OutputText() != text.String() || completed.Status != "completed" {
		t.Errorf("got deltas %q, completed %q (%s); want the script's text in both", text.String(), completed.OutputText(), completed.Status)
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("got events %q, want response.created first and response.completed last", types)
	}

	var args strings.Builder
	var done responses.ResponseFunctionCallArgumentsDoneEvent
	stream = client.Responses.NewStreaming(context.Background(), responsesParams("weather"))
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			done = ev.AsResponseFunctionCallArgumentsDone()
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if args.String() != `{"city":"Oslo"}` || done.Arguments != args.String() {
		t.Errorf("got argument deltas %q, done %q; want the script's input", args.String(), done.Arguments)
	}
	if call := completed.Output[0].AsFunctionCall(); call.Name != "get_weather" || call.Arguments != `{"city":"Oslo"}` {
		t.Errorf("got the completed response's call %q %q", call.Name, call.Arguments)
	}
}

// Faults, each shown by what the SDK does with it.

// TestSDKRetriesAfter429: the SDK waits out retry-after, sends again, and
// the next turn answers.
func TestSDKRetriesAfter429(t *testing.T) {
	script := `turns:
  - fault: {status: 429, headers: {retry-after: "1"}}
  - reply: {text: "second time lucky"}
`
	t.Run("anthropic", func(t *testing.T) {
		r, srv := mock(t, script)
		start := time.Now()
		msg, err := anthropicClient(srv, 1).Messages.New(context.Background(), anthropicParams("hi"))
		if err != nil {
			t.Fatalf("Messages.New: %v", err)
		}
		if elapsed := time.Since(start); elapsed < time.Second {
			t.Errorf("the SDK retried after %v, want at least the 1 s of retry-after", elapsed)
		}
		if msg.Content[0].Text != "second time lucky" {
			t.Errorf("got %q", msg.Content[0].Text)
		}
		want := []string{"turn 1 (TestSDKRetriesAfter429/anthropic.yaml:2): fault 429", "turn 2 (TestSDKRetriesAfter429/anthropic.yaml:3): reply"}
		if diff := cmp.Diff(want, outcomes(r)); diff != "" {
			t.Errorf("journal (-want +got):\n%s", diff)
		}
	})
	t.Run("openai", func(t *testing.T) {
		r, srv := mock(t, script)
		c, err := openaiClient(srv, 1).Chat.Completions.New(context.Background(), chatParams("hi"))
		if err != nil {
			t.Fatalf("Chat.Completions.New: %v", err)
		}
		if c.Choices[0].Message.Content != "second time lucky" || len(r.Requests()) != 2 {
			t.Errorf("got %q after %d requests, want the second turn after 2", c.Choices[0].Message.Content, len(r.Requests()))
		}
	})
}

// TestSDK500Persists: the SDK retries a 500 with its own backoff, then
// gives up with its API error.
func TestSDK500Persists(t *testing.T) {
	script := "turns:\n  - fault: {status: 500}\n    times: 3\n"
	t.Run("anthropic", func(t *testing.T) {
		r, srv := mock(t, script)
		_, err := anthropicClient(srv, 2).Messages.New(context.Background(), anthropicParams("hi"))
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != 500 || aerr.Type() != anthropic.ErrorTypeAPIError {
			t.Fatalf("got %v, want *anthropic.Error 500 api_error", err)
		}
		if n := len(r.Requests()); n != 3 {
			t.Errorf("got %d requests, want 3 (one and two retries)", n)
		}
	})
	t.Run("openai", func(t *testing.T) {
		r, srv := mock(t, script)
		_, err := openaiClient(srv, 1).Responses.New(context.Background(), responsesParams("hi"))
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != 500 || oerr.Type != "server_error" {
			t.Fatalf("got %v, want *openai.Error 500 server_error", err)
		}
		if n := len(r.Requests()); n != 2 {
			t.Errorf("got %d requests, want 2 (one and a retry)", n)
		}
	})
}

func TestSDKOverloaded(t *testing.T) {
	_, srv := mock(t, "turns:\n  - fault: {status: 529}\n")
	_, err := anthropicClient(srv, 0).Messages.New(context.Background(), anthropicParams("hi"))
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != 529 || aerr.Type() != anthropic.ErrorTypeOverloadedError {
		t.Fatalf("got %v, want *anthropic.Error 529 overloaded_error", err)
	}
}

// TestSDKDelay: a delayed answer takes at least the delay; a context
// shorter than the delay ends the call with its deadline.
func TestSDKDelay(t *testing.T) {
	_, srv := mock(t, `turns:
  - fault: {status: 200, delay_ms: 300}
  - fault: {status: 500, delay_ms: 5000}
`)
	client := anthropicClient(srv, 0)
	start := time.Now()
	msg, err := client.Messages.New(context.Background(), anthropicParams("hi"))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if elapsed := time.Since(start); elapsed < 300*time.Millisecond || msg.Content[0].Text == "" {
		t.Errorf("got %q after %v, want the stand-in reply after at least 300ms", msg.Content[0].Text, elapsed)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = client.Messages.New(ctx, anthropicParams("hi"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("the call took %v, want it to end at the 200ms deadline", elapsed)
	}
}

// TestSDKDisconnect: a stream cut part-way ends with an error, not a clean
// end; a JSON answer cut part-way is retried by the SDK.
func TestSDKDisconnect(t *testing.T) {
	t.Run("anthropic stream", func(t *testing.T) {
		_, srv := mock(t, "turns:\n  - fault: {disconnect_after_events: 4}\n")
		stream := anthropicClient(srv, 0).Messages.NewStreaming(context.Background(), anthropicParams("hi"))
		defer stream.Close()
		var msg anthropic.Message
		events := 0
		for stream.Next() {
			msg.Accumulate(stream.Current())
			events++
		}
		if stream.Err() == nil {
			t.Fatalf("the stream ended cleanly after %d events, want an error", events)
		}
		if events != 3 || msg.Content[0].Text == "" {
			t.Errorf("got %d events (ping aside) and text %q before the cut, want 3 and some text", events, msg.Content[0].Text)
		}
	})
	t.Run("openai stream", func(t *testing.T) {
		_, srv := mock(t, "turns:\n  - fault: {disconnect_after_bytes: 300}\n")
		stream := openaiClient(srv, 0).Chat.Completions.NewStreaming(context.Background(), chatParams("hi"))
		defer stream.Close()
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Fatal("the stream ended cleanly, want an error")
		}
	})
	t.Run("anthropic JSON, retried", func(t *testing.T) {
		r, srv := mock(t, "turns:\n  - fault: {disconnect_after_bytes: 20}\n  - reply: {text: whole}\n")
		msg, err := anthropicClient(srv, 1).Messages.New(context.Background(), anthropicParams("hi"))
		if err != nil || msg.Content[0].Text != "whole" || len(r.Requests()) != 2 {
			t.Errorf("got %v after %d requests, want the second turn's answer after 2", err, len(r.Requests()))
		}
	})
}

// TestSDKStall: a stalled stream holds until the client's timeout fires.
func TestSDKStall(t *testing.T) {
	_, srv := mock(t, "turns:\n  - fault: {stall: true}\n")
	start := time.Now() // before the deadline is set, which counts from its own now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stream := anthropicClient(srv, 0).Messages.NewStreaming(ctx, anthropicParams("hi"))
	defer stream.Close()
	events := 0
	for stream.Next() {
		events++
	}
	if err := stream.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); events != 1 || elapsed < 300*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("got %d events and the end after %v, want message_start then the 300ms timeout", events, elapsed)
	}
}

// TestSDKUnmatched: a request no turn fits gets the SDK's API error with
// 400, and is not retried.
func TestSDKUnmatched(t *testing.T) {
	r, srv := mock(t, "turns:\n  - match: {model: other}\n    reply: {text: x}\n")
	var heard []mockllm.Journaled
	r.OnUnmatched = func(j mockllm.Journaled) { heard = append(heard, j) }
	_, err := anthropicClient(srv, 2).Messages.New(context.Background(), anthropicParams("hi"))
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != 400 || aerr.Type() != anthropic.ErrorTypeInvalidRequestError {
		t.Fatalf("got %v, want *anthropic.Error 400 invalid_request_error", err)
	}
	if !strings.Contains(aerr.RawJSON(), `no turn fits this request (model \"claude-sonnet-4-5\", last user message \"hi\")`) {
		t.Errorf("got %s, want it to say why no turn fits", aerr.RawJSON())
	}
	_, err = openaiClient(srv, 2).Chat.Completions.New(context.Background(), chatParams("hi"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != 400 || oerr.Type != "invalid_request_error" {
		t.Fatalf("got %v, want *openai.Error 400 invalid_request_error", err)
	}
	if len(r.Requests()) != 2 || len(heard) != 2 {
		t.Errorf("got %d requests, %d heard by OnUnmatched; want 2 and 2 (no retries)", len(r.Requests()), len(heard))
	}
}

// TestSDKRecordReplay records an SDK's streaming exchange through a
// Recorder and replays the written script offline: the SDK sees the same
// message.
func TestSDKRecordReplay(t *testing.T) {
	_, upstream := mock(t, `turns:
  - reply:
      text: "Recorded once, replayed offline."
      tool_calls: [{name: bash, input: {command: pwd}}]
`)
	rec := mockllm.NewRecorder(nil)
	recording := anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(upstream.URL),
		aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0), aoption.WithHTTPClient(&http.Client{Transport: rec}))
	accumulate := func(c *anthropic.Client) string {
		t.Helper()
		stream := c.Messages.NewStreaming(context.Background(), anthropicParams("where am I?"))
		defer stream.Close()
		var msg anthropic.Message
		for stream.Next() {
			msg.Accumulate(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		return msg.RawJSON()
	}
	live := accumulate(&recording)

	var script bytes.Buffer
	if err := mockllm.WriteScript(&script, rec.Turns()); err != nil {
		t.Fatal(err)
	}
	s, err := mockllm.ParseScript("recorded.yaml", script.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	offline := httptest.NewServer(mockllm.New(s))
	defer offline.Close()
	if replayed := accumulate(anthropicClient(offline, 0)); replayed != live {
		t.Errorf("replayed message\n%s\nwant the recorded one\n%s", replayed, live)
	}
}
