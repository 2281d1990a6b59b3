package mockllm_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// patch is a custom tool's input as Codex's apply_patch takes it: free
// text, with the line breaks and quotes JSON would escape.
const patch = "*** Begin Patch\n*** Add File: hello.txt\n+say \"hi\"\n*** End Patch\n"

// customScript calls apply_patch, a custom tool, then answers its result.
const customScript = `turns:
  - match: {user: patch}
    reply:
      text: "Patching."
      tool_calls:
        - name: apply_patch
          custom: "*** Begin Patch\n*** Add File: hello.txt\n+say \"hi\"\n*** End Patch\n"
      chunk_size: 7
    times: 2
  - match: {tool_result: apply_patch}
    reply: {text: "Patched."}
`

// customParams asks with Codex's kind of tool: a custom tool with a
// grammar.
func customParams(input string) responses.ResponseNewParams {
	tool := responses.ToolParamOfCustom("apply_patch")
	tool.OfCustom.Format = shared.CustomToolInputFormatParamOfGrammar(`start: "*** Begin Patch" /(.|\n)*/`, "lark")
	return responses.ResponseNewParams{
		Model: "gpt-5-codex",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)},
		Tools: []responses.ToolUnionParam{tool},
	}
}

// TestOpenAIResponsesSDKCustomToolCall: a script's custom tool call is a
// custom_tool_call output item the SDK decodes as one, with the script's
// input, in a JSON answer and in a stream (its input in
// response.custom_tool_call_input deltas); its result, a
// custom_tool_call_output, takes a turn that matches tool_result.
func TestOpenAIResponsesSDKCustomToolCall(t *testing.T) {
	r, srv := mock(t, customScript)
	client := openaiClient(srv, 0)

	resp, err := client.Responses.New(context.Background(), customParams("patch it"))
	if err != nil {
		t.Fatalf("Responses.New: %v", err)
	}
	if len(resp.Output) != 2 {
		t.Fatalf("got %d output items, want a message and a custom tool call", len(resp.Output))
	}
	call, ok := resp.Output[1].AsAny().(responses.ResponseCustomToolCall)
	if !ok {
		t.Fatalf("got output item %T (%s), want a responses.ResponseCustomToolCall", resp.Output[1].AsAny(), resp.Output[1].RawJSON())
	}
	if call.Name != "apply_patch" || call.Input != patch || !strings.HasPrefix(call.CallID, "call_") || !strings.HasPrefix(call.ID, "ctc_") {
		t.Errorf("got custom call %q input %q call_id %q id %q, want apply_patch with the script's input", call.Name, call.Input, call.CallID, call.ID)
	}
	if resp.OutputText() != "Patching." || resp.Status != "completed" {
		t.Errorf("got text %q status %q, want %q completed", resp.OutputText(), resp.Status, "Patching.")
	}

	var deltas strings.Builder
	var done responses.ResponseCustomToolCallInputDoneEvent
	var added, finished responses.ResponseCustomToolCall
	var completed responses.Response
	stream := client.Responses.NewStreaming(context.Background(), customParams("patch it"))
	for stream.Next() {
		switch ev := stream.Current().AsAny().(type) {
		case responses.ResponseCustomToolCallInputDeltaEvent:
			deltas.WriteString(ev.Delta)
		case responses.ResponseCustomToolCallInputDoneEvent:
			done = ev
		case responses.ResponseOutputItemAddedEvent:
			if c, ok := ev.Item.AsAny().(responses.ResponseCustomToolCall); ok {
				added = c
			}
		case responses.ResponseOutputItemDoneEvent:
			if c, ok := ev.Item.AsAny().(responses.ResponseCustomToolCall); ok {
				finished = c
			}
		case responses.ResponseCompletedEvent:
			completed = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if deltas.String() != patch || done.Input != patch {
		t.Errorf("got input deltas %q, done %q; want the script's input %q", deltas.String(), done.Input, patch)
	}
	if added.Name != "apply_patch" || added.Input != "" || finished.Input != patch || done.ItemID != finished.ID || finished.CallID == "" {
		t.Errorf("got item added %+v, done %+v (input done for item %q); want apply_patch, its input in the done item", added, finished, done.ItemID)
	}
	if len(completed.Output) != 2 || completed.Output[1].AsCustomToolCall().Input != patch {
		t.Errorf("got the completed response's output %s, want the custom call with its input", completed.RawJSON())
	}

	out := responses.ResponseInputItemParamOfCustomToolCallOutput(call.CallID, "Done!")
	params := customParams("")
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("patch it", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfCustomToolCall(call.CallID, call.Input, call.Name),
		out,
	}}
	resp, err = client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatalf("the custom tool's result: %v", err)
	}
	if got := resp.OutputText(); got != "Patched." {
		t.Errorf("got %q after the custom_tool_call_output, want %q (outcomes %q)", got, "Patched.", outcomes(r))
	}
}

// TestCustomToolCallOtherAPIs: a turn with a custom tool call answers
// Anthropic and Chat Completions requests with an error that names the
// turn and the fix, which the SDKs do not retry; the turn stays for a
// Responses request.
func TestCustomToolCallOtherAPIs(t *testing.T) {
	r, srv := mock(t, customScript)
	_, err := anthropicClient(srv, 2).Messages.New(context.Background(), anthropicParams("patch it"))
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.Error(), "custom tool call, which only the OpenAI Responses API has") || !strings.Contains(aerr.Error(), "turn 1 (") {
		t.Errorf("Anthropic: got %v, want a 400 naming the turn and the custom tool call", err)
	}
	_, err = openaiClient(srv, 2).Chat.Completions.New(context.Background(), chatParams("patch it"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusBadRequest || !strings.Contains(oerr.Message, "input: in place of custom:") {
		t.Errorf("Chat Completions: got %v, want a 400 naming the fix", err)
	}
	if n := len(r.Requests()); n != 2 {
		t.Errorf("got %d requests in the journal, want 2 (no retries)", n)
	}
	// The turn (times: 2) was not used by the refusals.
	for i := range 2 {
		if _, err := openaiClient(srv, 0).Responses.New(context.Background(), customParams("patch it")); err != nil {
			t.Fatalf("Responses request %d: %v", i+1, err)
		}
	}
	if got := outcomes(r)[3]; !strings.HasPrefix(got, "turn 1 (") || !strings.HasSuffix(got, ": reply") {
		t.Errorf("got outcome %q for the second Responses request, want turn 1's reply", got)
	}
}

// TestCustomToolCallRaw: an answer with a custom tool call rendered raw
// over HTTP carries the events named as the API names them.
func TestCustomToolCallRaw(t *testing.T) {
	_, srv := mock(t, customScript)
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","stream":true,"input":"patch"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"custom_tool_call\",\"id\":\"ctc_",
		"\"status\":\"in_progress\",\"call_id\":\"call_",
		"\"input\":\"\",\"name\":\"apply_patch\"}",
		"event: response.custom_tool_call_input.delta\ndata: {\"type\":\"response.custom_tool_call_input.delta\",\"item_id\":\"ctc_",
		"\"output_index\":1,\"delta\":\"*** Beg\",\"sequence_number\":",
		"event: response.custom_tool_call_input.done\ndata: {\"type\":\"response.custom_tool_call_input.done\",\"item_id\":\"ctc_",
		"\"output_index\":1,\"input\":\"*** Begin Patch\\n*** Add File: hello.txt\\n+say \\\"hi\\\"\\n*** End Patch\\n\",\"sequence_number\":",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the stream has no %q:\n%s", want, b)
		}
	}
}
