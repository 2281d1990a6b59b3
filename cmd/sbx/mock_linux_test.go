package main

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// mockScript answers one request from each official Node SDK.
const mockScript = `turns:
  - match: {model: claude-test}
    reply: {text: "hello from the scripted claude"}
    times: 2
  - match: {model: gpt-test}
    reply: {text: "hello from the scripted gpt"}
    times: 2
  - match: {model: gemini-test}
    reply: {text: "hello from the scripted gemini", chunk_size: 5}
    times: 3
`

// mockClient is an unmodified agent's use of the official SDKs: the real
// API hostnames (no base URL), an API key that is never checked.
const mockClient = `const Anthropic = require("@anthropic-ai/sdk");
const OpenAI = require("openai");
const {GoogleGenAI} = require("@google/genai");
(async () => {
  const a = new Anthropic({apiKey: "sk-test", maxRetries: 0});
  const m = await a.messages.create({model: "claude-test", max_tokens: 64, messages: [{role: "user", content: "hi"}]});
  console.log("anthropic: " + m.content[0].text);
  const o = new OpenAI({apiKey: "sk-test", maxRetries: 0});
  const c = await o.chat.completions.create({model: "gpt-test", messages: [{role: "user", content: "hi"}]});
  console.log("openai: " + c.choices[0].message.content);
  // Plain http:// base URLs, no TLS: the same mock.
  const ah = new Anthropic({apiKey: "sk-test", maxRetries: 0, baseURL: "http://api.anthropic.com"});
  const mh = await ah.messages.create({model: "claude-test", max_tokens: 64, messages: [{role: "user", content: "hi"}]});
  console.log("anthropic over http: " + mh.content[0].text);
  const oh = new OpenAI({apiKey: "sk-test", maxRetries: 0, baseURL: "http://api.openai.com/v1"});
  const ch = await oh.chat.completions.create({model: "gpt-test", messages: [{role: "user", content: "hi"}]});
  console.log("openai over http: " + ch.choices[0].message.content);
  const g = new GoogleGenAI({apiKey: "mock"});
  const gr = await g.models.generateContent({model: "gemini-test", contents: "hi"});
  console.log("gemini: " + gr.text);
  let streamed = "";
  for await (const chunk of await g.models.generateContentStream({model: "gemini-test", contents: "hi"})) streamed += chunk.text;
  console.log("gemini streamed: " + streamed);
  const gh = new GoogleGenAI({apiKey: "mock", httpOptions: {baseUrl: "http://generativelanguage.googleapis.com"}});
  const ghr = await gh.models.generateContent({model: "gemini-test", contents: "hi"});
  console.log("gemini over http: " + ghr.text);
})().catch(e => { console.log("error: " + e); process.exit(1); });
`

// TestPrivilegedMockLLMNodeSDKs installs the official Node SDKs
// (@anthropic-ai/sdk, openai, @google/genai) from npm inside a sandbox and runs them
// unmodified against the real API hostnames: --mock-llm answers both
// from a script through TLS inspection and capture (the SDKs' fetch
// ignores HTTPS_PROXY), and over plain http:// base URLs too; nothing
// reaches the real APIs. Then the same agent again under the policy's
// form, intercept rules with response {llm: SCRIPT}.
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
		"--mock-llm", "api.openai.com=" + filepath.Join(dir, "script.yaml"),
		"--mock-llm", "generativelanguage.googleapis.com=" + filepath.Join(dir, "script.yaml")}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			args = append(args, "--allow-private", netip.PrefixFrom(ip, 32).String())
		}
	}
	args = append(args, "--", "sh", "-c", "npm install --no-audit --no-fund --loglevel=error @anthropic-ai/sdk openai @google/genai && node agent.js")
	runAgent(t, "--mock-llm", args)
	recs := readRecords(t, logFile)
	for _, host := range []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"} {
		r := findRecord(recs, func(r map[string]any) bool {
			return r["event"] == "decision" && r["kind"] == "https" && r["host"] == host && r["rule"] == "mock-llm"
		})
		if r == nil {
			t.Errorf("no https decision of rule mock-llm for %s", host)
		}
	}

	// The policy's form: intercept rules answered by the script, named
	// relative to the policy file. The SDKs are installed in /agent now;
	// nothing but the two API hosts is allowed.
	policy := "rules:\n" +
		"  - {id: claude, host: api.anthropic.com, action: intercept, response: {llm: script.yaml}}\n" +
		"  - {id: gpt, host: api.openai.com, action: intercept, response: {llm: script.yaml}}\n" +
		"  - {id: gemini, host: generativelanguage.googleapis.com, action: intercept, response: {llm: script.yaml}}\n"
	// Outside the -v volume the sandbox writes: sbx refuses a policy file
	// there.
	pdir := t.TempDir()
	script, err := os.ReadFile(filepath.Join(dir, "script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "script.yaml"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "policy.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile = filepath.Join(state, "policy-decisions.jsonl")
	runAgent(t, "policy form", []string{"run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(state, "state"),
		"--subnet-pool", "10.213.224.0/24", "--log", logFile, "--user", "0", "-v", dir + ":/agent", "-w", "/agent",
		"--policy", filepath.Join(pdir, "policy.yaml"), "--", "node", "agent.js"})
	recs = readRecords(t, logFile)
	for host, rule := range map[string]string{"api.anthropic.com": "claude", "api.openai.com": "gpt", "generativelanguage.googleapis.com": "gemini"} {
		for _, kind := range []string{"https", "transparent"} {
			r := findRecord(recs, func(r map[string]any) bool {
				return r["event"] == "decision" && r["kind"] == kind && r["host"] == host && r["rule"] == rule && r["action"] == "intercept"
			})
			if r == nil {
				t.Errorf("policy form: no %s intercept of rule %s for %s", kind, rule, host)
			}
		}
	}
}

// runAgent runs sbx with args, mockClient being the sandbox's command, and
// checks that the agent printed each SDK's scripted answer, over HTTPS and
// over http://; what names the run in failures.
func runAgent(t *testing.T, what string, args []string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, args...)
	t.Logf("%s: exit %d\n%s\n%s", what, code, stdout, stderr)
	for _, want := range []string{"anthropic: hello from the scripted claude", "openai: hello from the scripted gpt",
		"anthropic over http: hello from the scripted claude", "openai over http: hello from the scripted gpt",
		"gemini: hello from the scripted gemini", "gemini streamed: hello from the scripted gemini", "gemini over http: hello from the scripted gemini"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("%s: the agent's output lacks %q", what, want)
		}
	}
}

// TestPrivilegedRecordLLM records an unmodified Node agent's exchanges with
// "the API" (a scripted LLM served over HTTPS as api.anthropic.com in a
// test namespace, standing in for the real one) with --record-llm, then
// replays them offline with --mock-llm: the agent prints the same answer,
// and the second run dials nothing.
func TestPrivilegedRecordLLM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not on this host")
	}
	addrs, err := net.LookupHost("registry.npmjs.org")
	if err != nil {
		t.Skipf("registry.npmjs.org does not resolve here: %v", err)
	}
	dir := readableDir(t)
	up := newCaptureUpstream(t, dir) // its DNS answers every name with its address
	caPEM, cert := testCertificate(t, "api.anthropic.com")
	if err := os.WriteFile(filepath.Join(dir, "api-ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	api, err := mockllm.ParseScript("api.yaml", []byte(`turns:
  - reply: {text: "recorded from the api", chunk_size: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	responder := mockllm.New(api)
	ln := listenIn(t, up.Name, func() (io.Closer, error) { return net.Listen("tcp", up.Addr+":443") }).(net.Listener)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); responder.ServeHTTP(w, r) }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	agent := `const Anthropic = require("@anthropic-ai/sdk");
new Anthropic({apiKey: "sk-test", maxRetries: 0}).messages.create({model: "m", max_tokens: 64, messages: [{role: "user", content: "hi"}]})
  .then(m => console.log("answer: " + m.content[0].text), e => { console.log("error: " + e); process.exit(1); });
`
	if err := os.WriteFile(filepath.Join(dir, "agent.js"), []byte(agent), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "recorded.yaml")
	run := func(name, command string, extra ...string) string {
		state := t.TempDir()
		args := []string{"run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(state, "state"),
			"--subnet-pool", "10.213.223.0/24", "--log", filepath.Join(state, "decisions.jsonl"), "--user", "0",
			"-v", dir + ":/agent", "-w", "/agent"}
		args = append(append(args, extra...), "--", "sh", "-c", command)
		stdout, stderr, code := runCLI(t, args...)
		t.Logf("%s: exit %d\n%s\n%s", name, code, stdout, stderr)
		return stdout
	}
	// The SDK from npm first, with the host's own DNS.
	install := []string{"--allow", "registry.npmjs.org"}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			install = append(install, "--allow-private", netip.PrefixFrom(ip, 32).String())
		}
	}
	run("install", "npm install --no-audit --no-fund --loglevel=error @anthropic-ai/sdk", install...)
	out := run("record", "node agent.js", "--host-dns", up.Addr, "--allow", "api.anthropic.com", "--allow-private", up.Net,
		"--upstream-ca", filepath.Join(dir, "api-ca.pem"), "--record-llm", "api.anthropic.com="+script)
	if !strings.Contains(out, "answer: recorded from the api") || hits.Load() != 1 {
		t.Fatalf("recording: the agent's output %q, the API asked %d times; want its answer, once", out, hits.Load())
	}
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatalf("the recorded script: %v", err)
	}
	t.Logf("recorded:\n%s", data)
	out = run("replay", "node agent.js", "--mock-llm", "api.anthropic.com="+script)
	if !strings.Contains(out, "answer: recorded from the api") || hits.Load() != 1 {
		t.Errorf("replaying: the agent's output %q, the API asked %d times; want the same answer, and the API not asked again", out, hits.Load())
	}
}

// TestPrivilegedMockJournalAfterTheEnd: a sandbox whose agent (busybox
// wget, captured by the gateway) sends one request to a --mock-llm host and
// ends at once; then sbx mock requests --sandbox ID, with no sandbox
// running, reads the journal kept beside the decision log, body
// included, and says so on stderr.
func TestPrivilegedMockJournalAfterTheEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	state := filepath.Join(t.TempDir(), "state")
	script := writeFile(t, "script.yaml", "turns:\n  - reply: {text: scripted answer}\n")
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"the word is marmalade"}]}`
	stdout, stderr, code := runCLI(t, "run", "--runtime", "containerd", "--quiet", "--state-dir", state,
		"--subnet-pool", "10.213.249.0/24", "--rootfs", busyboxRoot(t),
		"--mock-llm", "api.anthropic.com="+script,
		// Busybox's wget sends --post-data as a GET through a proxy: it
		// goes straight to the host, which capture brings to the gateway.
		"--", "sh", "-c", `unset http_proxy HTTP_PROXY; exec busybox wget -q -O- --header "Content-Type: application/json" --post-data "$1" http://api.anthropic.com/v1/messages`, "sh", body)
	t.Logf("sbx run: exit %d\n%s%s", code, stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "scripted answer") {
		t.Fatalf("sbx run: exit %d, want 0 and the scripted answer", code)
	}
	// sbx: mock journal of sandbox ID: PATH
	_, rest, ok := strings.Cut(stderr, "sbx: mock journal of sandbox ")
	id, journal, _ := strings.Cut(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), ": ")
	if !ok || journal != filepath.Join(logRoot, id, "mock-requests.jsonl") {
		t.Fatalf("sbx run said %q, want the journal of the sandbox in %s/<id>/mock-requests.jsonl", stderr, logRoot)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(logRoot, id)) })
	if fi, err := os.Stat(journal); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the journal: got %v, %v; want mode 0600", fi, err)
	}

	out, errOut, code := runCLI(t, "mock", "requests", "--sandbox", id, "--state-dir", state, "--json")
	t.Logf("sbx mock requests --sandbox %s --json: exit %d\n%s%s", id, code, out, errOut)
	if code != 0 || !strings.Contains(out, `"content":"the word is marmalade"`) || !strings.Contains(out, `"outcome":"turn 1 (`) {
		t.Errorf("sbx mock requests --sandbox %s after the end: exit %d, want 0 and the request's body", id, code)
	}
	if want := "sbx: sandbox " + id + " ended; reading its mock journal " + journal + "\n"; errOut != want {
		t.Errorf("got stderr %q, want %q", errOut, want)
	}
	if log, err := os.ReadFile(filepath.Join(logRoot, id, "decisions.jsonl")); err != nil || strings.Contains(string(log), "marmalade") {
		t.Errorf("the decision log: %v, or it holds the body", err)
	}
}
