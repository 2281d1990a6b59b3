package gateway

// A captured connection, and a CONNECT tunnel, relay raw only what is
// not an HTTP request: plain HTTP is decided request by request, its Host
// checked against the target, or the connection is closed. What counts
// as HTTP is what lenient servers take for a request line,
// not what the gateway's own parser takes: else a request the gateway
// would have refused as malformed (an empty line first, a tab after the
// method) would go upstream raw, its Host unchecked, to a server that
// reads it as any other.

// lineVerdict is what a connection's first bytes say of an HTTP/1.x
// request line.
type lineVerdict uint8

const (
	lineMore  lineVerdict = iota // too few bytes to tell
	lineHTTP                     // a request line, as a lenient server reads one
	lineOther                    // not one: relayed raw
)

// sniffRequestLine tells whether b, a client's first bytes, begin an
// HTTP/1.x request line as lenient servers read one (RFC 9112
// §2.2 and §3 let a server skip empty lines before it, and take any of
// SP, HTAB, VT, FF and a bare CR for the space between its parts):
//
//   - after any whitespace and line ends, a method token of any length;
//   - whitespace;
//   - a request-target that is a path ("/..."), "*" or an absolute URL
//     ("http:" or "https:", any case): HTTP, whatever follows, since some
//     servers still take a line without a version (HTTP/0.9) and read
//     header fields after it;
//   - else any other target followed by whitespace and "HTTP/" (any
//     case): an authority-form request.
//
// A line that ends, or a byte that cannot be in a request line, before
// that is not one: "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", "*1\r\n$4\r\n"
// (Redis) or "get key\r\n" (memcached) are relayed, as a bare word is.
func sniffRequestLine(b []byte) lineVerdict {
	// A PROXY protocol header (v2's binary signature, v1's line) goes
	// to no upstream from a sandbox: it would speak for the sandbox's
	// address, and a server that takes it as optional reads the request
	// after it. Taken for HTTP, it is refused.
	switch n := min(len(b), len(proxyV2Sig)); {
	case string(b[:n]) != proxyV2Sig[:n] || n <= 4: // "\r\n\r\n" may be empty lines
	case n == len(proxyV2Sig):
		return lineHTTP
	default:
		return lineMore
	}
	i := 0
	for i < len(b) && (isLineSpace(b[i]) || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	m := i
	for i < len(b) && isTokenChar(b[i]) {
		i++
	}
	switch {
	case hasPrefixFold(b[m:], "PROXY "):
		return lineHTTP
	case i == len(b):
		return lineMore
	case i == m:
		return lineOther
	}
	i, v := spaces(b, i)
	if v != lineHTTP {
		return v
	}
	target := i
	for i < len(b) && !isLineSpace(b[i]) && b[i] != '\r' && b[i] != '\n' {
		i++
	}
	t := b[target:i]
	if t[0] == '/' || t[0] == '*' {
		return lineHTTP
	}
	for _, scheme := range []string{"http:", "https:"} {
		switch {
		case hasPrefixFold(t, scheme):
			return lineHTTP
		case i == len(b) && isPrefixFold(t, scheme):
			return lineMore // "htt", so far
		}
	}
	if i == len(b) {
		return lineMore
	}
	i, v = spaces(b, i)
	if v != lineHTTP {
		return v
	}
	const version = "HTTP/"
	rest := b[i:]
	switch {
	case hasPrefixFold(rest, version):
		return lineHTTP
	case isPrefixFold(rest, version):
		return lineMore
	}
	return lineOther
}

// spaces skips the whitespace between two parts of a request line that
// starts at b[i]. It returns lineHTTP and the index of the next part's
// first byte when there is whitespace and a byte after it; lineOther
// when there is none, or the line ends there (CR LF, or LF); lineMore
// when b ends first (a CR last may be a bare CR, a space, or the line's
// end).
func spaces(b []byte, i int) (int, lineVerdict) {
	j := i
	for j < len(b) {
		switch {
		case isLineSpace(b[j]):
			j++
		case b[j] == '\r':
			if j+1 == len(b) {
				return j, lineMore
			}
			if b[j+1] == '\n' {
				return j, lineOther
			}
			j++
		case b[j] == '\n' || j == i:
			return j, lineOther
		default:
			return j, lineHTTP
		}
	}
	return j, lineMore
}

// isLineSpace reports whether c separates the parts of a request line to
// a lenient server: SP, HTAB, VT or FF (RFC 9112 §3; a bare CR too:
// spaces), and the other bytes Python's str.split takes for whitespace
// in a line its http.server decodes as Latin-1: 0x1C to 0x1F, NEL (0x85)
// and NBSP (0xA0).
func isLineSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0:
		return true
	}
	return false
}

// proxyV2Sig begins a PROXY protocol v2 header.
const proxyV2Sig = "\r\n\r\n\x00\r\nQUIT\n"

// isPrefixFold reports whether b is a proper prefix of s, ASCII case
// ignored.
func isPrefixFold(b []byte, s string) bool {
	if len(b) >= len(s) {
		return false
	}
	for i := range b {
		if b[i]|0x20 != s[i]|0x20 {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether b begins with prefix, ASCII case
// ignored.
func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if b[i]|0x20 != prefix[i]|0x20 {
			return false
		}
	}
	return true
}
