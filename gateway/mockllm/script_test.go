package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

func intp(n int) *int { return &n }

// everyField is a script that uses every field of the format.
const everyField = `turns:
  - match:
      model: claude-sonnet-4-5
      user: list the files
      user_regexp: "(?i)files?"
      tool_result: bash
    reply:
      text: "Let me look.\n"
      tool_calls:
        - id: toolu_01
          name: bash
          input: {command: ls -la, timeout: 30, flags: [1, 2.5, true, null], nested: {b: 1, a: "x"}}
        - name: read_file
      stop_reason: tool_use
      usage: {input_tokens: 120, output_tokens: 9}
      chunk_size: 4
      chunk_delay_ms: 5
    times: 2
  - reply:
      raw:
        dialect: anthropic
        events:
          - "event: ping\ndata: {}\n\n"
  - reply:
      raw: {dialect: openai-chat, body: '{"id":"x"}'}
  - fault:
      status: 429
      headers: {retry-after: "1", x-should-retry: "true"}
      body: '{"error":{"message":"slow down"}}'
      delay_ms: 100
  - fault: {status: 200, disconnect_after_bytes: 0}
  - fault: {disconnect_after_events: 3, stall: true}
`

func TestParseScript(t *testing.T) {
	got, err := ParseScript("s.yaml", []byte(everyField))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	want := &Script{Turns: []Turn{
		{
			Match: &Match{Model: "claude-sonnet-4-5", User: "list the files", UserRegexp: "(?i)files?", ToolResult: "bash"},
			Reply: &Reply{
				Text: "Let me look.\n",
				ToolCalls: []ToolCall{
					{ID: "toolu_01", Name: "bash", Input: json.RawMessage(`{"command":"ls -la","timeout":30,"flags":[1,2.5,true,null],"nested":{"b":1,"a":"x"}}`)},
					{Name: "read_file"},
				},
				StopReason:   "tool_use",
				Usage:        &Usage{InputTokens: 120, OutputTokens: 9},
				ChunkSize:    4,
				ChunkDelayMS: 5,
			},
			Times:  2,
			Origin: "s.yaml:2",
		},
		{Reply: &Reply{Raw: &Raw{Dialect: Anthropic, Events: []string{"event: ping\ndata: {}\n\n"}}}, Origin: "s.yaml:19"},
		{Reply: &Reply{Raw: &Raw{Dialect: ChatCompletions, Body: `{"id":"x"}`}}, Origin: "s.yaml:24"},
		{Fault: &Fault{
			Status:  429,
			Headers: map[string]string{"retry-after": "1", "x-should-retry": "true"},
			Body:    `{"error":{"message":"slow down"}}`,
			DelayMS: 100,
		}, Origin: "s.yaml:26"},
		{Fault: &Fault{Status: 200, DisconnectAfterBytes: intp(0)}, Origin: "s.yaml:31"},
		{Fault: &Fault{DisconnectAfterEvents: intp(3), Stall: true}, Origin: "s.yaml:32"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseScript (-want +got):\n%s", diff)
	}
}

func TestParseScriptJSON(t *testing.T) {
	doc := `{"turns": [
  {"match": {"model": "gpt-5"}, "reply": {"text": "hi", "tool_calls": [{"name": "f", "input": {"a": 1.50}}]}},
  {"fault": {"status": 500}}
]}`
	got, err := ParseScript("s.json", []byte(doc))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	want := &Script{Turns: []Turn{
		{Match: &Match{Model: "gpt-5"}, Reply: &Reply{Text: "hi", ToolCalls: []ToolCall{{Name: "f", Input: json.RawMessage(`{"a":1.50}`)}}}, Origin: "s.json:2"},
		{Fault: &Fault{Status: 500}, Origin: "s.json:3"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseScript (-want +got):\n%s", diff)
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string // the errors, one a line
	}{
		{"empty", "", "s.yaml: empty document; a script starts with turns:"},
		{"unknown top field", "turn:\n  - reply: {}\n", `s.yaml:1: script: unknown field "turn"; did you mean "turns"? (known fields: turns)`},
		{"neither reply nor fault", "turns:\n  - match: {model: m}\n", "s.yaml:2: turn 1: a turn needs a reply or a fault"},
		{"both", "turns:\n  - reply: {text: a}\n    fault: {status: 500}\n", "s.yaml:3: turn 1: fault: a turn has a reply or a fault, not both; put them in two turns"},
		{"typo in reply", "turns:\n  - reply: {txt: a}\n", `s.yaml:2: turn 1: reply: unknown field "txt"; did you mean "text"? (known fields: text, tool_calls, stop_reason, usage, chunk_size, chunk_delay_ms, raw)`},
		{"number for text", "turns:\n  - reply:\n      text: 12\n", "s.yaml:3: turn 1: reply: text: want a string, got !!int; put the value in quotes"},
		{"string for status", "turns:\n  - fault: {status: \"429\"}\n", `s.yaml:2: turn 1: fault: status: want a whole number, got "429"`},
		{"bad status", "turns:\n  - fault:\n      status: 302\n", "s.yaml:3: turn 1: fault.status: 302: want 200 (a reply cut short) or an error from 400 to 599"},
		{"fault says nothing", "turns:\n  - fault: {delay_ms: 10}\n", "s.yaml:2: turn 1: fault: say what goes wrong: a status (such as 429 or 500), disconnect_after_bytes, disconnect_after_events or stall"},
		{"two cuts", "turns:\n  - fault:\n      disconnect_after_bytes: 1\n      disconnect_after_events: 1\n", "s.yaml:4: turn 1: fault.disconnect_after_events: give disconnect_after_bytes or disconnect_after_events, not both"},
		{"stall quoted", "turns:\n  - fault: {stall: \"yes\"}\n", `s.yaml:2: turn 1: fault: stall: want true or false without quotes, got "yes"`},
		{"bad regexp", "turns:\n  - match:\n      user_regexp: \"(\"\n    reply: {}\n", "s.yaml:3: turn 1: match.user_regexp: error parsing regexp: missing closing ): `(`; write a Go regular expression (https://pkg.go.dev/regexp/syntax)"},
		{"empty match field", "turns:\n  - match: {model: \"\"}\n    reply: {}\n", "s.yaml:2: turn 1: match: model is empty; leave it out to match any request"},
		{"tool call without name", "turns:\n  - reply:\n      tool_calls:\n        - input: {a: 1}\n", "s.yaml:3: turn 1: reply.tool_calls: tool call 1: name is missing; say which tool the model calls"},
		{"input not a mapping", "turns:\n  - reply:\n      tool_calls:\n        - {name: f, input: [1]}\n", "s.yaml:4: turn 1: reply: tool call 1: input must be a mapping of argument names to values"},
		{"input infinity", "turns:\n  - reply:\n      tool_calls:\n        - name: f\n          input: {a: .inf}\n", `s.yaml:5: turn 1: reply: tool call 1: input: ".inf" is not a number JSON can hold; put it in quotes for a string`},
		{"chunk size zero", "turns:\n  - reply: {chunk_size: 0}\n", "s.yaml:2: turn 1: reply: chunk_size: 0: want 1 or more (leave it out for 16)"},
		{"times zero", "turns:\n  - reply: {}\n    times: 0\n", "s.yaml:3: turn 1: times: 0: want 1 or more, or unlimited (leave it out for 1)"},
		{"raw dialect", "turns:\n  - reply:\n      raw: {dialect: bard, body: x}\n", "s.yaml:3: turn 1: reply.raw.dialect: \"bard\" is not a dialect; want one of anthropic, openai-chat, openai-responses, gemini"},
		{"header twice", "turns:\n  - fault:\n      status: 429\n      headers: {retry-after: \"1\", Retry-After: \"2\"}\n", `s.yaml:4: turn 1: fault: headers: header "Retry-After" given twice (first on line 4); keep one`},
		{"alias", "turns:\n  - &a {reply: {}}\n  - *a\n", "s.yaml:3: YAML aliases are not supported; write the value out"},
		{"tabs", "turns:\n\t- reply: {}\n", "s.yaml:2: not valid YAML: found character that cannot start any token; YAML does not allow tabs for indentation, use spaces"},
		{"two documents", "turns: []\n---\nturns: []\n", "s.yaml:2: more than one YAML document; keep one script per file"},
		{"two problems", "turns:\n  - reply: {text: 1}\n  - fault: {status: 99}\n", "s.yaml:2: turn 1: reply: text: want a string, got !!int; put the value in quotes\ns.yaml:3: turn 2: fault.status: 99: want 200 (a reply cut short) or an error from 400 to 599"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScript("s.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("ParseScript gave %+v, want an error", s)
			}
			if !errors.Is(err, ErrInvalidScript) {
				t.Errorf("errors.Is(err, ErrInvalidScript) = false for %v", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("got error\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestParseScriptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte("turns:\n  - reply: {text: hi}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ParseScriptFile(path)
	if err != nil {
		t.Fatalf("ParseScriptFile: %v", err)
	}
	if got, want := s.Turns[0].Origin, path+":2"; got != want {
		t.Errorf("got origin %q, want %q", got, want)
	}
	if _, err := ParseScriptFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v for a missing file, want fs.ErrNotExist", err)
	}
}

func TestDecodeTurns(t *testing.T) {
	want := []Turn{{Reply: &Reply{Text: "a"}}, {Fault: &Fault{Status: 500}}}
	docs := map[string]string{
		"script json": `{"turns": [{"reply": {"text": "a"}}, {"fault": {"status": 500}}]}`,
		"list json":   `[{"reply": {"text": "a"}}, {"fault": {"status": 500}}]`,
		"list yaml":   "- reply: {text: a}\n- fault: {status: 500}\n",
		"script yaml": "turns:\n  - reply: {text: a}\n  - fault: {status: 500}\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeTurns("expect", []byte(doc))
			if err != nil {
				t.Fatalf("DecodeTurns: %v", err)
			}
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Turn{}, "Origin")); diff != "" {
				t.Errorf("DecodeTurns (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("one turn", func(t *testing.T) {
		got, err := DecodeTurns("expect", []byte(`{"match": {"user": "hi"}, "reply": {"text": "a"}}`))
		if err != nil {
			t.Fatalf("DecodeTurns: %v", err)
		}
		want := []Turn{{Match: &Match{User: "hi"}, Reply: &Reply{Text: "a"}, Origin: "expect:1"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DecodeTurns (-want +got):\n%s", diff)
		}
	})
	t.Run("bad", func(t *testing.T) {
		_, err := DecodeTurns("expect", []byte(`{"reply": {"text": "a"}, "fault": {"status": 500}}`))
		if want := "expect:1: turn: fault: a turn has a reply or a fault, not both; put them in two turns"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	})
}

func TestCheckTurns(t *testing.T) {
	err := CheckTurns([]Turn{
		{Reply: &Reply{Text: "fine"}},
		{Reply: &Reply{ToolCalls: []ToolCall{{Name: "f", Input: json.RawMessage(`[1]`)}}}, Origin: "go"},
		{Fault: &Fault{Status: 700}},
		{Reply: &Reply{Raw: &Raw{Dialect: Anthropic, Body: "\xff"}}},
	})
	want := "turn 2 (go): reply.tool_calls: tool call 1: input must be a JSON object of argument names to values\n" +
		"turn 3: fault.status: 700: want 200 (a reply cut short) or an error from 400 to 599\n" +
		"turn 4: reply.raw.body: not valid UTF-8; a script holds text"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want\n%s", err, want)
	}
}

// TestWriteScript writes turns and reads them back: every field, and
// strings that only survive exactly quoted.
func TestWriteScript(t *testing.T) {
	orig, err := ParseScript("s.yaml", []byte(everyField))
	if err != nil {
		t.Fatal(err)
	}
	tricky := []string{
		"event: a\r\ndata: {\"x\": \"tab\\there\"}\r\n\r\n",
		"data: trailing spaces   \n\n",
		"\n",
		"data: ünïcødé ✓ \"quotes\" 'single' # not a comment: - [x]\n\n",
		"data: " + strings.Repeat("long line with spaces ", 20) + "\n\n",
		": comment\n\n\n",
		"no terminator",
		"data: \x1b[31mcontrol\x7f\n\n",
		"data: true\n\n",
	}
	turns := append(orig.Turns,
		Turn{Reply: &Reply{Raw: &Raw{Dialect: Responses, Events: tricky}}},
		Turn{Reply: &Reply{Text: "multi\nline\n\n  indented\ttab  \n", Raw: &Raw{Dialect: Anthropic, Body: "{\n  \"a\": 1\n}\n"}}},
		Turn{Reply: &Reply{Text: "true", ToolCalls: []ToolCall{{Name: "f", Input: json.RawMessage(`{"s":"123","b":"true","n":null,"e":{},"l":[],"f":1e5}`)}}}},
		Turn{Match: &Match{User: "- starts with a dash"}, Reply: &Reply{}},
	)
	var b bytes.Buffer
	if err := WriteScript(&b, turns); err != nil {
		t.Fatalf("WriteScript: %v", err)
	}
	got, err := ParseScript("written.yaml", b.Bytes())
	if err != nil {
		t.Fatalf("ParseScript of what WriteScript wrote: %v\n%s", err, b.String())
	}
	if diff := cmp.Diff(turns, got.Turns, cmpopts.IgnoreFields(Turn{}, "Origin")); diff != "" {
		t.Errorf("turns written and read back (-want +got):\n%s\nscript:\n%s", diff, b.String())
	}
}

func TestWriteScriptRefusesBadTurns(t *testing.T) {
	err := WriteScript(&bytes.Buffer{}, []Turn{{}})
	if !errors.Is(err, ErrInvalidScript) {
		t.Errorf("got %v, want ErrInvalidScript", err)
	}
}

// TestMarshalYAML: yaml.Marshal of a Script writes what ParseScript reads.
func TestMarshalYAML(t *testing.T) {
	orig, err := ParseScript("s.yaml", []byte(everyField))
	if err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(orig)
	if err != nil {
		t.Fatalf("yaml.Marshal: %v", err)
	}
	got, err := ParseScript("marshaled.yaml", data)
	if err != nil {
		t.Fatalf("ParseScript of yaml.Marshal's output: %v\n%s", err, data)
	}
	if diff := cmp.Diff(orig, got, cmpopts.IgnoreFields(Turn{}, "Origin")); diff != "" {
		t.Errorf("marshaled and read back (-want +got):\n%s", diff)
	}
	if _, err := yaml.Marshal(&Script{Turns: []Turn{{}}}); !errors.Is(err, ErrInvalidScript) {
		t.Errorf("yaml.Marshal of a bad script: got %v, want ErrInvalidScript", err)
	}
}
