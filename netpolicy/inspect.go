package netpolicy

import (
	"fmt"
	"net/netip"
)

// InspectedReason is the reason of DecideTunnel's Allow: the tunnel goes
// through to the gateway, which decides every request inside it.
const InspectedReason = "inspected: each request is decided"

// Inspects reports whether the gateway is to terminate TLS for a CONNECT to
// host on port and decide each HTTPS request inside it (docs/inspection.md):
// whether a rule whose host pattern matches host and whose ports hold port
// has inspect: true, methods, a path or action intercept. Rule order does
// not matter, nor whether the rule would decide anything: an inspect-only
// rule after a rule that decides the host still marks it, and so does a
// rule that an earlier one shadows. Whether the tunnel may open at all is
// DecideTunnel's answer, not this one's.
//
// host is normalized as Decide normalizes it; a host that does not
// normalize, and port 0, are never inspected. Like Decide it ignores the
// mode and does no DNS. It is safe for concurrent use and does not
// allocate for a normalized host; under a policy with no such rule it
// answers false without looking at host.
func (p *Policy) Inspects(host string, port uint16) bool {
	if !p.hasInspect || port == 0 {
		return false
	}
	h, err := normalizeTarget(host)
	if err != nil {
		return false
	}
	return p.inspect.eachList(h, port, func(list []int32) bool {
		for _, pos := range list {
			if p.rules[pos].matchesPort(port) {
				return true
			}
		}
		return false
	})
}

// DecideTunnel is the verdict on a CONNECT that the gateway inspects
// (Inspects reports true for its host and port). The gateway terminates
// TLS and decides each request inside with Decide, so the tunnel itself is
// refused only when no request through it could be let through.
//
// Its Action is Block when every request to t's host on t.Port is blocked
// whatever its method and path: the first rule, in policy order, that
// matches the host and port and is not a block rule with methods or path
// is a block rule (the decision is that rule's, as Decide gives it), or
// there is no such rule and the default is block (rule RuleDefault).
// Otherwise its Action is Allow, its reason InspectedReason, and its rule
// the first one that could let a request through (an allow or intercept
// rule, with or without methods and path), or RuleDefault under the
// default allow. A tunnel to intercepted requests is allowed: the gateway
// answers them inside it.
//
// A block rule with methods or path never blocks the tunnel, since the
// requests it does not name pass it; so DecideTunnel errs only towards
// Allow, as DecideHost does: when such rules leave nothing over for the
// allow rules after them, the tunnel opens and every request in it is
// blocked. It never blocks a tunnel through which Decide lets some request
// through, and it allows every CONNECT that Decide allows or intercepts.
//
// t.Method and t.Path are ignored. A host or port that is invalid is
// blocked with rule RuleInvalid, as Decide blocks it. Inspect-only rules
// are skipped. Like Decide it ignores the mode and does no DNS and no
// address guard: the gateway guards the addresses it dials for the
// requests inside. It is safe for concurrent use and does not allocate for
// a normalized host.
//
// It is no verdict on a tunnel the gateway does not inspect, whose
// requests are never decided: Decide is.
func (p *Policy) DecideTunnel(t Target) Decision {
	host, err := normalizeTarget(t.Host)
	if err != nil {
		return invalidDecision(fmt.Sprintf("invalid target %q: %s", truncate(t.Host, 80), err))
	}
	if t.Port == 0 {
		return invalidDecision("invalid target: port 0")
	}
	best := len(p.rules)
	p.index.eachList(host, t.Port, func(list []int32) bool {
		for _, pos := range list {
			if int(pos) >= best {
				break
			}
			if r := &p.rules[pos]; r.matchesPort(t.Port) && !(r.httpOnly && r.decision.Action == Block) {
				best = int(pos)
				break
			}
		}
		return false
	})
	if best == len(p.rules) {
		if p.spec.Default == Block {
			return p.tunnelDefault
		}
		return Decision{Action: Allow, Rule: RuleDefault, Reason: InspectedReason}
	}
	r := &p.rules[best]
	if r.decision.Action == Block {
		return r.decision
	}
	return Decision{Action: Allow, Rule: r.decision.Rule, Reason: InspectedReason}
}

// eachList calls fn with each list of ix that can hold a rule whose host
// pattern matches host, which is normalized, and whose ports hold port:
// the lists of the host's name and domains, or of its address's networks,
// and those of the rules "*" for port and for every port. Only the last
// two are sure to hold port. It stops at the first call that returns true
// and reports whether there was one.
func (ix *index) eachList(host string, port uint16, fn func(list []int32) bool) bool {
	if isIPHost(host) {
		ip, err := netip.ParseAddr(host)
		if err != nil { // cannot happen for a normalized host
			return false
		}
		for _, b := range ix.prefixes {
			if b.is4 != ip.Is4() {
				continue
			}
			pfx, _ := ip.Prefix(b.bits)
			if l := b.rules[pfx]; len(l) > 0 && fn(l) {
				return true
			}
		}
	} else {
		if l := ix.exact[host]; len(l) > 0 && fn(l) {
			return true
		}
		for i := 0; i < len(host); i++ {
			if host[i] == '.' {
				if l := ix.wildcard[host[i+1:]]; len(l) > 0 && fn(l) {
					return true
				}
			}
		}
	}
	if l := ix.anyPort[port]; len(l) > 0 && fn(l) {
		return true
	}
	return len(ix.anyAll) > 0 && fn(ix.anyAll)
}

// Spliced returns d as the verdict on a tunnel the gateway does not
// inspect, which relays bytes it never reads: d itself, except that an
// intercept is a block by the same rule, since an intercept answers HTTP
// requests and a spliced tunnel has none the gateway can answer (docs/gateway.md)
// . why is the block's reason. The gateway's CONNECT and transparent
// paths and sbx audit's replay all decide spliced tunnels so.
func (d Decision) Spliced(why string) Decision {
	if d.Action != Intercept {
		return d
	}
	return Decision{Action: Block, Rule: d.Rule, Reason: why}
}
