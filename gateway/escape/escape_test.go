package escape

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"registry.npmjs.org", "registry.npmjs.org"},
		{`/a\x1b/b`, `/a\x1b/b`}, // a backslash is text
		{"café/ünï/日本/😀", "café/ünï/日本/😀"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"\x1b]52;c;aGk=\x07", `\x1b]52;c;aGk=\x07`}, // OSC 52, a clipboard write
		{"\x1b[8m", `\x1b[8m`},
		{"line\nsbx: allow x", `line\x0asbx: allow x`},
		{"\r\t\x00\x7f", `\x0d\x09\x00\x7f`},
		{"\u0085\u009b\u009d", `\u0085\u009b\u009d`}, // C1: NEL, CSI, OSC
		{"\xff\xc3", `\xff\xc3`},                     // invalid UTF-8
		{"\ufffd", `\ufffd`},
		{"evil\u202egpj.exe", `evil\u202egpj.exe`},
		{"\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u061c", `\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u061c`},
		{"a\u200bb\u200cc\u200dd\u2060e\ufeff", `a\u200bb\u200cc\u200dd\u2060e\ufeff`},
		{"soft\u00adhyphen", `soft\u00adhyphen`},
		{"\u2028\u2029", `\u2028\u2029`},
		{"tag\U000e0041\U000e007f", `tag\U000e0041\U000e007f`}, // tag characters, invisible
		{"\u0600\u06dd\ufff9\ufffe\uffff", `\u0600\u06dd\ufff9\ufffe\uffff`},
		{"\u206f", `\u206f`},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// checkShown fails when out holds a character Hidden reports or invalid
// UTF-8.
func checkShown(t *testing.T, in, out string) {
	t.Helper()
	for i, c := range out {
		if c == utf8.RuneError && !strings.HasPrefix(out[i:], "\ufffd") {
			t.Fatalf("Text(%q) = %q holds invalid UTF-8 at byte %d", in, out, i)
		}
		if Hidden(c) {
			t.Fatalf("Text(%q) = %q holds %U at byte %d", in, out, c, i)
		}
	}
}

// FuzzText: whatever the input, the output holds no control, format or
// bidirectional character and no invalid UTF-8; an input that holds
// none comes back unchanged; and the escapes are the only change (the
// output without them reads as the input without what they replaced).
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x1b[8mb", "\u202e", "\xff", "\U000e0041", `\x1b`, "日本\n", "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Text(in)
		checkShown(t, in, out)
		clean := utf8.ValidString(in)
		var kept strings.Builder
		for _, c := range in {
			if Hidden(c) {
				clean = false
			} else {
				kept.WriteRune(c)
			}
		}
		if clean && out != in {
			t.Fatalf("Text(%q) = %q, want it unchanged", in, out)
		}
		if !clean && len(out) <= len(in)-countHidden(in) {
			t.Fatalf("Text(%q) = %q is no longer than the input without what it escaped", in, out)
		}
		if Text(out) != out {
			t.Fatalf("Text(Text(%q)) = %q, want %q: escaped text is shown as it is", in, Text(out), out)
		}
	})
}

// countHidden returns the bytes of s that Text escapes.
func countHidden(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c, size := utf8.DecodeRuneInString(s[i:])
		if Hidden(c) || c == utf8.RuneError && size == 1 {
			n += size
		}
		i += size
	}
	return n
}
