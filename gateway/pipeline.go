package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The pipeline decides every request and tunnel the gateway sees, whatever
// door it came in by: an absolute-form request to the proxy (or a plain
// HTTP request on a captured connection), a request inside an inspected
// tunnel, a CONNECT tunnel, or a captured connection decided as a tunnel.
// A door reads its input into an entry, runs the pipeline, and writes the
// outcome: the answer the gateway makes itself, the mock's, the inspected
// tunnel, or the request or tunnel sent upstream to the guarded addresses
// once its record is committed. The steps, in run's order, are
//
//	decide → secrets → inspect → mock → hold → refuse → cap → guard → commit → upstream
//
// and every rule of the gateway's decisions lives in one of them; a step
// that does not concern a door (a path for a tunnel, a tunnel cap for a
// request) passes it by. What a door refuses while it reads (a request it
// cannot parse, a Host or a TLS server name that is not its target's) it
// refuses before the pipeline, or hands in as entry.invalid. docs/gateway.md lists the same steps
// (TestPipelineStepsDocumented).

// doorKind is where a request or a connection came into the gateway.
type doorKind uint8

const (
	// doorProxy is a request the gateway reads itself: an absolute-form
	// request to the proxy, or a plain HTTP request on a captured
	// connection (kind transparent).
	doorProxy doorKind = iota
	// doorInspected is a request inside an inspected tunnel, HTTP/1.1 or
	// HTTP/2, read by net/http.
	doorInspected
	// doorConnect is a CONNECT tunnel.
	doorConnect
	// doorCaptured is a captured connection decided as a tunnel: TLS by
	// its server name, or raw TCP. Its client does not know the gateway
	// is there: a refusal closes the connection unanswered (status 0).
	doorCaptured
)

// tunnel reports whether d decides tunnels, which have no path or header
// fields.
func (d doorKind) tunnel() bool { return d == doorConnect || d == doorCaptured }

// entry is what a door read: the target of a request or tunnel and where
// it came from.
type entry struct {
	door     doorKind
	kind     string              // the record's kind (decisionlog.Kind*)
	c        *conn               // the client's connection
	target   netpolicy.Target    // as sent: decide normalizes the host; Method CONNECT for a tunnel
	raw      string              // the request-target as sent; "" for a tunnel
	header   http.Header         // the request's header fields; nil for a tunnel
	tls      bool                // HTTPS inside an inspected tunnel
	hello    bool                // a captured connection began with a TLS ClientHello, which the gateway may inspect
	start    time.Time           // when the door began reading it
	rec      *decisionlog.Record // where the decision record is made; nil: allocated
	closeRec *decisionlog.Record // where the close record is made; nil: allocated

	// invalid, when not nil, is a refusal the door found reading the
	// request (an inspected request not for the tunnel's host, say),
	// answered with status invalidStatus before anything is decided.
	invalid       *netpolicy.Decision
	invalidStatus int
}

// next is what a door does with an outcome.
type next uint8

const (
	// nextAnswer: write the outcome's answer (nothing when its status is
	// 0: a captured connection is closed unanswered). The record is
	// logged; a close record, when there is one, the door logs with end.
	nextAnswer next = iota
	// nextMock: the mock answers (outcome.mock); its serving logs the
	// record.
	nextMock
	// nextInspect: terminate the tunnel's TLS and serve its requests;
	// the record is logged and the door logs the close record.
	nextInspect
	// nextUpstream: the record is committed; send the request or open the
	// tunnel to the first of the guarded addresses that answers, and log
	// the close record with end.
	nextUpstream
)

// answer is a response the gateway makes itself.
type answer struct {
	status      int // 0: none, the connection is closed unanswered
	contentType string
	body        string
	extra       [][2]string // header fields after the framing ones
}

// outcome is what the pipeline made of an entry.
type outcome struct {
	next       next
	rec        *decisionlog.Record // the decision record
	closeRec   *decisionlog.Record // the close record; nil when nothing was let through
	snap       *netpolicy.Snapshot // the policy that decided
	t          netpolicy.Target    // the target, its host normalized
	d          netpolicy.Decision
	answer     answer
	mock       *mockAnswer
	addrs      []netip.Addr // the guarded addresses to dial, in order
	unresolved error        // why the target's name did not resolve (guard), answered once the record is committed
	inject     bool         // the values of the secrets bound to the target go in the request
	asked      bool         // the verdict was ask, and d is its answer (hold)
	slot       bool         // a tunnel slot of the client is held: the door gives it back (tunnelCount.release)
}

// pipeline runs the steps of a decision for its Server.
type pipeline struct {
	s *Server
}

// run takes in through the pipeline's steps, in order, and returns the
// outcome of the first that settles it. A step that panics after cap took
// one of the client's tunnel slots gives the slot back as the panic
// unwinds: the door, which gives it back once run returned, never will.
func (p *pipeline) run(ctx context.Context, in *entry) (o outcome) {
	done := false
	defer func() {
		if !done && o.slot {
			p.s.tunnels.release(in.c.client.Addr())
		}
	}()
	done = p.decide(in, &o) || p.secrets(in, &o) || p.inspect(in, &o) || p.mock(in, &o)
	if done {
		return o
	}
	p.hold(ctx, in, &o)
	done = p.refuse(in, &o) || p.cap(in, &o) || p.guard(ctx, in, &o) || p.commit(in, &o)
	if done {
		return o
	}
	p.upstream(in, &o)
	done = true
	return o
}

// decide starts the record and decides the target with the current
// policy's Verdict (so an allowed IP literal that the address guard
// refuses is refused here, before anything is resolved). The record logs
// the normalized host, or the raw one redacted when it does not normalize
// (Verdict then blocks it as invalid). A secret's placeholder in the host
// goes nowhere (docs/secrets.md). An entry the door found invalid is
// refused here.
func (p *pipeline) decide(in *entry, o *outcome) bool {
	s := p.s
	rec := in.rec
	if rec == nil {
		rec = new(decisionlog.Record)
	}
	t := in.target
	s.initRecord(rec, in.c, in.kind, t.Method, t.Port)
	if in.door == doorCaptured {
		rec.Method = "" // decided as a tunnel; no HTTP method was sent
	}
	snap := s.cfg.Store.Load()
	rec.PolicyVersion = snap.Version()
	o.rec, o.snap = rec, snap
	if in.invalid != nil {
		rec.Host, rec.Path = t.Host, truncate(t.Path, maxLoggedPath)
		o.t, o.d = t, *in.invalid
		p.finishRefusal(rec, o.d, in.invalidStatus, in.start)
		o.answer = p.blockAnswer(in, o, o.d, in.invalidStatus)
		return true
	}
	d := snap.Policy().Verdict(t)
	if host, err := netpolicy.NormalizeHost(t.Host); err == nil {
		rec.Host, t.Host = host, host
		// An IP target the guard refused; inside an inspected tunnel the
		// record names the tunnel's host alone, as it always has.
		if d.Rule == netpolicy.RuleGuard && in.door != doorInspected {
			if ip, err := netip.ParseAddr(host); err == nil {
				rec.Addrs = ip.Unmap().String()
			}
		}
	} else {
		rec.Host = redactTarget(t.Host)
	}
	if sec := s.secrets.PlaceholderIn(t.Host); sec != nil {
		d, rec.Secret = sec.Block(rec.Host), sec.Name()
		rec.Addrs = ""
	}
	if !in.door.tunnel() {
		rec.Path = truncate(t.Path, maxLoggedPath)
	}
	o.t, o.d = t, d
	return false
}

// secrets refuses a request or tunnel that carries a secret's placeholder
// where its value is not sent: in its host (decide found it), or, for a
// request, in its method, target or header fields (secrets.Set.BlockLeak).
func (p *pipeline) secrets(in *entry, o *outcome) bool {
	if o.rec.Secret == "" && (in.door.tunnel() || !p.s.secrets.BlockLeak(o.rec, &o.d, secrets.Request{Host: o.t.Host, Port: o.t.Port, Method: o.t.Method, Target: in.raw, Path: o.t.Path, Header: in.header, TLS: in.tls})) {
		return false
	}
	p.block(in, o, o.d)
	return true
}

// inspect opens a tunnel the gateway inspects (inspects: the policy asks
// for it, a mock or a recorder answers for the host, or a secret is bound
// to it, and the gateway has a CA), decided by tunnelDecision: a block
// only when no request through it could be allowed. Nothing is held: each
// request inside is decided, asked about and committed on its own; the
// tunnel's record is logged, not committed, since nothing goes upstream
// for the tunnel itself. A captured connection is inspected only when it
// began with a ClientHello.
func (p *pipeline) inspect(in *entry, o *outcome) bool {
	if !in.door.tunnel() || in.door == doorCaptured && !in.hello || !p.inspects(o.snap.Policy(), o.t) {
		return false
	}
	o.d = p.tunnelDecision(o.snap.Policy(), o.t)
	if p.blocked(in, o) || p.cap(in, o) {
		return true
	}
	o.closeRec = p.admit(o.rec, o.d, in.start)
	o.next = nextInspect
	return true
}

// mock hands a request for a host the mock LLM answers (or that an
// intercept rule with an llm response decides) to the mock. A tunnel to a
// mocked host that is not inspected would reach the real API, so it is
// refused, in audit mode too.
func (p *pipeline) mock(in *entry, o *outcome) bool {
	s := p.s
	if !in.door.tunnel() {
		if o.mock = s.mocks.answerFor(o.t.Host, &o.d); o.mock == nil {
			return false
		}
		o.next = nextMock
		return true
	}
	if s.mocks.forHost(o.t.Host) == nil {
		return false
	}
	d := s.mocks.tunnelDecision(o.t.Host)
	if s.cfg.CA != nil { // not TLS, or it would have been inspected
		d = netpolicy.Decision{Action: netpolicy.Block, Rule: RuleMockLLM,
			Reason: "the mock LLM for " + o.t.Host + " answers HTTP and TLS; this connection speaks neither"}
	}
	p.block(in, o, d)
	return true
}

// hold waits for the answer to an ask (Server.hold). A request's client
// hanging up ends the wait, but inside an inspected tunnel, whose
// connection net/http reads. A plain HTTP request in a tunnel (a CONNECT,
// or a late captured connection) whose own question was answered allow
// takes that answer, when its verdict is an ask by the same rule: the
// person who allowed the tunnel allowed what it carries, and is not
// asked again.
func (p *pipeline) hold(ctx context.Context, in *entry, o *outcome) {
	if o.d.Action != netpolicy.Ask {
		return
	}
	o.asked = true
	c := in.c
	if a := c.answered; a != nil && in.door == doorProxy && o.d.Rule == a.Rule {
		// A request in a tunnel whose own question was answered allow
		// (conn.answered): that answer was for it too.
		o.d = *a
		o.d.Reason += "; the answer to the question about its tunnel"
		return
	}
	if in.door == doorInspected {
		c = nil
	}
	o.d = p.s.hold(ctx, c, o.rec, o.snap, o.t, o.d)
}

// refuse answers an intercept and refuses an enforced block. A tunnel
// cannot be intercepted: the intercept is a block of its rule (Spliced),
// refused whatever the mode for a CONNECT, enforced as any block for a
// captured connection.
func (p *pipeline) refuse(in *entry, o *outcome) bool {
	if o.d.Action == netpolicy.Intercept {
		switch in.door {
		case doorConnect:
			p.block(in, o, o.d.Spliced("an HTTPS intercept needs TLS inspection, and this gateway has no CA"))
			return true
		case doorCaptured:
			o.d = o.d.Spliced("an intercept answers HTTP requests; this connection does not speak plain HTTP")
		default:
			status, contentType, extra := interceptHead(o.d)
			p.finishRefusal(o.rec, o.d, status, in.start)
			o.answer = answer{status: status, contentType: contentType, body: o.d.Response.Body, extra: extra}
			return true
		}
	}
	return p.blocked(in, o)
}

// blocked refuses an enforced block (an audit-mode block of a rule that
// audit mode lets through goes on).
func (p *pipeline) blocked(in *entry, o *outcome) bool {
	if o.d.Action != netpolicy.Block || !enforced(o.snap, o.d) {
		return false
	}
	p.block(in, o, o.d)
	return true
}

// cap takes one of the client's tunnel slots for a tunnel: a client at
// Limits.MaxTunnelsPerClient gets a decision of its own, action block and
// status 429 (0 for a captured connection), before the name is resolved,
// so that a client at its cap makes the gateway do nothing more.
func (p *pipeline) cap(in *entry, o *outcome) bool {
	if !in.door.tunnel() {
		return false
	}
	s := p.s
	if s.tunnels.acquire(in.c.client.Addr(), s.limits.MaxTunnelsPerClient) {
		o.slot = true
		return false
	}
	proxied := in.door == doorConnect
	p.refuseOverTunnels(in.c, o.rec, in.start, proxied)
	if proxied {
		o.answer = answer{status: http.StatusTooManyRequests, body: "sbx: too many open tunnels from this client\n"}
	}
	return true
}

// guard resolves the target and applies the address guard to every
// address (resolveChecked); a refused address refuses the request. A name
// that does not resolve is answered once the record is committed.
func (p *pipeline) guard(ctx context.Context, in *entry, o *outcome) bool {
	addrs, guard, err := p.s.resolveChecked(ctx, o.snap.Policy(), o.t, o.rec)
	if guard != nil {
		p.block(in, o, *guard)
		return true
	}
	o.addrs, o.unresolved = addrs, err
	return false
}

// commit writes the decision record and returns only once the decision
// log's file holds it: nothing goes upstream that the log does not hold.
// When the file cannot take it, the request is refused (admitCommitted).
// A name that did not resolve is answered here, its close record saying
// so.
func (p *pipeline) commit(in *entry, o *outcome) bool {
	refusedStatus := http.StatusForbidden
	if in.door == doorCaptured {
		refusedStatus = 0 // closed unanswered
	}
	closeRec, refused := p.admitCommitted(o.rec, o.d, in.start, in.closeRec, refusedStatus)
	if refused != nil { // the decision log cannot be written
		o.d = *refused
		if refusedStatus != 0 {
			o.answer = p.blockAnswer(in, o, o.d, refusedStatus)
		}
		return true
	}
	o.closeRec = closeRec
	if o.unresolved == nil {
		return false
	}
	closeRec.Status, closeRec.Error = upstreamStatus(o.unresolved, true), "resolving "+o.t.Host+": "+o.unresolved.Error()
	if in.door != doorCaptured {
		o.answer = answer{status: closeRec.Status, body: "sbx: cannot resolve " + o.t.Host + "\n"}
	}
	return true
}

// upstream lets the door go upstream to the guarded addresses, with the
// values of the secrets bound to the target in place of their
// placeholders when the request is allowed HTTPS inside an inspected
// tunnel: the only requests a value goes in (docs/secrets.md).
func (p *pipeline) upstream(in *entry, o *outcome) {
	o.next = nextUpstream
	o.inject = in.tls && o.d.Action == netpolicy.Allow && p.s.secrets.Bound(o.t.Host, o.t.Port)
}

// block logs d, a refusal of the entry, and makes its 403; a captured
// connection is closed unanswered, status 0 in the record.
func (p *pipeline) block(in *entry, o *outcome, d netpolicy.Decision) {
	status := http.StatusForbidden
	if in.door == doorCaptured {
		status = 0
	}
	o.d = d
	p.finishRefusal(o.rec, d, status, in.start)
	if status != 0 {
		o.answer = p.blockAnswer(in, o, d, status)
	}
}

// blockAnswer is the answer to a refused entry: status, the X-Sbx headers
// and a body that says what was refused and how to allow it.
func (p *pipeline) blockAnswer(in *entry, o *outcome, d netpolicy.Decision, status int) answer {
	hostport := joinHostPort(o.rec.Host, o.t.Port)
	what := describe(o.t.Method, hostport, o.t.Path)
	if in.door == doorInspected {
		scheme := "http"
		if in.tls {
			scheme = "https"
		}
		what = o.t.Method + " " + scheme + "://" + hostport + o.t.Path
	}
	return answer{status: status, body: p.blockText(what, hostport, d), extra: blockHeaders(d)}
}
