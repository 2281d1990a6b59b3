package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// patternKind tells how a rule's host pattern matches.
type patternKind uint8

const (
	patExact    patternKind = iota // one host name
	patWildcard                    // "*.domain": names below domain, not domain
	patAny                         // "*": every host, names and IPs
	patPrefix                      // an IP (as a /32 or /128) or a CIDR
)

// pattern is a parsed, normalized host pattern.
type pattern struct {
	kind patternKind
	// name is the host for patExact and the domain after "*." for
	// patWildcard.
	name string
	// prefix is the network for patPrefix.
	prefix netip.Prefix
}

// String returns the pattern in its normalized written form.
func (p pattern) String() string {
	switch p.kind {
	case patWildcard:
		return "*." + p.name
	case patAny:
		return "*"
	case patPrefix:
		if p.prefix.IsSingleIP() {
			return p.prefix.Addr().String()
		}
		return p.prefix.String()
	}
	return p.name
}

// parsePattern parses a rule's host pattern. Errors are sentences fit to
// follow "host %q: ".
func parsePattern(s string) (pattern, error) {
	switch {
	case s == "":
		return pattern{}, errHost("empty host; write a name (example.com), *.example.com, *, an IP or a CIDR")
	case s == "*":
		return pattern{kind: patAny}, nil
	case s == "*.":
		return pattern{}, errHost("'*.' needs a domain after it, e.g. *.example.com")
	case strings.HasPrefix(s, "*."):
		domain := s[2:]
		if strings.Contains(domain, "*") {
			return pattern{}, errHost("'*' may only stand alone or as the whole first label ('*.example.com')")
		}
		name, err := normalizeHost(domain)
		if err != nil {
			return pattern{}, err
		}
		if _, perr := netip.ParseAddr(name); perr == nil {
			return pattern{}, errHost("'*.' must be followed by a domain name, not an IP address; use a CIDR for address ranges")
		}
		return pattern{kind: patWildcard, name: name}, nil
	case strings.Contains(s, "*"):
		return pattern{}, errHost("'*' may only stand alone or as the whole first label ('*.example.com')")
	case strings.Contains(s, "/"):
		pfx, err := netip.ParsePrefix(strings.Trim(s, "[]"))
		if err != nil {
			return pattern{}, errHost("not a valid CIDR (want e.g. 10.0.0.0/8 or 2001:db8::/32)")
		}
		if pfx.Addr().Zone() != "" {
			return pattern{}, errHost("IPv6 zones are not allowed")
		}
		if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		if m := pfx.Masked(); m != pfx {
			return pattern{}, errHost(fmt.Sprintf("%s has host bits set; did you mean %s?", pfx, m))
		}
		return pattern{kind: patPrefix, prefix: pfx}, nil
	}
	name, err := normalizeHost(s)
	if err != nil {
		return pattern{}, err
	}
	if ip, perr := netip.ParseAddr(name); perr == nil {
		return pattern{kind: patPrefix, prefix: netip.PrefixFrom(ip, ip.BitLen())}, nil
	}
	return pattern{kind: patExact, name: name}, nil
}

// ParseFlagPattern parses a host pattern in the command-line form of
// docs/policy.md: host, host:port, host:*, *.domain, an IP, [IPv6]:port or a
// CIDR. It returns the host part and the port list, nil when the flag
// names no port. The host part is checked when the rule is compiled.
func ParseFlagPattern(s string) (host string, ports []Port, err error) {
	if s == "" {
		return "", nil, errorf(ErrInvalidRule, "empty pattern; write e.g. example.com, example.com:8080, *.example.com or 10.0.0.0/8")
	}
	var portStr string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", nil, errorf(ErrInvalidRule, "pattern %q: unclosed '['; write an IPv6 address as [2001:db8::1]:443", s)
		}
		host, rest := s[1:end], s[end+1:]
		if strings.HasPrefix(rest, "/") { // [2001:db8::]/32, maybe :port
			i := strings.IndexByte(rest, ':')
			if i < 0 {
				i = len(rest)
			}
			host, rest = host+rest[:i], rest[i:]
		}
		if rest == "" {
			return host, nil, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", nil, errorf(ErrInvalidRule, "pattern %q: unexpected %q after ']'; write [2001:db8::1]:443", s, rest)
		}
		portStr = rest[1:]
		p, err := ParsePort(portStr)
		if err != nil {
			return "", nil, errorf(ErrInvalidRule, "pattern %q: %s", s, err)
		}
		return host, []Port{p}, nil
	case strings.Count(s, ":") > 1:
		// A bare IPv6 address or CIDR; a port needs brackets.
		return s, nil, nil
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, nil, nil
	}
	host, portStr = s[:i], s[i+1:]
	p, err := ParsePort(portStr)
	if err != nil {
		return "", nil, errorf(ErrInvalidRule, "pattern %q: %s", s, err)
	}
	return host, []Port{p}, nil
}
