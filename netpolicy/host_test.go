package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when the host is invalid
	}{
		// Names.
		{"example.com", "example.com"},
		{"EXAMPLE.com", "example.com"},
		{"EXAMPLE.com.", "example.com"},
		{"example.com.", "example.com"},
		{"a-b_c.example.com", "a-b_c.example.com"},
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com"},
		{"localhost", "localhost"},
		{"1password.com", "1password.com"},
		{"x.123abc", "x.123abc"},
		// IDN to punycode, in any case, and punycode passed through.
		{"bücher.de", "xn--bcher-kva.de"},
		{"BÜCHER.DE", "xn--bcher-kva.de"},
		{"xn--bcher-kva.de", "xn--bcher-kva.de"},
		{"XN--BCHER-KVA.de", "xn--bcher-kva.de"},
		{"münchen.example.", "xn--mnchen-3ya.example"},
		{"ｅｘａｍｐｌｅ.com", "example.com"}, // fullwidth letters map to ASCII
		// IPv4.
		{"127.0.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"203.0.113.7", "203.0.113.7"},
		// IPv6: brackets removed, canonical form, mapped IPv4 unmapped.
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"::ffff:7f00:1", "127.0.0.1"},
		{"[::ffff:203.0.113.7]", "203.0.113.7"},

		// Invalid: alternate IPv4 spellings.
		{"2130706433", ""},
		{"0x7f.1", ""},
		{"0x7f000001", ""},
		{"0177.0.0.1", ""},
		{"127.1", ""},
		{"127.0.1", ""},
		{"127.0.0.01", ""},
		{"1.2.3.4.5", ""},
		{"256.1.1.1", ""},
		{"example.123", ""},
		{"example.0x1f", ""},
		// Invalid: empty labels.
		{"", ""},
		{".", ""},
		{"..", ""},
		{".example.com", ""},
		{"example..com", ""},
		{"example.com..", ""},
		// Invalid: userinfo, bad characters.
		{"user@example.com", ""},
		{"user:pass@example.com", ""},
		{"example.com@evil.net", ""},
		{"exa mple.com", ""},
		{"example.com/", ""},
		{"example.com\\evil.net", ""},
		{"exa%2emple.com", ""},
		{"example.com\x00", ""},
		{"exa*mple.com", ""},
		{"example.com:443", ""},
		{"ex\tample.com", ""},
		{"[::1", ""},
		{"::1]", ""},
		{"[127.0.0.1]", ""},
		{"[fe80::1%eth0]", ""},
		{"fe80::1%25eth0", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 127) + "com", ""},
	}
	for _, tt := range tests {
		got, err := NormalizeHost(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("NormalizeHost(%q) = %q, want an error", tt.in, got)
			} else if !errors.Is(err, ErrInvalidTarget) {
				t.Errorf("NormalizeHost(%q) error %v does not wrap ErrInvalidTarget", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestNormalizeHostIdempotent checks that normalizing a normalized host
// changes nothing, so the gateway can normalize once and decide, dial and
// log with the same string.
func TestNormalizeHostIdempotent(t *testing.T) {
	for _, in := range []string{"EXAMPLE.com.", "bücher.de", "[::ffff:127.0.0.1]", "[2001:DB8::1]", "ｅｘａｍｐｌｅ.com"} {
		once, err := NormalizeHost(in)
		if err != nil {
			t.Fatalf("NormalizeHost(%q): %v", in, err)
		}
		twice, err := NormalizeHost(once)
		if err != nil || twice != once {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q unchanged", once, twice, err, once)
		}
	}
}

func TestFastPathAgreesWithSlowPath(t *testing.T) {
	for _, in := range []string{"example.com", "a-b_c.d", "x.123abc", "localhost", "a.b.c.d.e.f", "1password.com", "127.0.0.1", "203.0.113.7", "Example.COM.", "a.b.", "::1", "2001:db8::1", "fe80::1:2"} {
		fast, ok := fastNormalize(in)
		slow, err := normalizeHost(in)
		if !ok || err != nil || fast != slow {
			t.Errorf("%q: fast %q (%v), slow %q (%v)", in, fast, ok, slow, err)
		}
	}
	for _, in := range []string{"xn--bcher-kva.de", "XN--bcher-kva.de", "127.1", "0177.0.0.1", "2130706433", "example.com..", "bücher.de", "a..b", "",
		"2001:DB8::1", "2001:db8:0::1", "::ffff:127.0.0.1", "::ffff:7f00:1", "fe80::1%eth0", "[::1]", "::1.", "1:2:3:4:5:6:7:8:9"} {
		if got, ok := fastNormalize(in); ok {
			t.Errorf("fastNormalize(%q) = %q, want it to defer to the slow path", in, got)
		}
	}
}
