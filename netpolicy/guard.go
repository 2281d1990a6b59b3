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

// specialNets are the ranges of docs/gateway.md, most specific first where
// they overlap so that the log names the narrowest class.
var specialNets = func() []specialNet {
	table := []struct{ cidr, class string }{
		{"0.0.0.0/32", "unspecified"},
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
		{"192.88.99.0/24", "6to4 relay anycast (192.88.99.0/24)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible IPv6 (deprecated)"},
		{"::ffff:0:0:0/96", "IPv4-translated IPv6 (SIIT)"},
		{"100::/64", "discard-only (100::/64)"},
		{"64:ff9b::/96", "NAT64 (64:ff9b::/96)"},
		{"64:ff9b:1::/48", "local NAT64 (64:ff9b:1::/48)"},
		{"2001::/32", "Teredo (2001::/32)"},
		{"2001:2::/48", "benchmarking (2001:2::/48)"},
		{"2001:10::/28", "ORCHID (2001:10::/28)"},
		{"2001:20::/28", "ORCHIDv2 (2001:20::/28)"},
		{"2001::/23", "IETF protocol assignments (2001::/23)"},
		{"2001:db8::/32", "documentation (2001:db8::/32)"},
		{"2002::/16", "6to4 (2002::/16)"},
		{"3fff::/20", "documentation (3fff::/20)"},
		{"5f00::/16", "SRv6 SIDs (5f00::/16)"},
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

// AddrClass names the special-purpose range of docs/gateway.md that ip falls
// in, such as "loopback" or "private (RFC 1918)", or returns "" for an
// ordinary public unicast address. An IPv4-mapped IPv6 address is judged as
// the IPv4 address it stands for, since that is where a dial to it goes. An
// invalid ip is "invalid"; an IPv6 address with a zone is "zoned".
func AddrClass(ip netip.Addr) string {
	if n := specialNetOf(ip); n != nil {
		return n.class
	}
	return ""
}

// invalidNet and zonedNet classify addresses no range holds; their prefix
// is the whole address space, so no allow rule is ever inside them.
var (
	invalidNet = specialNet{netip.Prefix{}, "invalid"}
	zonedNet   = specialNet{netip.MustParsePrefix("::/0"), "zoned"}
)

// specialNetOf returns the narrowest special range holding ip, or nil.
func specialNetOf(ip netip.Addr) *specialNet {
	if !ip.IsValid() {
		return &invalidNet
	}
	if ip.Zone() != "" {
		return &zonedNet
	}
	ip = ip.Unmap()
	for i := range specialNets {
		if specialNets[i].prefix.Contains(ip) {
			return &specialNets[i]
		}
	}
	return nil
}

// GuardAddr applies the address guard of docs/gateway.md to ip, an address
// that t's host resolved to and that the gateway is about to dial. An
// address in a special range (see AddrClass) is refused, with a block
// decision by rule RuleGuard and true, unless
//
//   - an allow_private network holds it, or
//   - the rule that would decide a request like t made to ip itself is an
//     IP or CIDR allow rule that lies inside the special range: allowing
//     10.0.0.0/8 or 127.0.0.1 exempts those addresses, but an earlier
//     block rule for the address wins, and allowing 0.0.0.0/0 (or
//     169.254.0.0/16 for the metadata address 169.254.169.254) exempts
//     nothing, because such a rule was not written for that range.
//
// A host-name rule never exempts anything, and nothing exempts an invalid
// or zoned address. Otherwise GuardAddr returns the
// zero Decision and false. The gateway must refuse its own listening
// addresses as well; a policy cannot know them.
func (p *Policy) GuardAddr(ip netip.Addr, t Target) (Decision, bool) {
	special := specialNetOf(ip)
	if special == nil {
		return Decision{}, false
	}
	if special != &invalidNet && special != &zonedNet {
		ip = ip.Unmap()
		for _, pfx := range p.spec.AllowPrivate {
			if pfx.Contains(ip) {
				return Decision{}, false
			}
		}
		if pos := p.match(ip.String(), t); pos >= 0 {
			r := &p.rules[pos]
			if r.decision.Action == Allow && r.pat.kind == patPrefix && r.pat.prefix.Bits() >= special.prefix.Bits() {
				return Decision{}, false
			}
		}
	}
	return Decision{
		Action: Block,
		Rule:   RuleGuard,
		Reason: fmt.Sprintf("address guard: %s is %s", ip, special.class),
	}, true
}
