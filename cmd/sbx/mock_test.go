package main

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestMockCommands: sbx mock expect (a file and stdin), requests and
// reset against a gateway in this process that mocks one host.
func TestMockCommands(t *testing.T) {
	p, _ := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
	tokenFile := filepath.Join(t.TempDir(), "token")
	g, err := gateway.Start(t.Context(), gateway.Config{Listen: "127.0.0.1:0", API: []string{"127.0.0.1:0"}, TokenFile: tokenFile, Policy: p,
		MockLLM: map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	api := []string{"--api", g.APIAddrs[0], "--token-file", tokenFile}
	proxy, _ := url.Parse("http://" + g.ProxyAddr.String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	ask := func(user string) (int, string) {
		t.Helper()
		resp, err := client.Post("http://api.anthropic.com/v1/messages", "application/json",
			strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"`+user+`"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	mock := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		var out, errOut strings.Builder
		root := newRootCmd()
		root.SetArgs(append(append([]string{"mock"}, args...), api...))
		root.SetIn(strings.NewReader(stdin))
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := execute(t.Context(), root)
		return out.String(), errOut.String(), code
	}

	turns := writeFile(t, "turns.yaml", "- match: {user: hello}\n  reply: {text: from the file}\n")
	if stdout, stderr, code := mock("", "expect", turns); code != 0 || !strings.Contains(stdout, "queued 1 turn for api.anthropic.com") {
		t.Fatalf("mock expect FILE: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, stderr, code := mock("reply: {text: from stdin}\n", "expect", "--host", "api.anthropic.com", "-"); code != 0 || !strings.Contains(stdout, "queued 1 turn") {
		t.Fatalf("mock expect -: exit %d, %q %q", code, stdout, stderr)
	}
	if status, body := ask("hello"); status != 200 || !strings.Contains(body, "from the file") {
		t.Errorf("first request: got %d %s", status, body)
	}
	if status, body := ask("anything"); status != 200 || !strings.Contains(body, "from stdin") {
		t.Errorf("second request: got %d %s", status, body)
	}
	stdout, stderr, code := mock("", "requests")
	if code != 0 || !strings.Contains(stdout, "turn 1 (") || !strings.Contains(stdout, "turn 2 (stdin:1): reply") || !strings.Contains(stdout, "POST /v1/messages") {
		t.Errorf("mock requests: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, _, code := mock("", "requests", "--json"); code != 0 || !strings.Contains(stdout, `"content":"anything"`) {
		t.Errorf("mock requests --json: exit %d, %q, want the bodies", code, stdout)
	}
	if stdout, stderr, code := mock("", "reset"); code != 0 || !strings.Contains(stdout, "reset the mock of api.anthropic.com") {
		t.Errorf("mock reset: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, _, _ := mock("", "requests"); !strings.Contains(stdout, "no requests") {
		t.Errorf("mock requests after reset: %q", stdout)
	}
	// Errors: a bad script names its file and line, before the API is
	// asked; an unmocked host is the API's message.
	bad := writeFile(t, "bad.yaml", "- reply: {text: ok}\n- reply: {txet: no}\n")
	if _, stderr, code := mock("", "expect", bad); code == 0 || !strings.Contains(stderr, bad+":2:") {
		t.Errorf("mock expect with a bad file: exit %d, %q", code, stderr)
	}
	if _, stderr, code := mock("", "requests", "--host", "other.example"); code == 0 || !strings.Contains(stderr, "other.example is not mocked") {
		t.Errorf("mock requests --host other.example: exit %d, %q", code, stderr)
	}
}

// TestMockRequestsFromJournal: sbx mock requests reads the journal file
// a gateway kept (--journal FILE), and, for a sandbox that is not running,
// the journal kept in its directory of the logs' directory, saying so on
// stderr; bodies included with --json.
func TestMockRequestsFromJournal(t *testing.T) {
	p, _ := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
	logDir := t.TempDir()
	id := "1a2b3c4d"
	journal := filepath.Join(logDir, id, run.JournalName)
	g, err := gateway.Start(t.Context(), gateway.Config{Listen: "127.0.0.1:0", Policy: p, MockJournal: journal,
		MockLLM: map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil), "api.openai.com": mockllm.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	proxy, _ := url.Parse("http://" + g.ProxyAddr.String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := client.Post("http://api.anthropic.com/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"kept after the end"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Not for a model: the mock's fixed answer, journaled as a default.
	if resp, err = client.Get("http://api.anthropic.com/api/settings"); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mock := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut strings.Builder
		root := newRootCmd()
		root.SetArgs(append([]string{"mock", "requests"}, args...))
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := execute(t.Context(), root)
		return out.String(), errOut.String(), code
	}
	stateDir := t.TempDir()
	tests := []struct {
		name       string
		args       []string
		wantOut    string
		wantErr    string
		wantFailed bool
	}{
		{name: "file", args: []string{"--journal", journal, "--host", "api.anthropic.com", "--json"}, wantOut: `"content":"kept after the end"`},
		{name: "file, table", args: []string{"--journal", journal, "--host", "API.Anthropic.com"}, wantOut: "unmatched: the script is used up"},
		{name: "file, a default answer", args: []string{"--journal", journal, "--host", "api.anthropic.com", "--json"}, wantOut: `"default":true,"status":404,"outcome":"default: not a model endpoint: 404"`},
		{name: "ended sandbox", args: []string{"--sandbox", "1a2b", "--state-dir", stateDir, "--log-dir", logDir, "--host", "api.anthropic.com", "--json"},
			wantOut: `"content":"kept after the end"`, wantErr: "sbx: sandbox 1a2b3c4d ended; reading its mock journal " + journal},
		{name: "the other mock", args: []string{"--journal", journal, "--host", "api.openai.com"}, wantOut: "no requests to api.openai.com yet"},
		{name: "several mocks", args: []string{"--journal", journal}, wantErr: "there are several mocks (api.anthropic.com, api.openai.com); name one with --host or --script", wantFailed: true},
		{name: "not mocked", args: []string{"--journal", journal, "--host", "other.example"}, wantErr: "other.example is not mocked", wantFailed: true},
		{name: "no journal", args: []string{"--sandbox", "ffff", "--state-dir", stateDir, "--log-dir", logDir}, wantErr: "no mock journal of one in " + logDir, wantFailed: true},
		{name: "with --sandbox", args: []string{"--journal", journal, "--sandbox", id}, wantErr: "does not go with --sandbox", wantFailed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := mock(tt.args...)
			if (code != 0) != tt.wantFailed || !strings.Contains(stdout, tt.wantOut) || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("sbx mock requests %s: got exit %d, %q, %q; want failed %t, %q, %q", strings.Join(tt.args, " "), code, stdout, stderr, tt.wantFailed, tt.wantOut, tt.wantErr)
			}
		})
	}
}
