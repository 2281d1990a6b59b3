package netpolicy

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkReason checks what a *TargetError promises of its reason.
func checkReason(t *testing.T, se *TargetError) {
	t.Helper()
	if se.Reason == "" || strings.IndexFunc(se.Reason, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		t.Errorf("got reason %q, want a non-empty printable ASCII sentence", se.Reason)
	}
	if se.Error() != se.Reason || !errors.Is(se, ErrInvalidTarget) {
		t.Errorf("got Error() %q, errors.Is(ErrInvalidTarget) %t; want the reason, and true", se.Error(), errors.Is(se, ErrInvalidTarget))
	}
}

// asTargetError returns err as a *TargetError, nil for nil, and fails the
// test for an error of another type.
func asTargetError(t *testing.T, err error) *TargetError {
	t.Helper()
	if err == nil {
		return nil
	}
	var se *TargetError
	if !errors.As(err, &se) {
		t.Fatalf("got error %v (%T), want a *TargetError", err, err)
	}
	return se
}

func TestParseConnectTarget(t *testing.T) {
	tests := []struct {
		in       string
		wantHost string
		wantPort uint16
		wantErr  bool
	}{
		{in: "example.com:443", wantHost: "example.com", wantPort: 443},
		{in: "EXAMPLE.com.:8443", wantHost: "EXAMPLE.com.", wantPort: 8443},
		{in: "[::1]:443", wantHost: "::1", wantPort: 443},
		{in: "[2001:db8::1]:443", wantHost: "2001:db8::1", wantPort: 443},
		{in: "[::ffff:1.2.3.4]:443", wantHost: "::ffff:1.2.3.4", wantPort: 443},
		{in: "1.2.3.4:443", wantHost: "1.2.3.4", wantPort: 443},
		{in: "localhost:1", wantHost: "localhost", wantPort: 1},
		{in: "a_b-c.example:65535", wantHost: "a_b-c.example", wantPort: 65535},
		{in: "127.1:443", wantHost: "127.1", wantPort: 443}, // NormalizeHost refuses it later

		{in: "", wantErr: true},
		{in: ":443", wantErr: true},
		{in: "host:99999", wantErr: true},
		{in: "host:65536", wantErr: true},
		{in: "host:0", wantErr: true},
		{in: "host:00", wantErr: true},
		{in: "host:0443", wantErr: true},
		{in: "[::1", wantErr: true},
		{in: "[::1:443", wantErr: true},
		{in: "::1:443", wantErr: true},
		{in: "2001:db8::1", wantErr: true},
		{in: "host:", wantErr: true},
		{in: "host", wantErr: true},
		{in: "[::1]", wantErr: true},
		{in: "[::1]:", wantErr: true},
		{in: "[::1]x:443", wantErr: true},
		{in: "[]:443", wantErr: true},
		{in: "[1.2.3.4]:443", wantErr: true},
		{in: "[example.com]:443", wantErr: true},
		{in: "[fe80::1%eth0]:443", wantErr: true},
		{in: "[fe80::1%25eth0]:443", wantErr: true},
		{in: "ho[st:443", wantErr: true},
		{in: "host]:443", wantErr: true},
		{in: "host:-1", wantErr: true},
		{in: "host:+443", wantErr: true},
		{in: "host:443 ", wantErr: true},
		{in: "host: 443", wantErr: true},
		{in: " host:443", wantErr: true},
		{in: "ho st:443", wantErr: true},
		{in: "host:4\t43", wantErr: true},
		{in: "host:https", wantErr: true},
		{in: "host:0x1bb", wantErr: true},
		{in: "host:443/x", wantErr: true},
		{in: "host:443\\x", wantErr: true},
		{in: "host:443?x", wantErr: true},
		{in: "host:443#x", wantErr: true},
		{in: "user@host:443", wantErr: true},
		{in: "user:pw@host:443", wantErr: true},
		{in: "http://host:443", wantErr: true},
		{in: "https://host:443/", wantErr: true},
		{in: "ex%61mple.com:443", wantErr: true},
		{in: "exa\"mple.com:443", wantErr: true},
		{in: "b\xc3\xbccher.de:443", wantErr: true},
		{in: "host:443:443", wantErr: true},
		{in: "host\x00:443", wantErr: true},
	}
	for _, tt := range tests {
		host, port, err := ParseConnectTarget(tt.in)
		if tt.wantErr {
			var se *TargetError
			if !errors.As(err, &se) {
				t.Errorf("ParseConnectTarget(%q) = %q, %d, %v; want a *TargetError", tt.in, host, port, err)
				continue
			}
			checkReason(t, se)
			if !strings.Contains(se.Reason, "host:port") {
				t.Errorf("ParseConnectTarget(%q): got reason %q, want one naming the host:port form", tt.in, se.Reason)
			}
			continue
		}
		if err != nil || host != tt.wantHost || port != tt.wantPort {
			t.Errorf("ParseConnectTarget(%q) = %q, %d, %v; want %q, %d, nil", tt.in, host, port, err, tt.wantHost, tt.wantPort)
		}
	}
}

func TestParseConnectTargetReasons(t *testing.T) {
	for in, want := range map[string]string{
		":443":             "empty host",
		"host:99999":       "out of range",
		"host:0":           "port 0",
		"host:0443":        "leading zeros",
		"[::1":             "unclosed '['",
		"::1:443":          "IPv6 address must be in brackets",
		"host:":            "empty port",
		"host":             "missing port",
		"host:-1":          "not a decimal number",
		"host:443/x":       "path",
		"user@host:443":    "userinfo",
		"http://host:443":  "scheme",
		"ho st:443":        "whitespace",
		"[1.2.3.4]:443":    "IPv6",
		"ex%61mple.com:80": "percent-encoding",
	} {
		_, _, err := ParseConnectTarget(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConnectTarget(%q): got error %v, want one that says %q", in, err, want)
		}
	}
}

func TestParseProxyTarget(t *testing.T) {
	tests := []struct {
		in         string
		want       *url.URL // nil: refused with 400
		wantReason string   // part of the reason, when refused
	}{
		{in: "http://example.com/", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/"}},
		{in: "http://example.com", want: &url.URL{Scheme: "http", Host: "example.com"}},
		{in: "HTTP://Example.COM/A", want: &url.URL{Scheme: "http", Host: "Example.COM", Path: "/A"}},
		{in: "http://example.com:8080/x?y=1&z", want: &url.URL{Scheme: "http", Host: "example.com:8080", Path: "/x", RawQuery: "y=1&z"}},
		{in: "http://example.com?q", want: &url.URL{Scheme: "http", Host: "example.com", RawQuery: "q"}},
		{in: "http://example.com/?", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/", ForceQuery: true}},
		{in: "http://[2001:db8::1]:80/x", want: &url.URL{Scheme: "http", Host: "[2001:db8::1]:80", Path: "/x"}},
		{in: "http://[::1]/", want: &url.URL{Scheme: "http", Host: "[::1]", Path: "/"}},
		{in: "http://1.2.3.4/", want: &url.URL{Scheme: "http", Host: "1.2.3.4", Path: "/"}},
		{in: "http://example.com/a%2Fb/%41%7e", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/a/b/A~", RawPath: "/a%2Fb/%41%7e"}},
		{in: "http://example.com/a%20b", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/a b"}},
		{in: "http://example.com/..;/x:@!$&'()*+,=~", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/..;/x:@!$&'()*+,=~", RawPath: "/..;/x:@!$&'()*+,=~"}},
		{in: "http://example.com/p?a={\"b\"}|^`<>\\", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/p", RawQuery: "a={\"b\"}|^`<>\\"}},
		{in: "http://example.com/p?x#", wantReason: "fragment"},

		{in: "/path", wantReason: "HTTP_PROXY"},
		{in: "/", wantReason: "HTTP_PROXY"},
		{in: "*", wantReason: "asterisk"},
		{in: "", wantReason: "empty"},
		{in: "https://example.com/", wantReason: "use CONNECT for https:// URLs (set HTTPS_PROXY)"},
		{in: "HTTPS://example.com/", wantReason: "use CONNECT"},
		{in: "ftp://example.com/", wantReason: "scheme \"ftp\""},
		{in: "ws://example.com/", wantReason: "scheme \"ws\""},
		{in: "example.com:80", wantReason: "CONNECT only"},
		{in: "[::1]:80", wantReason: "CONNECT only"},
		{in: "example.com", wantReason: "not an absolute URL"},
		{in: "http:example.com/", wantReason: "not an absolute URL"},
		{in: "http:/example.com/", wantReason: "not an absolute URL"},
		{in: "mailto:a@example.com", wantReason: "not an absolute URL"},
		{in: "1http://example.com/", wantReason: "not an absolute URL"},
		{in: "://example.com/", wantReason: "not an absolute URL"},
		{in: "http://user@example.com/", wantReason: "userinfo"},
		{in: "http://user:pw@example.com/", wantReason: "userinfo"},
		{in: "http://example.com/@x", want: &url.URL{Scheme: "http", Host: "example.com", Path: "/@x"}},
		{in: "http://example.com/#frag", wantReason: "fragment"},
		{in: "http:///path", wantReason: "empty host"},
		{in: "http://", wantReason: "empty host"},
		{in: "http://:80/", wantReason: "empty host"},
		{in: "http://example.com:/", wantReason: "empty port"},
		{in: "http://example.com:0/", wantReason: "port 0"},
		{in: "http://example.com:65536/", wantReason: "out of range"},
		{in: "http://example.com:080/", wantReason: "leading zeros"},
		{in: "http://example.com:-80/", wantReason: "not a decimal number"},
		{in: "http://example.com:http/", wantReason: "not a decimal number"},
		{in: "http://::1/", wantReason: "brackets"},
		{in: "http://[::1/", wantReason: "unclosed"},
		{in: "http://[fe80::1%25en0]/", wantReason: "zone"},
		{in: "http://ex%61mple.com/", wantReason: "percent-encoding"},
		{in: "http://exa<mple.com/", wantReason: "not allowed in a host"},
		{in: "http://example.com\\@evil.com/", wantReason: "userinfo"},
		{in: "http://example.com\\.evil.com/", wantReason: "not allowed in a host"},
		{in: "http://example.com/a%zz", wantReason: "two hex digits"},
		{in: "http://example.com/a%2", wantReason: "two hex digits"},
		{in: "http://example.com/a\\b", wantReason: "must be percent-encoded"},
		{in: "http://example.com/a{b}", wantReason: "must be percent-encoded"},
		{in: "http://example.com/a\"b", wantReason: "must be percent-encoded"},
		{in: "http://example.com/a b", wantReason: "whitespace"},
		{in: "http://example.com/\x00", wantReason: "control"},
		{in: "http://example.com/\xc3\xa9", wantReason: "non-ASCII"},
	}
	for _, tt := range tests {
		got, err := ParseProxyTarget(tt.in)
		se := asTargetError(t, err)
		if tt.want == nil {
			if se == nil {
				t.Errorf("ParseProxyTarget(%q) = %v; want a 400 saying %q", tt.in, got, tt.wantReason)
				continue
			}
			if !strings.Contains(se.Reason, tt.wantReason) {
				t.Errorf("ParseProxyTarget(%q): got %q, want a refusal saying %q", tt.in, se.Reason, tt.wantReason)
			}
			checkReason(t, se)
			continue
		}
		if se != nil {
			t.Errorf("ParseProxyTarget(%q): got error %v, want %v", tt.in, se, tt.want)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseProxyTarget(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
		if path, _, _ := strings.Cut(tt.in[strings.Index(tt.in, "://")+3:], "?"); got.EscapedPath() != path[len(got.Host):] {
			t.Errorf("ParseProxyTarget(%q): got EscapedPath %q, want %q", tt.in, got.EscapedPath(), path[len(got.Host):])
		}
	}
}

func FuzzParseConnectTarget(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "[2001:db8::1]:443", "1.2.3.4:443", ":443", "host:99999", "host:0", "[::1",
		"::1:443", "host:", "host:-1", "host:443/x", "user@host:443", "[::1]:443", "[::ffff:1.2.3.4]:80",
		"[fe80::1%eth0]:443", "http://host:80", "host:0443", "ho st:1", "a.b.c.:65535",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		host, port, err := ParseConnectTarget(in)
		if err != nil {
			var se *TargetError
			if !errors.As(err, &se) {
				t.Fatalf("ParseConnectTarget(%q): got error %v, want a *TargetError", in, err)
			}
			checkReason(t, se)
			if host != "" || port != 0 {
				t.Fatalf("ParseConnectTarget(%q) = %q, %d with an error", in, host, port)
			}
			return
		}
		if host == "" || port == 0 {
			t.Fatalf("ParseConnectTarget(%q) = %q, %d; want a host and a port 1-65535", in, host, port)
		}
		joined := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if joined != in {
			t.Fatalf("ParseConnectTarget(%q) = %q, %d, joined as %q; want the input back", in, host, port, joined)
		}
		h2, p2, err := ParseConnectTarget(joined)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("ParseConnectTarget(%q) = %q, %d, %v; want %q, %d", joined, h2, p2, err, host, port)
		}
		sh, sp, err := net.SplitHostPort(in)
		if err != nil || sh != host || sp != strconv.Itoa(int(port)) {
			t.Fatalf("net.SplitHostPort(%q) = %q, %q, %v; want %q, %d", in, sh, sp, err, host, port)
		}
		if _, err := NormalizeHost(host); err != nil && strings.Contains(host, ":") {
			t.Fatalf("NormalizeHost(%q) refuses an IPv6 address ParseConnectTarget accepted: %v", host, err)
		}
		if u, se := ParseProxyTarget("http://" + in + "/"); se != nil || u.Hostname() != host || u.Port() != strconv.Itoa(int(port)) {
			t.Fatalf("ParseProxyTarget(%q) = %v, %v; want host %q, port %d", "http://"+in+"/", u, se, host, port)
		}
	})
}

func FuzzParseProxyTarget(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "HTTP://Example.com:8080/a%2Fb?q=1", "http://[::1]:80/x", "https://example.com/",
		"/path", "*", "example.com:80", "http://user@example.com/", "http://example.com/#f", "http://:80/",
		"http://example.com:080/", "http://example.com/a%zz", "http://example.com/..%2f..;/x?y#", "ftp://x/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := ParseProxyTarget(in)
		if se := asTargetError(t, err); se != nil {
			if u != nil {
				t.Fatalf("ParseProxyTarget(%q) = %v, %v; want nil and a *TargetError", in, u, se)
			}
			checkReason(t, se)
			return
		}
		if u.Scheme != "http" || u.User != nil || u.Opaque != "" || u.Fragment != "" {
			t.Fatalf("ParseProxyTarget(%q) = %#v; want a plain http URL", in, u)
		}
		// The URL is made without url.Parse; it must be the one url.Parse
		// makes.
		if ref, err := url.Parse(in); err != nil || *ref != *u {
			t.Fatalf("ParseProxyTarget(%q) = %#v; url.Parse gives %#v, %v", in, u, ref, err)
		}
		if _, _, err := ParseConnectTarget(u.Hostname() + ":1"); err != nil && !strings.Contains(u.Host, "[") {
			t.Fatalf("ParseProxyTarget(%q) accepted host %q that CONNECT refuses: %v", in, u.Hostname(), err)
		}
		if p := u.Port(); p != "" {
			if _, reason := parseTargetPort(p); reason != "" {
				t.Fatalf("ParseProxyTarget(%q): got port %q: %s", in, p, reason)
			}
		}
		// The path is the one sent, byte for byte.
		rest := in[len("http://"):]
		pathQuery := rest[len(u.Host):]
		path, _, _ := strings.Cut(pathQuery, "?")
		if u.EscapedPath() != path {
			t.Fatalf("ParseProxyTarget(%q): got EscapedPath %q, want %q", in, u.EscapedPath(), path)
		}
		again, se := ParseProxyTarget(u.String())
		if se != nil {
			t.Fatalf("ParseProxyTarget(%q) = %v, but %q is refused: %v", in, u, u.String(), se)
		}
		if *again != *u {
			t.Fatalf("ParseProxyTarget(%q) = %#v, parsed again = %#v", in, u, again)
		}
	})
}
