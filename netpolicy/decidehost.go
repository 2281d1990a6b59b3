package netpolicy

import (
	"fmt"
	"net/netip"
)

// DecideHost returns the policy's verdict on a host as a whole, over every
// port, method and path: what a resolver needs that must say whether a
// name exists before it knows what will be asked of it (the gateway's DNS
// stub, docs/capture.md).
//
// Its Action is Allow when Decide could let some target on host through
// (allow, intercept or ask about it): the decision then names the first rule, in
// policy order, that could, or is the default. Its Action is Block when
// Decide blocks host on every port: the decision names the rule that
// blocks every port (a rule without methods or path, ports "*"), or is the
// default (also when the port lists of several rules block every port
// between them); an invalid host is blocked with rule RuleInvalid, as
// Decide blocks it.
//
// It errs only towards Allow: a host whose only allowing rules have
// methods or a path, and are shadowed entirely by earlier block rules that
// have methods or a path too, is reported as allowed, since which requests
// such rules leave over is not worked out. It never reports Block for a
// host that Decide lets through on some target.
//
// Like Decide it ignores the mode (MayAllowHost does not), does no DNS and
// no address guard, and is safe for concurrent use. It does not allocate
// for a normalized host of few labels under a policy of few "*" rules.
func (p *Policy) DecideHost(host string) Decision {
	h, err := normalizeTarget(host)
	if err != nil {
		return invalidDecision(fmt.Sprintf("invalid target %q: %s", truncate(host, 80), err))
	}
	// The rules whose host pattern matches h, as lists in policy order;
	// walked merged, lowest position first.
	var buf [8][]int32
	lists := buf[:0]
	if isIPHost(h) {
		ip, err := netip.ParseAddr(h)
		if err != nil { // cannot happen for a normalized host
			return invalidDecision(fmt.Sprintf("invalid target %q", truncate(host, 80)))
		}
		for _, b := range p.index.prefixes {
			if b.is4 == ip.Is4() {
				pfx, _ := ip.Prefix(b.bits)
				lists = appendList(lists, b.rules[pfx])
			}
		}
	} else {
		lists = appendList(lists, p.index.exact[h])
		for i := 0; i < len(h); i++ {
			if h[i] == '.' {
				lists = appendList(lists, p.index.wildcard[h[i+1:]])
			}
		}
	}
	lists = appendList(lists, p.index.anyHost)

	// Walk the matching rules in order. A block rule without methods or
	// path closes its ports: no later rule decides them. An allow or
	// intercept rule with a port still open lets the host through there.
	// A block rule with methods or path closes nothing, since requests it
	// does not name pass it. The rules "*" that close a list of ports are
	// not walked: anyPortBlock says from which position each port is
	// closed for every host.
	var closed portSet
	isOpen := func(port uint16, pos int32) bool {
		if first, ok := p.index.anyPortBlock[port]; ok && first < pos {
			return false
		}
		return !closed.has(port)
	}
	for {
		pos := popLowest(lists)
		if pos < 0 {
			break
		}
		r := &p.rules[pos]
		switch {
		case r.decision.Action != Block:
			if r.anyPort {
				return r.hostDecision // no block rule so far closed every port
			}
			for _, port := range r.ports {
				if isOpen(port, pos) {
					return r.hostDecision
				}
			}
		case r.httpOnly:
		case r.anyPort:
			return r.decision
		default:
			for _, port := range r.ports {
				closed.add(port)
			}
		}
	}
	if p.spec.Default != Block && closed.n+len(p.index.anyPortBlock) >= 65535 {
		// Lists of ports might close every port, however unlikely.
		for port := 1; port <= 65535; port++ {
			if isOpen(uint16(port), int32(len(p.rules))) {
				return p.hostDefault
			}
		}
		return Decision{Action: Block, Rule: RuleDefault, Reason: "rules block it on every port between them, so the default " + string(p.spec.Default) + " decides none"}
	}
	return p.hostDefault
}

// MayAllowHost reports whether a connection to host could go through on
// some port under this policy: DecideHost allows it, or the policy is in
// audit mode, which lets every block through but those of invalid targets.
func (p *Policy) MayAllowHost(host string) bool {
	d := p.DecideHost(host)
	return d.Action != Block || p.spec.Mode == Audit && d.Rule != RuleInvalid
}

// appendList appends l to lists when it is not empty.
func appendList(lists [][]int32, l []int32) [][]int32 {
	if len(l) == 0 {
		return lists
	}
	return append(lists, l)
}

// popLowest removes and returns the lowest first entry of the sorted
// lists, or -1 when all are empty.
func popLowest(lists [][]int32) int32 {
	best := -1
	for i, l := range lists {
		if len(l) > 0 && (best < 0 || l[0] < lists[best][0]) {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	pos := lists[best][0]
	lists[best] = lists[best][1:]
	return pos
}

// portSet is a set of ports: a few inline, a bitmap beyond.
type portSet struct {
	small [16]uint16
	big   *[1024]uint64
	n     int // ports held
}

func (s *portSet) has(port uint16) bool {
	if s.big != nil {
		return s.big[port/64]&(1<<(port%64)) != 0
	}
	for _, q := range s.small[:s.n] {
		if q == port {
			return true
		}
	}
	return false
}

func (s *portSet) add(port uint16) {
	if s.has(port) {
		return
	}
	if s.big == nil && s.n == len(s.small) {
		s.big = new([1024]uint64)
		for _, q := range s.small {
			s.big[q/64] |= 1 << (q % 64)
		}
	}
	if s.big != nil {
		s.big[port/64] |= 1 << (port % 64)
	} else {
		s.small[s.n] = port
	}
	s.n++
}
