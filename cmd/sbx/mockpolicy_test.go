package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPolicyLLMCommands: a policy file's intercept rule answers with an
// LLM script named by a path relative to the file. sbx policy validate
// and check read the script as a sandbox would, sbx gateway answers with
// it, sbx mock reaches it by --script, and sbx policy replace cannot name
// a script the gateway did not read at start.
func TestPolicyLLMCommands(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "scripts"), 0o755)
	os.WriteFile(filepath.Join(dir, "scripts", "agent.yaml"), []byte("turns:\n  - reply: {text: scripted by the policy}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "scripts", "bad.yaml"), []byte("turns:\n  - reply: {txet: no}\n"), 0o644)
	policy := func(name, script string) string {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte("rules:\n  - id: model\n    host: api.anthropic.com\n    action: intercept\n    response: {llm: "+script+"}\n"), 0o644)
		return path
	}
	good := policy("policy.yaml", "scripts/agent.yaml")

	// The working directory is not the policy's: the script's path is
	// read relative to the file.
	if stdout, stderr, code := runCLI(t, "policy", "validate", good); code != 0 || !strings.Contains(stdout, "valid (1 rule") {
		t.Errorf("policy validate: exit %d, %q %q", code, stdout, stderr)
	}
	for _, tc := range []struct{ script, want string }{
		{"scripts/missing.yaml", "rule model: response: llm: scripts/missing.yaml: open " + filepath.Join(dir, "scripts", "missing.yaml") + ": no such file"},
		{"scripts/bad.yaml", "rule model: response: llm: scripts/bad.yaml: the script is invalid:\nsbx: " + filepath.Join(dir, "scripts", "bad.yaml") + ":2:"},
	} {
		path := policy("p-"+filepath.Base(tc.script), tc.script)
		if _, stderr, code := runCLI(t, "policy", "validate", path); code != exitFailure || !strings.Contains(stderr, tc.want) {
			t.Errorf("policy validate naming %s: exit %d, %q; want exit 1 and %q", tc.script, code, stderr, tc.want)
		}
		if _, stderr, code := runCLI(t, "policy", "check", "--policy", path, "--method", "POST", "http://api.anthropic.com/v1/messages"); code != exitFailure || !strings.Contains(stderr, tc.want) {
			t.Errorf("policy check naming %s: exit %d, %q; want exit 1 and %q", tc.script, code, stderr, tc.want)
		}
	}
	if stdout, stderr, code := runCLI(t, "policy", "check", "--policy", good, "--method", "POST", "http://api.anthropic.com/v1/messages"); code != 0 ||
		!strings.Contains(stdout, "intercept  POST http://api.anthropic.com:80/v1/messages") || !strings.Contains(stdout, "answer: the scripted LLM of scripts/agent.yaml") {
		t.Errorf("policy check: exit %d, %q %q", code, stdout, stderr)
	}

	pln, _ := net.Listen("tcp", "127.0.0.1:0")
	proxyAddr := pln.Addr().String()
	pln.Close()
	tokenFile := filepath.Join(dir, "token")
	sock := filepath.Join(dir, "api.sock")
	g := startGatewayCmd(t, "management API on", "--listen", proxyAddr, "--policy", good, "--api", "unix:"+sock, "--token-file", tokenFile)
	defer g.stop(t)

	pu, _ := url.Parse("http://" + proxyAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post("http://api.anthropic.com/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "scripted by the policy") {
		t.Errorf("POST /v1/messages through the gateway: got %d %s, want the script's reply", resp.StatusCode, body)
	}
	api := []string{"--api", "unix:" + sock, "--token-file", tokenFile}
	if stdout, stderr, code := runCLI(t, append([]string{"mock", "requests", "--script", "scripts/agent.yaml"}, api...)...); code != 0 || !strings.Contains(stdout, "turn 1 (") {
		t.Errorf("mock requests --script: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code := runCLI(t, append([]string{"policy", "show"}, api...)...); code != 0 || !strings.Contains(stdout, "intercept (llm: scripts/agent.yaml)") {
		t.Errorf("policy show: exit %d, %q %q; want the rule's script", code, stdout, stderr)
	}
	other := policy("other.yaml", "scripts/bad.yaml")
	if _, stderr, code := runCLI(t, append([]string{"policy", "replace", other}, api...)...); code == 0 || !strings.Contains(stderr, `"scripts/bad.yaml" was not read when this gateway started`) {
		t.Errorf("policy replace naming another script: exit %d, %q; want it refused", code, stderr)
	}
}
