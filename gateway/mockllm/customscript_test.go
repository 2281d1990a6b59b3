package mockllm

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCustomToolCallScript: custom: is read as a custom call's input,
// written back by WriteScript, and refused with input: or in its place
// as input; CheckAPI refuses it for the APIs that have no custom tools.
func TestCustomToolCallScript(t *testing.T) {
	const script = `turns:
  - match: {model: gpt-5-codex}
    reply:
      tool_calls:
        - {name: apply_patch, custom: "*** Begin Patch\n*** End Patch\n"}
        - {name: shell, input: {command: [ls]}}
        - {name: empty, custom: ""}
  - reply: {text: done}
`
	s, err := ParseScript("s.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	calls := s.Turns[0].Reply.ToolCalls
	if calls[0].Custom == nil || *calls[0].Custom != "*** Begin Patch\n*** End Patch\n" || calls[0].Input != nil || calls[1].Custom != nil || calls[2].Custom == nil || *calls[2].Custom != "" {
		t.Fatalf("got calls %+v, want the custom inputs", calls)
	}
	var b strings.Builder
	if err := WriteScript(&b, s.Turns); err != nil {
		t.Fatal(err)
	}
	back, err := ParseScript("s.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("reading back %s: %v", b.String(), err)
	}
	if diff := cmp.Diff(s.Turns[0].Reply, back.Turns[0].Reply); diff != "" {
		t.Errorf("written and read back (-want +got):\n%s", diff)
	}

	for _, d := range []Dialect{Anthropic, ChatCompletions} {
		err := CheckAPI(s.Turns, d)
		if !errors.Is(err, ErrInvalidScript) {
			t.Fatalf("CheckAPI(%s): got %v, want ErrInvalidScript", d, err)
		}
		want := "s.yaml:2: turn 1: reply.tool_calls: tool call 1 (apply_patch) is a custom tool call, which only the OpenAI Responses API has, not " + apiNames[d] +
			"; for this API call a function tool (input: in place of custom:), or give its requests a turn of their own, matched by model"
		if got := strings.Split(err.Error(), "\n"); len(got) != 2 || got[0] != want {
			t.Errorf("CheckAPI(%s): got\n%s\nwant two errors, the first\n%s", d, err, want)
		}
	}
	if err := CheckAPI(s.Turns, Responses); err != nil {
		t.Errorf("CheckAPI(Responses): got %v, want nil", err)
	}

	for _, tc := range []struct{ name, call, want string }{
		{"both", `{name: f, input: {a: 1}, custom: "x"}`, "s.yaml:4: turn 1: reply.tool_calls: tool call 1: give input (a function tool's arguments) or custom (a custom tool's input text), not both"},
		{"input text", `{name: f, input: "*** Begin Patch"}`, "s.yaml:5: turn 1: reply: tool call 1: input must be a mapping of argument names to values; for the input text of a custom tool (OpenAI Responses), write custom: in its place"},
		{"custom not text", `{name: f, custom: {a: 1}}`, "s.yaml:5: turn 1: reply: tool call 1: custom: want a string, got a list or mapping; put the value in quotes"},
	} {
		_, err := ParseScript("s.yaml", []byte("turns:\n  - reply:\n      text: x\n      tool_calls:\n        - "+tc.call+"\n"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestCustomToolCallReadBack: the Recorder's reading of an answer (JSON
// or stream) gives back a custom call with its input.
func TestCustomToolCallReadBack(t *testing.T) {
	_, srv := serve(t, "turns:\n  - reply:\n      tool_calls: [{name: apply_patch, custom: \"patch\\n\"}]\n    times: 2\n")
	for _, stream := range []bool{false, true} {
		_, body, err := post(t, srv, "POST", "/v1/responses", userBody(Responses, "m", "hi", stream))
		if err != nil {
			t.Fatal(err)
		}
		var r *Reply
		if stream {
			r = replyOfStream(Responses, splitEvents([]byte(body)))
		} else {
			r = replyOfJSON(Responses, []byte(body))
		}
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "apply_patch" || r.ToolCalls[0].Custom == nil || *r.ToolCalls[0].Custom != "patch\n" {
			t.Errorf("stream %t: got calls %+v, want apply_patch with its input", stream, r.ToolCalls)
		}
	}
}
