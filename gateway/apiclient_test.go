package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// apiClientOf returns a typed client of a's API at its first address.
func apiClientOf(t *testing.T, a *testAPI, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(a.g.APIAddrs[0], token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// wantAPIError checks that err is an *api.Error of status whose message
// holds msg.
func wantAPIError(t *testing.T, what string, err error, status int, msg string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Errorf("%s: got error %v (%T), want an *api.Error with status %d", what, err, err, status)
		return
	}
	if ae.Status != status || !strings.Contains(ae.Message, msg) {
		t.Errorf("%s: got %d %q, want %d with a message holding %q", what, ae.Status, ae.Message, status, msg)
	}
}

// TestAPIRoundTrip calls every endpoint of the management API through the
// typed client and the real server, on a TCP address and on a unix
// socket, errors included: what the client decodes is what the server
// meant.
func TestAPIRoundTrip(t *testing.T) {
	for _, transport := range []string{"tcp", "unix"} {
		t.Run(transport, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "api.sock")
			a := startAPIWith(t, loopbackPolicy(netpolicy.Block), nil, func(o *Config) {
				o.Sandbox = "roundtrip"
				o.MockLLM = map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil)}
				if transport == "unix" {
					o.API = []string{"unix:" + sock}
				}
			})
			testRoundTrip(t, a, apiClientOf(t, a, a.token))
		})
	}
}

func testRoundTrip(t *testing.T, a *testAPI, c *api.Client) {
	ctx := context.Background()
	if err := c.Healthz(ctx); err != nil {
		t.Errorf("Healthz: %v", err)
	}

	// A wrong token: 401, and /healthz needs none.
	wrong := apiClientOf(t, a, "not-the-token")
	_, err := wrong.Status(ctx)
	wantAPIError(t, "Status with a wrong token", err, http.StatusUnauthorized, "bearer token")
	if err := wrong.Healthz(ctx); err != nil {
		t.Errorf("Healthz with a wrong token: %v, want nil", err)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.PolicyVersion != 1 || st.Sandbox != "roundtrip" || st.Mode != "" && st.Mode != netpolicy.Enforce || len(st.Gateway) != 1 {
		t.Errorf("Status: got %+v, want version 1 of sandbox roundtrip, enforcing, one proxy address", st)
	}

	pol, err := c.Policy(ctx)
	if err != nil {
		t.Fatalf("Policy: %v", err)
	}
	if pol.Version != 1 || pol.Policy.Default != netpolicy.Block || len(pol.Policy.Rules) != 0 {
		t.Errorf("Policy: got %+v, want version 1, default block, no rules", pol)
	}

	first := 0
	added, err := c.AddRule(ctx, api.AddRule{Rule: netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{18080}, Methods: []string{"GET"}, Path: "/v1/", Action: netpolicy.Allow}, Position: &first}, 1)
	if err != nil {
		t.Fatalf("AddRule: %v", err)
	}
	wantRule := netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{18080}, Methods: []string{"GET"}, Path: "/v1/", Action: netpolicy.Allow}
	if diff := cmp.Diff(api.RuleAdded{Change: "rule api added at position 0", Rule: wantRule, Version: 2}, *added); diff != "" {
		t.Errorf("AddRule (-want +got):\n%s", diff)
	}
	_, err = c.AddRule(ctx, api.AddRule{Rule: netpolicy.Rule{Host: "late.test", Action: netpolicy.Allow}}, 1)
	wantAPIError(t, "AddRule with a stale version", err, http.StatusPreconditionFailed, "policy version 1 was expected")

	_, err = c.ReplacePolicy(ctx, []byte("rules:\n  - host: \"*.\"\n    action: allow\n"), 0)
	wantAPIError(t, "ReplacePolicy of an invalid policy", err, http.StatusBadRequest, "request body:2")
	_, err = c.ReplacePolicy(ctx, []byte("default: allow\n"), 1)
	wantAPIError(t, "ReplacePolicy with a stale version", err, http.StatusPreconditionFailed, "current version is 2")

	spec := netpolicy.Spec{Version: 1, Default: netpolicy.Block, Mode: netpolicy.Audit, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Rules: []netpolicy.Rule{
			{ID: "api", Host: "*.api.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Allow},
			{ID: "tea", Host: "tea.test", Ports: []netpolicy.Port{80}, Action: netpolicy.Intercept, Response: &netpolicy.Response{Status: 418, Body: "short and stout"}},
		}}
	body, _ := json.Marshal(spec)
	ch, err := c.ReplacePolicy(ctx, body, 2)
	if err != nil {
		t.Fatalf("ReplacePolicy: %v", err)
	}
	if diff := cmp.Diff(api.PolicyChange{Change: "policy replaced (2 rules)", Version: 3}, *ch); diff != "" {
		t.Errorf("ReplacePolicy (-want +got):\n%s", diff)
	}
	pol, err = c.Policy(ctx)
	if err != nil {
		t.Fatalf("Policy: %v", err)
	}
	if diff := cmp.Diff(api.Policy{Version: 3, Policy: spec}, *pol, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Policy after ReplacePolicy (-want +got):\n%s", diff)
	}

	ch, err = c.RemoveRule(ctx, "api", 3)
	if err != nil || ch.Version != 4 || ch.Change != "rule api removed" {
		t.Errorf("RemoveRule: got %+v, %v; want version 4, rule api removed", ch, err)
	}
	_, err = c.RemoveRule(ctx, "api", 0)
	wantAPIError(t, "RemoveRule of a rule that is gone", err, http.StatusNotFound, `no rule with id "api"`)

	// Decisions, a page at a time: the four policy records.
	var changes []string
	for since := uint64(0); ; {
		page, err := c.Decisions(ctx, since, 3)
		if err != nil {
			t.Fatalf("Decisions since %d: %v", since, err)
		}
		if len(page.Decisions) == 0 {
			break
		}
		for _, raw := range page.Decisions {
			var r decisionlog.Record
			if err := (&decisionlog.Decoder{}).Decode(raw, &r); err != nil {
				t.Fatalf("Decisions: record %s: %v", raw, err)
			}
			changes = append(changes, r.Change)
		}
		since = page.Next
	}
	if diff := cmp.Diff([]string{"policy loaded", "rule api added at position 0", "policy replaced (2 rules)", "rule api removed"}, changes); diff != "" {
		t.Errorf("Decisions' policy records (-want +got):\n%s", diff)
	}

	// The follow stream: the backlog after seq 3, then a change made now.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := c.FollowDecisions(sctx, 3)
	if err != nil {
		t.Fatalf("FollowDecisions: %v", err)
	}
	next := func() string {
		t.Helper()
		raw, err := stream.Next()
		if err != nil {
			t.Fatalf("FollowDecisions: Next: %v", err)
		}
		var r decisionlog.Record
		if err := (&decisionlog.Decoder{}).Decode(raw, &r); err != nil {
			t.Fatalf("FollowDecisions: record %s: %v", raw, err)
		}
		return r.Change
	}
	if got := next(); got != "rule api removed" {
		t.Errorf("FollowDecisions: backlog got %q, want rule api removed", got)
	}
	if _, err := c.AddRule(ctx, api.AddRule{Rule: netpolicy.Rule{ID: "live", Host: "live.test", Action: netpolicy.Block}}, 0); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "rule live added at position 1" {
		t.Errorf("FollowDecisions: live got %q, want rule live added at position 1", got)
	}
	stream.Close()

	// The mock: queue, ask, read the journal, reset.
	_, err = c.MockExpect(ctx, api.Mock{}, "bad.yaml", []byte("- reply: {txet: x}\n"))
	wantAPIError(t, "MockExpect of an invalid turn", err, http.StatusBadRequest, "bad.yaml")
	q, err := c.MockExpect(ctx, api.Mock{Host: "API.anthropic.com"}, "turns.yaml", []byte("- reply: {text: queued answer}\n"))
	if err != nil {
		t.Fatalf("MockExpect: %v", err)
	}
	if diff := cmp.Diff(api.MockQueued{Host: "api.anthropic.com", Mock: "api.anthropic.com", Queued: 1}, *q); diff != "" {
		t.Errorf("MockExpect (-want +got):\n%s", diff)
	}
	if status, body := askMock(t, a, "api.anthropic.com", "hello"); status != http.StatusOK || !strings.Contains(body, "queued answer") {
		t.Errorf("the mock after MockExpect: got %d %s, want the queued answer", status, body)
	}
	reqs, err := c.MockRequests(ctx, api.Mock{})
	if err != nil {
		t.Fatalf("MockRequests: %v", err)
	}
	if len(reqs.Requests) != 1 || reqs.Mock != "api.anthropic.com" {
		t.Fatalf("MockRequests: got %+v, want one request to api.anthropic.com", reqs)
	}
	if j := reqs.Requests[0]; j.Seq != 1 || j.Turn != 1 || j.Status != 200 || j.Method != "POST" || j.Path != "/v1/messages" ||
		j.Dialect != string(mockllm.Anthropic) || j.Model != "m" || !strings.Contains(string(j.Body), `"hello"`) || j.Time.IsZero() ||
		!strings.HasPrefix(j.Outcome, "turn 1 (turns.yaml:1): reply") {
		t.Errorf("MockRequests: got %+v, want turn 1 of turns.yaml answering POST /v1/messages with 200", j)
	}
	_, err = c.MockRequests(ctx, api.Mock{Host: "other.example"})
	wantAPIError(t, "MockRequests of a host not mocked", err, http.StatusNotFound, "other.example is not mocked")
	_, err = c.MockRequests(ctx, api.Mock{Host: "a.example", Script: "b.yaml"})
	wantAPIError(t, "MockRequests naming a host and a script", err, http.StatusBadRequest, "not both")
	reset, err := c.MockReset(ctx, api.Mock{})
	if err != nil || !cmp.Equal(reset.Reset, []string{"api.anthropic.com"}) {
		t.Errorf("MockReset: got %+v, %v; want api.anthropic.com reset", reset, err)
	}
	if reqs, err := c.MockRequests(ctx, api.Mock{}); err != nil || reqs.Requests == nil || len(reqs.Requests) != 0 {
		t.Errorf("MockRequests after MockReset: got %+v, %v; want an empty journal", reqs, err)
	}

	m, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(string(m), "sbx_gateway_requests_total") {
		t.Errorf("Metrics: got %.200q, %v; want the Prometheus text", m, err)
	}
	_, err = wrong.Metrics(ctx)
	wantAPIError(t, "Metrics with a wrong token", err, http.StatusUnauthorized, "bearer token")
}

// TestAPIStatus: GET /v1/status counts what the gateway decided and
// holds open, and names its proxy, sandbox, policy version and mode.
func TestAPIStatus(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	a := startAPIWith(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "tea", Host: "tea.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Intercept, Response: &netpolicy.Response{Status: 418}},
	), map[string]string{"api.test": "127.0.0.1", "tea.test": "127.0.0.1"}, func(o *Config) { o.Sandbox = "status" })
	c := apiClientOf(t, a, a.token)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := api.Status{Gateway: []string{a.g.ProxyAddr.String()}, Sandbox: "status", PolicyVersion: 1, Mode: netpolicy.Enforce}
	if diff := cmp.Diff(want, *st, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".UptimeSeconds" }, cmp.Ignore())); diff != "" {
		t.Errorf("Status of a new gateway (-want +got):\n%s", diff)
	}
	if st.UptimeSeconds < 0 || st.UptimeSeconds > 60 {
		t.Errorf("Status: uptime %d s, want a few", st.UptimeSeconds)
	}

	// One of each verdict, and a tunnel held open.
	for _, tc := range []struct {
		host string
		want int
	}{{"api.test", 200}, {"api.test", 200}, {"blocked.test", 403}, {"tea.test", 418}} {
		if got := a.statusThrough(t, fmt.Sprintf("http://%s:%d/", tc.host, port)); got != tc.want {
			t.Fatalf("GET %s: got %d, want %d", tc.host, got, tc.want)
		}
	}
	conn, err := net.Dial("tcp", a.g.ProxyAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port, port)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT api.test: %v %v", resp, err)
	}
	if _, err := c.ReplacePolicy(ctx, []byte("mode: audit\nallow_private: [127.0.0.0/8]\n"), 0); err != nil {
		t.Fatal(err)
	}

	want = api.Status{Gateway: []string{a.g.ProxyAddr.String()}, Sandbox: "status", PolicyVersion: 2, Mode: netpolicy.Audit,
		Counts: api.Counts{Allowed: 3, Blocked: 1, Intercepted: 1, OpenTunnels: 1}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		diff := cmp.Diff(want, *st, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".UptimeSeconds" }, cmp.Ignore()))
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status after 3 allowed (one a tunnel, open), 1 blocked, 1 intercepted and a change to audit (-want +got):\n%s", diff)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The tunnel closed, it is no longer counted open.
	conn.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if st.Counts.OpenTunnels == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status after the tunnel closed: %d open tunnels, want 0", st.Counts.OpenTunnels)
		}
	}
}
