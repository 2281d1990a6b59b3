package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Replay returns what p says of the attempt r records, with the decision
// code the gateway uses (netpolicy's Verdict and DecideHost), and whether
// r is an attempt at all (decisions of every kind but conn are, and so is
// a close record of a tunnel the gateway's TLS check closed, and a record
// of an event this package does not know; other close records, policy
// and dropped records and refused clients are not).
//
//   - http, connect, transparent: Verdict of the target, with the method
//     and path of a plain HTTP request. A tunnel (a CONNECT, or a
//     transparent connection that was not plain HTTP) is decided as a
//     CONNECT, and an intercept of it is a block, as the gateway does.
//     A request whose path the log cut short (over 1024 bytes) is decided
//     as such a tunnel to its host and port, since its real path is
//     unknown.
//   - http, https, connect, transparent that the address guard refused
//     (rule guard, a reason that starts with decisionlog.ReasonGuard):
//     when the verdict above allows, the address guard, GuardAddr, on the
//     addresses the record's addrs lists, as the gateway applies it to
//     the addresses it resolved: the attempt is allowed when p's guard
//     passes one of them, else blocked. A record that lists none a policy
//     can pass (the gateway's own, this host's or the sandbox pool's
//     address, which no policy reaches, or a log of an sbx that did not
//     list them) is a block whatever p says.
//   - http, connect, transparent whose record has rule invalid (a target
//     that did not parse, a malformed request, a Host header or TLS
//     server name that is not the target's): the logged block, which the
//     gateway gives whatever the policy. So is a close record of action
//     block and rule invalid, a tunnel the gateway closed when its first
//     bytes were a ClientHello for another host, or one it could not
//     parse.
//   - dns: DecideHost of the name, as the DNS stub decides.
//   - bypass: the packet's destination as a target: Verdict of (address,
//     port) as a CONNECT, or, for ICMP and other protocols without ports,
//     DecideHost of the address and then, when it allows, the address
//     guard as Verdict applies it (which only a rule for the address with
//     ports "*" exempts from, a packet having no port). The gateway
//     refuses these packets whatever the policy; an allow here says only
//     that the policy names their target. A bypass record without a
//     destination (the gateway's overflow record) cannot be replayed and
//     is a block.
//   - a decision of a kind, or a record of an event, that this package
//     does not know (a newer gateway wrote it): a block by RuleUnknown,
//     since what it stands for cannot be judged; upgrade sbx.
//
// Like Verdict, Replay ignores the policy's mode.
func Replay(p *netpolicy.Policy, r *decisionlog.Record) (netpolicy.Decision, bool) {
	switch r.Event {
	case decisionlog.EventDecision:
	case decisionlog.EventClose:
		if closedByTLSCheck(r) {
			return loggedInvalid(r), true
		}
		return netpolicy.Decision{}, false
	case decisionlog.EventPolicy, decisionlog.EventDropped, decisionlog.EventApproval:
		return netpolicy.Decision{}, false
	default:
		return unknownDecision("event", r.Event), true
	}
	if r.Secret != "" { // a secret's placeholder sent where the secret is not
		return loggedInvalid(r), true
	}
	switch r.Kind {
	case decisionlog.KindHTTP, decisionlog.KindHTTPS, decisionlog.KindConnect, decisionlog.KindTransparent:
		if r.Rule == netpolicy.RuleInvalid {
			return loggedInvalid(r), true
		}
		if guardRefused(r) && !exemptable(r.Addrs) {
			return fencedBlock(r), true
		}
		t := netpolicy.Target{Host: r.Host, Port: port(r.Port), Method: r.Method, Path: r.Path}
		var d netpolicy.Decision
		switch {
		case isTunnel(r.Method):
			d = tunnelVerdict(p, t, r)
			t.Method, t.Path = "CONNECT", ""
		case pathCut(r.Path):
			d = anyRequestVerdict(p, t, fmt.Sprintf("the log cut this request's path at %d bytes, so it is decided as a tunnel to %s, which could carry any path", maxLoggedPath, hostPort(clipString(r.Host, maxHostString), r.Port)))
		default:
			d = p.Verdict(t)
		}
		if d.Action == netpolicy.Allow && guardRefused(r) {
			return replayGuard(p, t, r, d), true
		}
		return d, true
	case decisionlog.KindDNS:
		return p.DecideHost(r.Host), true
	case decisionlog.KindBypass:
		if r.Host == "" {
			return netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid,
				Reason: "the gateway did not keep these packets' destinations apart (too many targets), so no policy can be said to allow them"}, true
		}
		if r.Port > 0 {
			return p.Verdict(netpolicy.Target{Host: r.Host, Port: port(r.Port), Method: "CONNECT"}), true
		}
		d := p.DecideHost(r.Host)
		if d.Action == netpolicy.Block {
			return d, true
		}
		if h, err := netpolicy.NormalizeHost(r.Host); err == nil {
			if ip, err := netip.ParseAddr(h); err == nil {
				// The address guard, as Verdict applies it to an IP
				// literal; a packet has no port, so only a rule for
				// every port can exempt its address.
				if g, refused := p.GuardAddr(ip, netpolicy.Target{Host: h, Method: "CONNECT"}); refused {
					return g, true
				}
			}
		}
		return d, true
	case decisionlog.KindConn:
		return netpolicy.Decision{}, false
	}
	return unknownDecision("kind", r.Kind), true
}

// guardRefused reports whether r is a decision the address guard refused
// for the address its target was or resolved to (not a packet around the
// gateway, nor a client over its tunnel limit, which rule guard refuses
// too).
func guardRefused(r *decisionlog.Record) bool {
	return r.Rule == netpolicy.RuleGuard && strings.HasPrefix(r.Reason, decisionlog.ReasonGuard)
}

// replayGuard is Replay's verdict on r, which the address guard refused
// and which p decides as d, an allow: d when p's guard passes one of the
// addresses r lists, else the guard's block of the first (see Replay). t
// is r's target as the gateway decided it.
func replayGuard(p *netpolicy.Policy, t netpolicy.Target, r *decisionlog.Record, d netpolicy.Decision) netpolicy.Decision {
	var first netpolicy.Decision
	var firstIP netip.Addr
	addrs := r.Addrs
	for i := 0; addrs != "" && i < decisionlog.MaxAddrs; i++ {
		var a string
		a, addrs, _ = strings.Cut(addrs, ",")
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue // not an address: nothing passes it
		}
		g, refused := p.GuardAddr(ip, t)
		if !refused {
			return d
		}
		if !firstIP.IsValid() {
			first, firstIP = g, ip.Unmap()
		}
	}
	if !firstIP.IsValid() {
		return fencedBlock(r) // cannot happen after exemptable
	}
	first.Reason += fmt.Sprintf(" (where %s resolved when logged; allow_private: [%s] exempts it)",
		hostPort(clipString(r.Host, maxHostString), r.Port), netip.PrefixFrom(firstIP, firstIP.BitLen()))
	return first
}

// exemptable reports whether a guard refusal's addrs lists an address a
// policy can pass: an IP address without a zone, among the first
// decisionlog.MaxAddrs.
func exemptable(addrs string) bool {
	for i := 0; addrs != "" && i < decisionlog.MaxAddrs; i++ {
		var a string
		a, addrs, _ = strings.Cut(addrs, ",")
		if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
			return true
		}
	}
	return false
}

// fencedBlock is Replay's block of r, a refusal by the address guard
// whose record names no address a policy can exempt.
func fencedBlock(r *decisionlog.Record) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleGuard,
		Reason: "the address guard refused every address " + hostPort(clipString(r.Host, maxHostString), r.Port) +
			" resolved to, and the log names none that a policy can exempt (the gateway's own, this host's or the sandbox pool's, which no policy reaches; or a log of an older sbx): " +
			clipString(r.Reason, maxShortString)}
}

// RuleUnknown is the rule of Replay's block of a record of a kind or
// event it does not know.
const RuleUnknown = "unknown"

func unknownDecision(what, name string) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: RuleUnknown,
		Reason: fmt.Sprintf("%s %q is not known to this sbx audit: upgrade sbx", what, clipString(name, maxShortString))}
}

// tunnelVerdict is the gateway's verdict on the tunnel to t that r logged
// (a CONNECT, or a transparent connection that is not plain HTTP):
// DecideTunnel when the gateway inspects it, else anyRequestVerdict.
func tunnelVerdict(p *netpolicy.Policy, t netpolicy.Target, r *decisionlog.Record) netpolicy.Decision {
	// The gateway decrypts a tunnel to a host the policy inspects and
	// decides each request in it (docs/inspection.md), which are records of
	// their own: every CONNECT, and a transparent connection that spoke
	// TLS, which its record shows by the reason of its allow. Another
	// transparent connection (SSH, say) is never inspected.
	inspectable := r.Kind == decisionlog.KindConnect || r.Action == string(netpolicy.Allow) && r.Reason == netpolicy.InspectedReason
	if inspectable && p.Inspects(t.Host, t.Port) {
		t.Method, t.Path = "CONNECT", ""
		return p.DecideTunnel(t)
	}
	return anyRequestVerdict(p, t, "")
}

// anyRequestVerdict is the verdict on t as an uninspected tunnel, which
// could carry any request: Verdict of t as a CONNECT, an intercept being a
// block, since an intercept answers HTTP requests and the gateway cannot
// read them inside a tunnel it does not inspect (docs/gateway.md). It is
// also the verdict on a request whose path the log cut: only a rule that
// would allow any path to its host allows it. why, when not empty, is
// added to the reason.
func anyRequestVerdict(p *netpolicy.Policy, t netpolicy.Target, why string) netpolicy.Decision {
	t.Method, t.Path = "CONNECT", ""
	d := p.Verdict(t)
	d = d.Spliced("rule " + d.Rule + " intercepts it, and an intercept answers HTTP requests, which the gateway cannot read inside a tunnel, so the gateway refuses the tunnel")
	if why != "" {
		d.Reason = why + ": " + d.Reason
	}
	return d
}

// loggedInvalid is the block the gateway logged for r, which it refused
// as invalid whatever the policy.
func loggedInvalid(r *decisionlog.Record) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid,
		Reason: "the gateway refused it whatever the policy (" + clipString(r.Reason, maxShortString) + "), so no policy can allow it"}
}

// closedByTLSCheck reports whether r is the close record of a tunnel the
// gateway closed after it opened: its first bytes were a TLS ClientHello
// for another host than the target, or one that could not be parsed
// (gateway/tunnel.go's relay logs action block, rule invalid).
func closedByTLSCheck(r *decisionlog.Record) bool {
	return r.Event == decisionlog.EventClose && r.Action == string(netpolicy.Block) && r.Rule == netpolicy.RuleInvalid &&
		(r.Kind == decisionlog.KindConnect || r.Kind == decisionlog.KindTransparent)
}

// droppedCount is how many records a dropped record says are missing: its
// count, and at least one when the count is 0, which says that records
// stopped and their number is not known (reports of refused packets that
// could no longer be read).
func droppedCount(r *decisionlog.Record) uint64 { return max(r.Count, 1) }

// maxLoggedPath is the longest path the gateway logs whole; a longer one
// is cut to this many bytes and "..." (gateway/forward.go).
const maxLoggedPath = 1024

// pathCut reports whether a logged path may have been cut short: the
// gateway never logs a longer one whole.
func pathCut(path string) bool { return len(path) > maxLoggedPath }

// port returns n as a port, 0 (which Decide calls invalid) when it is not
// one.
func port(n int) uint16 {
	if n < 1 || n > 65535 {
		return 0
	}
	return uint16(n)
}

// Unexpected is one target that the policy would not allow, with the
// attempts at it.
type Unexpected struct {
	Kind   string `json:"kind"`
	Proto  string `json:"proto,omitempty"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Attempts counts the attempts: one a record, but the packets of a
	// bypass record and the refusals a per-client cap's record counts.
	Attempts uint64 `json:"attempts"`
	// Logged is what the log says was done at the time.
	Logged string `json:"logged"`
	// Rule and Reason are the policy's verdict.
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	Seen

	// What Expect's last pass weighs against the logs' answers (see
	// Expect): the verdict was ask; it was a block by a rule or the
	// default (not invalid, the guard's or an unknown record's); and how
	// many attempts were logged allowed, and blocked.
	ask, policyBlock             bool
	loggedAllowed, loggedBlocked uint64
}

// Expectation is the outcome of replaying logs against a policy.
type Expectation struct {
	Policy string `json:"policy"`
	// Attempts is how many attempts were replayed.
	Attempts uint64 `json:"attempts"`
	// Unexpected are the targets the policy would not allow, sorted by
	// kind, host, port, method and path.
	Unexpected []*Unexpected `json:"unexpected"`
	// NotKept counts unexpected attempts at targets beyond the first
	// Limits.Targets, which are not listed one by one.
	NotKept uint64 `json:"not_kept,omitempty"`
	// Dropped is how many records the gateway left out of the logs: those
	// attempts cannot be replayed, so the expectation cannot hold.
	Dropped uint64 `json:"dropped"`
	// Truncated says of each log whose last line was cut short where,
	// and why that may be (see LogRead.Truncated): what that line
	// recorded cannot be replayed, so the expectation cannot hold.
	Truncated []string `json:"truncated,omitempty"`
	// Gaps says of each log whose seqs skip records no dropped record
	// accounts for how many, and where (see LogRead.Gaps): they cannot be
	// replayed, so the expectation cannot hold.
	Gaps []string `json:"gaps,omitempty"`
	// Denied counts the attempts the policy blocks that a person denied
	// when the gateway asked, and that were blocked when logged: the
	// policy reproduces the answer, so they are not unexpected (see
	// Expect).
	Denied uint64 `json:"denied,omitempty"`
}

// Holds reports whether every attempt was allowed and none is missing
// (no dropped records, no last line cut short, no gap in the seqs).
func (e *Expectation) Holds() bool {
	return len(e.Unexpected) == 0 && e.NotKept == 0 && e.Dropped == 0 && len(e.Truncated) == 0 && len(e.Gaps) == 0
}

type unexpectedKey struct {
	kind, proto, host string
	port              int
	method, path      string
}

// ErrNoRecords is wrapped by Scan's error (so Summarize's and Expect's)
// for a log without a record:
// it cannot show that anything holds, and is likely not a decision log.
var ErrNoRecords = errors.New("no decision records")

// isKnownEvent reports whether this package knows the event.
func isKnownEvent(ev string) bool {
	switch ev {
	case decisionlog.EventDecision, decisionlog.EventClose, decisionlog.EventPolicy, decisionlog.EventDropped, decisionlog.EventApproval:
		return true
	}
	return false
}

// Expect replays every attempt of sources against p (see Replay) and
// returns the targets p would not allow: a block verdict (an invalid
// target, and a record of a kind or event it does not know, among them).
// An intercept is expected (the gateway answers it, nothing leaves). A
// record of refusals by a per-client cap is replayed as the attempts its
// count says, against p like any other: the cap refused it, not the
// policy, so p allowing its target is what counts. name names the policy
// in the result. A log without a single record is an
// error that wraps ErrNoRecords.
//
// The answers in the logs' approval records are weighed, by a person
// (tty, cli, api, ui; not a timeout, nor the gateway closing) for a host
// and port:
//
//   - An ask verdict is expected only for a target a person allowed when
//     asked, all of whose attempts (with the same method and path) were
//     logged allowed: under p they would be asked, and the logs show the
//     answer that let them through. Any other ask (denied, timed out,
//     never asked) is unexpected: under p it would wait on a person. A
//     DNS query whose verdict is ask is expected: the gateway's DNS stub
//     answers it, so that the question is asked on the connection.
//   - A block verdict by a rule or the default, on a target a person
//     denied when asked, all of whose attempts were logged blocked, is
//     not unexpected but counted in Expectation.Denied: p reproduces the
//     answer (sbx audit --suggest writes such a block rule). So is a DNS
//     query of a name a person denied at some port and allowed at none.
//     A block because the target is invalid, or by the address guard,
//     stays unexpected.
//
// The answers are matched to the targets after the whole logs are read,
// so that an attempt logged before its target's question counts too; at
// most Limits.Targets targets' answers are kept.
func Expect(ctx context.Context, p *netpolicy.Policy, name string, sources []Source, lim Limits) (*Expectation, error) {
	lim = lim.withDefaults()
	e := &Expectation{Policy: name, Unexpected: []*Unexpected{}}
	found := map[unexpectedKey]*Unexpected{}
	answers := map[targetKey]*answerSeen{}
	hostAnswers := map[string]*answerSeen{}
	reads, err := Scan(ctx, sources, func(r *decisionlog.Record) error {
		if r.Event == decisionlog.EventDropped {
			e.Dropped = satAdd(e.Dropped, droppedCount(r))
			return nil
		}
		if r.Event == decisionlog.EventApproval && r.Answer != "" && byPerson(r.By) {
			c := clipRecord(r)
			k := answerKey(c.Host, c.Port)
			if a := answers[k].add(c.Answer, len(answers) < lim.Targets); a != nil {
				answers[k] = a
			}
			if a := hostAnswers[k.host].add(c.Answer, len(hostAnswers) < lim.Targets); a != nil {
				hostAnswers[k.host] = a
			}
			return nil
		}
		d, ok := Replay(p, r)
		if !ok {
			return nil
		}
		// A bypass record stands for its packets, a refusal by a
		// per-client cap for the refusals it folds (its count).
		n := refusals(r)
		if r.Kind == decisionlog.KindBypass {
			n = max(r.Count, 1)
		}
		e.Attempts = satAdd(e.Attempts, n)
		ask := d.Action == netpolicy.Ask && r.Kind != decisionlog.KindDNS
		if d.Action != netpolicy.Block && !ask {
			return nil
		}
		// What is kept is cut to bounds (see clipRecord), so that a log
		// of huge strings is replayed in bounded memory.
		c := clipRecord(r)
		k := unexpectedKey{kind: c.Kind, proto: c.Proto, host: c.Host, port: c.Port}
		if d.Rule == RuleUnknown && !isKnownEvent(r.Event) {
			k.kind = "event " + strconv.Quote(c.Event)
		}
		if !isTunnel(r.Method) {
			k.method, k.path = c.Method, c.Path
		}
		u := found[k]
		if u == nil {
			if len(found) >= lim.Targets {
				e.NotKept = satAdd(e.NotKept, n)
				return nil
			}
			u = &Unexpected{Kind: k.kind, Proto: k.proto, Host: k.host, Port: k.port, Method: k.method, Path: k.path,
				Rule: clipString(d.Rule, maxShortString), Reason: clipString(d.Reason, maxLoggedPath),
				ask: ask, policyBlock: !ask && d.Rule != netpolicy.RuleInvalid && d.Rule != netpolicy.RuleGuard && d.Rule != RuleUnknown}
			found[k] = u
		}
		u.Attempts = satAdd(u.Attempts, n)
		switch r.Action {
		case string(netpolicy.Allow):
			u.loggedAllowed = satAdd(u.loggedAllowed, n)
		case string(netpolicy.Block):
			u.loggedBlocked = satAdd(u.loggedBlocked, n)
		}
		u.Logged = loggedAs(&c)
		u.Seen.add(r.Time)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range reads {
		if l.TruncatedLine != 0 {
			e.Truncated = append(e.Truncated, l.Truncated())
		}
		if l.Missing != 0 {
			e.Gaps = append(e.Gaps, l.Gaps())
		}
	}
	for _, u := range found {
		k := answerKey(u.Host, u.Port)
		a, h := answers[k], hostAnswers[k.host]
		switch {
		case u.ask && a.allowed() && u.loggedAllowed == u.Attempts:
			continue // asked, and a person allowed it
		case u.policyBlock && u.Kind == decisionlog.KindDNS && h.denied() && !h.allowed(),
			u.policyBlock && u.Kind != decisionlog.KindDNS && a.denied() && u.loggedBlocked == u.Attempts:
			e.Denied = satAdd(e.Denied, u.Attempts)
			continue // blocked, as a person denied it
		case u.ask:
			u.Reason = clipString(u.Reason+"; the policy asks, and no answer in the logs allowed it", maxLoggedPath)
		}
		e.Unexpected = append(e.Unexpected, u)
	}
	slices.SortFunc(e.Unexpected, func(a, b *Unexpected) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port),
			strings.Compare(a.Proto, b.Proto), strings.Compare(a.Method, b.Method), strings.Compare(a.Path, b.Path))
	})
	return e, nil
}

// loggedAs says what the gateway did with r: its action and rule.
func loggedAs(r *decisionlog.Record) string {
	switch r.Cap {
	case "":
	case decisionlog.CapTunnels:
		return r.Action + " by the per-client tunnel cap (" + r.Cap + ")"
	case decisionlog.CapConns:
		return r.Action + " by the per-client connection cap (" + r.Cap + ")"
	default:
		return r.Action + " by a per-client cap (" + r.Cap + ")"
	}
	s := r.Action + " by " + r.Rule
	if r.Action == "block" && !r.Enforced && r.Kind != decisionlog.KindDNS && r.Kind != decisionlog.KindBypass {
		s += " (audit mode let it through)"
	}
	return s
}

// isTunnel reports whether a record's method is a tunnel's: none (a
// transparent connection that was not plain HTTP) or CONNECT, in any case,
// as netpolicy reads it.
func isTunnel(method string) bool {
	return method == "" || netpolicy.Target{Method: method}.IsConnect()
}

// answerSeen is what the logs' answers by a person said of a target (or
// a host): allowed at least once, denied at least once.
type answerSeen struct{ allow, deny bool }

// add notes answer in a, which is made when nil and room is set; it
// returns a.
func (a *answerSeen) add(answer string, room bool) *answerSeen {
	if a == nil {
		if !room {
			return nil
		}
		a = &answerSeen{}
	}
	switch answer {
	case "allow":
		a.allow = true
	case "deny":
		a.deny = true
	}
	return a
}

func (a *answerSeen) allowed() bool { return a != nil && a.allow }
func (a *answerSeen) denied() bool  { return a != nil && a.deny }
