package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Answers that race for one question: one wins, and only its rule is
// written (to the file, for always) and added; every other gets
// ErrApprovalAnswered naming the winner, and writes nothing.
func TestAskConcurrentAnswersOneWins(t *testing.T) {
	for _, scope := range []approval.Scope{approval.ScopeAlways, approval.ScopeSession, approval.ScopeOnce} {
		t.Run(string(scope), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "approvals.yaml")
			if err := os.WriteFile(file, []byte("rules: []\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			g, c, base, port := askGateway(t, time.Minute, func(cfg *serverConfig) { cfg.ApprovalsFile = file })
			ch := getAsync(c, base+"/")
			q := waitQuestion(t, g.srv, "api.test", port, 1)
			answerers := api.Answerers()
			const n = 16
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = g.srv.approvals.Answer(q.ID, approval.Answer{Allow: i%2 == 0, Scope: scope, By: answerers[i%len(answerers)]})
				}()
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						t.Fatalf("answers %d and %d both won", winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("no answer won: %v", errs)
			}
			wantBy := answerers[winner%len(answerers)]
			for i, err := range errs {
				if i == winner {
					continue
				}
				// An answer that came after the winner was done finds no
				// question (404); one that came while it was being
				// carried out is told who answered (409).
				if errors.Is(err, approval.ErrNotFound) {
					continue
				}
				if !errors.Is(err, approval.ErrAnswered) || !strings.Contains(err.Error(), "already answered (by "+wantBy+")") {
					t.Errorf("answer %d: got %v, want ErrApprovalAnswered saying already answered (by %s)", i, err, wantBy)
				}
				if strings.Contains(err.Error(), "timed out") {
					t.Errorf("answer %d: got %v, which says the question timed out", i, err)
				}
			}
			wantStatus := 200
			if winner%2 != 0 {
				wantStatus = 403
			}
			if r := result(t, ch); r.status != wantStatus {
				t.Errorf("held request: got %d, want %d (the winner's answer)", r.status, wantStatus)
			}
			wantRules := 1
			if scope == approval.ScopeOnce {
				wantRules = 0
			}
			if got := len(g.store.Load().Policy().Rules()); got != wantRules {
				t.Errorf("rules in the running policy: got %d, want %d", got, wantRules)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			wantFile := 0
			if scope == approval.ScopeAlways {
				wantFile = 1
			}
			if got := strings.Count(string(data), "host: api.test"); got != wantFile {
				t.Errorf("rules in the approvals file: got %d, want %d:\n%s", got, wantFile, data)
			}
			answers := 0
			for _, r := range g.approvalRecords(t) {
				if r["answer"] != nil {
					answers++
					if r["by"] != wantBy {
						t.Errorf("answer record: got by %v, want %s", r["by"], wantBy)
					}
				}
			}
			if answers != 1 {
				t.Errorf("answer records: got %d, want 1", answers)
			}
		})
	}
}

// An answer to a question another answer is carrying out is refused
// through the API with 409 and the code that errors.Is matches, before
// any effect; once the first answer gives up (it failed), the question
// can be answered again.
func TestAskAnswerWhileAnsweredIsAConflict(t *testing.T) {
	up := echoUpstream(t)
	port := uint16(portOf(t, up))
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Minute)
	a := startAPIWith(t, spec, map[string]string{"api.test": "127.0.0.1"}, nil)
	c := apiClientOf(t, a, a.token)
	held := getAsync(a.proxy, fmt.Sprintf("http://api.test:%d/", port))
	q := waitQuestion(t, a.g.Server, "api.test", port, 1)
	// An answer by ui is being carried out: the rule it adds waits in a
	// check of the policy store until the test lets the change fail.
	var checks atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	err := a.g.Server.Store().AddCheck(func(*netpolicy.Policy) error {
		if checks.Add(1) != 2 { // the first is AddCheck's own
			return nil
		}
		close(entered)
		<-release
		return errors.New("the test refuses the change")
	})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := a.g.Server.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeSession, By: approval.ByUI})
		first <- err
	}()
	<-entered
	_, err = c.AnswerApproval(context.Background(), q.ID, api.ApprovalAnswer{Answer: api.AnswerDeny, Scope: api.ScopeSession})
	wantAPIError(t, "an answer while another is carried out", err, http.StatusConflict, `question "`+q.ID+`" is already answered (by ui)`)
	if !errors.Is(err, api.ErrApprovalAnswered) || errors.Is(err, api.ErrNoApprovalsFile) {
		t.Errorf("errors.Is(%v): want ErrApprovalAnswered only", err)
	}
	if n := len(a.g.Server.Store().Load().Policy().Rules()); n != 0 {
		t.Errorf("rules: got %d, want 0 (the refused answer added none)", n)
	}
	stillHeld(t, held)
	close(release)
	if err := <-first; err == nil || !strings.Contains(err.Error(), "the test refuses the change") {
		t.Fatalf("the answer whose rule was refused: got %v, want the store's refusal", err)
	}
	if _, err := c.AnswerApproval(context.Background(), q.ID, api.ApprovalAnswer{Answer: api.AnswerAllow}); err != nil {
		t.Fatalf("answering after the claim was given up: %v", err)
	}
	if r := result(t, held); r.status != 200 {
		t.Errorf("held request: got %d, want 200", r.status)
	}
	// The other conflict keeps its own code.
	held = getAsync(a.proxy, fmt.Sprintf("http://api.test:%d/", port))
	q = waitQuestion(t, a.g.Server, "api.test", port, 1)
	_, err = c.AnswerApproval(context.Background(), q.ID, api.ApprovalAnswer{Answer: api.AnswerAllow, Scope: api.ScopeAlways})
	if !errors.Is(err, api.ErrNoApprovalsFile) || errors.Is(err, api.ErrApprovalAnswered) {
		t.Errorf("an always answer without a file: got %v, want ErrNoApprovalsFile only", err)
	}
	if _, err := c.AnswerApproval(context.Background(), q.ID, api.ApprovalAnswer{Answer: api.AnswerDeny}); err != nil {
		t.Fatal(err)
	}
	result(t, held)
}

// Closing the gateway ends its pending questions with an answer record
// by closed, before the log closes; their requests are blocked, their
// timers log nothing after, and no question is asked after.
func TestAskCloseAnswersPendingQuestions(t *testing.T) {
	g, c, base, port := askGateway(t, time.Second, nil)
	held := getAsync(c, base+"/")
	q := waitQuestion(t, g.srv, "api.test", port, 1)
	if err := g.srv.Close(); err != nil {
		t.Fatal(err)
	}
	recs := g.approvalRecords(t)
	if len(recs) != 2 {
		t.Fatalf("approval records after Close: got %v, want the question and its answer", recs)
	}
	if r := recs[1]; r["approval_id"] != q.ID || r["answer"] != api.AnswerDeny || r["by"] != approval.ByClosed || r["action"] != "block" || r["reason"] != approval.ReasonClosed {
		t.Errorf("the answer record: got %v, want a deny by %s: %s", r, approval.ByClosed, approval.ReasonClosed)
	}
	if p := g.srv.approvals.List(); len(p) != 0 {
		t.Errorf("pending after Close: %+v", p)
	}
	<-held // blocked, or its connection closed: either way it ends
	if dec := g.lastDecision(t); dec["action"] != "block" || !strings.HasSuffix(dec["reason"].(string), approval.ReasonClosed) {
		t.Errorf("the held request's decision: got %v, want a block: %s", dec, approval.ReasonClosed)
	}
	n := len(g.records(t))
	time.Sleep(1200 * time.Millisecond) // past the question's deadline
	if got := g.records(t); len(got) != n {
		t.Errorf("records after Close: got %v, want none (a timer logged after)", got[n:])
	}
	// A request still being decided when the gateway closes asks nothing.
	rec := &decisionlog.Record{Kind: decisionlog.KindHTTP, Method: "GET"}
	d := g.srv.hold(context.Background(), nil, rec, g.store.Load(), netpolicy.Target{Host: "late.test", Port: 80},
		netpolicy.Decision{Action: netpolicy.Ask, Rule: netpolicy.RuleDefault, Reason: "no rule matched"})
	if d.Action != netpolicy.Block || !strings.HasSuffix(d.Reason, approval.ReasonClosed) || len(g.srv.approvals.List()) != 0 {
		t.Errorf("hold after Close: got %+v, pending %+v; want a block: %s, and no question", d, g.srv.approvals.List(), approval.ReasonClosed)
	}
}

// The decision log of a gateway closed while a question was pending ends
// with the question's answer: Start's Close ends the questions before it
// closes the log.
func TestAskCloseLogEndsWithTheAnswer(t *testing.T) {
	up := echoUpstream(t)
	port := uint16(portOf(t, up))
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Minute)
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res := &Resolver{}
	res.AddStatic("api.test", netip.MustParseAddr("127.0.0.1"))
	logFile := filepath.Join(t.TempDir(), "log.jsonl")
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: p, Resolver: res, LogFile: logFile})
	if err != nil {
		t.Fatal(err)
	}
	c := (&testGateway{addr: g.ProxyAddr.String()}).client(t, nil)
	held := getAsync(c, fmt.Sprintf("http://api.test:%d/", port))
	q := waitQuestion(t, g.Server, "api.test", port, 1)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	<-held
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	asked, answered := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r decisionlog.Record
		if err := decisionlog.Decode(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Event != decisionlog.EventApproval || r.ApprovalID != q.ID {
			continue
		}
		if r.Answer == "" {
			asked++
		} else if r.By == approval.ByClosed && r.Answer == api.AnswerDeny {
			answered++
		}
	}
	if asked != 1 || answered != 1 {
		t.Errorf("the log's records of %s: got %d questions and %d answers by closed, want 1 and 1", q.ID, asked, answered)
	}
}
