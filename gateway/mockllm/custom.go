package mockllm

import "fmt"

// Custom tool calls (ToolCall.Custom) are the OpenAI Responses API's
// alone: a custom_tool_call output item whose input is free text (a tool
// defined with a grammar or text format, such as Codex's apply_patch),
// answered by a custom_tool_call_output item. The other APIs have no such
// call, so a turn with one cannot answer them: CheckAPI says so when the
// API is known as a script is read, and the Responder answers such a
// request with an error that says the same.

// apiNames name the dialects in messages.
var apiNames = map[Dialect]string{
	Anthropic:       "the Anthropic Messages API",
	ChatCompletions: "the OpenAI Chat Completions API",
	Responses:       "the OpenAI Responses API",
	Gemini:          "the Gemini API",
}

// apiProblems returns why reply r cannot be rendered in dialect d: its
// custom tool calls, unless d is Responses.
func apiProblems(d Dialect, r *Reply) []problem {
	if r == nil || d == Responses {
		return nil
	}
	var ps []problem
	for i, c := range r.ToolCalls {
		if c.Custom == nil {
			continue
		}
		ps = append(ps, problem{"reply.tool_calls", fmt.Sprintf(
			"tool call %d (%s) is a custom tool call, which only the OpenAI Responses API has, not %s; "+
				"for this API call a function tool (input: in place of custom:), or give its requests a turn of their own, matched by model", i+1, c.Name, apiNames[d])})
	}
	return ps
}

// ParseDialect returns the dialect named s, as a recorded reply's
// raw.dialect names it: anthropic, openai-chat, openai-responses or
// gemini.
func ParseDialect(s string) (Dialect, error) {
	if d := Dialect(s); knownDialect(d) {
		return d, nil
	}
	return "", fmt.Errorf("%q is not an API the mock speaks: want one of %s", s, dialectList())
}

// CheckAPI checks that every reply of turns can be rendered in dialect d,
// for a script whose API is known as it is read: a custom tool call
// answers only the Responses API. It returns an ErrorList whose entries
// start with each turn's Origin (or its position), or nil.
func CheckAPI(turns []Turn, d Dialect) error {
	var errs ErrorList
	for i := range turns {
		for _, p := range apiProblems(d, turns[i].Reply) {
			msg := fmt.Sprintf("turn %d: %s: %s", i+1, p.field, p.msg)
			if o := turns[i].Origin; o != "" {
				msg = o + ": " + msg
			}
			errs = append(errs, &ParseError{Msg: msg, Err: ErrInvalidScript})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
