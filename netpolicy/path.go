package netpolicy

import (
	"fmt"
	"strings"
)

// CanonicalPath returns the form of a request path that path rules are
// compared in, chosen so that spellings a server would read as the same
// path cannot slip past a rule:
//
//   - percent-escapes are decoded, once (%61 is 'a', %2F is '/', %2e is
//     '.'), and then '%' and the bytes that are not printable ASCII
//     (controls, space, non-ASCII) are written as escapes with upper-case
//     hex, so "/100%25" and "/100%" are both "/100%25";
//   - '\' is read as '/', as some servers do;
//   - runs of '/' count as one, as most servers (nginx's merge_slashes)
//     do;
//   - the dot segments "." and ".." are resolved (RFC 3986 §5.2.4), so
//     /v1/../admin is /admin.
//
// Reading %2F as '/' can make a path look deeper or shallower than a server
// that keeps it literal would see; rules then err on the side of not
// matching an allow rule's prefix. A path that needs none of this, the
// common case, is returned as is without allocating. The empty path is
// "/", as the upstream will be asked for it. Another path that does not
// start with '/' (such as "*") is returned as is.
//
// Servers that decode twice (%252e) or compare paths without regard to case
// are not covered.
func CanonicalPath(path string) string { return canonicalPath(path, false) }

// canonicalPath is CanonicalPath, cutting path parameters (";..." in a
// segment) when stripParams is set.
func canonicalPath(path string, stripParams bool) string {
	if path == "" {
		return "/"
	}
	if !strings.HasPrefix(path, "/") || !stripParams && isCanonicalPath(path) {
		return path
	}
	// Decode every escape, then write '\' as '/', '%' and what is not
	// printable as escapes, and the rest as itself.
	var b strings.Builder
	b.Grow(len(path))
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
			c = unhex(path[i+1])<<4 | unhex(path[i+2])
			i += 2
		}
		switch {
		case c == '\\':
			b.WriteByte('/')
		case c == '%' || !isPathPrintable(c):
			writeEscape(&b, c)
		default:
			b.WriteByte(c)
		}
	}
	// Merge slashes and resolve dot segments.
	segs := strings.Split(b.String(), "/")[1:]
	out := make([]string, 0, len(segs))
	trailing := false
	for _, s := range segs {
		trailing = false
		if i := strings.IndexByte(s, ';'); i >= 0 && stripParams {
			s = s[:i]
		}
		switch s {
		case "", ".":
			trailing = true
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = true
		default:
			out = append(out, s)
		}
	}
	res := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		res += "/"
	}
	return res
}

// isCanonicalPath reports whether CanonicalPath would return path as is:
// printable ASCII, escapes only for '%' and bytes that are not printable,
// in upper-case hex, no '\', no "//" and no dot segment.
func isCanonicalPath(path string) bool {
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '%':
			if i+2 >= len(path) || !isUpperHex(path[i+1]) || !isUpperHex(path[i+2]) {
				return false
			}
			if d := unhex(path[i+1])<<4 | unhex(path[i+2]); d != '%' && isPathPrintable(d) {
				return false
			}
			i += 2
		case c == '\\' || !isPathPrintable(c):
			return false
		case c == '/' && i+1 < len(path):
			switch next := path[i+1]; {
			case next == '/':
				return false
			case next == '.':
				rest := path[i+2:]
				if rest == "" || rest[0] == '/' || rest == "." || strings.HasPrefix(rest, "./") {
					return false
				}
			}
		}
	}
	return true
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

// isPathPrintable reports whether c stands for itself in a canonical path.
func isPathPrintable(c byte) bool { return c > ' ' && c < 0x7f }

func writeEscape(b *strings.Builder, c byte) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('%')
	b.WriteByte(hex[c>>4])
	b.WriteByte(hex[c&15])
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// checkPathPrefix checks a path prefix of a rule or a secret and returns
// it in the form CanonicalPath gives, and what is wrong with it ("" for
// nothing): it starts with '/', holds no query, fragment, space or
// control character, and no ';' (path parameters, which servers read
// differently).
func checkPathPrefix(p string) (canonical, problem string) {
	switch {
	case p == "" || p[0] != '/':
		return p, fmt.Sprintf("%q must start with '/'", p)
	case strings.ContainsAny(p, "?#"):
		return p, fmt.Sprintf("%q: a path prefix cannot hold a query or fragment", p)
	case strings.ContainsFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f }):
		return p, fmt.Sprintf("%q holds a space or control character; write it percent-encoded (%%20)", p)
	}
	c := CanonicalPath(p)
	if strings.IndexByte(c, ';') >= 0 {
		return c, fmt.Sprintf("%q: ';' starts path parameters, which servers read differently; leave them out of a path prefix", c)
	}
	return c, ""
}
