package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// ReasonNoAnswer ends the reason of a request blocked because its question
// timed out: "...; no answer came within 60s".
const ReasonNoAnswer = "no answer came within "

// hold settles d, the verdict on t of the request that rec records, under
// snap: a verdict other than ask is returned as it is. An ask first
// resolves t's host and applies the address guard: a refusal is returned
// (and so logged) as the guard's block, never asked about. Then it holds
// the request on the question about t's host and port, method and path
// (asking it, and logging the question, when it is the first; a tunnel's
// question has no method or path of a request) until the question is answered or
// times out (the policy's ask_timeout, else netpolicy.DefaultAskTimeout),
// and returns the answer as an allow or a block by the same rule, its
// reason saying who answered, or that no answer came. A request whose
// ctx ends, or the gateway closing, ends the wait with a block. When c is
// not nil, the request is c's, which nothing else reads meanwhile: its
// client hanging up ends the wait too (watchClient), and its write
// deadline is renewed after the wait, which may have outlasted it.
//
// In audit mode nothing is held: the ask is the block it would be without
// an answer, which audit mode lets through. Over MaxPendingApprovals
// questions, a new one is not asked and its request is blocked.
//
// The waiting goroutine is parked on a channel: a held request costs no
// CPU while it waits.
func (s *Server) hold(ctx context.Context, c *conn, rec *decisionlog.Record, snap *netpolicy.Snapshot, t netpolicy.Target, d netpolicy.Decision) netpolicy.Decision {
	if d.Action != netpolicy.Ask {
		return d
	}
	p := snap.Policy()
	timeout := p.AskTimeout()
	if timeout == 0 {
		timeout = netpolicy.DefaultAskTimeout
	}
	blocked := func(why string) netpolicy.Decision {
		return netpolicy.Decision{Action: netpolicy.Block, Rule: d.Rule, Reason: d.Reason + "; " + why}
	}
	if p.Mode() == netpolicy.Audit {
		return blocked("audit mode asks nothing")
	}
	// A name is resolved and guarded before it is asked about: what the
	// guard refuses is refused, not asked (docs/gateway.md).
	if _, guard, _ := s.resolveChecked(ctx, p, t, rec); guard != nil {
		return *guard
	}
	info := Approval{
		Host: t.Host, Port: t.Port, Kind: rec.Kind, Method: rec.Method, Path: rec.Path, Client: rec.Client,
		Rule: d.Rule, Reason: d.Reason, Asked: time.Now(),
	}
	path := t.Path
	if rec.Method == "" || rec.Method == "CONNECT" {
		info.Path, path = "", "" // a tunnel: no request path
	}
	q, created, err := s.approvals.join(info, path, timeout)
	if errors.Is(err, errApprovalsClosed) {
		return blocked(reasonClosed)
	} else if err != nil {
		return blocked(fmt.Sprintf("not asked: %d requests are held for answers, the most a gateway holds; answer them (sbx approve) or add rules", MaxPendingApprovals))
	}
	if created {
		qr := *rec
		qr.Event, qr.Action, qr.Enforced, qr.Rule, qr.Reason = decisionlog.EventApproval, string(netpolicy.Ask), false, d.Rule, d.Reason
		qr.ApprovalID = q.ID
		s.emit(&qr)
	}
	if c != nil && c.br != nil {
		// ctx is the listener's: the wait ends when the client hangs up.
		var stop func()
		ctx, stop = watchClient(ctx, c)
		defer stop()
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		s.approvals.leave(q)
		return blocked("the request ended before an answer came")
	case <-s.base.Done():
		s.approvals.leave(q)
		return blocked(reasonClosed)
	}
	if c != nil {
		c.extendWriteDeadline(s.limits.IdleConnTimeout)
	}
	a := q.answer
	switch {
	case a.By == ByTimeout:
		return blocked(ReasonNoAnswer + formatSeconds(timeout))
	case a.By == ByClosed:
		return blocked(reasonClosed)
	case a.Allow:
		return netpolicy.Decision{Action: netpolicy.Allow, Rule: d.Rule, Reason: d.Reason + "; " + answerText(a)}
	}
	return blocked(answerText(a))
}

// halfCloseGrace is how soon after a hold starts the end of its client's
// stream is taken for a half-close that came with the request, not for
// the client leaving. Reading cannot tell a client that closed its
// connection from one that only shut down its sending side and waits
// for the answer, as printf ... | nc does at once; a client that leaves
// does so while it waits, later.
const halfCloseGrace = 500 * time.Millisecond

// watchClient returns a context that ends with ctx or when c's client
// hangs up, and the func that ends the watch, which the caller must call
// before it reads c again. While the watch lasts, a goroutine peeks at c
// for its client's next bytes: a read that fails (the client closed or
// reset the connection) cancels the context, but for the end of the
// stream within halfCloseGrace, which ends the watch. The bytes it reads stay in
// c.br, unread, for the request's reader: pipelined requests, a body, a
// tunnel's first bytes. Once c.br is full it can read no more without
// taking them, and the watch ends without cancelling: a client that sent
// that much past its request's head is not watched. stop wakes the
// goroutine's read with a deadline in the past, waits for it to return
// (its only end, besides a failed read and a full buffer), and puts back
// the read deadline c had.
func watchClient(ctx context.Context, c *conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c.Conn.SetReadDeadline(time.Time{}) // c.readDL keeps the deadline to put back
	start := time.Now()
	go func() {
		defer close(done)
		for n := c.br.Buffered(); n < c.br.Size(); n = c.br.Buffered() {
			_, err := c.br.Peek(n + 1)
			switch {
			case err == nil:
				continue
			case errors.Is(err, io.EOF) && time.Since(start) < halfCloseGrace:
				// The client ended its sending side with its request
				// (printf ... | nc): it waits for the answer.
			case !isTimeout(err):
				cancel()
			}
			return
		}
	}()
	return ctx, func() {
		c.Conn.SetReadDeadline(time.Now())
		<-done
		c.Conn.SetReadDeadline(c.readDL)
		cancel()
	}
}

// answerText says what an answer was, as reasons give it: "allowed once
// by cli", "denied for this session by api", "allowed always by ui".
func answerText(a Answer) string {
	verb := "denied"
	if a.Allow {
		verb = "allowed"
	}
	scope := string(a.Scope)
	if a.Scope == ScopeSession {
		scope = "for this session"
	}
	return verb + " " + scope + " by " + a.By
}

// reasonClosed ends the reason of a request blocked because the gateway
// closed while it was held, and is the reason of its question's answer.
const reasonClosed = "the gateway closed before an answer came"

// formatSeconds writes d as whole seconds ("60s") when it is, else as
// time.Duration does.
func formatSeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// Approvals returns the pending questions, oldest first.
func (s *Server) Approvals() []Approval { return s.approvals.list() }

// AnswerApproval answers the pending question id with a and wakes the
// requests waiting on it. A session answer first adds a rule for the
// question's host and port (allow, or block for a deny) to the running
// policy, before its first ask rule (or last, when it has none), so that
// later requests are decided without a question; an always answer first
// writes that rule to Config.ApprovalsFile too (an error, such as
// ErrNoApprovalsFile, leaves the question pending and the policy as it
// was). The answer is logged as an approval record. It returns the
// question as it stood.
//
// Errors: ErrInvalidAnswer for a scope or an a.By that is not one of
// api.Scopes or api.Answerers,
// ErrApprovalNotFound when id is not pending (answered already, timed
// out, never asked), ErrNoApprovalsFile, and those of the policy store
// and of writing the file.
func (s *Server) AnswerApproval(id string, a Answer) (Approval, error) {
	if !api.IsScope(string(a.Scope)) {
		return Approval{}, fmt.Errorf("%w: scope %q; answer %s", ErrInvalidAnswer, a.Scope, api.OrList(api.Scopes(), false))
	}
	if !api.IsAnswerer(a.By) {
		// by is written into the decision log: only the known answerers
		// (timeout is the gateway's own word, never an answer's).
		return Approval{}, fmt.Errorf("%w: by %q; say who answers (%s)", ErrInvalidAnswer, a.By, strings.Join(api.Answerers(), ", "))
	}
	_, key, ok := s.approvals.getKey(id)
	if !ok {
		return Approval{}, fmt.Errorf("%w %q: it was answered, timed out, or never asked; GET /v1/approvals lists the pending ones", ErrApprovalNotFound, id)
	}
	if a.Scope == ScopeAlways && s.cfg.ApprovalsFile == "" {
		return Approval{}, fmt.Errorf("%w: this gateway has no file to write an always answer to; answer with scope session, or give the gateway an approvals file (a YAML policy file)", ErrNoApprovalsFile)
	}
	// The answer claims the question before it has any effect: a second
	// answer meanwhile is refused, and writes no rule.
	if _, err := s.approvals.claim(id, a.By); errors.Is(err, ErrApprovalNotFound) {
		return Approval{}, fmt.Errorf("%w %q: it was answered, timed out, or never asked; GET /v1/approvals lists the pending ones", ErrApprovalNotFound, id)
	} else if err != nil {
		return Approval{}, err
	}
	if a.Scope != ScopeOnce {
		if err := s.answerRule(id, key, a); err != nil {
			s.approvals.unclaim(id)
			return Approval{}, err
		}
	}
	got, err := s.approvals.answer(id, a)
	if err != nil {
		return Approval{}, fmt.Errorf("%w %q: the gateway closed while the answer was being written (its rule stands)", ErrApprovalNotFound, id)
	}
	return got, nil
}

// answerRule adds the rule of the session or always answer a to question
// id, about key, to the running policy, after writing it to
// Config.ApprovalsFile for an always answer.
func (s *Server) answerRule(id string, key approvalKey, a Answer) error {
	action := netpolicy.Block
	if a.Allow {
		action = netpolicy.Allow
	}
	rule := answerRuleOf(key, action)
	if a.Scope == ScopeAlways {
		comment := fmt.Sprintf("%s %s by %s at %s (sbx, question %s)", verbOf(a), scopeWord(a.Scope), a.By, time.Now().UTC().Format(time.RFC3339), id)
		if err := s.writeApprovedRule(rule, comment); err != nil {
			return err
		}
	}
	return s.addAnswerRule(rule)
}

// answerRuleOf is the rule of a session or always answer to the question
// about q, with
// action: no wider than the question, as rules can say it. A question
// about a request (plain HTTP, or inside an inspected tunnel) gives a
// rule for its host, port, method and path (a path rule matches the
// paths below it too); a tunnel's, its host and port.
func answerRuleOf(q approvalKey, action netpolicy.Action) netpolicy.Rule {
	r := netpolicy.Rule{Host: q.host, Ports: []netpolicy.Port{netpolicy.Port(q.port)}, Action: action}
	if q.method != "" && q.method != "CONNECT" {
		r.Methods = []string{strings.ToUpper(q.method)}
		r.Path = netpolicy.CanonicalPath(q.path)
	}
	return r
}

func verbOf(a Answer) string {
	if a.Allow {
		return "allowed"
	}
	return "denied"
}

func scopeWord(sc Scope) string {
	if sc == ScopeSession {
		return "for this session"
	}
	return string(sc)
}

// addAnswerRule adds r to the running policy before its first ask rule,
// or last when it has none, retrying when another change came between
// reading the policy and adding the rule.
func (s *Server) addAnswerRule(r netpolicy.Rule) error {
	var err error
	for range 5 {
		snap := s.cfg.Store.Load()
		if _, _, err = s.cfg.Store.AddRule(r, snap.Policy().FirstAsk(), snap.Version()); !errors.Is(err, netpolicy.ErrVersionMismatch) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("adding the answer's rule to the policy: %w", err)
	}
	return nil
}

// logAnswer logs the approval record of q's answer a.
func (s *Server) logAnswer(q Approval, a Answer) {
	rec := &decisionlog.Record{
		Event: decisionlog.EventApproval, Client: q.Client, Kind: q.Kind, Method: q.Method,
		Host: q.Host, Port: int(q.Port), Path: q.Path, Rule: q.Rule, Enforced: true,
		PolicyVersion: s.cfg.Store.Load().Version(),
		ApprovalID:    q.ID, Answer: api.AnswerDeny, Scope: string(a.Scope), By: a.By,
		Count:  uint64(q.Waiting), // the held requests it reaches
		Action: string(netpolicy.Block),
	}
	if a.Allow {
		rec.Answer, rec.Action = api.AnswerAllow, string(netpolicy.Allow)
	}
	switch a.By {
	case ByTimeout:
		rec.Reason = ReasonNoAnswer + formatSeconds(q.Deadline.Sub(q.Asked))
	case ByClosed:
		rec.Reason = reasonClosed
	default:
		rec.Reason = answerText(a)
	}
	s.emit(rec)
}

// writeApprovedRule writes r with comment to Config.ApprovalsFile.
func (s *Server) writeApprovedRule(r netpolicy.Rule, comment string) error {
	if err := netpolicy.AddApprovedRule(s.cfg.ApprovalsFile, r, comment); err != nil {
		return fmt.Errorf("writing the always answer's rule: %w", err)
	}
	return nil
}
