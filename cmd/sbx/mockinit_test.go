package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestMockInit: sbx mock init writes each agent's starter script to
// standard output or to a new FILE, refuses to replace a file (or follow
// a link), and makes an unknown or missing --agent a usage error.
func TestMockInit(t *testing.T) {
	dir := t.TempDir()
	for _, agent := range starterAgents {
		want, err := starterScript(agent)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCLI(t, "mock", "init", "--agent", agent)
		if code != 0 || stdout != string(want) || stderr != "" {
			t.Errorf("--agent %s to stdout: exit %d, stderr %q, %d bytes; want exit 0 and the %d bytes of the script", agent, code, stderr, len(stdout), len(want))
		}
		file := filepath.Join(dir, agent+".yaml")
		if _, stderr, code := runCLI(t, "mock", "init", "--agent", agent, file); code != 0 {
			t.Fatalf("--agent %s %s: exit %d: %s", agent, file, code, stderr)
		}
		if got, _ := os.ReadFile(file); string(got) != string(want) {
			t.Errorf("--agent %s: the file holds %q, want the script", agent, got)
		}
	}
	// claude, the name sbx run --agent gives Claude Code, is claude-code.
	want, _ := starterScript("claude-code")
	if stdout, stderr, code := runCLI(t, "mock", "init", "--agent", "claude"); code != 0 || stdout != string(want) {
		t.Errorf("--agent claude: exit %d, stderr %q, %d bytes; want exit 0 and claude-code's script", code, stderr, len(stdout))
	}
	// An existing file, and a link to a missing one, are left alone.
	existing := filepath.Join(dir, "mine.yaml")
	os.WriteFile(existing, []byte("turns: []\n"), 0o644)
	link := filepath.Join(dir, "link.yaml")
	os.Symlink(filepath.Join(dir, "missing.yaml"), link)
	for _, path := range []string{existing, link} {
		_, stderr, code := runCLI(t, "mock", "init", "--agent", "codex", path)
		if code != exitFailure || !strings.Contains(stderr, path+" exists; remove it or name another file") {
			t.Errorf("onto %s: exit %d, %q; want %d and that it exists", path, code, stderr, exitFailure)
		}
	}
	if got, _ := os.ReadFile(existing); string(got) != "turns: []\n" {
		t.Errorf("the existing file was changed: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Errorf("the link was followed: missing.yaml was made")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mock", "init"}, "sbx mock init needs --agent claude-code|codex|gemini|generic"},
		{[]string{"mock", "init", "--agent", "aider"}, `--agent "aider": there is no starter script for it; give one of claude-code, codex, gemini, generic`},
		{[]string{"mock", "init", "--agent", "codex", "a", "b"}, "accepts at most 1 arg(s)"},
	} {
		stdout, stderr, code := runCLI(t, tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("sbx %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stdout, stderr, exitUsage, tc.want)
		}
	}
}

// TestStarterScriptsAnswer replays, for each starter script, the requests
// its agent sends (in their shapes, as the agents' end-to-end tests saw
// them): a session without tools, a side request to another model with
// the same user text, which must not take the session's turn, and a
// session whose tool call's output comes back (for Codex, with its
// default model, whose tool is the custom tool exec, and with
// gpt-5-codex, whose is the function exec_command). The real agents run
// against the same scripts in TestPrivilegedAgentClaudeCode and
// TestPrivilegedAgentCodex.
func TestStarterScriptsAnswer(t *testing.T) {
	const task = "write sbx-mock.txt and list the files"
	type exchange struct {
		body string // the request
		want string // the answer's text, or the tool the answer calls
		path string // the request's path, if not the agent's
	}
	tests := []struct {
		agent, path string
		exchanges   []exchange
	}{
		{"claude-code", "/v1/messages", []exchange{
			{`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"say hello"}]}`, "Hello from the scripted model.", ""},
			{`{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"` + task + `"}]}`, "Scripted side answer.", ""},
			{`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"` + task + `"}]}`, "tool Bash", ""},
			{`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"` + task + `"},
				{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sbx-mock.txt"}]}]}`, "Done: sbx-mock.txt is written.", ""},
		}},
		{"codex", "/v1/responses", []exchange{
			// Codex's default model: its tool is exec, a custom tool.
			{`{"model":"gpt-6.2-sol","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"say hello"}]}]}`, "Hello from the scripted model.", ""},
			{`{"model":"gpt-6.2-sol","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` + task + `"}]}]}`, "custom tool exec", ""},
			{`{"model":"gpt-6.2-sol","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` + task + `"}]},
				{"type":"custom_tool_call","call_id":"call_1","name":"exec","input":"text(\"ls\")"},
				{"type":"custom_tool_call_output","call_id":"call_1","output":[{"type":"input_text","text":"Script completed\n"},{"type":"input_text","text":"sbx-mock.txt\n"}]}]}`, "Done: sbx-mock.txt is written.", ""},
			// -m gpt-5-codex: its tool is the function exec_command.
			{`{"model":"gpt-5-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"say hello"}]}]}`, "Hello from the scripted model.", ""},
			{`{"model":"gpt-5-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` + task + `"}]}]}`, "tool exec_command", ""},
			{`{"model":"gpt-5-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` + task + `"}]},
				{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},
				{"type":"function_call_output","call_id":"call_1","output":"sbx-mock.txt"}]}`, "Done: sbx-mock.txt is written.", ""},
			{`{"model":"gpt-5-mini","input":"` + task + `"}`, "Scripted side answer.", ""},
		}},
		{"gemini", "/v1beta/models/gemini-2.5-pro:generateContent", []exchange{
			{`{"contents":[{"role":"user","parts":[{"text":"say hello"}]}]}`, "Hello from the scripted model.", ""},
			{`{"contents":[{"role":"user","parts":[{"text":"` + task + `"}]}]}`, "Scripted side answer.", "/v1beta/models/gemini-2.5-flash-lite:generateContent"},
			{`{"contents":[{"role":"user","parts":[{"text":"` + task + `"}]}]}`, "tool run_shell_command", ""},
			{`{"contents":[{"role":"user","parts":[{"text":"` + task + `"}]},
				{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}}]},
				{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"sbx-mock.txt"}}}]}]}`, "Done: sbx-mock.txt is written.", ""},
		}},
		{"generic", "/v1/chat/completions", []exchange{
			{`{"model":"any","messages":[{"role":"user","content":"say hello"}]}`, "Hello from the scripted model.", ""},
			{`{"model":"any","messages":[{"role":"user","content":"` + task + `"}]}`, "tool bash", ""},
			{`{"model":"any","messages":[{"role":"user","content":"` + task + `"},
				{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
				{"role":"tool","tool_call_id":"call_1","content":"sbx-mock.txt"}]}`, "Done: sbx-mock.txt is written.", ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.agent, func(t *testing.T) {
			data, err := starterScript(tc.agent)
			if err != nil {
				t.Fatal(err)
			}
			script, err := mockllm.ParseScript(tc.agent+".yaml", data)
			if err != nil {
				t.Fatalf("the starter script does not parse: %v", err)
			}
			mock := mockllm.New(script)
			for i, ex := range tc.exchanges {
				rec := httptest.NewRecorder()
				path := tc.path
				if ex.path != "" {
					path = ex.path
				}
				mock.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(ex.body)))
				if rec.Code != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200: %s", i+1, rec.Code, rec.Body)
				}
				if got := answerOf(t, rec.Body.Bytes()); got != ex.want {
					t.Errorf("request %d: got %q, want %q", i+1, got, ex.want)
				}
			}
		})
	}
}

// answerOf returns what a non-streamed answer of any of the four APIs
// says last: "tool NAME" when it calls a tool ("custom tool NAME" a
// custom tool of the Responses API), else its text.
func answerOf(t *testing.T, body []byte) string {
	t.Helper()
	var a struct {
		Content []struct{ Type, Text, Name string } // Anthropic
		Output  []struct {                          // Responses
			Type, Name string
			Content    []struct{ Text string }
		}
		Candidates []struct { // Gemini
			Content struct {
				Parts []struct {
					Text         string
					FunctionCall *struct{ Name string }
				}
			}
		}
		Choices []struct { // Chat Completions
			Message struct {
				Content   string
				ToolCalls []struct{ Function struct{ Name string } } `json:"tool_calls"`
			}
		}
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("the answer is not JSON: %v: %s", err, body)
	}
	last := ""
	for _, c := range a.Content {
		if c.Type == "tool_use" {
			last = "tool " + c.Name
		} else if last == "" {
			last = c.Text
		}
	}
	for _, o := range a.Output {
		if o.Type == "function_call" {
			last = "tool " + o.Name
		} else if o.Type == "custom_tool_call" {
			last = "custom tool " + o.Name
		} else if last == "" && len(o.Content) > 0 {
			last = o.Content[0].Text
		}
	}
	for _, c := range a.Candidates {
		for _, p := range c.Content.Parts {
			if p.FunctionCall != nil {
				last = "tool " + p.FunctionCall.Name
			} else if last == "" {
				last = p.Text
			}
		}
	}
	for _, c := range a.Choices {
		last = c.Message.Content
		for _, tc := range c.Message.ToolCalls {
			last = "tool " + tc.Function.Name
		}
	}
	return last
}
