package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The policy's form of the mock LLM (docs/mock-llm.md): intercept rules with
// response {llm: SCRIPT}, answered by the scripts Config.LLMScripts holds.

// TestPolicyLLMHTTPS: the official SDKs, at the real API hosts over HTTPS,
// get the scripts' answers from the policy's intercept rules; each
// request's record names the rule that answered it.
func TestPolicyLLMHTTPS(t *testing.T) {
	m := newMockSetupAs(t, true, true)
	exerciseSDKs(t, m, "https://api.anthropic.com", "https://api.openai.com/v1")
	checkMockRecords(t, m, decisionlog.KindHTTPS)
	for _, r := range recordsOfKind(t, m.g.ring, decisionlog.KindConnect) {
		if r["action"] != "allow" {
			t.Errorf("got CONNECT record %v, want it let in to be inspected", r)
		}
	}
}

// TestPolicyLLMPlainHTTP: the same over http:// base URLs, with no CA.
func TestPolicyLLMPlainHTTP(t *testing.T) {
	m := newMockSetupAs(t, false, true)
	exerciseSDKs(t, m, "http://api.anthropic.com", "http://api.openai.com/v1")
	checkMockRecords(t, m, decisionlog.KindHTTP)
}

// TestPolicyLLMRuleScope: an llm response answers only what its rule
// matches; the rest of the host is decided by the rest of the policy.
func TestPolicyLLMRuleScope(t *testing.T) {
	m := newMockSetupAs(t, false, true)
	c := m.httpClient(t)
	resp, err := c.Get("http://api.openai.com/v1/models") // GET: openai-mock names POST only
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != netpolicy.RuleDefault {
		t.Errorf("GET /v1/models: got %d by rule %q, want 403 by the default", resp.StatusCode, resp.Header.Get(HeaderRule))
	}
	if n := len(m.openai.Requests()); n != 0 {
		t.Errorf("the OpenAI script journaled %d requests, want none", n)
	}
}

// TestPolicyLLMScriptsFixedAtStart: a gateway runs only policies whose
// llm responses name scripts it was given at start; Start refuses one, and
// so does every change to the store (the management API's), leaving the
// policy as it was. A policy sent over the API never makes the gateway
// read a file.
func TestPolicyLLMScriptsFixedAtStart(t *testing.T) {
	llm := func(name string) netpolicy.Spec {
		return netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
			{Host: "api.anthropic.com", Action: netpolicy.Intercept, Response: &netpolicy.Response{LLM: name}}}}
	}
	p, err := netpolicy.Compile(llm("/etc/shadow"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newServer(serverConfig{Store: netpolicy.NewStore(p)}); err == nil || !strings.Contains(err.Error(), `"/etc/shadow": this gateway holds no LLM script`) {
		t.Errorf("newServer with a policy naming a script it does not hold: got %v, want it refused", err)
	}

	a := startAPIWith(t, llm("agent.yaml"), nil, func(o *Config) {
		o.LLMScripts = map[string]*mockllm.Responder{"agent.yaml": mockllm.New(nil)}
	})
	var errAns struct {
		Error string `json:"error"`
	}
	policy := "rules:\n  - {host: api.anthropic.com, action: intercept, response: {llm: /etc/shadow}}\n"
	resp := a.call(t, "PUT", "/v1/policy", policy, nil, &errAns)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errAns.Error, `response: llm: "/etc/shadow" was not read when this gateway started; it holds "agent.yaml"`) {
		t.Errorf("PUT /v1/policy naming another script: got %d %q, want 400 naming it and the scripts held", resp.StatusCode, errAns.Error)
	}
	resp = a.call(t, "POST", "/v1/policy/rules", `{"host": "x.test", "action": "intercept", "response": {"llm": "other.yaml"}}`, nil, &errAns)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errAns.Error, `"other.yaml" was not read`) {
		t.Errorf("POST /v1/policy/rules naming another script: got %d %q, want 400", resp.StatusCode, errAns.Error)
	}
	if v := a.g.Server.Store().Load().Version(); v != 1 {
		t.Errorf("policy version %d after refused changes, want 1", v)
	}
	// A script the gateway holds may be named by a new rule.
	resp = a.call(t, "POST", "/v1/policy/rules", `{"host": "api.openai.com", "action": "intercept", "response": {"llm": "agent.yaml"}}`, nil, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /v1/policy/rules naming the held script: got %d, want 201", resp.StatusCode)
	}
}

// TestAPIMockScript: the management API reaches a policy's script by
// ?script=, beside a --mock-llm host; with both there, a request must
// name one, and a reset without a name resets both.
func TestAPIMockScript(t *testing.T) {
	spec := netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
		{Host: "llm.test", Action: netpolicy.Intercept, Response: &netpolicy.Response{LLM: "scripts/agent.yaml"}}}}
	script := mockllm.New(nil)
	a := startAPIWith(t, spec, nil, func(o *Config) {
		o.LLMScripts = map[string]*mockllm.Responder{"scripts/agent.yaml": script}
		o.MockLLM = map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil)}
	})
	var errAns struct {
		Error string `json:"error"`
	}
	resp := a.call(t, "POST", "/v1/mock/expect", "- reply: {text: hi}\n", nil, &errAns)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errAns.Error, "api.anthropic.com, script scripts/agent.yaml") {
		t.Errorf("expect with no name among two mocks: got %d %q, want 400 listing both", resp.StatusCode, errAns.Error)
	}
	var queued struct {
		Mock   string `json:"mock"`
		Script string `json:"script"`
		Queued int    `json:"queued"`
	}
	resp = a.call(t, "POST", "/v1/mock/expect?script=scripts/agent.yaml", "- reply: {text: queued for the policy's script}\n", nil, &queued)
	if resp.StatusCode != http.StatusOK || queued.Script != "scripts/agent.yaml" || queued.Mock != "script scripts/agent.yaml" || queued.Queued != 1 {
		t.Fatalf("expect ?script=: got %d %+v, want 1 turn queued for the script", resp.StatusCode, queued)
	}
	if status, body := askMock(t, a, "llm.test", "hello"); status != http.StatusOK || !strings.Contains(body, "queued for the policy's script") {
		t.Errorf("after expect: got %d %s, want the queued answer", status, body)
	}
	if n := len(script.Requests()); n != 1 {
		t.Errorf("the script journaled %d requests, want 1", n)
	}
	resp = a.call(t, "GET", "/v1/mock/requests?script=nope.yaml", "", nil, &errAns)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(errAns.Error, `holds no LLM script "nope.yaml"`) {
		t.Errorf("requests of an unknown script: got %d %q, want 404", resp.StatusCode, errAns.Error)
	}
	resp = a.call(t, "GET", "/v1/mock/requests?script=scripts/agent.yaml&host=api.anthropic.com", "", nil, &errAns)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("requests naming a host and a script: got %d, want 400", resp.StatusCode)
	}
	var reset struct {
		Reset []string `json:"reset"`
	}
	resp = a.call(t, "DELETE", "/v1/mock", "", nil, &reset)
	if resp.StatusCode != http.StatusOK || strings.Join(reset.Reset, "|") != "api.anthropic.com|script scripts/agent.yaml" {
		t.Errorf("DELETE /v1/mock: got %d %v, want both reset", resp.StatusCode, reset.Reset)
	}
	if n := len(script.Requests()); n != 0 {
		t.Errorf("after the reset the script's journal holds %d requests, want none", n)
	}
}

// TestMockForMissingScript: a decision whose llm response names a script
// the gateway does not hold (which its Store's check keeps out of every
// policy) becomes a refusal in every mode, never an empty canned answer.
func TestMockForMissingScript(t *testing.T) {
	g := startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) {
		c.LLMScripts = map[string]*mockllm.Responder{"held.yaml": mockllm.New(nil)}
	})
	d := netpolicy.Decision{Action: netpolicy.Intercept, Rule: "r1", Response: &netpolicy.Response{LLM: "other.yaml"}}
	if a := g.srv.mocks.answerFor("llm.test", &d); a != nil || d.Action != netpolicy.Block || d.Rule != netpolicy.RuleInvalid || !strings.Contains(d.Reason, `"other.yaml", which this gateway did not load`) {
		t.Errorf("answerFor a missing script: got %v and %+v, want no mock and a refusal by rule invalid", a, d)
	}
	d = netpolicy.Decision{Action: netpolicy.Intercept, Rule: "r1", Response: &netpolicy.Response{LLM: "held.yaml"}}
	if a := g.srv.mocks.answerFor("llm.test", &d); a == nil || a.rule != "r1" || a.journal != "sbx mock requests --script held.yaml" {
		t.Errorf("answerFor the held script: got %+v, want it answered by rule r1", a)
	}
}

// TestMockHEADHasNoBody: a mock's answer to HEAD is the head alone, so a
// kept-alive connection's next answer is read where it starts.
func TestMockHEADHasNoBody(t *testing.T) {
	m := newMockSetupAs(t, false, true)
	c, br := dialRaw(t, m.g.addr)
	io.WriteString(c, "HEAD http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`
	fmt.Fprintf(c, "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		t.Fatalf("the answer after HEAD's: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Hello from the mock.") {
		t.Errorf("the answer after HEAD's: got %d %s, want the script's reply", resp.StatusCode, b)
	}
}

// TestMocksAlone: the mocks as the server makes them, without a server:
// a mocked host is found by its normalized name whatever the decision,
// tunnels to it are let in only when the gateway can inspect them, and a
// script with no Responder is refused when they are made.
func TestMocksAlone(t *testing.T) {
	host, script := mockllm.New(nil), mockllm.New(nil)
	cfg := Config{MockLLM: map[string]*mockllm.Responder{"API.Test.": host}, LLMScripts: map[string]*mockllm.Responder{"s.yaml": script}}
	var limits Limits
	m, err := newMocks(cfg, &limits, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.forHost("api.test") != host || m.forHost("other.test") != nil {
		t.Errorf("forHost: want the mock of api.test, and none for other.test")
	}
	d := netpolicy.Decision{Action: netpolicy.Block, Rule: "r1"}
	if a := m.answerFor("api.test", &d); a == nil || a.m != host || a.rule != RuleMockLLM || a.journal != "sbx mock requests --host api.test" || d.Action != netpolicy.Block {
		t.Errorf("answerFor the mocked host under a block: got %+v and %+v, want its mock by rule mock-llm, the decision untouched", a, d)
	}
	d = netpolicy.Decision{Action: netpolicy.Intercept, Rule: "r2", Response: &netpolicy.Response{LLM: "s.yaml"}}
	if a := m.answerFor("llm.test", &d); a == nil || a.m != script || a.rule != "r2" {
		t.Errorf("answerFor the script: got %+v, want s.yaml's by rule r2", a)
	}
	if d := m.tunnelDecision("api.test"); d.Action != netpolicy.Block || d.Rule != RuleMockLLM || !strings.Contains(d.Reason, "no CA") {
		t.Errorf("tunnelDecision without a CA: got %+v, want a block by rule mock-llm that says there is no CA", d)
	}
	cfg.CA = &CA{}
	if m, err = newMocks(cfg, &limits, nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := m.tunnelDecision("api.test"); d.Action != netpolicy.Allow || d.Rule != RuleMockLLM {
		t.Errorf("tunnelDecision with a CA: got %+v, want an allow by rule mock-llm", d)
	}
	cfg.LLMScripts["none.yaml"] = nil
	if _, err := newMocks(cfg, &limits, nil, nil); err == nil || !strings.Contains(err.Error(), `"none.yaml" has no Responder`) {
		t.Errorf("newMocks with a nil script: got %v, want it refused", err)
	}
}
