package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

var updateWire = flag.Bool("update-api-wire", false, "rewrite testdata/api/*.json from the server's answers")

// wireExchange is one request of TestAPIWire and the api type its answer
// decodes into.
type wireExchange struct {
	name         string // testdata/api/NAME.json
	method, path string
	body         string
	header       map[string]string
	noToken      bool
	status       int
	into         func() any // a new value of the answer's api type
}

// wireExchanges cover every JSON endpoint of docs/api.md and each error
// status, in an order whose answers do not depend on timing.
var wireExchanges = []wireExchange{
	{name: "status", method: "GET", path: "/v1/status", status: 200, into: func() any { return new(Status) }},
	{name: "policy", method: "GET", path: "/v1/policy", status: 200, into: func() any { return new(Policy) }},
	{name: "rule-added", method: "POST", path: "/v1/policy/rules", header: map[string]string{"If-Match": `"1"`},
		body:   `{"id": "api", "host": "api.test", "ports": [18080], "methods": ["GET"], "path": "/v1/", "action": "allow", "position": 0}`,
		status: 201, into: func() any { return new(RuleAdded) }},
	{name: "policy-replaced", method: "PUT", path: "/v1/policy", header: map[string]string{"If-Match": `"2"`},
		body: "version: 1\ndefault: block\nmode: audit\nallow_private: [10.0.0.0/8]\nrules:\n" +
			"  - {id: api, host: '*.api.test', ports: ['*'], action: allow}\n" +
			"  - {id: teapot, host: tea.test, ports: [80, 8080], action: intercept, response: {status: 418, body: short and stout}}\n" +
			"  - {id: llm, host: llm.test, action: intercept, response: {llm: agent.yaml}}\n",
		status: 200, into: func() any { return new(PolicyChange) }},
	{name: "policy-after", method: "GET", path: "/v1/policy", status: 200, into: func() any { return new(Policy) }},
	{name: "rule-removed", method: "DELETE", path: "/v1/policy/rules/api", status: 200, into: func() any { return new(PolicyChange) }},
	{name: "error-401", method: "GET", path: "/v1/status", noToken: true, status: 401, into: func() any { return new(ErrorBody) }},
	{name: "error-412", method: "PUT", path: "/v1/policy", header: map[string]string{"If-Match": `"1"`}, body: "default: allow\n", status: 412, into: func() any { return new(ErrorBody) }},
	{name: "error-400", method: "PUT", path: "/v1/policy", body: "rules:\n  - host: \"*.\"\n    action: allow\n", status: 400, into: func() any { return new(ErrorBody) }},
	{name: "error-404", method: "DELETE", path: "/v1/policy/rules/nope", status: 404, into: func() any { return new(ErrorBody) }},
	{name: "error-no-endpoint", method: "GET", path: "/v1/nothing", status: 404, into: func() any { return new(ErrorBody) }},
	{name: "decisions", method: "GET", path: "/v1/decisions?since=0&limit=1", status: 200, into: func() any { return new(Decisions) }},
	{name: "decisions-none", method: "GET", path: "/v1/decisions?since=1000", status: 200, into: func() any { return new(Decisions) }},
	{name: "mock-queued", method: "POST", path: "/v1/mock/expect?host=API.Anthropic.com&name=turns.yaml", body: "- reply: {text: queued}\n- reply: {text: second}\n", status: 200, into: func() any { return new(MockQueued) }},
	{name: "mock-queued-script", method: "POST", path: "/v1/mock/expect?script=agent.yaml", body: "reply: {text: one}\n", status: 200, into: func() any { return new(MockQueued) }},
	{name: "mock-requests", method: "GET", path: "/v1/mock/requests?host=api.anthropic.com", status: 200, into: func() any { return new(MockRequests) }},
	{name: "mock-requests-script", method: "GET", path: "/v1/mock/requests?script=agent.yaml", status: 200, into: func() any { return new(MockRequests) }},
	{name: "mock-reset", method: "DELETE", path: "/v1/mock", status: 200, into: func() any { return new(MockReset) }},
	{name: "approvals", method: "GET", path: "/v1/approvals", status: 200, into: func() any { return new(Approvals) }},
	{name: "approval-answered", method: "POST", path: "/v1/approvals/a1", body: `{"answer": "allow", "scope": "session", "by": "cli"}`, status: 200, into: func() any { return new(ApprovalAnswered) }},
	{name: "error-approval-404", method: "POST", path: "/v1/approvals/a1", body: `{"answer": "deny"}`, status: 404, into: func() any { return new(ErrorBody) }},
	{name: "error-approval-409", method: "POST", path: "/v1/approvals/a2", body: `{"answer": "allow", "scope": "always"}`, status: 409, into: func() any { return new(ErrorBody) }},
	{name: "error-approval-409-answered", method: "POST", path: "/v1/approvals/a2", body: `{"answer": "deny"}`, status: 409, into: func() any { return new(ErrorBody) }},
	{name: "error-approval-400", method: "POST", path: "/v1/approvals/a2", body: `{"answer": "maybe"}`, status: 400, into: func() any { return new(ErrorBody) }},
	{name: "approvals-after", method: "GET", path: "/v1/approvals", status: 200, into: func() any { return new(Approvals) }},
}

// wireNormal replaces what changes from run to run: times, the uptime.
var wireNormal = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"time":"[^"]*"`), `"time":"2026-01-02T03:04:05Z"`},
	{regexp.MustCompile(`"uptime_seconds":\d+`), `"uptime_seconds":7`},
}

// startWireAPI starts the API of TestAPIWire: a sandbox's, with a mocked
// host and a policy script, one request already sent to the mock and
// counted as intercepted.
func startWireAPI(t *testing.T) *testServer {
	t.Helper()
	spec := netpolicy.Spec{Default: netpolicy.Block, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Rules: []netpolicy.Rule{{ID: "llm", Host: "llm.test", Action: netpolicy.Intercept, Response: &netpolicy.Response{LLM: "agent.yaml"}}}}
	mock := mockllm.New(nil)
	a := startServer(t, spec, func(g *fakeGateway, cfg *ServerConfig) {
		cfg.Sandbox = "0123456789ab"
		g.hosts = map[string]*mockllm.Responder{"api.anthropic.com": mock}
		g.scripts = map[string]*mockllm.Responder{"agent.yaml": mockllm.New(nil)}
		g.counts = Counts{Intercepted: 1}
		g.answering = map[string]string{"a2": "ui"}
		asked := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		for i, host := range []string{"pypi.org", "files.pythonhosted.org"} {
			g.pending = append(g.pending, Approval{ID: "a" + strconv.Itoa(i+1), Host: host, Port: 443, Kind: "connect", Method: "CONNECT",
				Client: "10.213.0.2:40000", Rule: "default", Reason: "no rule matched; the default is ask",
				Asked: asked, Deadline: asked.Add(time.Minute), Waiting: 1})
		}
	})
	if status, _ := askMock(t, mock, "hello"); status != http.StatusBadRequest {
		t.Fatalf("a request to the mock with nothing scripted: got %d, want 400", status)
	}
	return a
}

// rawCall sends one exchange and returns its status and body, as sent.
func (a *testServer) rawCall(t *testing.T, x wireExchange) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(x.method, a.base+x.path, strings.NewReader(x.body))
	if err != nil {
		t.Fatal(err)
	}
	if !x.noToken {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for k, v := range x.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", x.method, x.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// TestAPIWire holds the management API's JSON to its contract
// (docs/api.md): the server's answers, times and uptime set aside, are
// the bytes of testdata/api, which the server wrote before the wire had
// types; each decodes into its api type with unknown fields refused, and
// encodes from it into the same bytes. -update-api-wire rewrites them.
func TestAPIWire(t *testing.T) {
	a := startWireAPI(t)
	for _, x := range wireExchanges {
		status, got := a.rawCall(t, x)
		if status != x.status {
			t.Errorf("%s: %s %s: got status %d (%s), want %d", x.name, x.method, x.path, status, got, x.status)
		}
		for _, n := range wireNormal {
			got = n.re.ReplaceAll(got, []byte(n.with))
		}
		path := filepath.Join("testdata", "api", x.name+".json")
		if *updateWire {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (go test -run TestAPIWire -update-api-wire writes it)", x.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s %s answered\n%s\nwant (%s)\n%s", x.name, x.method, x.path, got, path, want)
		}

		// The contract's bytes decode strictly into the api type, and
		// encode back into the same bytes.
		v := x.into()
		dec := json.NewDecoder(bytes.NewReader(want))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s: %s does not decode into %T strictly: %v", x.name, path, v, err)
			continue
		}
		var again bytes.Buffer
		enc := json.NewEncoder(&again)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), want) {
			t.Errorf("%s: %T encodes as\n%s\nwant (%s)\n%s", x.name, v, again.Bytes(), path, want)
		}
	}
}
