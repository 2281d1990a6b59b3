// Package escape shows text that a sandbox controls (a host, a path, a
// process's name, a model, a reason, a journal's text) as what it holds,
// in every text output of sbx: the terminal's lines and questions of sbx
// run, sbx decisions, sbx audit's text and markdown, sbx mock requests,
// sbx ps, sbx policy show. Text is the one escaping function for them;
// HTML has html/template, after Text.
//
// A string escaped by Text cannot drive a terminal (no control character
// reaches it, so no escape sequence: no clipboard write, no screen
// clear, no hidden text), cannot reorder or hide what is printed around
// it (no bidirectional or other format character), and cannot end its
// line (no newline), so it cannot pose as another line of sbx's. Text
// that holds none of these is returned unchanged.
package escape

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s with each character Hidden reports, and each byte of
// invalid UTF-8, written as an escape that shows it: \x1b for a byte or
// a character below U+0080, \u202e for one of the Basic Multilingual
// Plane, \U000e0001 above it. Everything else, backslashes included, is
// kept as it is: s is returned unchanged when it holds nothing to
// escape.
func Text(s string) string {
	i := 0
	for i < len(s) {
		c, size := utf8.DecodeRuneInString(s[i:])
		if Hidden(c) || c == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			writeHex(&b, `\x`, uint32(s[i]), 2)
		case !Hidden(c):
			b.WriteString(s[i : i+size])
		case c < 0x80:
			writeHex(&b, `\x`, uint32(c), 2)
		case c <= 0xffff:
			writeHex(&b, `\u`, uint32(c), 4)
		default:
			writeHex(&b, `\U`, uint32(c), 8)
		}
		i += size
	}
	return b.String()
}

// writeHex writes prefix and n, in lower case hexadecimal, at least
// digits wide.
func writeHex(b *strings.Builder, prefix string, n uint32, digits int) {
	b.WriteString(prefix)
	h := strconv.FormatUint(uint64(n), 16)
	for range digits - len(h) {
		b.WriteByte('0')
	}
	b.WriteString(h)
}

// Hidden reports whether c is not shown as itself by Text:
//   - a C0 or C1 control character or DEL (newline, tab, ESC and NEL among
//     them), which drive a terminal or end a line;
//   - a format character (Unicode category Cf): the bidirectional ones
//     (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which
//     reorder text, the zero-width ones (U+200B to U+200D, U+2060, U+FEFF),
//     the soft hyphen U+00AD, U+180E, the tags U+E0001 and U+E0020 to
//     U+E007F, the interlinear annotations U+FFF9 to U+FFFB, and the rest;
//   - a line or paragraph separator (U+2028, U+2029);
//   - the invisible operators and reserved format characters U+2060 to
//     U+206F, whether or not Unicode assigns them yet;
//   - the noncharacters U+FFFE and U+FFFF, and U+FFFD, the replacement
//     character, which would otherwise stand for invalid UTF-8 unseen.
func Hidden(c rune) bool {
	switch {
	case c < 0x20, c >= 0x7f && c < 0xa0:
		return true
	case c == 0x180e, c == utf8.RuneError, c == 0xfffe, c == 0xffff:
		return true
	case c >= 0x2028 && c <= 0x202e, c >= 0x2060 && c <= 0x206f:
		return true
	case c < 0xad:
		return false
	}
	return unicode.Is(unicode.Cf, c)
}
