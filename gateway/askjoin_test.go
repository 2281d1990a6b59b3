package gateway

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/netpolicy"
)

// waitQuestionFor waits for a pending question about host:port with
// method and path and returns it.
func waitQuestionFor(t *testing.T, s *Server, host string, port uint16, method, path string) approval.Approval {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		for _, a := range s.approvals.List() {
			if a.Host == host && a.Port == port && a.Method == method && a.Path == path {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no question about %s %s:%d%s; pending: %+v", method, host, port, path, s.approvals.List())
		}
	}
}

// The sandbox waits for a harmless GET / to be asked about, then sends
// POST /exfil?data=... to the same host and port, hoping to ride on the
// answer. It gets a question of its own: allow once to GET / lets GET /
// through and leaves the POST held, the pending list naming it.
func TestAskAnswerReleasesOnlyItsMethodAndPath(t *testing.T) {
	g, c, base, port := askGateway(t, time.Minute, nil)
	get := getAsync(c, base+"/")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	post := make(chan askResult, 1)
	go func() {
		resp, err := c.Post(base+"/exfil?data=c2VjcmV0", "text/plain", strings.NewReader("secret"))
		if err != nil {
			post <- askResult{err: err}
			return
		}
		resp.Body.Close()
		post <- askResult{status: resp.StatusCode, header: resp.Header}
	}()
	qp := waitQuestionFor(t, g.srv, "api.test", port, "POST", "/exfil")
	if qp.ID == q.ID {
		t.Fatalf("POST /exfil joined GET /'s question %s", q.ID)
	}
	if got, _ := pendingQuestion(g.srv, q.ID); got.Waiting != 1 || got.Method != "GET" || got.Path != "/" {
		t.Errorf("GET /'s question: got %+v, want GET / with 1 waiting", got)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, get); r.status != 200 {
		t.Errorf("GET /: got %d, want 200", r.status)
	}
	stillHeld(t, post)
	if _, err := g.srv.approvals.Answer(qp.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, post); r.status != 403 {
		t.Errorf("POST /exfil: got %d, want 403", r.status)
	}
}

// A session or always answer to a question about GET /v1/x adds a rule
// for that method and path, not for the host: POST /v1/x and GET /other
// are asked about, GET /v1/x is not; the file gets the same rule.
func TestAskAnswerRuleNoWiderThanTheQuestion(t *testing.T) {
	file := filepath.Join(t.TempDir(), "approvals.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []approval.Scope{approval.ScopeSession, approval.ScopeAlways} {
		t.Run(string(scope), func(t *testing.T) {
			g, c, base, port := askGateway(t, time.Minute, func(cfg *serverConfig) { cfg.ApprovalsFile = file })
			ch := getAsync(c, base+"/v1/x")
			q := waitQuestion(t, g.srv, "api.test", port, 1)
			if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: scope, By: approval.ByCLI}); err != nil {
				t.Fatal(err)
			}
			if r := result(t, ch); r.status != 200 {
				t.Fatalf("GET /v1/x: got %d, want 200", r.status)
			}
			if r := result(t, getAsync(c, base+"/v1/x")); r.status != 200 {
				t.Errorf("GET /v1/x again: got %d, want 200 by the new rule", r.status)
			}
			held := getAsync(c, base+"/other")
			waitQuestionFor(t, g.srv, "api.test", port, "GET", "/other")
			stillHeld(t, held)
			req, _ := http.NewRequest("POST", base+"/v1/x", strings.NewReader("x"))
			post := doAsync(c, req)
			waitQuestionFor(t, g.srv, "api.test", port, "POST", "/v1/x")
			stillHeld(t, post)
			var added *netpolicy.Rule
			for _, r := range g.store.Load().Policy().Rules() {
				if r.Host == "api.test" {
					added = &r
				}
			}
			if added == nil || fmt.Sprint(added.Methods) != "[GET]" || added.Path != "/v1/x" || fmt.Sprint(added.Ports) != fmt.Sprint([]netpolicy.Port{netpolicy.Port(port)}) {
				t.Errorf("the answer's rule: got %+v, want api.test:%d GET /v1/x", added, port)
			}
			if scope == approval.ScopeAlways {
				data, _ := os.ReadFile(file)
				if !strings.Contains(string(data), "methods: [GET]") || !strings.Contains(string(data), "path: /v1/x") {
					t.Errorf("the approvals file: got %q, want the rule's method and path", data)
				}
			}
		})
	}
}

// A name whose addresses the guard refuses (loop.test is 127.0.0.1,
// allow_private empty) is refused at once, logged by rule guard with its
// addresses, and never asked about, on the proxy and through CONNECT.
func TestAskGuardRefusesBeforeAsking(t *testing.T) {
	spec := netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(time.Minute)}
	g := startGatewayWith(t, spec, map[string]string{"loop.test": "127.0.0.1"}, nil)
	c := g.client(t, nil)
	c.Timeout = 3 * time.Second
	r := result(t, getAsync(c, "http://loop.test:8080/"))
	if r.status != 403 || r.header.Get(HeaderRule) != netpolicy.RuleGuard {
		t.Errorf("GET http://loop.test:8080/: got %d by %q, want 403 by guard", r.status, r.header.Get(HeaderRule))
	}
	if rec := g.lastDecision(t); rec["rule"] != netpolicy.RuleGuard || rec["addrs"] != "127.0.0.1" {
		t.Errorf("decision record: got %v, want rule guard with addrs 127.0.0.1", rec)
	}
	status, hdr := rawConnect(t, g.addr, "loop.test:443")
	if status != 403 || hdr.Get(HeaderRule) != netpolicy.RuleGuard {
		t.Errorf("CONNECT loop.test:443: got %d by %q, want 403 by guard", status, hdr.Get(HeaderRule))
	}
	if recs := g.approvalRecords(t); len(recs) != 0 {
		t.Errorf("approval records: got %v, want none", recs)
	}
}

// One inspected HTTP/2 connection opens many streams to one question:
// each counts toward the bound of held requests, and those past it are
// blocked at once, not held.
func TestAskHeldBoundCountsHTTP2Streams(t *testing.T) {
	const bound, streams = 4, 12
	s := newAskInspected(t, time.Minute, Limits{}, bound)
	c := s.client(t, true)
	// One stream first, so that the others share its connection.
	first := doAsync(c, mustRequest(t, "GET", s.url("/a"), ""))
	q := waitQuestion(t, s.g.srv, "example.com", s.port, 1)
	var chs []<-chan askResult
	for range streams - 1 {
		chs = append(chs, doAsync(c, mustRequest(t, "GET", s.url("/a"), "")))
	}
	refused := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && refused < streams-bound; time.Sleep(10 * time.Millisecond) {
		for i, ch := range chs {
			select {
			case r := <-ch:
				if r.err != nil || r.status != 403 || !strings.Contains(r.header.Get(HeaderReason), "not asked") || r.header.Get("Proto") != "HTTP/2.0" {
					t.Errorf("got %d %s %v (%q), want an HTTP/2 403 saying not asked", r.status, r.header.Get("Proto"), r.err, r.header.Get(HeaderReason))
				}
				refused++
				chs[i] = nil
			default:
			}
		}
	}
	time.Sleep(50 * time.Millisecond) // none more
	if got, _ := pendingQuestion(s.g.srv, q.ID); refused != streams-bound || got.Waiting != bound {
		t.Errorf("got %d streams refused and %d held, want %d and %d", refused, got.Waiting, streams-bound, bound)
	}
	if _, err := s.g.srv.approvals.Answer(q.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	result(t, first)
	// The answer released them all: the bound is free again.
	next := doAsync(c, mustRequest(t, "GET", s.url("/b"), ""))
	qb := waitQuestionFor(t, s.g.srv, "example.com", s.port, "GET", "/b")
	if _, err := s.g.srv.approvals.Answer(qb.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	result(t, next)
}
