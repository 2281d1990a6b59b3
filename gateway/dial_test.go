package gateway

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResolverLookupLiterals: an IP literal is its own answer, unmapped,
// and no resolver is asked; a name, however it ends, is asked for.
func TestResolverLookupLiterals(t *testing.T) {
	tests := []struct {
		host  string
		want  []netip.Addr
		asked bool
	}{
		{host: "127.0.0.1", want: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{host: "::1", want: []netip.Addr{netip.MustParseAddr("::1")}},
		{host: "::ffff:10.0.0.1", want: []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
		{host: "fe80::1%eth0", want: []netip.Addr{netip.MustParseAddr("fe80::1%eth0")}},
		{host: "registry.npmjs.org", want: []netip.Addr{netip.MustParseAddr("203.0.113.9")}, asked: true},
		{host: "host9", want: []netip.Addr{netip.MustParseAddr("203.0.113.9")}, asked: true},
		{host: "1password.com", want: []netip.Addr{netip.MustParseAddr("203.0.113.9")}, asked: true},
	}
	for _, tt := range tests {
		asked := false
		r := &Resolver{lookupNetIP: func(context.Context, string, string) ([]netip.Addr, error) {
			asked = true
			return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
		}}
		got, err := r.Lookup(context.Background(), tt.host)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", tt.host, err)
		}
		if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Lookup(%q): got %v, want %v", tt.host, got, tt.want)
		}
		if asked != tt.asked {
			t.Errorf("Lookup(%q): asked the resolver %v, want %v", tt.host, asked, tt.asked)
		}
	}
}

// TestMayBeIPLiteral: every address netip.ParseAddr takes passes, so that
// lookup never asks a resolver for an IP literal.
func TestMayBeIPLiteral(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "127.0.0.1", "255.255.255.255", "::", "::1", "fe80::1%eth0", "::ffff:1.2.3.4", "2001:db8::a", "ABCD::"} {
		if _, err := netip.ParseAddr(s); err != nil {
			t.Fatalf("netip.ParseAddr(%q): %v", s, err)
		}
		if !mayBeIPLiteral(s) {
			t.Errorf("mayBeIPLiteral(%q): got false, want true", s)
		}
	}
	for _, s := range []string{"", "localhost", "registry.npmjs.org", "1password.com", "a.b"} {
		if mayBeIPLiteral(s) {
			t.Errorf("mayBeIPLiteral(%q): got true, want false", s)
		}
	}
}

// BenchmarkResolverLookup measures the lookup of every forwarded
// request's host: a name with a static answer (as --resolve and the
// tests give), and an IP literal.
func BenchmarkResolverLookup(b *testing.B) {
	r := &Resolver{}
	if err := r.AddStatic("registry.npmjs.org", netip.MustParseAddr("203.0.113.9")); err != nil {
		b.Fatal(err)
	}
	for _, host := range []string{"registry.npmjs.org", "203.0.113.9"} {
		b.Run(host, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.lookup(context.Background(), host, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
