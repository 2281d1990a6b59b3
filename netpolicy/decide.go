package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// index finds the rules that can match a host without scanning them all.
// Every list holds rule positions in ascending order, so the first entry
// that matches the rest of a target is the first matching rule of that
// list; Decide takes the lowest position over the lists.
type index struct {
	exact    map[string][]int32 // host name -> rules naming it
	wildcard map[string][]int32 // domain -> rules "*.domain"
	anyPort  map[uint16][]int32 // rules "*" by each port they list
	anyAll   []int32            // rules "*" for every port
	prefixes []prefixBucket     // IP and CIDR rules, by prefix length

	// For DecideHost: the rules "*" but those that block a list of ports
	// whatever the method and path, and for each port the first of those.
	anyHost      []int32
	anyPortBlock map[uint16]int32
}

// prefixBucket holds the IP/CIDR rules of one address family and length.
type prefixBucket struct {
	bits  int
	is4   bool
	rules map[netip.Prefix][]int32
}

// buildIndex indexes the rules for which keep is true, by their positions
// in rules.
func buildIndex(rules []compiledRule, keep func(*compiledRule) bool) index {
	ix := index{exact: map[string][]int32{}, wildcard: map[string][]int32{}, anyPort: map[uint16][]int32{}, anyPortBlock: map[uint16]int32{}}
	for i := range rules {
		if !keep(&rules[i]) {
			continue
		}
		pos := int32(i)
		pat := rules[i].pat
		switch pat.kind {
		case patExact:
			ix.exact[pat.name] = append(ix.exact[pat.name], pos)
		case patWildcard:
			ix.wildcard[pat.name] = append(ix.wildcard[pat.name], pos)
		case patAny:
			if r := &rules[i]; r.decision.Action == Block && !r.httpOnly && !r.anyPort {
				for _, port := range r.ports {
					if _, ok := ix.anyPortBlock[port]; !ok {
						ix.anyPortBlock[port] = pos
					}
				}
			} else {
				ix.anyHost = append(ix.anyHost, pos)
			}
			if rules[i].anyPort {
				ix.anyAll = append(ix.anyAll, pos)
			}
			for _, port := range rules[i].ports {
				ix.anyPort[port] = append(ix.anyPort[port], pos)
			}
		case patPrefix:
			is4, bits := pat.prefix.Addr().Is4(), pat.prefix.Bits()
			j := slices.IndexFunc(ix.prefixes, func(b prefixBucket) bool { return b.is4 == is4 && b.bits == bits })
			if j < 0 {
				ix.prefixes = append(ix.prefixes, prefixBucket{bits: bits, is4: is4, rules: map[netip.Prefix][]int32{}})
				j = len(ix.prefixes) - 1
			}
			ix.prefixes[j].rules[pat.prefix] = append(ix.prefixes[j].rules[pat.prefix], pos)
		}
	}
	return ix
}

// Decide returns the decision of the first rule that matches t, else the
// default. A target whose host or port is invalid is blocked with rule
// RuleInvalid and never matches a rule, whatever the default or the mode.
// Inspect-only rules are skipped: they decide nothing.
//
// A rule with methods or path never allows a CONNECT. A block or intercept
// rule with methods or path does stop a CONNECT to its ports, since the
// tunnel could carry the very request the rule names; the decision's reason
// says so. That is the verdict on a tunnel the gateway does not inspect; a
// CONNECT that it inspects (Inspects) is decided by DecideTunnel, and each
// request inside it by Decide, with the request's method and path.
//
// Decide does no DNS and no address guard; see GuardAddr. It is safe for
// concurrent use, and does not allocate for a target whose host is already
// normalized and whose path is canonical.
func (p *Policy) Decide(t Target) Decision {
	host, err := normalizeTarget(t.Host)
	if err != nil {
		return invalidDecision(fmt.Sprintf("invalid target %q: %s", truncate(t.Host, 80), err))
	}
	if t.Port == 0 {
		return invalidDecision("invalid target: port 0")
	}
	if !ValidMethod(t.Method) {
		return invalidDecision(fmt.Sprintf("invalid target: method %q is not an HTTP method of at most %d bytes", truncate(t.Method, 40), MaxMethodLen))
	}
	pos := p.match(host, t)
	if pos < 0 {
		return p.defaultDecision
	}
	r := &p.rules[pos]
	if r.httpOnly && t.IsConnect() {
		return r.tunnelDecision
	}
	return r.decision
}

// Verdict is the gateway's verdict on t before it resolves a name, the
// one verdict that the gateway, sbx policy check and sbx audit --expect
// share: Decide's, replaced by the address guard's refusal (GuardAddr)
// when Decide allows an IP literal that the guard refuses. A name's
// addresses are guarded by the gateway once it has resolved them, which
// a verdict without DNS cannot do; an intercept dials nothing and is not
// guarded. Like Decide it ignores the mode.
//
// An Ask that the guard would refuse is the guard's block too: an
// address the guard refuses is never asked about.
func (p *Policy) Verdict(t Target) Decision {
	d := p.Decide(t)
	if d.Action != Allow && d.Action != Ask {
		return d
	}
	host, err := normalizeTarget(t.Host)
	if err != nil {
		return d // cannot happen: Decide blocks what does not normalize
	}
	if !isIPHost(host) {
		return d // a name: netip.ParseAddr would only allocate its error
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return d
	}
	if g, refused := p.GuardAddr(ip, t); refused {
		return g
	}
	return d
}

// match returns the position of the first rule that matches t, whose host
// is normalized, or -1.
func (p *Policy) match(host string, t Target) int {
	rp := p.requestPaths(t)
	best := len(p.rules)
	if isIPHost(host) {
		ip, err := netip.ParseAddr(host)
		if err != nil { // cannot happen for a normalized host
			return -1
		}
		for _, b := range p.index.prefixes {
			if b.is4 != ip.Is4() {
				continue
			}
			pfx, _ := ip.Prefix(b.bits)
			best = p.first(b.rules[pfx], best, t, rp)
		}
	} else {
		best = p.first(p.index.exact[host], best, t, rp)
		for i := 0; i < len(host); i++ {
			if host[i] == '.' {
				best = p.first(p.index.wildcard[host[i+1:]], best, t, rp)
			}
		}
	}
	best = p.first(p.index.anyPort[t.Port], best, t, rp)
	best = p.first(p.index.anyAll, best, t, rp)
	if best == len(p.rules) {
		return -1
	}
	return best
}

// requestPath is a request path in the two forms path rules compare: as
// CanonicalPath gives it, and with path parameters (";...") cut from every
// segment, as Tomcat, Jetty and Spring read /v1/..;/admin (as /admin).
type requestPath struct {
	plain, stripped string
}

// requestPaths returns t's path forms; they are only computed when a rule
// has a path and t is no tunnel.
func (p *Policy) requestPaths(t Target) requestPath {
	if !p.hasPathRules || t.IsConnect() {
		return requestPath{}
	}
	plain := CanonicalPath(t.Path)
	rp := requestPath{plain, plain}
	if strings.IndexByte(plain, ';') >= 0 {
		rp.stripped = canonicalPath(t.Path, true)
	}
	return rp
}

// first returns the position of the first rule in list that matches the
// target's port, method and path, if lower than best; else best.
func (p *Policy) first(list []int32, best int, t Target, rp requestPath) int {
	for _, pos := range list {
		if int(pos) >= best {
			return best
		}
		if p.rules[pos].matchesRest(t, rp) {
			return int(pos)
		}
	}
	return best
}

// matchesRest reports whether a rule whose host pattern matched also
// matches the target's port, method and path. Where the two forms of a
// path differ, an allow rule must match both and a block or intercept rule
// either, so that ambiguity never lets more through.
func (r *compiledRule) matchesRest(t Target, rp requestPath) bool {
	if !r.matchesPort(t.Port) {
		return false
	}
	if !r.httpOnly {
		return true
	}
	if t.IsConnect() {
		return r.decision.Action != Allow
	}
	if len(r.methods) > 0 && !slices.ContainsFunc(r.methods, func(m string) bool { return asciiEqualFold(m, t.Method) }) {
		return false
	}
	if r.path == "" {
		return true
	}
	if r.decision.Action == Allow {
		return strings.HasPrefix(rp.plain, r.path) && strings.HasPrefix(rp.stripped, r.path)
	}
	return strings.HasPrefix(rp.plain, r.path) || strings.HasPrefix(rp.stripped, r.path)
}

// matchesPort reports whether the rule's ports hold port.
func (r *compiledRule) matchesPort(port uint16) bool {
	return r.anyPort || slices.Contains(r.ports, port)
}

// asciiEqualFold is strings.EqualFold for ASCII only, so that no Unicode
// folding ("ſ" for "s") makes a method match.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'a' <= ca && ca <= 'z' {
			ca -= 'a' - 'A'
		}
		if 'a' <= cb && cb <= 'z' {
			cb -= 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

// truncate cuts s to at most n bytes for a log line, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func invalidDecision(reason string) Decision {
	return Decision{Action: Block, Rule: RuleInvalid, Reason: reason}
}

// normalizeTarget is NormalizeHost without the error wrapping, for Decide.
func normalizeTarget(host string) (string, error) {
	if h, ok := fastNormalize(host); ok {
		return h, nil
	}
	return normalizeHost(host)
}

// isIPHost reports whether a normalized host is an IP literal: after
// normalization only IPv6 has ':' and only IPv4 ends in a number.
func isIPHost(host string) bool {
	return strings.IndexByte(host, ':') >= 0 || endsInNumber(host)
}
