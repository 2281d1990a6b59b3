package netpolicy

import "testing"

func TestCanonicalPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/", "/"},
		{"/v1/users", "/v1/users"},
		{"/v1/users/", "/v1/users/"},
		{"/.well-known/x", "/.well-known/x"},
		{"/a/..b/c.", "/a/..b/c."},
		{"/@scope%2fname", "/@scope/name"},
		{"/%61dmin", "/admin"},
		{"/%2e%2E/admin", "/admin"},
		{"/v1/../admin", "/admin"},
		{"/v1/./x", "/v1/x"},
		{"/v1/..", "/"},
		{"/v1/x/..", "/v1/"},
		{"/v1/.", "/v1/"},
		{"/../../etc", "/etc"},
		{"//admin", "/admin"},
		{"/a///b//", "/a/b/"},
		{"/a\\b", "/a/b"},
		{"/a%5cb", "/a/b"},
		{"/100%", "/100%25"},
		{"/100%25", "/100%25"},
		{"/%2561", "/%2561"},
		{"/%zz", "/%25zz"},
		{"/a%20b", "/a%20b"},
		{"/a b", "/a%20b"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/café", "/caf%C3%A9"},
		{"/%00", "/%00"},
		{"*", "*"},
		{"", "/"},
	}
	for _, tt := range tests {
		got := CanonicalPath(tt.in)
		if got != tt.want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := CanonicalPath(got); again != got {
			t.Errorf("CanonicalPath(%q) = %q is not stable", got, again)
		}
	}
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/", "/v1/../x", "/%2e%2e/", "//a", "/a\\b", "/100%", "/%2561", "/café"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := CanonicalPath(in)
		if again := CanonicalPath(got); again != got {
			t.Fatalf("CanonicalPath(%q) = %q, then %q", in, got, again)
		}
		if hasSlashPrefix(in) && !isCanonicalPath(got) {
			t.Fatalf("CanonicalPath(%q) = %q, which isCanonicalPath rejects", in, got)
		}
	})
}

func hasSlashPrefix(s string) bool { return len(s) > 0 && s[0] == '/' }
