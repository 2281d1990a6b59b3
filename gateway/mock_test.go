package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub/dnsstubtest"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// mockSetup is a gateway whose policy blocks everything and that mocks
// the real API hosts of Anthropic and OpenAI. Its resolver has no DNS:
// a request that reached the network would fail.
type mockSetup struct {
	g                 *testGateway
	ca                *CA
	anthropic, openai *mockllm.Responder
	// rules are the rules the records of each host's requests name:
	// RuleMockLLM for --mock-llm, the policy's for its llm responses;
	// journals the commands their reasons point at.
	rules, journals map[string]string
}

const (
	mockAnthropicScript = `turns:
  - match: {user: hello}
    reply: {text: "Hello from the mock.", usage: {input_tokens: 5, output_tokens: 4}}
  - match: {user: stream}
    reply: {text: "A streamed answer, in pieces.", chunk_size: 4}
  - match: {user: cut}
    fault: {disconnect_after_events: 2}
`
	mockOpenAIScript = `turns:
  - match: {user: hello}
    reply: {text: "Hi from the OpenAI mock."}
  - match: {user: stream}
    reply: {text: "Streamed over chat completions.", chunk_size: 5}
`
)

func newMockSetup(t *testing.T, withCA bool) *mockSetup {
	t.Helper()
	return newMockSetupAs(t, withCA, false)
}

// mockPolicy is the policy of newMockSetupAs's policy form: the real API
// hosts answered by intercept rules with LLM responses, everything else
// blocked. OpenAI's rule is narrowed to POST under /v1/, as a rule may be.
var mockPolicy = netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
	{ID: "anthropic-mock", Host: "api.anthropic.com", Action: netpolicy.Intercept, Response: &netpolicy.Response{LLM: "anthropic.yaml"}},
	{ID: "openai-mock", Host: "api.openai.com", Methods: []string{"POST"}, Path: "/v1/", Action: netpolicy.Intercept, Response: &netpolicy.Response{LLM: "openai.yaml"}},
}}

// newMockSetupAs is newMockSetup, the mocks given as --mock-llm gives
// them (Config.MockLLM) or, viaPolicy, as the scripts of the policy's
// intercept rules (mockPolicy, Config.LLMScripts).
func newMockSetupAs(t *testing.T, withCA, viaPolicy bool) *mockSetup {
	t.Helper()
	parse := func(name, script string) *mockllm.Responder {
		s, err := mockllm.ParseScript(name, []byte(script))
		if err != nil {
			t.Fatal(err)
		}
		return mockllm.New(s)
	}
	m := &mockSetup{anthropic: parse("anthropic.yaml", mockAnthropicScript), openai: parse("openai.yaml", mockOpenAIScript)}
	if withCA {
		ca, err := NewCA("test", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		m.ca = ca
	}
	if viaPolicy {
		m.rules = map[string]string{"api.anthropic.com": "anthropic-mock", "api.openai.com": "openai-mock"}
		m.journals = map[string]string{"api.anthropic.com": "sbx mock requests --script anthropic.yaml", "api.openai.com": "sbx mock requests --script openai.yaml"}
		m.g = startGatewayWith(t, mockPolicy, nil, func(c *serverConfig) {
			c.CA = m.ca
			c.LLMScripts = map[string]*mockllm.Responder{"anthropic.yaml": m.anthropic, "openai.yaml": m.openai}
		})
		return m
	}
	m.rules = map[string]string{"api.anthropic.com": RuleMockLLM, "api.openai.com": RuleMockLLM}
	m.journals = map[string]string{"api.anthropic.com": "sbx mock requests --host api.anthropic.com", "api.openai.com": "sbx mock requests --host api.openai.com"}
	m.g = startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) {
		c.CA = m.ca
		// Not normalized on purpose: newServer normalizes.
		c.MockLLM = map[string]*mockllm.Responder{"API.Anthropic.com.": m.anthropic, "api.openai.com": m.openai}
	})
	return m
}

// httpClient goes through the gateway and trusts only the sandbox's CA.
func (m *mockSetup) httpClient(t *testing.T) *http.Client {
	proxy, _ := url.Parse("http://" + m.g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), ForceAttemptHTTP2: true}
	if m.ca != nil {
		pool := x509.NewCertPool()
		pool.AddCert(m.ca.Certificate())
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (m *mockSetup) anthropicClient(t *testing.T, base string) anthropic.Client {
	return anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(base),
		aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0), aoption.WithHTTPClient(m.httpClient(t)))
}

func (m *mockSetup) openaiClient(t *testing.T, base string) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey("sk-test"),
		ooption.WithMaxRetries(0), ooption.WithHTTPClient(m.httpClient(t)))
}

func mockAnthropicParams(user string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 100,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(user))},
	}
}

func mockChatParams(user string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)}}
}

// exerciseSDKs runs each SDK against the mock at its base URL: a text
// reply, a streamed reply, an unmatched request, and (Anthropic) a stream
// the mock cuts.
func exerciseSDKs(t *testing.T, m *mockSetup, anthropicBase, openaiBase string) {
	ctx := context.Background()
	ac := m.anthropicClient(t, anthropicBase)
	msg, err := ac.Messages.New(ctx, mockAnthropicParams("hello there"))
	if err != nil {
		t.Fatalf("Anthropic Messages.New: %v", err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "Hello from the mock." || msg.Usage.OutputTokens != 4 {
		t.Errorf("Anthropic: got %+v, want the script's text reply", msg)
	}
	stream := ac.Messages.NewStreaming(ctx, mockAnthropicParams("stream it"))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || len(acc.Content) != 1 || acc.Content[0].Text != "A streamed answer, in pieces." {
		t.Errorf("Anthropic stream: got %+v (%v), want the script's streamed reply", acc.Content, err)
	}
	stream.Close()
	_, err = ac.Messages.New(ctx, mockAnthropicParams("nothing fits this"))
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.Error(), "no turn fits") {
		t.Errorf("Anthropic unmatched: got %v, want *anthropic.Error 400 saying no turn fits", err)
	}
	// The cut must end the connection, not leave the client waiting.
	cutCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cut := ac.Messages.NewStreaming(cutCtx, mockAnthropicParams("cut me off"))
	events := 0
	for cut.Next() {
		events++
	}
	if err := cut.Err(); err == nil || errors.Is(err, context.DeadlineExceeded) || events > 2 {
		t.Errorf("Anthropic cut stream: got %d events and error %v, want at most 2 and the connection's end", events, err)
	}
	cut.Close()

	oc := m.openaiClient(t, openaiBase)
	c, err := oc.Chat.Completions.New(ctx, mockChatParams("hello"))
	if err != nil {
		t.Fatalf("OpenAI Chat.Completions.New: %v", err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content != "Hi from the OpenAI mock." {
		t.Errorf("OpenAI: got %+v, want the script's text reply", c.Choices)
	}
	os := oc.Chat.Completions.NewStreaming(ctx, mockChatParams("stream"))
	chat := openai.ChatCompletionAccumulator{}
	for os.Next() {
		chat.AddChunk(os.Current())
	}
	if err := os.Err(); err != nil || len(chat.Choices) != 1 || chat.Choices[0].Message.Content != "Streamed over chat completions." {
		t.Errorf("OpenAI stream: got %+v (%v), want the script's streamed reply", chat.Choices, err)
	}
	os.Close()
	_, err = oc.Chat.Completions.New(ctx, mockChatParams("nothing fits"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusBadRequest {
		t.Errorf("OpenAI unmatched: got %v, want *openai.Error 400", err)
	}
}

// checkMockRecords checks the decision records of the requests
// exerciseSDKs sent, of kind kind.
func checkMockRecords(t *testing.T, m *mockSetup, kind string) {
	t.Helper()
	type want struct{ host, path, reason string }
	wants := []want{
		{"api.anthropic.com", "/v1/messages", "mock LLM: turn 1 (anthropic.yaml:2): reply"},
		{"api.anthropic.com", "/v1/messages", "mock LLM: turn 2 (anthropic.yaml:4): reply"},
		{"api.anthropic.com", "/v1/messages", "mock LLM: unmatched: no turn fits this request; request 3 of the mock's journal says more (" + m.journals["api.anthropic.com"] + ")"},
		{"api.anthropic.com", "/v1/messages", "mock LLM: turn 3 (anthropic.yaml:6): fault 200: disconnect after 2 events"},
		{"api.openai.com", "/v1/chat/completions", "mock LLM: turn 1 (openai.yaml:2): reply"},
		{"api.openai.com", "/v1/chat/completions", "mock LLM: turn 2 (openai.yaml:4): reply"},
		{"api.openai.com", "/v1/chat/completions", "mock LLM: unmatched: the script is used up; request 3 of the mock's journal says more (" + m.journals["api.openai.com"] + ")"},
	}
	recs := recordsOfKind(t, m.g.ring, kind)
	if len(recs) != len(wants) {
		t.Fatalf("got %d %s decision records, want %d: %v", len(recs), kind, len(wants), recs)
	}
	for i, w := range wants {
		r := recs[i]
		wantStatus := 200.0
		if strings.Contains(w.reason, "unmatched") {
			wantStatus = 400
		}
		rule := m.rules[w.host]
		if r["host"] != w.host || r["path"] != w.path || r["action"] != "intercept" || r["rule"] != rule || r["reason"] != w.reason || r["status"] != wantStatus || r["method"] != "POST" {
			t.Errorf("record %d: got %v, want host %s path %s action intercept rule %s status %v reason %q", i, r, w.host, w.path, rule, wantStatus, w.reason)
		}
	}
	for _, r := range ringRecords(t, m.g.ring) {
		if r["event"] == decisionlog.EventClose && r["kind"] == kind {
			t.Errorf("got a close record for a mocked request: %v", r)
		}
	}
	// The journal keeps the bodies; the log does not.
	if j := m.anthropic.Requests(); len(j) != 4 || !strings.Contains(string(j[2].Body), "nothing fits this") {
		t.Errorf("got journal %+v, want 4 requests with their bodies", j)
	}
}

// TestMockLLMHTTPS: the official SDKs, at the real API hosts over HTTPS,
// get the script's answers through the gateway, which inspects the
// mocked hosts under a policy that blocks everything and dials nothing.
func TestMockLLMHTTPS(t *testing.T) {
	m := newMockSetup(t, true)
	exerciseSDKs(t, m, "https://api.anthropic.com", "https://api.openai.com/v1")
	checkMockRecords(t, m, decisionlog.KindHTTPS)
	connects := recordsOfKind(t, m.g.ring, decisionlog.KindConnect)
	if len(connects) == 0 {
		t.Fatal("no CONNECT records")
	}
	for _, r := range connects {
		if r["action"] != "allow" || r["rule"] != RuleMockLLM {
			t.Errorf("got CONNECT record %v, want allowed by rule %s", r, RuleMockLLM)
		}
	}
}

// TestMockLLMNeedsCAForHTTPS: without a CA, a CONNECT to a mocked host is
// refused (a tunnel would reach the real API), saying why.
func TestMockLLMNeedsCAForHTTPS(t *testing.T) {
	m := newMockSetup(t, false)
	ac := m.anthropicClient(t, "https://api.anthropic.com")
	if _, err := ac.Messages.New(context.Background(), mockAnthropicParams("hello")); err == nil {
		t.Fatal("got an answer, want the CONNECT refused")
	}
	recs := recordsOfKind(t, m.g.ring, decisionlog.KindConnect)
	if len(recs) != 1 || recs[0]["action"] != "block" || recs[0]["rule"] != RuleMockLLM || !strings.Contains(recs[0]["reason"].(string), "no CA") {
		t.Errorf("got %v, want one CONNECT blocked by rule %s for want of a CA", recs, RuleMockLLM)
	}
	if n := len(m.anthropic.Requests()); n != 0 {
		t.Errorf("got %d requests journaled, want none", n)
	}
}

func TestMockLLMConfigHosts(t *testing.T) {
	for _, hosts := range []map[string]*mockllm.Responder{
		{"bad host!": mockllm.New(nil)},
		{"api.test": nil},
		{"API.test": mockllm.New(nil), "api.test.": mockllm.New(nil)},
	} {
		p, _ := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
		if _, err := newServer(serverConfig{Store: netpolicy.NewStore(p), Config: Config{MockLLM: hosts}}); err == nil {
			t.Errorf("newServer with MockLLM %v: got no error, want one", hosts)
		}
	}
}

// TestMockLLMPlainHTTP: http:// base URLs need no CA; the proxy answers
// them from the mock as well, streams included, over kept-alive
// connections.
func TestMockLLMPlainHTTP(t *testing.T) {
	m := newMockSetup(t, false)
	exerciseSDKs(t, m, "http://api.anthropic.com", "http://api.openai.com/v1")
	checkMockRecords(t, m, decisionlog.KindHTTP)
}

// TestMockLLMPlainHTTPStall: a stalled answer is released when the
// client gives up, and the next request is served.
func TestMockLLMPlainHTTPStall(t *testing.T) {
	m := newMockSetup(t, false)
	if err := m.anthropic.Expect([]mockllm.Turn{{Match: &mockllm.Match{User: "stall"}, Fault: &mockllm.Fault{Stall: true}}}); err != nil {
		t.Fatal(err)
	}
	ac := m.anthropicClient(t, "http://api.anthropic.com")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ac.Messages.New(ctx, mockAnthropicParams("stall")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the client's deadline", err)
	}
	if _, err := ac.Messages.New(context.Background(), mockAnthropicParams("hello")); err != nil {
		t.Errorf("after the stall: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	open := func() int {
		m.g.srv.mu.Lock()
		defer m.g.srv.mu.Unlock()
		return len(m.g.srv.conns)
	}
	for open() > 1 { // the stalled request's connection is closed; the next one's may idle
		if time.Now().After(deadline) {
			t.Fatal("the stalled connection is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMockLLMHostResolves: the DNS stub answers a mocked host with a fake
// address under a policy that blocks everything, so an agent that ignores
// the proxy (Node's fetch) reaches the mock through capture.
func TestMockLLMHostResolves(t *testing.T) {
	st := startDNS(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) {
		c.MockLLM = map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil)}
	})
	for _, tt := range []struct {
		name  string
		rcode dnsmessage.RCode
	}{{"api.anthropic.com", dnsmessage.RCodeSuccess}, {"api.openai.com", dnsmessage.RCodeNameError}} {
		m := dnsstubtest.Unpack(t, exchange(t, st, false, dnsstubtest.Query{Name: tt.name + ".", Type: dnsmessage.TypeA}.Pack(t, 7)))
		if m.RCode != tt.rcode || (tt.rcode == dnsmessage.RCodeSuccess && len(m.Answers) != 1) {
			t.Errorf("A %s: got %v with %d answers, want %v", tt.name, m.RCode, len(m.Answers), tt.rcode)
		}
	}
}

// TestRecordLLMReplaysByteIdentical is --record-llm end to end in the
// gateway: requests to an inspected API host go to the upstream (here a
// scripted LLM served by the test, standing in for the real API) and are
// recorded; a second gateway replays the recorded script offline, and the
// client gets the same bytes: the same JSON, the same event stream.
func TestRecordLLMReplaysByteIdentical(t *testing.T) {
	api, err := mockllm.ParseScript("api.yaml", []byte(`turns:
  - match: {user: "json please"}
    reply: {text: "a plain answer", usage: {input_tokens: 5, output_tokens: 3}}
  - match: {user: "stream please"}
    reply: {text: "a streamed answer in several chunks", chunk_size: 7}
`))
	if err != nil {
		t.Fatal(err)
	}
	up, port, ca, roots, clientRoots := recordedUpstream(t, api)
	target := "https://example.com:" + strconv.Itoa(int(port)) + "/v1/messages"
	ask := func(g *testGateway, body string) []byte {
		t.Helper()
		proxy, _ := url.Parse("http://" + g.addr)
		tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: clientRoots}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("POST", target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return b
	}
	requests := []string{
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"json please"}]}`,
		`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"stream please"}]}`,
	}

	rec := mockllm.NewRecorder(nil)
	recording := startGatewayWith(t, loopbackPolicy(netpolicy.Block, netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow}),
		map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
			c.CA, c.UpstreamRoots, c.RecordLLM = ca, roots, map[string]*mockllm.Recorder{"example.com": rec}
		})
	var live [][]byte
	for _, body := range requests {
		live = append(live, ask(recording, body))
	}
	if d := recording.lastDecision(t); d["kind"] != decisionlog.KindHTTPS || d["action"] != "allow" {
		t.Errorf("a recorded request: logged %v, want an allowed https request", d)
	}
	var script bytes.Buffer
	if err := mockllm.WriteScript(&script, rec.Turns()); err != nil {
		t.Fatal(err)
	}
	replayed, err := mockllm.ParseScript("recorded.yaml", script.Bytes())
	if err != nil {
		t.Fatalf("the recorded script does not parse: %v\n%s", err, script.String())
	}
	up.Close() // offline from here
	replaying := startGatewayWith(t, loopbackPolicy(netpolicy.Block), map[string]string{}, func(c *serverConfig) {
		c.CA, c.MockLLM = ca, map[string]*mockllm.Responder{"example.com": mockllm.New(replayed)}
	})
	for i, body := range requests {
		if got := ask(replaying, body); !bytes.Equal(got, live[i]) {
			t.Errorf("request %d replayed:\n%s\nwant the recorded bytes:\n%s", i+1, got, live[i])
		}
	}
}

// TestRecordLLMGemini: --record-llm records the Gemini API through the
// gateway (its key in the query, as Google's clients may send it), a
// stream and an answer not streamed, and the recording replays offline
// byte for byte. The key is in neither the script nor the decision log.
func TestRecordLLMGemini(t *testing.T) {
	api, err := mockllm.ParseScript("api.yaml", []byte(`turns:
  - match: {user: "json please"}
    reply: {text: "a plain answer", usage: {input_tokens: 5, output_tokens: 3}}
  - match: {user: "stream please"}
    reply:
      text: "a streamed answer in several chunks"
      tool_calls: [{name: run_shell_command, input: {command: ls}}]
      chunk_size: 7
`))
	if err != nil {
		t.Fatal(err)
	}
	up, port, ca, roots, clientRoots := recordedUpstream(t, api)
	const key = "AIzaSyD-not-a-real-key-1234567890"
	base := "https://example.com:" + strconv.Itoa(int(port)) + "/v1beta/models/gemini-2.5-pro:"
	requests := []struct{ target, body string }{
		{base + "generateContent?key=" + key, `{"contents":[{"role":"user","parts":[{"text":"json please"}]}]}`},
		{base + "streamGenerateContent?alt=sse&key=" + key, `{"contents":[{"role":"user","parts":[{"text":"stream please"}]}]}`},
	}
	ask := func(g *testGateway, target, body string) []byte {
		t.Helper()
		proxy, _ := url.Parse("http://" + g.addr)
		tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: clientRoots}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("POST", target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return b
	}

	rec := mockllm.NewRecorder(nil)
	recording := startGatewayWith(t, loopbackPolicy(netpolicy.Block, netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow}),
		map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
			c.CA, c.UpstreamRoots, c.RecordLLM = ca, roots, map[string]*mockllm.Recorder{"example.com": rec}
		})
	var live [][]byte
	for _, r := range requests {
		live = append(live, ask(recording, r.target, r.body))
	}
	d := recording.lastDecision(t)
	if d["kind"] != decisionlog.KindHTTPS || d["action"] != "allow" {
		t.Errorf("a recorded request: logged %v, want an allowed https request", d)
	}
	if s := fmt.Sprint(d); strings.Contains(s, key) {
		t.Errorf("the decision log holds the API key: %s", s)
	}
	var script bytes.Buffer
	if err := mockllm.WriteScript(&script, rec.Turns()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(script.String(), key) {
		t.Errorf("the recorded script holds the API key:\n%s", script.String())
	}
	replayed, err := mockllm.ParseScript("recorded.yaml", script.Bytes())
	if err != nil {
		t.Fatalf("the recorded script does not parse: %v\n%s", err, script.String())
	}
	if n := len(replayed.Turns); n != 2 || replayed.Turns[1].Reply == nil || len(replayed.Turns[1].Reply.ToolCalls) != 1 {
		t.Fatalf("got %d turns recorded, want 2, the second with the function call:\n%s", n, script.String())
	}
	up.Close() // offline from here
	replaying := startGatewayWith(t, loopbackPolicy(netpolicy.Block), map[string]string{}, func(c *serverConfig) {
		c.CA, c.MockLLM = ca, map[string]*mockllm.Responder{"example.com": mockllm.New(replayed)}
	})
	for i, r := range requests {
		if got := ask(replaying, r.target, r.body); !bytes.Equal(got, live[i]) {
			t.Errorf("request %d replayed:\n%s\nwant the recorded bytes:\n%s", i+1, got, live[i])
		}
	}
}

// recordedUpstream serves script over TLS as the real API a recording
// gateway inspects (closed at the test's end, or when the test takes the
// gateway offline): the server, its port, the gateway's CA, the roots that trust the
// upstream (the gateway's UpstreamRoots) and those that trust the CA (the
// client's).
func recordedUpstream(t *testing.T, script *mockllm.Script) (up *httptest.Server, port netpolicy.Port, ca *CA, roots, clientRoots *x509.CertPool) {
	t.Helper()
	up = httptest.NewUnstartedServer(mockllm.New(script))
	up.StartTLS()
	t.Cleanup(up.Close)
	port = portOf(t, up)
	ca, err := NewCA("record", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(up.Certificate())
	clientRoots = x509.NewCertPool()
	clientRoots.AddCert(ca.Certificate())
	return up, port, ca, roots, clientRoots
}
