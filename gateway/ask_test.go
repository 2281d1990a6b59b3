package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// askResult is what a request held by the gateway got in the end.
type askResult struct {
	status int
	body   string
	header http.Header
	err    error
}

// getAsync sends GET url through the gateway in a goroutine; the channel
// gets its result.
func getAsync(c *http.Client, url string) <-chan askResult {
	ch := make(chan askResult, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- askResult{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- askResult{status: resp.StatusCode, body: string(body), header: resp.Header}
	}()
	return ch
}

// waitQuestion waits for a pending question about host:port with at least
// waiting requests on it and returns it.
func waitQuestion(t *testing.T, s *Server, host string, port uint16, waiting int) approval.Approval {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, a := range s.approvals.List() {
			if a.Host == host && a.Port == port && a.Waiting >= waiting {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no question about %s:%d with %d waiting; pending: %+v", host, port, waiting, s.approvals.List())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pendingQuestion returns the pending question id of s, or false.
func pendingQuestion(s *Server, id string) (approval.Approval, bool) {
	for _, a := range s.approvals.List() {
		if a.ID == id {
			return a, true
		}
	}
	return approval.Approval{}, false
}

// result waits for a held request's result.
func result(t *testing.T, ch <-chan askResult) askResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request: %v", r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never ended")
	}
	return askResult{}
}

// stillHeld fails the test when the request has ended already.
func stillHeld(t *testing.T, ch <-chan askResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the request was not held: got %d %s %v", r.status, r.body, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// approvalRecords returns the approval records the gateway logged.
func (g *testGateway) approvalRecords(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range g.records(t) {
		if r["event"] == decisionlog.EventApproval {
			out = append(out, r)
		}
	}
	return out
}

// askGateway starts a gateway whose default is ask, with the policy's
// ask_timeout and rules, over an echo upstream named api.test; it returns
// the gateway, a client and the upstream's URL.
func askGateway(t *testing.T, timeout time.Duration, set func(*serverConfig), rules ...netpolicy.Rule) (*testGateway, *http.Client, string, uint16) {
	t.Helper()
	up := echoUpstream(t)
	port := portOf(t, up)
	spec := loopbackPolicy(netpolicy.Ask, rules...)
	spec.AskTimeout = netpolicy.Duration(timeout)
	g := startGatewayWith(t, spec, map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"}, set)
	return g, g.client(t, nil), fmt.Sprintf("http://api.test:%d", port), uint16(port)
}

func TestAskHeldThenAllowedOnce(t *testing.T) {
	g, c, base, port := askGateway(t, time.Minute, nil)
	ch := getAsync(c, base+"/v1/x")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	stillHeld(t, ch)
	if q.Rule != netpolicy.RuleDefault || q.Kind != decisionlog.KindHTTP || q.Method != "GET" || q.Path != "/v1/x" {
		t.Errorf("question: got %+v, want rule default, kind http, GET /v1/x", q)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatalf("AnswerApproval: %v", err)
	}
	if r := result(t, ch); r.status != 200 {
		t.Fatalf("allowed request: got %d %s, want 200", r.status, r.body)
	}
	if rec := g.lastDecision(t); rec["action"] != "allow" || rec["rule"] != "default" || !strings.Contains(rec["reason"].(string), "allowed once by cli") {
		t.Errorf("decision record: got %v, want allow by default, allowed once by cli", rec)
	}
	recs := g.approvalRecords(t)
	if len(recs) != 2 {
		t.Fatalf("approval records: got %d (%v), want the question and its answer", len(recs), recs)
	}
	if r := recs[0]; r["approval_id"] != q.ID || r["action"] != "ask" || r["host"] != "api.test" || r["port"] != float64(port) || r["answer"] != nil {
		t.Errorf("question record: got %v", r)
	}
	if r := recs[1]; r["approval_id"] != q.ID || r["answer"] != "allow" || r["scope"] != "once" || r["by"] != "cli" || r["host"] != "api.test" {
		t.Errorf("answer record: got %v", r)
	}
	// Once: the next request is asked again.
	ch = getAsync(c, base+"/v1/y")
	q2 := waitQuestion(t, g.srv, "api.test", port, 1)
	if q2.ID == q.ID {
		t.Errorf("second question: got the first's id %s", q.ID)
	}
	if _, err := g.srv.approvals.Answer(q2.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.status != 403 || !strings.Contains(r.header.Get(HeaderReason), "denied once by api") {
		t.Errorf("denied request: got %d %q, want 403 denied once by api", r.status, r.header.Get(HeaderReason))
	}
	// An answered question cannot be answered again.
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("answering twice: got %v, want ErrApprovalNotFound", err)
	}
}

func TestAskHeldThenDeniedConnect(t *testing.T) {
	g, _, _, port := askGateway(t, time.Minute, nil)
	done := make(chan askResult, 1)
	go func() {
		status, hdr := rawConnect(t, g.addr, fmt.Sprintf("api.test:%d", port))
		done <- askResult{status: status, header: hdr}
	}()
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	stillHeld(t, done)
	if q.Kind != decisionlog.KindConnect {
		t.Errorf("question kind: got %s, want connect", q.Kind)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
		t.Fatal(err)
	}
	r := result(t, done)
	if r.status != 403 || r.header.Get(HeaderDecision) != "block" || !strings.Contains(r.header.Get(HeaderReason), "denied once by api") {
		t.Errorf("denied CONNECT: got %d %v, want 403 denied once by api", r.status, r.header)
	}
}

func TestAskTimeoutBlocksWithTheReason(t *testing.T) {
	g, c, base, port := askGateway(t, time.Second, nil)
	start := time.Now()
	r := result(t, getAsync(c, base+"/"))
	if r.status != 403 || !strings.Contains(r.header.Get(HeaderReason), "no answer came within 1s") {
		t.Errorf("timed-out request: got %d %q, want 403 with no answer came within 1s", r.status, r.header.Get(HeaderReason))
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("blocked after %v, before the 1s timeout", el)
	}
	if rec := g.lastDecision(t); rec["action"] != "block" || rec["enforced"] != true || !strings.Contains(rec["reason"].(string), approval.ReasonNoAnswer) {
		t.Errorf("decision record: got %v", rec)
	}
	recs := g.approvalRecords(t)
	if len(recs) != 2 || recs[1]["by"] != approval.ByTimeout || recs[1]["answer"] != "deny" || recs[1]["port"] != float64(port) {
		t.Errorf("approval records: got %v, want a question and a deny by timeout", recs)
	}
	if p := g.srv.approvals.List(); len(p) != 0 {
		t.Errorf("pending after the timeout: %+v", p)
	}
}

// Requests to one host and port with one method and path wait on one
// question (TestAskAnswerReleasesOnlyItsMethodAndPath: not another's).
func TestAskOneQuestionPerHostAndPort(t *testing.T) {
	otherUp := echoUpstream(t)
	otherPort := uint16(portOf(t, otherUp))
	g, c, base, port := askGateway(t, time.Minute, nil)
	a := getAsync(c, base+"/a")
	b := getAsync(c, base+"/a")
	other := getAsync(c, fmt.Sprintf("http://api.test:%d/a", otherPort))
	q := waitQuestion(t, g.srv, "api.test", port, 2)
	qo := waitQuestion(t, g.srv, "api.test", otherPort, 1)
	if qo.ID == q.ID {
		t.Fatalf("another port got the same question %s", q.ID)
	}
	if n := len(g.srv.approvals.List()); n != 2 {
		t.Errorf("pending: got %d questions, want 2 (one per host and port)", n)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan askResult{"a": a, "b": b} {
		if r := result(t, ch); r.status != 200 {
			t.Errorf("request %s: got %d, want 200", name, r.status)
		}
	}
	stillHeld(t, other)
	if _, err := g.srv.approvals.Answer(qo.ID, approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, other); r.status != 403 {
		t.Errorf("other port: got %d, want 403", r.status)
	}
	questions := 0
	for _, r := range g.approvalRecords(t) {
		if r["answer"] == nil && r["port"] == float64(port) {
			questions++
		}
	}
	if questions != 1 {
		t.Errorf("question records for api.test:%d: got %d, want 1", port, questions)
	}
}

// Address-guard refusals and invalid targets are blocked at once, never
// asked about, whatever the default.
func TestAskNeverForGuardOrInvalid(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	spec := netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(time.Minute)} // no allow_private
	g := startGatewayWith(t, spec, nil, nil)
	c := g.client(t, nil)
	for _, tt := range []struct{ url, rule string }{
		{fmt.Sprintf("http://127.0.0.1:%d/", port), netpolicy.RuleGuard},
		{"http://169.254.169.254/latest/meta-data/", netpolicy.RuleGuard},
		{fmt.Sprintf("http://[::1]:%d/", port), netpolicy.RuleGuard},
	} {
		r := result(t, getAsync(c, tt.url))
		if r.status != 403 || r.header.Get(HeaderRule) != tt.rule {
			t.Errorf("GET %s: got %d by %q, want 403 by %s", tt.url, r.status, r.header.Get(HeaderRule), tt.rule)
		}
	}
	status, hdr := rawConnect(t, g.addr, fmt.Sprintf("127.0.0.1:%d", port))
	if status != 403 || hdr.Get(HeaderRule) != netpolicy.RuleGuard {
		t.Errorf("CONNECT 127.0.0.1: got %d by %q, want 403 by guard", status, hdr.Get(HeaderRule))
	}
	status, hdr = rawConnect(t, g.addr, "bad_host!:443")
	if status != 400 && status != 403 {
		t.Errorf("CONNECT to an invalid target: got %d %v", status, hdr)
	}
	if recs := g.approvalRecords(t); len(recs) != 0 {
		t.Errorf("approval records: got %v, want none", recs)
	}
	if p := g.srv.approvals.List(); len(p) != 0 {
		t.Errorf("pending questions: got %+v, want none", p)
	}
}

func TestAskAuditModeHoldsNothing(t *testing.T) {
	g, c, base, _ := askGateway(t, time.Minute, func(cfg *serverConfig) {
		spec := cfg.Store.Load().Policy().Spec()
		spec.Mode = netpolicy.Audit
		if _, err := cfg.Store.Replace(spec, 0); err != nil {
			t.Fatal(err)
		}
	})
	if r := result(t, getAsync(c, base+"/")); r.status != 200 {
		t.Errorf("audit mode: got %d, want 200 (let through, not held)", r.status)
	}
	if rec := g.lastDecision(t); rec["action"] != "block" || rec["enforced"] != false || !strings.Contains(rec["reason"].(string), "audit mode asks nothing") {
		t.Errorf("audit-mode record: got %v", rec)
	}
}

func TestAskSessionAddsARule(t *testing.T) {
	askRule := netpolicy.Rule{ID: "q", Host: "*.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Ask}
	first := netpolicy.Rule{ID: "first", Host: "first.test", Action: netpolicy.Allow}
	g, c, base, port := askGateway(t, time.Minute, nil, first, askRule)
	ch := getAsync(c, base+"/")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	if q.Rule != "q" {
		t.Errorf("question's rule: got %q, want q", q.Rule)
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeSession, By: approval.ByUI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.status != 200 {
		t.Fatalf("got %d, want 200", r.status)
	}
	rules := g.store.Load().Policy().Rules()
	if len(rules) != 3 || rules[0].ID != "first" || rules[2].ID != "q" || rules[1].Host != "api.test" || rules[1].Action != netpolicy.Allow ||
		len(rules[1].Ports) != 1 || rules[1].Ports[0] != netpolicy.Port(port) {
		t.Fatalf("rules after a session answer: got %+v, want first, allow api.test:%d, q", rules, port)
	}
	// The next request is decided by the new rule, not asked.
	if r := result(t, getAsync(c, base+"/again")); r.status != 200 {
		t.Errorf("after the session answer: got %d, want 200", r.status)
	}
	if rec := g.lastDecision(t); rec["rule"] != rules[1].ID {
		t.Errorf("decided by %v, want the new rule %s", rec["rule"], rules[1].ID)
	}
	if p := g.srv.approvals.List(); len(p) != 0 {
		t.Errorf("asked again: %+v", p)
	}
	// A session deny adds a block rule.
	ch = getAsync(c, fmt.Sprintf("http://other.test:%d/", port))
	q = waitQuestion(t, g.srv, "other.test", port, 1)
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: false, Scope: approval.ScopeSession, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.status != 403 {
		t.Errorf("session deny: got %d, want 403", r.status)
	}
	if r := result(t, getAsync(c, fmt.Sprintf("http://other.test:%d/", port))); r.status != 403 || r.header.Get(HeaderRule) == "q" {
		t.Errorf("after the session deny: got %d by %s, want 403 by the new block rule", r.status, r.header.Get(HeaderRule))
	}
}

const approvalsPolicy = `# the team's policy
version: 1
default: block
rules:
  # registries
  - host: registry.npmjs.org
    ports: [443]
    action: allow
  - host: "*.test" # ask about the rest
    ports: ["*"]
    action: ask
  - host: never.example
    action: block
`

func TestAskAlwaysWritesTheFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(approvalsPolicy), 0o640); err != nil {
		t.Fatal(err)
	}
	p, err := netpolicy.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Spec()
	spec.AllowPrivate = loopbackPolicy("").AllowPrivate
	up := echoUpstream(t)
	port := uint16(portOf(t, up))
	g := startGatewayWith(t, spec, map[string]string{"api.test": "127.0.0.1"}, func(cfg *serverConfig) { cfg.ApprovalsFile = file })
	c := g.client(t, nil)
	url := fmt.Sprintf("http://api.test:%d/", port)
	ch := getAsync(c, url)
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeAlways, By: approval.ByCLI}); err != nil {
		t.Fatalf("AnswerApproval: %v", err)
	}
	if r := result(t, ch); r.status != 200 {
		t.Fatalf("got %d, want 200", r.status)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	// Kept: the comments and rules, in order; the new rule before the ask rule.
	order := []string{"# the team's policy", "# registries", "registry.npmjs.org", "# allowed always by cli at ", "host: api.test", fmt.Sprintf("ports: [%d]", port), "action: allow", "# ask about the rest", "action: ask", "never.example"}
	at := 0
	for _, s := range order {
		i := strings.Index(text[at:], s)
		if i < 0 {
			t.Fatalf("the file lacks %q after byte %d:\n%s", s, at, text)
		}
		at += i + len(s)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("file mode: got %v (%v), want 0640 kept", fi.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 || entries[0].Name() != ".policy.yaml.lock" {
		t.Errorf("the directory holds %v, want the policy and its lock file (no temporary file left)", entries)
	}
	// A second run with the same file is not asked.
	next, err := netpolicy.ParseFile(file)
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, text)
	}
	d := netpolicy.NewStore(next).Load().Policy().Verdict(netpolicy.Target{Host: "api.test", Port: port, Method: "GET", Path: "/"})
	if d.Action != netpolicy.Allow {
		t.Errorf("a new store from the file: got %s by %s, want allow", d.Action, d.Rule)
	}
	if recs := g.approvalRecords(t); len(recs) != 2 || recs[1]["scope"] != "always" {
		t.Errorf("approval records: got %v", recs)
	}
}

func TestAskAlwaysWithoutAFileIsRefused(t *testing.T) {
	g, c, base, port := askGateway(t, time.Minute, nil)
	ch := getAsync(c, base+"/")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	_, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeAlways, By: approval.ByCLI})
	if !errors.Is(err, approval.ErrNoFile) || !strings.Contains(err.Error(), "answer with scope session") {
		t.Fatalf("always without a file: got %v, want ErrNoApprovalsFile saying what to do", err)
	}
	// The question is still pending, and the policy as it was.
	if _, ok := pendingQuestion(g.srv, q.ID); !ok {
		t.Errorf("the question is no longer pending")
	}
	if n := len(g.store.Load().Policy().Rules()); n != 0 {
		t.Errorf("rules: got %d, want 0", n)
	}
	for _, bad := range []approval.Answer{{Allow: true, Scope: "forever", By: approval.ByCLI}, {Allow: true, Scope: approval.ScopeOnce}} {
		if _, err := g.srv.approvals.Answer(q.ID, bad); !errors.Is(err, approval.ErrInvalidAnswer) {
			t.Errorf("answer %+v: got %v, want ErrInvalidAnswer", bad, err)
		}
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.status != 200 {
		t.Errorf("got %d, want 200", r.status)
	}
}
