package netpolicy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// This file is the one parser of request-targets: the gateway's, for what
// a client sends it (RFC 9112 §3.2), and through ParseRequest that of sbx
// policy check, so that what the gateway refuses check calls invalid too.

// TargetError is a request-target the gateway refuses before deciding it
// (it answers 400 Bad Request and logs a block by rule "invalid"). Reason
// is a short sentence for the client and the decision log that names the
// problem and the form to use; it never quotes the target, and holds only
// printable ASCII. It wraps ErrInvalidTarget.
type TargetError struct {
	Reason string
}

func (e *TargetError) Error() string { return e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidTarget) hold.
func (e *TargetError) Unwrap() error { return ErrInvalidTarget }

// targetErrorf returns a *TargetError with a formatted reason.
func targetErrorf(format string, args ...any) *TargetError {
	return &TargetError{Reason: fmt.Sprintf(format, args...)}
}

// targetConnectForm is the hint that ends every refused CONNECT target.
const targetConnectForm = "; want host:port, such as example.com:443 or [2001:db8::1]:443"

// ParseConnectTarget splits the request-target of a CONNECT, which must be
// in authority form host:port (RFC 9112 §3.2.3): a host name, a dotted-quad
// IPv4 address, or an IPv6 address in brackets, then a port from 1 to
// 65535 in decimal without leading zeros. The host is returned as written,
// without the brackets of an IPv6 address; the caller normalizes it with
// NormalizeHost. Anything else (a missing or empty part, a scheme,
// userinfo, a path, whitespace, percent-encoding) is refused with a
// *TargetError that names the problem.
func ParseConnectTarget(target string) (host string, port uint16, err error) {
	host, port, te := parseConnectTarget(target)
	if te != nil {
		return "", 0, te
	}
	return host, port, nil
}

func parseConnectTarget(target string) (string, uint16, *TargetError) {
	bad := func(reason string) (string, uint16, *TargetError) {
		return "", 0, targetErrorf("invalid CONNECT target: %s%s", reason, targetConnectForm)
	}
	switch {
	case target == "":
		return bad("empty")
	case strings.IndexFunc(target, func(r rune) bool { return r > '~' || r <= ' ' }) >= 0:
		return bad("whitespace, control or non-ASCII character")
	case strings.Contains(target, "://"):
		return bad("a scheme is not allowed")
	case strings.ContainsAny(target, "/\\"):
		return bad("a path is not allowed")
	case strings.IndexByte(target, '@') >= 0:
		return bad("userinfo (user@) is not allowed")
	case strings.ContainsAny(target, "?#"):
		return bad("a query or fragment is not allowed")
	}
	host, port, hasPort, reason := splitTargetHostPort(target)
	if reason != "" {
		return bad(reason)
	}
	if !hasPort {
		return bad("missing port")
	}
	p, reason := parseTargetPort(port)
	if reason != "" {
		return bad(reason)
	}
	return host, p, nil
}

// splitTargetHostPort splits an authority without userinfo into host and
// port: "host", "host:port", "[ipv6]" or "[ipv6]:port". The host comes
// back without brackets. reason says what is wrong when it is not empty;
// the port is not checked.
func splitTargetHostPort(s string) (host, port string, hasPort bool, reason string) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, "unclosed '[' in an IPv6 address"
		}
		host, rest := s[1:end], s[end+1:]
		if host == "" {
			return "", "", false, "empty host"
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", "", false, "brackets must hold an IPv6 address, without a zone"
		}
		switch {
		case rest == "":
			return host, "", false, ""
		case rest[0] != ':':
			return "", "", false, "unexpected characters after ']'"
		}
		return host, rest[1:], true, ""
	}
	if strings.ContainsAny(s, "[]") {
		return "", "", false, "'[' or ']' outside an IPv6 address"
	}
	host, port, hasPort = strings.Cut(s, ":")
	switch {
	case strings.IndexByte(port, ':') >= 0:
		return "", "", false, "an IPv6 address must be in brackets"
	case host == "":
		return "", "", false, "empty host"
	case strings.IndexByte(host, '%') >= 0:
		return "", "", false, "percent-encoding is not allowed in a host"
	}
	for i := 0; i < len(host); i++ {
		if !isRegNameChar(host[i]) {
			return "", "", false, fmt.Sprintf("%q is not allowed in a host", host[i])
		}
	}
	return host, port, hasPort, ""
}

// parseTargetPort parses a port: decimal, 1 to 65535, no sign and no
// leading zeros (which some software reads as octal). reason says what is
// wrong when it is not empty.
func parseTargetPort(s string) (port uint16, reason string) {
	switch {
	case s == "":
		return 0, "empty port"
	case strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0:
		return 0, "the port is not a decimal number"
	case s == "0":
		return 0, "port 0 is not allowed"
	case s[0] == '0':
		return 0, "the port has leading zeros"
	case len(s) > 5:
		return 0, "the port is out of range 1-65535"
	}
	n, _ := strconv.Atoi(s) // at most 5 digits
	if n > 65535 {
		return 0, "the port is out of range 1-65535"
	}
	return uint16(n), ""
}

// targetProxyForm is the hint that ends most refused proxy targets.
const targetProxyForm = "; send an absolute URL such as http://example.com/path"

// ParseProxyTarget parses the request-target of any method but CONNECT,
// which must be in absolute form with the http scheme (docs/gateway.md):
// http://host[:port][/path][?query], host and port as ParseConnectTarget
// accepts them (the port optional), the path made of RFC 3986 path
// characters and valid percent-escapes, the query of printable ASCII.
// The scheme may be in any case.
//
// Everything else is refused with a *TargetError whose reason tells the client what
// to do: origin form (/path, sent when the client does not know it talks
// to a proxy), asterisk form, authority form, https:// (which goes through
// CONNECT), other schemes, userinfo, fragments, an empty host, bad ports.
//
// The URL's path is kept as sent: u.EscapedPath() returns it byte for
// byte, and u.Path is its decoded form, so the policy and the upstream see
// the same path. u.Host is the authority as sent, brackets and port
// included; the caller normalizes u.Hostname().
func ParseProxyTarget(target string) (*url.URL, error) {
	u, te := parseProxyTarget(target)
	if te != nil {
		return nil, te
	}
	return u, nil
}

func parseProxyTarget(target string) (*url.URL, *TargetError) {
	bad := func(format string, args ...any) (*url.URL, *TargetError) {
		return nil, targetErrorf(format, args...)
	}
	switch {
	case target == "":
		return bad("empty request-target" + targetProxyForm)
	case target == "*":
		return bad("the asterisk form (OPTIONS *) is not proxied" + targetProxyForm)
	case target[0] == '/':
		return bad("a path alone (origin form) is not proxied; this is an HTTP proxy, set HTTP_PROXY and request absolute URLs such as http://example.com/path")
	case strings.IndexFunc(target, func(r rune) bool { return r > '~' || r <= ' ' }) >= 0:
		return bad("the URL holds whitespace, a control or a non-ASCII character; percent-encode it")
	}
	sep := strings.Index(target, "://")
	if sep < 0 {
		if _, _, te := parseConnectTarget(target); te == nil {
			return bad("host:port (authority form) is for CONNECT only" + targetProxyForm)
		}
		return bad("the request-target is not an absolute URL" + targetProxyForm)
	}
	switch scheme := target[:sep]; {
	case strings.EqualFold(scheme, "http"):
	case strings.EqualFold(scheme, "https"):
		return bad("use CONNECT for https:// URLs (set HTTPS_PROXY)")
	case !isScheme(scheme):
		return bad("the request-target is not an absolute URL" + targetProxyForm)
	default:
		if len(scheme) > 16 {
			scheme = scheme[:16] + "..."
		}
		return bad("scheme %q is not supported; only http:// URLs are proxied, use CONNECT for others", scheme)
	}
	if strings.IndexByte(target, '#') >= 0 {
		return bad("a fragment (#...) is not allowed in a request-target")
	}
	rest := target[sep+len("://"):]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, pathQuery := rest[:end], rest[end:]
	if strings.IndexByte(authority, '@') >= 0 {
		return bad("userinfo (user@) is not allowed in the URL; send credentials in a header")
	}
	_, port, hasPort, reason := splitTargetHostPort(authority)
	if reason != "" {
		return bad("invalid host in the URL: %s", reason)
	}
	if hasPort {
		if _, reason := parseTargetPort(port); reason != "" {
			return bad("invalid port in the URL: %s", reason)
		}
	}
	path, query, hasQuery := strings.Cut(pathQuery, "?")
	if reason := checkTargetPath(path); reason != "" {
		return bad("invalid path in the URL: %s", reason)
	}

	u, ok := targetURL(authority, path, query, hasQuery)
	if !ok {
		return bad("malformed URL" + targetProxyForm)
	}
	return u, nil
}

// targetURL makes the URL of an absolute-form target from the parts that
// ParseProxyTarget checked: "http://", authority and path, then "?" and
// query when hasQuery. It is exactly what url.Parse makes of the target
// (FuzzParseProxyTarget compares the two), without parsing again what was
// checked, so that what was checked is what is used. It reports false for
// a path with a bad escape, which checkTargetPath refuses before.
func targetURL(authority, path, query string, hasQuery bool) (*url.URL, bool) {
	u := &url.URL{Scheme: "http", Host: authority, Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	for i := 0; i < len(path); i++ {
		if !isPathLiteral(path[i]) {
			// Escapes to decode, or bytes that url.URL writes escaped:
			// Path is the decoded path, and RawPath the path as sent when
			// escaping Path again would not give it back.
			dec, err := url.PathUnescape(path)
			if err != nil {
				return nil, false
			}
			u.Path = dec
			if (&url.URL{Path: dec}).EscapedPath() != path {
				u.RawPath = path
			}
			break
		}
	}
	return u, true
}

// isPathLiteral reports whether c stands for itself in a path that
// url.URL escapes (its EscapedPath): letters, digits, "-._~" and
// "$&+,/:;=@".
func isPathLiteral(c byte) bool {
	return 'a' <= c|0x20 && c|0x20 <= 'z' || isDigit(c) || strings.IndexByte("-._~$&+,/:;=@", c) >= 0
}

// isScheme reports whether s is a URI scheme: a letter, then letters,
// digits, '+', '-' or '.' (RFC 3986 §3.1).
func isScheme(s string) bool {
	if s == "" || !('a' <= s[0]|0x20 && s[0]|0x20 <= 'z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c|0x20 && c|0x20 <= 'z' || isDigit(c) || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// checkTargetPath checks that p is an RFC 3986 path: '/', pchar and
// escapes of two hex digits. Anything else (such as '\', '"', '{' or a bad
// escape) would be re-encoded or read differently by the next parser, so
// the path the policy sees would not be the one forwarded. reason says
// what is wrong when it is not empty.
func checkTargetPath(p string) (reason string) {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "'%' is not followed by two hex digits"
			}
			i += 2
		case c == '/' || c == ':' || c == '@' || isRegNameChar(c):
		default:
			return fmt.Sprintf("%q must be percent-encoded", c)
		}
	}
	return ""
}

// isRegNameChar reports whether c may appear in a host name of a URI:
// unreserved or sub-delims (RFC 3986 §3.2.2), without percent-encoding.
func isRegNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
		strings.IndexByte("-._~!$&'()*+,;=", c) >= 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
