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
}

// prefixBucket holds the IP/CIDR rules of one address family and length.
type prefixBucket struct {
	bits  int
	is4   bool
	rules map[netip.Prefix][]int32
}

func buildIndex(rules []compiledRule) index {
	ix := index{exact: map[string][]int32{}, wildcard: map[string][]int32{}, anyPort: map[uint16][]int32{}}
	for i := range rules {
		pos := int32(i)
		pat := rules[i].pat
		switch pat.kind {
		case patExact:
			ix.exact[pat.name] = append(ix.exact[pat.name], pos)
		case patWildcard:
			ix.wildcard[pat.name] = append(ix.wildcard[pat.name], pos)
		case patAny:
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
// RuleInvalid and never matches a rule, whatever the default. Decide does no
// DNS and no address guard; see GuardAddr.
//
// Decide is safe for concurrent use and does not allocate for a valid
// target whose host is already normalized.
func (p *Policy) Decide(t Target) Decision {
	host, err := normalizeTarget(t.Host)
	if err != nil {
		return invalidDecision(fmt.Sprintf("invalid target %q: %s", t.Host, err))
	}
	if t.Port == 0 {
		return invalidDecision("invalid target: port 0")
	}
	path := t.Path
	if p.hasPathRules && !t.IsConnect() {
		path = CanonicalPath(path)
	}
	best := len(p.rules)
	if isIPHost(host) {
		ip, err := netip.ParseAddr(host)
		if err != nil { // cannot happen for a normalized host
			return invalidDecision(fmt.Sprintf("invalid target %q: %s", t.Host, err))
		}
		for _, b := range p.index.prefixes {
			if b.is4 != ip.Is4() {
				continue
			}
			pfx, _ := ip.Prefix(b.bits)
			best = p.first(b.rules[pfx], best, t, path)
		}
	} else {
		best = p.first(p.index.exact[host], best, t, path)
		for i := 0; i < len(host); i++ {
			if host[i] == '.' {
				best = p.first(p.index.wildcard[host[i+1:]], best, t, path)
			}
		}
	}
	best = p.first(p.index.anyPort[t.Port], best, t, path)
	best = p.first(p.index.anyAll, best, t, path)
	if best < len(p.rules) {
		return p.rules[best].decision
	}
	return p.defaultDecision
}

// first returns the position of the first rule in list that matches the
// target's port, method and path, if lower than best; else best.
func (p *Policy) first(list []int32, best int, t Target, path string) int {
	for _, pos := range list {
		if int(pos) >= best {
			return best
		}
		if p.rules[pos].matchesRest(t, path) {
			return int(pos)
		}
	}
	return best
}

// matchesRest reports whether a rule whose host pattern matched also
// matches the target's port, method and path.
func (r *compiledRule) matchesRest(t Target, path string) bool {
	if !r.anyPort && !slices.Contains(r.ports, t.Port) {
		return false
	}
	if !r.httpOnly {
		return true
	}
	if t.IsConnect() {
		return false
	}
	if len(r.methods) > 0 && !slices.ContainsFunc(r.methods, func(m string) bool { return strings.EqualFold(m, t.Method) }) {
		return false
	}
	return r.path == "" || strings.HasPrefix(path, r.path)
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
