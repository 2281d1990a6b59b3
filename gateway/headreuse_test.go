package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestKeepAliveRequestsKeepTheirOwnFields plays a client that pipelines
// seven requests on one keep-alive connection, written at once, so that
// the gateway reads each head over the memory of the one before
// (headBuf): other hosts, paths, methods and header fields each time,
// more fields than the last and then fewer, a name repeated around
// another, fields a Connection header names, a credential in the first
// request alone, a request the mock answers (its body read from the same
// buffer), one held on a question (ask) while the next ones wait in the
// buffer, and one the policy blocks. The upstream must see each request's
// own fields and none of another's, the mock its own path and body in
// its journal, the question the held request's method, host and path,
// and the decision log each request's, its allowed ones' close records
// too, in order.
func TestKeepAliveRequestsKeepTheirOwnFields(t *testing.T) {
	port := portOf(t, echoUpstream(t))
	script, err := mockllm.ParseScript("mock.yaml", []byte("turns:\n  - match: {user: hello}\n    reply: {text: hi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	mock := mockllm.New(script)
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "a", Host: "a.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "b", Host: "b.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		netpolicy.Rule{ID: "d", Host: "d.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Ask},
	), map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1", "d.test": "127.0.0.1"}, func(c *serverConfig) {
		c.MockLLM = map[string]*mockllm.Responder{"api.anthropic.com": mock}
	})
	body := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hello"}]}`
	many := make([]string, 0, 24)
	for i := range 24 {
		many = append(many, fmt.Sprintf("X-Many-%d: v%d", i, i))
	}
	reqs := []struct {
		head       []string // the request line and fields, Host added
		host, path string
		status     int
		want       http.Header // the fields the upstream sees; nil: not sent upstream
	}{
		{
			head: []string{"GET http://a.test:%d/first?q=1 HTTP/1.1", "Authorization: Bearer token-of-the-first",
				"A: 1", "B: 2", "A: 3", "Connection: X-Hop", "X-Hop: for the gateway", "X-First: yes"},
			host: "a.test", path: "/first", status: 200,
			want: http.Header{"Authorization": {"Bearer token-of-the-first"}, "A": {"1", "3"}, "B": {"2"}, "X-First": {"yes"}},
		},
		{
			head: []string{"POST http://api.anthropic.com/v1/messages HTTP/1.1", "Content-Type: application/json",
				"Anthropic-Version: 2023-06-01", fmt.Sprintf("Content-Length: %d", len(body))},
			host: "api.anthropic.com", path: "/v1/messages", status: 200,
		},
		{
			head: append([]string{"PUT http://b.test:%d/third HTTP/1.1", "B: 4", "X-Third: yes"}, many...),
			host: "b.test", path: "/third", status: 200,
			want: func() http.Header {
				h := http.Header{"B": {"4"}, "X-Third": {"yes"}, "Content-Length": {"0"}}
				for i := range 24 {
					h[fmt.Sprintf("X-Many-%d", i)] = []string{fmt.Sprintf("v%d", i)}
				}
				return h
			}(),
		},
		{
			head: []string{"GET http://d.test:%d/held HTTP/1.1", "X-Held: yes"},
			host: "d.test", path: "/held", status: 200,
			want: http.Header{"X-Held": {"yes"}},
		},
		{
			head: []string{"GET http://c.test/blocked HTTP/1.1", "Authorization: Bearer token-of-the-fifth"},
			host: "c.test", path: "/blocked", status: 403,
		},
		{
			head: []string{"DELETE http://a.test:%d/fifth HTTP/1.1"},
			host: "a.test", path: "/fifth", status: 200,
			want: http.Header{},
		},
		{
			head: []string{"GET http://b.test:%d/sixth HTTP/1.1", "A: 5", "Connection: close"},
			host: "b.test", path: "/sixth", status: 200,
			want: http.Header{"A": {"5"}},
		},
	}
	var out strings.Builder
	for i, r := range reqs {
		line := r.head[0]
		if strings.Contains(line, "%d") {
			line = fmt.Sprintf(line, port)
		}
		hostport, _, _ := strings.Cut(strings.TrimPrefix(strings.Fields(line)[1], "http://"), "/")
		out.WriteString(crlf(append([]string{line, "Host: " + hostport}, r.head[1:]...)...))
		if i == 1 {
			out.WriteString(body)
		}
	}
	conn, br := dialRaw(t, g.addr)
	io.WriteString(conn, out.String())
	q := waitQuestion(t, g.srv, "d.test", uint16(port), 1)
	if q.Method != "GET" || q.Path != "/held" {
		t.Errorf("the question is about %s %s, want GET /held", q.Method, q.Path)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}

	for i, r := range reqs {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: reading its answer: %v", i+1, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.status {
			t.Fatalf("request %d: status %d, want %d: %s", i+1, resp.StatusCode, r.status, got)
		}
		if r.want == nil {
			continue
		}
		var echo struct {
			Method, Path, Host string
			Header             http.Header
		}
		if err := json.Unmarshal(got, &echo); err != nil {
			t.Fatalf("request %d: the upstream's answer %q: %v", i+1, got, err)
		}
		method := strings.Fields(r.head[0])[0]
		if echo.Method != method || !strings.HasPrefix(echo.Path, r.path) || echo.Host != fmt.Sprintf("%s:%d", r.host, port) {
			t.Errorf("request %d: the upstream got %s %s for %s, want %s %s for %s:%d", i+1, echo.Method, echo.Path, echo.Host, method, r.path, r.host, port)
		}
		if diff := cmp.Diff(r.want, echo.Header); diff != "" {
			t.Errorf("request %d: the upstream's fields (-want +got):\n%s", i+1, diff)
		}
	}

	if j := mock.Requests(); len(j) != 1 || j[0].Path != "/v1/messages" || !strings.Contains(string(j[0].Body), `"hello"`) {
		t.Errorf("the mock's journal %+v: want one request, POST /v1/messages with its body", j)
	}
	var wantDecisions, wantCloses []string
	for _, r := range reqs {
		what := strings.Fields(r.head[0])[0] + " " + r.host + r.path
		wantDecisions = append(wantDecisions, what)
		if r.want != nil {
			wantCloses = append(wantCloses, what)
		}
	}
	// A close record is written once its answer is relayed, so the last
	// one may follow the client's read of that answer.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, rec := range g.records(t) {
			if rec["event"] == decisionlog.EventClose {
				n++
			}
		}
		if n >= len(wantCloses) {
			break
		}
	}
	var decisions, closes, approvals []string
	closeOf := map[string]string{}
	for _, rec := range g.records(t) {
		what := fmt.Sprint(rec["method"], " ", rec["host"], rec["path"])
		switch rec["event"] {
		case decisionlog.EventApproval:
			approvals = append(approvals, what)
		case decisionlog.EventDecision:
			decisions = append(decisions, what)
			closeOf[rec["id"].(string)] = what
		case decisionlog.EventClose:
			closes = append(closes, what)
			if closeOf[rec["id"].(string)] != what {
				t.Errorf("close record %v: its decision, id %v, was %q", rec, rec["id"], closeOf[rec["id"].(string)])
			}
		}
	}
	if diff := cmp.Diff(wantDecisions, decisions); diff != "" {
		t.Errorf("decision records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCloses, closes); diff != "" {
		t.Errorf("close records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"GET d.test/held", "GET d.test/held"}, approvals); diff != "" {
		t.Errorf("approval records, the question and its answer (-want +got):\n%s", diff)
	}
}
