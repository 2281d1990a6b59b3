package main

import (
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestMockValidate: sbx mock validate prints "SCRIPT: ok (N turns)" for
// each valid script, each problem as "SCRIPT:LINE: message" (exit 1),
// warnings of turns that never answer without failing, and with --api the
// custom tool calls that API cannot answer.
func TestMockValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", "turns:\n  - match: {user: hi}\n    reply: {text: hello}\n  - reply: {text: bye}\n    times: unlimited\n")
	bad := writeFile(t, "bad.yaml", "turns:\n  - reply: {text: ok}\n  - reply: {txet: no}\n")
	unreachable := writeFile(t, "unreachable.yaml", "turns:\n  - reply: {text: a}\n    times: unlimited\n  - match: {user: hi}\n    reply: {text: b}\n")
	codex := writeFile(t, "codex.yaml", "turns:\n  - reply:\n      tool_calls: [{name: apply_patch, custom: \"*** Begin Patch\\n*** End Patch\\n\"}]\n")
	for _, tc := range []struct {
		name         string
		args         []string
		code         int
		stdout       []string
		stderr       []string
		stderrAbsent []string
	}{
		{"valid", []string{good}, exitOK, []string{good + ": ok (2 turns)\n"}, nil, []string{"warning"}},
		{"invalid", []string{bad}, exitFailure, nil, []string{bad + `:3: turn 2: reply: unknown field "txet"; did you mean "text"?`}, []string{"sbx: "}},
		{"every script", []string{bad, good}, exitFailure, []string{good + ": ok (2 turns)"}, []string{bad + ":3:"}, nil},
		{"unreachable turn", []string{unreachable}, exitOK, []string{unreachable + ": ok (2 turns)"},
			[]string{unreachable + ":4: warning: turn 2 can never answer: turn 1 (" + unreachable + ":2) answers every request it fits (times: unlimited) and has no match; move this turn before it, or narrow its match"}, nil},
		{"missing", []string{good + ".nope"}, exitFailure, nil, []string{"sbx: mock LLM script " + good + ".nope: no such file or directory; give the path of a script (YAML or JSON)"}, nil},
		{"custom call for Anthropic", []string{"--api", "anthropic", codex}, exitFailure, nil,
			[]string{codex + ":2: turn 1: reply.tool_calls: tool call 1 (apply_patch) is a custom tool call, which only the OpenAI Responses API has, not the Anthropic Messages API; for this API call a function tool (input: in place of custom:)"}, nil},
		{"custom call for Responses", []string{"--api", "openai-responses", codex}, exitOK, []string{codex + ": ok (1 turn)"}, nil, nil},
		{"custom call, API unknown", []string{codex}, exitOK, []string{codex + ": ok (1 turn)"}, nil, nil},
		{"unknown API", []string{"--api", "bard", good}, exitUsage, nil, []string{`--api "bard" is not an API the mock speaks: want one of anthropic, openai-chat, openai-responses, gemini`}, nil},
		{"no script", nil, exitUsage, nil, []string{"sbx mock validate takes SCRIPT..."}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, append([]string{"mock", "validate"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("got exit %d, want %d (stdout %q, stderr %q)", code, tc.code, stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("got stdout %q, want %q in it", stdout, want)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("got stderr %q, want %q in it", stderr, want)
				}
			}
			for _, absent := range tc.stderrAbsent {
				if strings.Contains(stderr, absent) {
					t.Errorf("got stderr %q, want no %q in it", stderr, absent)
				}
			}
		})
	}
}

// TestMockValidateStdin: - reads the script from stdin.
func TestMockValidateStdin(t *testing.T) {
	var out, errOut strings.Builder
	root := newRootCmd()
	root.SetArgs([]string{"mock", "validate", "-"})
	root.SetIn(strings.NewReader("turns: [{reply: {text: x}}, {reply: {text: y}}]\n"))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if code := execute(t.Context(), root); code != exitOK || out.String() != "stdin: ok (2 turns)\n" {
		t.Errorf("got exit %d, stdout %q, stderr %q; want stdin: ok (2 turns)", code, out.String(), errOut.String())
	}
}

// TestMockHelpListsFields: sbx mock --help lists every field of a script
// with its meaning, from mockllm.Fields.
func TestMockHelpListsFields(t *testing.T) {
	stdout, _, code := runCLI(t, "mock", "--help")
	if code != exitOK {
		t.Fatalf("got exit %d", code)
	}
	for _, f := range mockllm.Fields {
		if !strings.Contains(stdout, "  "+f.Path+" (") || !strings.Contains(stdout, f.Doc+"\n") {
			t.Errorf("sbx mock --help does not list %s with its meaning", f.Path)
		}
	}
	if !strings.Contains(stdout, "validate") {
		t.Errorf("sbx mock --help does not list the validate command")
	}
}
