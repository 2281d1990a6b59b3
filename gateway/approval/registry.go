package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Gateway is what a Registry needs of the gateway that holds it.
type Gateway interface {
	// Guard applies the address guard under p to t's host before a
	// question about t is asked, when its addresses are known without
	// asking a resolver (which would carry the name out before anyone
	// allowed it), noting them in rec: it returns the guard's refusal (a
	// block, which the request gets and the gateway logs), or nil when
	// the question may be asked.
	Guard(ctx context.Context, p *netpolicy.Policy, t netpolicy.Target, rec *decisionlog.Record) *netpolicy.Decision
	// Emit logs rec, an approval record: a question as it is asked, an
	// answer as it is given.
	Emit(rec *decisionlog.Record)
}

// Config configures a Registry.
type Config struct {
	// Store is the running policy: a session or always answer adds its
	// rule to it, and answer records carry its version. Required.
	Store *netpolicy.Store
	// Gateway guards and logs for the registry. Required.
	Gateway Gateway
	// File is the approvals file an always answer writes its rule to
	// (AddApprovedRule); "" refuses always answers with
	// ErrNoFile.
	File string
	// Max bounds the requests held at once; 0 is MaxPending.
	Max int
}

// Registry holds the requests whose verdict is ask on their questions
// and carries out the answers. Make one with New; it is safe for
// concurrent use.
type Registry struct {
	cfg Config
	t   *table
}

// New returns a registry with no pending question.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil || cfg.Gateway == nil {
		return nil, errors.New("approval: Config needs Store and Gateway")
	}
	if cfg.Max == 0 {
		cfg.Max = MaxPending
	}
	r := &Registry{cfg: cfg}
	r.t = newTable(cfg.Max, r.logAnswer)
	return r, nil
}

// Held is a request held on its question, from Ask; its Wait waits for
// the answer.
type Held struct {
	r       *Registry
	q       *question
	d       netpolicy.Decision
	timeout time.Duration
}

// Ask settles d, the verdict on t of the request that rec records, under
// snap. A verdict other than ask is returned as it is, and so is the
// block of an ask that is not asked, with a nil Held: in audit mode the
// ask is the block it would be without an answer, which audit mode lets
// through; a name whose addresses the guard refuses is refused (and so
// logged) as the guard's block, never asked about (the name is resolved
// and guarded first, docs/gateway.md); over Config.Max held requests, or
// once the registry is closed, a new one is not asked. Otherwise the
// request is held on the question about t's host and port, method and
// path (asked, and logged, when it is the first; a tunnel's question has
// no method or path of a request), which times out after the policy's
// ask_timeout, else netpolicy.DefaultAskTimeout: the caller then waits
// for the answer with the Held's Wait, and must.
func (r *Registry) Ask(ctx context.Context, rec *decisionlog.Record, snap *netpolicy.Snapshot, t netpolicy.Target, d netpolicy.Decision) (netpolicy.Decision, *Held) {
	if d.Action != netpolicy.Ask {
		return d, nil
	}
	p := snap.Policy()
	timeout := p.AskTimeout()
	if timeout == 0 {
		timeout = netpolicy.DefaultAskTimeout
	}
	if p.Mode() == netpolicy.Audit {
		return blocked(d, "audit mode asks nothing"), nil
	}
	if guard := r.cfg.Gateway.Guard(ctx, p, t, rec); guard != nil {
		return *guard, nil
	}
	info := Approval{
		Host: t.Host, Port: t.Port, Kind: rec.Kind, Method: rec.Method, Path: rec.Path, Client: rec.Client,
		Rule: d.Rule, Reason: d.Reason, Asked: time.Now(),
	}
	path := t.Path
	if rec.Method == "" || rec.Method == "CONNECT" {
		info.Path, path = "", "" // a tunnel: no request path
	}
	q, created, err := r.t.join(info, path, timeout)
	if errors.Is(err, errClosed) {
		return blocked(d, ReasonClosed), nil
	} else if err != nil {
		return blocked(d, fmt.Sprintf("not asked: %d requests are held for answers, the most a gateway holds; answer them (sbx approve) or add rules", r.cfg.Max)), nil
	}
	if created {
		qr := *rec
		qr.Event, qr.Action, qr.Enforced, qr.Rule, qr.Reason = decisionlog.EventApproval, string(netpolicy.Ask), false, d.Rule, d.Reason
		qr.ApprovalID = q.ID
		r.cfg.Gateway.Emit(&qr)
	}
	return d, &Held{r: r, q: q, d: d, timeout: timeout}
}

// Wait holds the request until its question is answered or times out
// and returns the answer as an allow or a block by the ask's rule, its
// reason saying who answered, or that no answer came; ended is true.
// When ctx ends first (the request ended: its client hung up) the
// request leaves the question, and Wait returns a block saying so, ended
// false. The waiting goroutine is parked on a channel: a held request
// costs no CPU while it waits.
func (h *Held) Wait(ctx context.Context) (d netpolicy.Decision, ended bool) {
	select {
	case <-h.q.done:
	case <-ctx.Done():
		h.r.t.leave(h.q)
		return blocked(h.d, "the request ended before an answer came"), false
	}
	a := h.q.answer
	switch {
	case a.By == ByTimeout:
		return blocked(h.d, ReasonNoAnswer+formatSeconds(h.timeout)), true
	case a.By == ByClosed:
		return blocked(h.d, ReasonClosed), true
	case a.Allow:
		return netpolicy.Decision{Action: netpolicy.Allow, Rule: h.d.Rule, Reason: h.d.Reason + "; " + answerText(a)}, true
	}
	return blocked(h.d, answerText(a)), true
}

// blocked is the block of the ask d, its reason ending with why.
func blocked(d netpolicy.Decision, why string) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: d.Rule, Reason: d.Reason + "; " + why}
}

// List returns the pending questions, oldest first.
func (r *Registry) List() []Approval { return r.t.list() }

// Close ends every pending question with a deny by ByClosed, logged as
// its answer (so the requests held on it are blocked, and a question's
// timer logs nothing after), and refuses new questions. It returns once
// every answer is logged: nothing is logged after it.
func (r *Registry) Close() { r.t.close(Answer{Scope: ScopeOnce, By: ByClosed}) }

// answerText says what an answer was, as reasons give it: "allowed once
// by cli", "denied for this session by api", "allowed always by ui".
func answerText(a Answer) string {
	return verbOf(a) + " " + scopeWord(a.Scope) + " by " + a.By
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

// formatSeconds writes d as whole seconds ("60s") when it is, else as
// time.Duration does.
func formatSeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
