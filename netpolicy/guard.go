package netpolicy

import (
	"fmt"
	"net/netip"
)

// specialNet is an address range the address guard refuses, with the name
// the decision log gives it.
type specialNet struct {
	prefix netip.Prefix
	class  string
}

// specialNets are the ranges of DESIGN.md §4.2, most specific first where
// they overlap so that the log names the narrowest class.
var specialNets = func() []specialNet {
	table := []struct{ cidr, class string }{
		{"169.254.169.254/32", "the cloud metadata address"},
		{"255.255.255.255/32", "broadcast"},
		{"0.0.0.0/8", "\"this network\" (0.0.0.0/8)"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"100.64.0.0/10", "shared address space (CGNAT, 100.64.0.0/10)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"},
		{"192.0.2.0/24", "documentation (TEST-NET-1)"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"198.18.0.0/15", "benchmarking (198.18.0.0/15)"},
		{"198.51.100.0/24", "documentation (TEST-NET-2)"},
		{"203.0.113.0/24", "documentation (TEST-NET-3)"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved (240.0.0.0/4)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible IPv6 (deprecated)"},
		{"100::/64", "discard-only (100::/64)"},
		{"::ffff:0:0/96", "IPv4-mapped IPv6"},
		{"64:ff9b::/96", "NAT64 (64:ff9b::/96)"},
		{"64:ff9b:1::/48", "local NAT64 (64:ff9b:1::/48)"},
		{"2001::/32", "Teredo (2001::/32)"},
		{"2001:db8::/32", "documentation (2001:db8::/32)"},
		{"2002::/16", "6to4 (2002::/16)"},
		{"3fff::/20", "documentation (3fff::/20)"},
		{"fc00::/7", "unique local (ULA)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local (deprecated)"},
		{"ff00::/8", "multicast"},
	}
	nets := make([]specialNet, len(table))
	for i, e := range table {
		nets[i] = specialNet{netip.MustParsePrefix(e.cidr), e.class}
	}
	return nets
}()

// AddrClass names the special-purpose range of DESIGN.md §4.2 that ip falls
// in, such as "loopback" or "private (RFC 1918)", or returns "" for an
// ordinary public unicast address. An invalid ip is "invalid"; an IPv6
// address with a zone is "zoned".
func AddrClass(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	if ip.Zone() != "" {
		return "zoned"
	}
	if ip.IsUnspecified() {
		return "unspecified"
	}
	for _, n := range specialNets {
		if n.prefix.Contains(ip) {
			return n.class
		}
	}
	return ""
}

// GuardAddr applies the address guard of DESIGN.md §4.2 to ip, an address
// that t's host resolved to and that the gateway is about to dial. It
// returns a block decision with rule RuleGuard and true when ip is in a
// special range that neither allow_private nor an IP/CIDR allow rule
// matching t's port, method and path exempts; otherwise the zero Decision
// and false.
//
// The gateway must refuse its own listening addresses as well; that is its
// own check, since a policy cannot know them.
func (p *Policy) GuardAddr(ip netip.Addr, t Target) (Decision, bool) {
	class := AddrClass(ip)
	if class == "" {
		return Decision{}, false
	}
	if ip.IsValid() && ip.Zone() == "" {
		path := t.Path
		if p.hasPathRules && !t.IsConnect() {
			path = CanonicalPath(path)
		}
		for _, e := range p.exempt {
			if e.prefix.Contains(ip.Unmap()) && (e.rule == nil || e.rule.matchesRest(t, path)) {
				return Decision{}, false
			}
		}
	}
	return Decision{
		Action: Block,
		Rule:   RuleGuard,
		Reason: fmt.Sprintf("address guard: %s is %s", ip, class),
	}, true
}
