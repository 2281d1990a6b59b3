package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// maxHostLen is the longest host name in presentation form (RFC 1035 §2.3.4).
const maxHostLen = 253

// maxLabelLen is the longest label of a host name.
const maxLabelLen = 63

// idnaProfile maps a host name as a browser does for lookup (UTS #46,
// nontransitional) and converts it to punycode. STD3 rules are off so that
// the underscores found in real host names pass; checkLabel then allows only
// letters, digits, '-' and '_'. Hyphen checks are off because real names
// such as r3---sn-abc.example.net have "--" in positions 3 and 4.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
	idna.BidiRule(),
)

// NormalizeHost returns the canonical form of a host name or IP literal, the
// form used for matching, dialing and logging (docs/policy.md): lower case,
// one trailing dot removed, IDN converted to punycode, IPv6 brackets
// removed, IPv4-mapped IPv6 unmapped.
//
// A name is returned without its trailing dot; whoever resolves it must
// look it up as a fully qualified name (with the dot put back) so that the
// resolver's search list never turns "secrets" into "secrets.corp.example".
//
// It rejects, with an error wrapping ErrInvalidTarget, what must never
// match: empty labels, characters outside letters, digits, '-' and '_',
// userinfo, zones, over-long names and every spelling of an IPv4 address but
// the dotted quad (2130706433, 0x7f.1, 0177.0.0.1, 127.1).
func NormalizeHost(host string) (string, error) {
	if h, ok := fastNormalize(host); ok {
		return h, nil
	}
	h, err := normalizeHost(host)
	if err != nil {
		return "", errorf(ErrInvalidTarget, "host %q: %s", host, err)
	}
	return h, nil
}

// fastNormalize handles the common cases cheaply: an ASCII name of
// letters, digits, '-', '_' and dots, with at most one trailing dot and no
// punycode label, or a dotted-quad IPv4 address (netip accepts only the
// canonical spelling), or an IPv6 address already in the form
// normalizeHost gives. For these normalizeHost only lower-cases and drops
// the trailing dot, so the result is the same. It allocates only to lower
// the case of a name that has upper-case letters.
func fastNormalize(host string) (string, bool) {
	if strings.IndexByte(host, ':') >= 0 {
		return fastNormalizeIPv6(host)
	}
	host = strings.TrimSuffix(host, ".")
	if len(host) == 0 || len(host) > maxHostLen {
		return "", false
	}
	labelStart := 0
	for i := 0; i <= len(host); i++ {
		if i < len(host) {
			c := host[i]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', 'A' <= c && c <= 'Z':
				continue
			case c != '.':
				return "", false
			}
		}
		label := host[labelStart:i]
		if len(label) == 0 || len(label) > maxLabelLen ||
			len(label) >= 4 && (label[0]|0x20) == 'x' && (label[1]|0x20) == 'n' && label[2] == '-' && label[3] == '-' {
			return "", false
		}
		labelStart = i + 1
	}
	if endsInNumber(host) {
		ip, err := netip.ParseAddr(host)
		return host, err == nil && ip.Is4()
	}
	return strings.ToLower(host), true
}

// fastNormalizeIPv6 accepts an IPv6 address that is already normalized:
// in the canonical text form (RFC 5952), without a zone, and not
// IPv4-mapped, which normalizeHost unmaps.
func fastNormalizeIPv6(host string) (string, bool) {
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is6() || ip.Is4In6() || ip.Zone() != "" {
		return "", false
	}
	var buf [64]byte
	return host, string(ip.AppendTo(buf[:0])) == host
}

// errHost is the reason a host is invalid; NormalizeHost wraps it.
type errHost string

func (e errHost) Error() string { return string(e) }

func normalizeHost(host string) (string, error) {
	if host == "" {
		return "", errHost("empty host")
	}
	if strings.ContainsRune(host, '@') {
		return "", errHost("userinfo ('@') is not allowed in a host")
	}
	if strings.ContainsRune(host, '%') {
		return "", errHost("percent-encoding and IPv6 zones are not allowed in a host")
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", errHost("unclosed '[' in IPv6 literal")
		}
		inner := host[1 : len(host)-1]
		ip, err := netip.ParseAddr(inner)
		if err != nil || !ip.Is6() {
			return "", errHost("not an IPv6 address inside brackets")
		}
		return ip.Unmap().String(), nil
	}
	if strings.ContainsRune(host, ':') {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			if u, ok := asURL(host); ok && u.Host != "" {
				return "", errHost("a URL, not a host; the host is " + u.Host)
			}
			return "", errHost("':' is only allowed in an IPv6 literal")
		}
		return ip.Unmap().String(), nil
	}
	name, hadDot := strings.CutSuffix(host, ".")
	if name == "" {
		return "", errHost("empty host")
	}
	// Look at the raw labels first: the IDNA mapping would quietly drop
	// some characters (soft hyphens, for one) and hide an empty label.
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return "", errHost("empty label")
		}
	}
	if !utf8.ValidString(name) {
		return "", errHost("not valid UTF-8")
	}
	ascii, err := idnaProfile.ToASCII(name)
	if err != nil {
		return "", errHost("not a valid international domain name")
	}
	// The result must read back as itself, or the gateway would log and
	// dial a name that does not normalize to what was decided.
	if again, err := idnaProfile.ToASCII(ascii); err != nil || again != ascii {
		return "", errHost("not a valid international domain name")
	}
	if !hadDot { // a trailing ideographic or fullwidth dot, mapped to '.'
		ascii = strings.TrimSuffix(ascii, ".")
	}
	if ascii == "" || len(ascii) > maxHostLen {
		return "", errHost("host name longer than 253 bytes")
	}
	if endsInNumber(ascii) {
		ip, err := netip.ParseAddr(ascii)
		if err != nil || !ip.Is4() {
			return "", errHost("a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)")
		}
		return ip.String(), nil
	}
	for _, label := range strings.Split(ascii, ".") {
		if err := checkLabel(label); err != nil {
			return "", err
		}
	}
	return ascii, nil
}

// checkLabel checks one label of a name already in ASCII form.
func checkLabel(label string) error {
	if label == "" {
		return errHost("empty label")
	}
	if len(label) > maxLabelLen {
		return errHost("label longer than 63 bytes")
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return errHost(fmt.Sprintf("character %q is not allowed in a host name", c))
		}
	}
	return nil
}

// endsInNumber reports whether a host's last label looks like a number
// (decimal, or hex with 0x), the WHATWG URL test for a host that must parse
// as IPv4. Such a host is valid only as a dotted quad.
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
