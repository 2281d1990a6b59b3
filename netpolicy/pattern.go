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
	if u, ok := asURL(s); ok {
		if u.Host == "" {
			return pattern{}, errHost("a URL with no host; write the host alone, e.g. host: example.com")
		}
		return pattern{}, errHost("a URL, not a host; write " + u.RuleFix())
	}
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
// names no port. The host part is checked when the rule is compiled. A
// pattern written as a URL is a *URLError, which names the pattern to
// write instead.
func ParseFlagPattern(s string) (host string, ports []Port, err error) {
	if s == "" {
		return "", nil, errorf(ErrInvalidRule, "empty pattern; write e.g. example.com, example.com:8080, *.example.com or 10.0.0.0/8")
	}
	if u, ok := asURL(s); ok {
		return "", nil, u
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

// URLError is the error for a host or pattern written as a URL
// ("https://github.com/"), where a host is wanted. It names the host to
// write instead, and wraps ErrInvalidRule.
type URLError struct {
	URL string // as written
	// Host is the URL's host as written there, brackets removed from an
	// IPv6 address; empty when the URL has none.
	Host string
	// Port is the URL's port when it differs from its scheme's default
	// (80 for http and ws, 443 for https and wss; a rule's default ports
	// are both), else AnyPort: a rule needs it only then.
	Port Port
}

func (e *URLError) Error() string {
	if e.Host == "" {
		return fmt.Sprintf("%q is a URL with no host; write the host alone, e.g. example.com", e.URL)
	}
	return fmt.Sprintf("%q is a URL, not a host; write the host alone: %s", e.URL, e.Pattern())
}

func (e *URLError) Unwrap() error { return ErrInvalidRule }

// Pattern is the host pattern the URL stands for, in the flag form of
// ParseFlagPattern: github.com, github.com:8443, [2001:db8::1]:8443.
func (e *URLError) Pattern() string {
	host := e.Host
	if strings.Contains(host, ":") {
		if e.Port == AnyPort {
			return host
		}
		host = "[" + host + "]"
	}
	if e.Port != AnyPort {
		return host + ":" + e.Port.String()
	}
	return host
}

// RuleFix is what a policy file writes for the URL's host:
// "host: github.com", and "ports: [8443]" when the URL has a port that
// is not its scheme's default.
func (e *URLError) RuleFix() string {
	if e.Port == AnyPort {
		return "host: " + e.Host
	}
	return fmt.Sprintf("host: %s with ports: [%d]", e.Host, e.Port)
}

// schemePorts are the default ports of the schemes a policy's ports
// cover without saying.
var schemePorts = map[string]Port{"http": 80, "ws": 80, "https": 443, "wss": 443}

// asURL reports whether s is written as a URL, scheme://authority..., and
// if so returns the URLError that names its host. The scheme is RFC 3986's:
// a letter, then letters, digits, '+', '-' or '.'.
func asURL(s string) (*URLError, bool) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return nil, false
	}
	for i := 0; i < len(scheme); i++ {
		c := scheme[i] | 0x20
		if !('a' <= c && c <= 'z' || i > 0 && ('0' <= scheme[i] && scheme[i] <= '9' || strings.IndexByte("+-.", scheme[i]) >= 0)) {
			return nil, false
		}
	}
	e := &URLError{URL: s}
	authority := rest
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:] // never the userinfo
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		if end := strings.IndexByte(authority, ']'); end > 0 {
			host, port = authority[1:end], strings.TrimPrefix(authority[end+1:], ":")
		}
	} else if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		host, port = authority[:i], authority[i+1:]
	}
	e.Host = strings.ToLower(host)
	if h, err := normalizeHost(host); err == nil {
		e.Host = h
	}
	if p, err := ParsePort(port); err == nil && p != schemePorts[strings.ToLower(scheme)] {
		e.Port = p
	}
	return e, true
}
