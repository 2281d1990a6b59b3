package mockllm

import (
	"fmt"
	"strings"
)

// Field documents one field of the script format: what `sbx mock --help`
// and docs/mock-llm.md list, made from this one table (a test checks that
// it names every field the decoder reads and every field of the types,
// and that the docs hold its table).
type Field struct {
	// Path names the field from the script's top: turns[].match.model.
	Path string
	// Type is the field's YAML type, such as "string" or "mapping".
	Type string
	// Default is what leaving the field out means: "required" for a
	// field that must be given, "-" for one whose absence says nothing
	// more than its Doc does.
	Default string
	// Doc says what the field means, in a sentence without its period.
	Doc string
}

// Fields are the fields of a script, each after the one it is part of.
var Fields = []Field{
	{"turns", "list of turns", "required", "the turns, in order: each request takes the first turn not used up whose match fits it"},
	{"turns[].match", "mapping", "any request", "what a request must look like to take the turn: every field given must fit (an empty one is an error: leave it out)"},
	{"turns[].match.model", "string", "any model", "the request's model, exactly"},
	{"turns[].match.user", "string", "any text", "a substring of the last user message: the text of the last message from the user that has text (one carrying only tool results is skipped)"},
	{"turns[].match.user_regexp", "string", "any text", "a regular expression (Go syntax, https://pkg.go.dev/regexp/syntax) that must match in the last user message"},
	{"turns[].match.tool_result", "string", "any", "the name of a tool whose result is in the request's last message: an Anthropic tool_result block, an OpenAI tool message, a Responses function_call_output or custom_tool_call_output, a Gemini functionResponse part"},
	{"turns[].match.normalize", "boolean", "false", "true: user and user_regexp are matched against the last user message normalized (dates, times, UUIDs, hex ids, temporary paths and system reminders replaced by placeholders such as <date>), and user is normalized the same way, so that a turn recorded one day fits the next; --record-llm sets it. It needs user or user_regexp"},
	{"turns[].times", "integer or unlimited", "1", "how many requests the turn answers before it is used up; unlimited: every request it fits, so turns after it that it covers never answer"},
	{"turns[].reply", "mapping", "-", "a model's answer, rendered in the request's API, as JSON or as its event stream; a turn has reply or fault, not both"},
	{"turns[].reply.text", "string", "no text", "the answer's text"},
	{"turns[].reply.tool_calls", "list of tool calls", "no calls", "the tools the model calls, after the text"},
	{"turns[].reply.tool_calls[].id", "string", "generated", "the call's id; left out, one is made for each answer (toolu_... for Anthropic, call_... for OpenAI; none for Gemini, whose calls have no id)"},
	{"turns[].reply.tool_calls[].name", "string", "required", "the tool's name"},
	{"turns[].reply.tool_calls[].input", "mapping", "{}", "the arguments of a function tool (a JSON object), sent as the API sends arguments"},
	{"turns[].reply.tool_calls[].custom", "string", "-", "makes this a call of a custom tool (OpenAI Responses only, such as Codex's apply_patch) with this input text, in place of input: a custom_tool_call"},
	{"turns[].reply.stop_reason", "string", "end_turn, or tool_use with tool calls", "why the model stopped, in any API's terms (end_turn/stop/completed, tool_use/tool_calls, max_tokens/length/incomplete, refusal/content_filter), translated to the request's API; other names are sent as they are"},
	{"turns[].reply.usage", "mapping", "estimated", "the token usage reported; left out, a token per four bytes of the request body and of the answer"},
	{"turns[].reply.usage.input_tokens", "integer", "0", "input (prompt) tokens reported"},
	{"turns[].reply.usage.output_tokens", "integer", "0", "output (completion) tokens reported"},
	{"turns[].reply.chunk_size", "integer", fmt.Sprint(DefaultChunkSize), "how many characters of text, of a tool call's JSON input or of a custom call's input a streamed delta carries"},
	{"turns[].reply.chunk_delay_ms", "integer", "0", "milliseconds to wait between streamed events"},
	{"turns[].reply.raw", "mapping", "-", "an answer recorded from a real API (--record-llm writes it): a request of that API that streams when the recording does gets it byte for byte, any other the answer rendered from the fields above"},
	{"turns[].reply.raw.dialect", "string", "required", "the API it was recorded from: anthropic, openai-chat, openai-responses or gemini"},
	{"turns[].reply.raw.events", "list of strings", "-", "a recorded event stream, one entry per event (with its blank line); give events or body"},
	{"turns[].reply.raw.body", "string", "-", "a recorded JSON answer; give events or body"},
	{"turns[].fault", "mapping", "-", "what goes wrong in place of an answer; a turn has reply or fault, not both"},
	{"turns[].fault.status", "integer", "200 with a cut or stall", "the HTTP status: 200 (a stand-in reply cut short) or 400 to 599, such as 429, 500 or 529"},
	{"turns[].fault.headers", "mapping of strings", "none", "headers added to the answer, such as retry-after"},
	{"turns[].fault.body", "string", "the API's error", "replaces the answer's body; left out, an error in the API's shape (a stand-in reply for 200)"},
	{"turns[].fault.delay_ms", "integer", "0", "milliseconds to wait before answering"},
	{"turns[].fault.disconnect_after_bytes", "integer", "-", "close the connection after this many bytes of the body (0: right after the headers), with no proper end"},
	{"turns[].fault.disconnect_after_events", "integer", "-", "close the connection after this many events of a stream (a JSON body is one event); not with disconnect_after_bytes"},
	{"turns[].fault.stall", "boolean", "false", "stop sending at the cut point (the first event of a stream, the headers otherwise, unless disconnect_after_* says) and hold the connection open until the client gives up or the mock is reset"},
}

// FieldReference returns Fields as text for a terminal: each field's
// path, type and default on a line, what it means indented below.
func FieldReference() string {
	var b strings.Builder
	for _, f := range Fields {
		switch f.Default {
		case "required":
			fmt.Fprintf(&b, "  %s (%s, required)\n", f.Path, f.Type)
		case "-":
			fmt.Fprintf(&b, "  %s (%s)\n", f.Path, f.Type)
		default:
			fmt.Fprintf(&b, "  %s (%s; default: %s)\n", f.Path, f.Type, f.Default)
		}
		fmt.Fprintf(&b, "      %s\n", f.Doc)
	}
	return b.String()
}

// FieldMarkdown returns Fields as a Markdown table, as docs/mock-llm.md
// holds it.
func FieldMarkdown() string {
	var b strings.Builder
	b.WriteString("| field | type | default | meaning |\n|---|---|---|---|\n")
	for _, f := range Fields {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Path, f.Type, f.Default, markdownCell(f.Doc))
	}
	return b.String()
}

// markdownCell escapes what would end a table cell.
func markdownCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
