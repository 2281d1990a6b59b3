package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
)

// The real coding agents, end to end: Claude Code and the Codex CLI,
// installed from npm inside a sandbox (the registry allowed through its
// gateway, the install cached on the machine), run headless as a normal
// user (uid 1000, the owner of the working directory) against --mock-llm
// on their APIs' real hostnames, with the starter scripts of sbx mock init.
// Nothing else is allowed: every other host an agent tries is blocked and
// shows in the decision log with the process that tried it.

// agentPackage is an agent CLI on npm, at the version the tests pin.
type agentPackage struct {
	name, version string
	bin           string // its command, in node_modules/.bin
}

var (
	claudeCodePackage = agentPackage{"@anthropic-ai/claude-code", "2.1.332", "claude"}
	codexPackage      = agentPackage{"@openai/codex", "0.171.0", "codex"}
	geminiPackage     = agentPackage{"@google/gemini-cli", "0.61.0", "gemini"}
)

// agentCache keeps each installed package, by name and version, between
// runs on a machine; agentCacheComplete is written last into a complete
// one, so an install cut short is made again.
const (
	agentCache         = "/var/cache/sbx-test/agents"
	agentCacheComplete = ".sbx-test-complete"
)

// The task of the sessions with a tool call, as the starter scripts match
// it, and what the scripted model's command writes.
const (
	agentToolTask    = "write sbx-mock.txt and list the files"
	agentFileContent = "written by the scripted model\n"
)

// installAgent returns the directory that holds p installed (its
// node_modules), from the cache, or installed there first by npm inside a
// sandbox as uid 1000 with only the npm registry allowed. The test fails,
// and does not skip, when the registry cannot be reached.
func installAgent(t *testing.T, p agentPackage) string {
	t.Helper()
	dir := filepath.Join(agentCache, strings.ReplaceAll(strings.TrimPrefix(p.name, "@"), "/", "+")+"@"+p.version)
	if _, err := os.Stat(filepath.Join(dir, agentCacheComplete)); err == nil {
		t.Logf("%s@%s: cached in %s", p.name, p.version, dir)
		return dir
	}
	if err := os.RemoveAll(dir); err != nil { // an install cut short
		t.Fatal(err)
	}
	if err := os.MkdirAll(agentCache, 0o755); err != nil {
		t.Fatal(err)
	}
	staging, err := os.MkdirTemp(agentCache, ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(staging)
	if err := os.Chown(staging, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	// The registry, wherever it resolves here, is allowed past the
	// address guard: some build machines answer it at a private address.
	addrs, err := net.LookupHost("registry.npmjs.org")
	if err != nil {
		t.Fatalf("registry.npmjs.org does not resolve: this test installs %s from npm, through a sandbox's gateway; CI must reach the registry: %v", p.name, err)
	}
	state := t.TempDir()
	args := []string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.217.0/24",
		"--log", filepath.Join(state, "install.jsonl"), "--allow", "registry.npmjs.org"}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			args = append(args, "--allow-private", netip.PrefixFrom(ip, 32).String())
		}
	}
	args = append(args, "--", "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", p.name+"@"+p.version)
	t.Chdir(staging)
	start := time.Now()
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("npm install %s@%s in a sandbox (as uid 1000, registry.npmjs.org allowed): exit %d; CI must reach the registry\n%s\n%s",
			p.name, p.version, code, stdout, stderr)
	}
	t.Logf("%s@%s: installed from npm in a sandbox in %v", p.name, p.version, time.Since(start).Round(time.Millisecond))
	var pj struct{ Version string }
	data, err := os.ReadFile(filepath.Join(staging, "node_modules", p.name, "package.json"))
	if err == nil {
		err = json.Unmarshal(data, &pj)
	}
	if err != nil || pj.Version != p.version {
		t.Fatalf("npm installed %s version %q (%v), want %s", p.name, pj.Version, err, p.version)
	}
	if _, err := os.Stat(filepath.Join(staging, "node_modules", ".bin", p.bin)); err != nil {
		t.Fatalf("npm installed no %s command: %v", p.bin, err)
	}
	if err := os.Rename(staging, dir); err != nil {
		t.Fatalf("caching the install: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, agentCacheComplete), []byte(p.name+"@"+p.version+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// agentSession is one headless session of an agent in a sandbox.
type agentSession struct {
	pkg     agentPackage
	starter string   // the sbx mock init --agent script the mock answers from
	host    string   // the API host the agent calls, mocked
	subnet  string   // --subnet-pool
	env     []string // KEY=VAL for the agent
	args    []string // the agent's arguments
}

// agentResult is what a session left: the agent's output and exit code,
// its wall time (the agent alone, measured inside the sandbox), the
// working directory, the decision log and the mock's journal.
type agentResult struct {
	work           string
	stdout, stderr string
	exit           int
	wall           time.Duration
	records        []map[string]any
	journal        api.MockRequests
}

// run runs the session and returns what it left. The mock's journal is
// read after the sandbox has ended, from the file the gateway kept beside
// its decision log, as a user reads it after a headless run.
func (s agentSession) run(t *testing.T) agentResult {
	t.Helper()
	install := installAgent(t, s.pkg)
	script := filepath.Join(readableDir(t), s.starter+".yaml")
	if _, stderr, code := runCLI(t, "mock", "init", "--agent", s.starter, script); code != 0 {
		t.Fatalf("sbx mock init --agent %s: exit %d: %s", s.starter, code, stderr)
	}
	work := sharedDir(t, 1000, 1000, 0o755)
	timing := sharedDir(t, 1000, 1000, 0o755) // the agent's exit code and wall time
	state := t.TempDir()
	logFile := filepath.Join(state, "decisions.jsonl")
	const agentDir = "/sbx-agent"
	args := []string{"run", "--show", "blocks", "--state-dir", state, "--subnet-pool", s.subnet, "--log", logFile, "--name", "agent",
		"--mock-llm", s.host + "=" + script, "-v", install + ":" + agentDir + ":ro", "-v", timing + ":" + timing}
	for _, kv := range s.env {
		args = append(args, "-e", kv)
	}
	cmd := `start=$(date +%s%N); "$@"; code=$?; echo "$code $(( $(date +%s%N) - start ))" > ` + timing + `/exit; exit $code`
	args = append(args, "--", "/bin/sh", "-c", cmd, "sh", agentDir+"/node_modules/.bin/"+s.pkg.bin)
	args = append(args, s.args...)
	t.Chdir(work)

	var res agentResult
	res.work = work
	var code int
	res.stdout, res.stderr, code = runCLI(t, args...)
	exitLine, err := os.ReadFile(filepath.Join(timing, "exit"))
	if err != nil {
		t.Fatalf("sbx run exited %d and the agent left no exit line (%v)\n%s\n%s", code, err, res.stdout, res.stderr)
	}
	var ns int64
	if _, err := fmt.Sscan(string(exitLine), &res.exit, &ns); err != nil {
		t.Fatalf("the agent's exit line %q: %v", exitLine, err)
	}
	res.wall = time.Duration(ns)
	if code != res.exit {
		t.Errorf("sbx run exited %d, the agent %d", code, res.exit)
	}
	journal := strings.TrimSuffix(logFile, ".jsonl") + ".mock-requests.jsonl"
	stdout, stderr, code := runCLI(t, "mock", "requests", "--journal", journal, "--json")
	if code != 0 {
		t.Fatalf("sbx mock requests after the sandbox ended: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &res.journal); err != nil {
		t.Fatalf("sbx mock requests --json: %v\n%s", err, stdout)
	}
	res.records = readRecords(t, logFile)
	t.Logf("%s %s: wall time %v (the agent alone, in the sandbox)", s.pkg.bin, strings.Join(s.args, " "), res.wall.Round(time.Millisecond))
	if res.exit != 0 {
		t.Fatalf("the agent exited %d\n%s\n%s", res.exit, res.stdout, res.stderr)
	}
	return res
}

// checkRecords: the mocked host's requests were answered by the mock, and
// every other host the agent tried was blocked and is named with the
// process that tried it (which the log lists).
func checkRecords(t *testing.T, res agentResult, mocked string) {
	t.Helper()
	mockAnswered := false
	var others []string
	for _, r := range res.records {
		if r["event"] != "decision" {
			continue
		}
		host, _ := r["host"].(string)
		comm, _ := r["comm"].(string)
		if host == mocked {
			if r["rule"] != "mock-llm" {
				t.Errorf("%s: a decision of rule %v, want mock-llm: %v", mocked, r["rule"], r)
			}
			mockAnswered = mockAnswered || r["action"] == "intercept"
			continue
		}
		others = append(others, fmt.Sprintf("%s %v:%v by %s", r["action"], host, r["port"], comm))
		if r["action"] != "block" || comm == "" {
			t.Errorf("%s:%v: %v by %q, want blocked and named with its process: %v", host, r["port"], r["action"], comm, r)
		}
	}
	if !mockAnswered {
		t.Errorf("no request to %s was answered by the mock", mocked)
	}
	t.Logf("the agent's other attempts: %d: %s", len(others), strings.Join(others, "; "))
}

// checkJournal: the mock answered with turn (1-based) a request whose body
// holds, in a tool's result, toolOutput (unless it is empty): a POST, or
// a message on a WebSocket (Codex's Responses API).
func checkJournal(t *testing.T, res agentResult, path string, turn int, toolOutput string) {
	t.Helper()
	var calls []string
	for _, j := range res.journal.Requests {
		if j.Method != "POST" && !j.WebSocket || j.Path != path {
			continue
		}
		calls = append(calls, fmt.Sprintf("%d %s %s", j.Seq, j.Model, j.Outcome))
		if j.Turn != turn {
			continue
		}
		if j.Status != 200 {
			t.Errorf("turn %d answered with status %d", turn, j.Status)
		}
		if toolOutput == "" {
			return
		}
		var body any
		if err := json.Unmarshal(j.Body, &body); err != nil || j.BodyTruncated {
			t.Fatalf("request %d's body: %v (truncated %v)", j.Seq, err, j.BodyTruncated)
		}
		results := toolResults(body)
		for _, r := range results {
			if strings.Contains(r, toolOutput) {
				return
			}
		}
		t.Errorf("request %d (turn %d) carries the tool results %q, want one holding %q", j.Seq, turn, results, toolOutput)
		return
	}
	t.Errorf("no request to %s was answered by turn %d; the journal's: %q", path, turn, calls)
}

// toolResults returns the tools' results a request body carries: the
// content of Anthropic tool_result blocks, the output of Responses
// function_call_output items, the response of Gemini functionResponse
// parts, as JSON text.
func toolResults(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		var r any
		switch v["type"] {
		case "tool_result":
			r = v["content"]
		case "function_call_output", "custom_tool_call_output":
			r = v["output"]
		}
		if fr, ok := v["functionResponse"].(map[string]any); ok { // Gemini
			r = fr["response"]
		}
		if r != nil {
			b, _ := json.Marshal(r)
			out = append(out, string(b))
		}
		for _, e := range v {
			out = append(out, toolResults(e)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, toolResults(e)...)
		}
	}
	return out
}

// checkAgentFile: the command the model called wrote sbx-mock.txt in the
// working directory, as the agent's user (uid 1000), not as root.
func checkAgentFile(t *testing.T, res agentResult) {
	t.Helper()
	path := filepath.Join(res.work, "sbx-mock.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the tool call left no file: %v\n%s\n%s", err, res.stdout, res.stderr)
	}
	if string(data) != agentFileContent {
		t.Errorf("%s holds %q, want %q", path, data, agentFileContent)
	}
	fi, _ := os.Stat(path)
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 1000 {
		t.Errorf("%s belongs to %v, want uid 1000", path, fi.Sys())
	}
}

// checkNoMockLines: at --show blocks, the mock printed no live line: the
// agent's requests besides the model (settings, feature flags, telemetry,
// the models list) got the mock's fixed answers, which have none, and
// every model request was scripted.
func checkNoMockLines(t *testing.T, res agentResult) {
	t.Helper()
	for _, line := range strings.Split(res.stderr, "\n") {
		if strings.HasPrefix(line, "sbx: intercept") {
			t.Errorf("got the live line %q, want none for the mock at --show blocks", line)
		}
	}
	var defaults []string
	for _, j := range res.journal.Requests {
		if j.Default {
			defaults = append(defaults, fmt.Sprintf("%s %s %d", j.Method, j.Path, j.Status))
		}
	}
	t.Logf("the mock's default answers: %d: %s", len(defaults), strings.Join(defaults, "; "))
}

func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
}

// claudeSession runs claude -p prompt headless: its permission prompts
// off (--dangerously-skip-permissions, which it refuses as root: it runs
// as uid 1000), the model the starter script's session turns match, and
// the final answer as JSON.
func claudeSession(t *testing.T, prompt string) (agentResult, string) {
	t.Helper()
	res := agentSession{pkg: claudeCodePackage, starter: "claude-code", host: "api.anthropic.com", subnet: "10.213.218.0/24",
		env:  []string{"ANTHROPIC_API_KEY=sk-mock"},
		args: []string{"-p", prompt, "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions", "--output-format", "json"},
	}.run(t)
	var out struct {
		Result  string
		IsError bool `json:"is_error"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || out.IsError {
		t.Fatalf("claude's output is not a successful JSON result (%v):\n%s\n%s", err, res.stdout, res.stderr)
	}
	return res, out.Result
}

// TestPrivilegedAgentClaudeCodeText: a session without tools; Claude Code
// prints the scripted answer.
func TestPrivilegedAgentClaudeCodeText(t *testing.T) {
	skipUnlessRoot(t)
	res, answer := claudeSession(t, "say hello")
	if want := "Hello from the scripted model."; answer != want {
		t.Errorf("the final answer: got %q, want %q", answer, want)
	}
	checkJournal(t, res, "/v1/messages", 1, "")
	checkRecords(t, res, "api.anthropic.com")
	checkNoMockLines(t, res)
}

// TestPrivilegedAgentClaudeCodeTool: the model calls Claude Code's Bash
// tool, which writes a file and lists the directory; the listing goes
// back to the model (the journal), which finishes.
func TestPrivilegedAgentClaudeCodeTool(t *testing.T) {
	skipUnlessRoot(t)
	res, answer := claudeSession(t, agentToolTask)
	if want := "Done: sbx-mock.txt is written."; answer != want {
		t.Errorf("the final answer: got %q, want %q", answer, want)
	}
	checkAgentFile(t, res)
	checkJournal(t, res, "/v1/messages", 3, "sbx-mock.txt")
	checkRecords(t, res, "api.anthropic.com")
	checkNoMockLines(t, res)
}

// codexModel is a model Codex runs with, as the starter script's turns
// match it: its default (no -m), which offers the custom tool exec
// (JavaScript), or one given with -m, which offers the function
// exec_command (a shell command).
type codexModel struct {
	name string   // the model Codex sends, which the turns match
	args []string // how codex exec picks it
	// The turns (1-based) answering "say hello" and the tool's result:
	// the default model's come first in the script.
	textTurn, toolTurn int
}

// codexModels are the models the starter script answers: Codex's
// default, gpt-6.2-sol (Codex 0.171.0's), and gpt-5-codex.
var codexModels = []codexModel{
	{name: "gpt-6.2-sol", textTurn: 1, toolTurn: 3},
	{name: "gpt-5-codex", args: []string{"-m", "gpt-5-codex"}, textTurn: 4, toolTurn: 6},
}

// codexSession runs codex exec prompt headless with model m: Codex's own
// sandbox and approvals off (bubblewrap cannot make its namespaces inside
// sbx's), outside a git repository. Every request the mock answered with
// a turn carried m's name. Its final answer is its standard output.
func codexSession(t *testing.T, m codexModel, prompt string) (agentResult, string) {
	t.Helper()
	args := append([]string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}, m.args...)
	res := agentSession{pkg: codexPackage, starter: "codex", host: "api.openai.com", subnet: "10.213.219.0/24",
		env:  []string{"OPENAI_API_KEY=sk-mock"},
		args: append(args, prompt),
	}.run(t)
	for _, j := range res.journal.Requests {
		if j.Turn != 0 && j.Model != m.name {
			t.Errorf("request %d (turn %d) is for the model %q, want %q (Codex %s's; its default model changed: name the new one in the starter script, codex.yaml)",
				j.Seq, j.Turn, j.Model, m.name, codexPackage.version)
		}
	}
	return res, strings.TrimSpace(res.stdout)
}

// TestPrivilegedAgentCodexText: a session without tools, with Codex's
// default model and with gpt-5-codex; codex exec prints the scripted
// answer.
func TestPrivilegedAgentCodexText(t *testing.T) {
	skipUnlessRoot(t)
	for _, m := range codexModels {
		t.Run(m.name, func(t *testing.T) {
			res, answer := codexSession(t, m, "say hello")
			if want := "Hello from the scripted model."; answer != want {
				t.Errorf("the final answer: got %q, want %q", answer, want)
			}
			checkJournal(t, res, "/v1/responses", m.textTurn, "")
			checkRecords(t, res, "api.openai.com")
		})
	}
}

// TestPrivilegedAgentCodexTool: the model calls Codex's tool, which
// writes a file and lists the directory: with the default model the
// custom tool exec, whose JavaScript calls exec_command; with gpt-5-codex
// the function exec_command. The listing goes back to the model (the
// journal), which finishes.
func TestPrivilegedAgentCodexTool(t *testing.T) {
	skipUnlessRoot(t)
	for _, m := range codexModels {
		t.Run(m.name, func(t *testing.T) {
			res, answer := codexSession(t, m, agentToolTask)
			if want := "Done: sbx-mock.txt is written."; answer != want {
				t.Errorf("the final answer: got %q, want %q", answer, want)
			}
			checkAgentFile(t, res)
			checkJournal(t, res, "/v1/responses", m.toolTurn, "sbx-mock.txt")
			checkRecords(t, res, "api.openai.com")
		})
	}
}

// geminiSession runs gemini -p prompt headless with the model the starter
// script's session turns match, its tools run without asking (--yolo).
// Every request the mock answered with one of the session's turns carried
// that model. Its final answer is its standard output.
func geminiSession(t *testing.T, prompt string) (agentResult, string) {
	t.Helper()
	res := agentSession{pkg: geminiPackage, starter: "gemini", host: "generativelanguage.googleapis.com", subnet: "10.213.220.0/24",
		env:  []string{"GEMINI_API_KEY=mock"},
		args: []string{"-p", prompt, "-m", "gemini-2.5-pro", "--yolo", "--skip-trust"},
	}.run(t)
	for _, j := range res.journal.Requests {
		t.Logf("journal: %d %s %s %s %d %s", j.Seq, j.Method, j.Path, j.Model, j.Status, j.Outcome)
	}
	return res, strings.TrimSpace(res.stdout)
}

// TestPrivilegedAgentGeminiText: a session without tools; the Gemini CLI
// prints the scripted answer.
func TestPrivilegedAgentGeminiText(t *testing.T) {
	skipUnlessRoot(t)
	res, answer := geminiSession(t, "say hello")
	if want := "Hello from the scripted model."; answer != want {
		t.Errorf("the final answer: got %q, want %q", answer, want)
	}
	checkJournal(t, res, "/v1beta/models/gemini-2.5-pro:streamGenerateContent", 1, "")
	checkRecords(t, res, "generativelanguage.googleapis.com")
	checkNoMockLines(t, res)
}

// TestPrivilegedAgentGeminiTool: the model calls the CLI's
// run_shell_command, which writes a file and lists the directory; the
// listing goes back to the model as a functionResponse (the journal),
// which finishes.
func TestPrivilegedAgentGeminiTool(t *testing.T) {
	skipUnlessRoot(t)
	res, answer := geminiSession(t, agentToolTask)
	if want := "Done: sbx-mock.txt is written."; !strings.HasSuffix(answer, want) {
		t.Errorf("the final answer: got %q, want it to end in %q", answer, want)
	}
	checkAgentFile(t, res)
	checkJournal(t, res, "/v1beta/models/gemini-2.5-pro:streamGenerateContent", 2, "sbx-mock.txt")
	checkRecords(t, res, "generativelanguage.googleapis.com")
	checkNoMockLines(t, res)
}
