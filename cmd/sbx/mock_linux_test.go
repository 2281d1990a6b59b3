package main

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mockScript answers one request from each official Node SDK.
const mockScript = `turns:
  - match: {model: claude-test}
    reply: {text: "hello from the scripted claude"}
  - match: {model: gpt-test}
    reply: {text: "hello from the scripted gpt"}
`

// mockClient is an unmodified agent's use of the official SDKs: the real
// API hostnames (no base URL), an API key that is never checked.
const mockClient = `const Anthropic = require("@anthropic-ai/sdk");
const OpenAI = require("openai");
(async () => {
  const a = new Anthropic({apiKey: "sk-test", maxRetries: 0});
  const m = await a.messages.create({model: "claude-test", max_tokens: 64, messages: [{role: "user", content: "hi"}]});
  console.log("anthropic: " + m.content[0].text);
  const o = new OpenAI({apiKey: "sk-test", maxRetries: 0});
  const c = await o.chat.completions.create({model: "gpt-test", messages: [{role: "user", content: "hi"}]});
  console.log("openai: " + c.choices[0].message.content);
})().catch(e => { console.log("error: " + e); process.exit(1); });
`

// TestPrivilegedMockLLMNodeSDKs installs the official Node SDKs
// (@anthropic-ai/sdk, openai) from npm inside a sandbox and runs them
// unmodified against the real API hostnames: --mock-llm answers both
// from a script through TLS inspection and capture (the SDKs' fetch
// ignores HTTPS_PROXY), and nothing reaches the real APIs.
func TestPrivilegedMockLLMNodeSDKs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not on this host")
	}
	// The registry, wherever it resolves here, is allowed past the
	// guard: some build machines answer it at a private address.
	addrs, err := net.LookupHost("registry.npmjs.org")
	if err != nil {
		t.Skipf("registry.npmjs.org does not resolve here: %v", err)
	}
	dir := readableDir(t)
	for name, data := range map[string]string{"script.yaml": mockScript, "agent.js": mockClient} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	logFile := filepath.Join(state, "decisions.jsonl")
	args := []string{"run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(state, "state"),
		"--subnet-pool", "10.213.224.0/24", "--log", logFile, "--user", "0", "-v", dir + ":/agent", "-w", "/agent",
		"--allow", "registry.npmjs.org",
		"--mock-llm", "api.anthropic.com=" + filepath.Join(dir, "script.yaml"),
		"--mock-llm", "api.openai.com=" + filepath.Join(dir, "script.yaml")}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			args = append(args, "--allow-private", netip.PrefixFrom(ip, 32).String())
		}
	}
	args = append(args, "--", "sh", "-c", "npm install --no-audit --no-fund --loglevel=error @anthropic-ai/sdk openai && node agent.js")
	stdout, stderr, code := runCLI(t, args...)
	t.Logf("exit %d\n%s\n%s", code, stdout, stderr)
	for _, want := range []string{"anthropic: hello from the scripted claude", "openai: hello from the scripted gpt"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the agent's output lacks %q", want)
		}
	}
	recs := readRecords(t, logFile)
	for _, host := range []string{"api.anthropic.com", "api.openai.com"} {
		r := findRecord(recs, func(r map[string]any) bool {
			return r["event"] == "decision" && r["kind"] == "https" && r["host"] == host && r["rule"] == "mock-llm"
		})
		if r == nil {
			t.Errorf("no https decision of rule mock-llm for %s", host)
		}
	}
}
