package netpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCheckTarget: the request Check decides for a URL or host[:port],
// --method and --path, and for what the gateway's parser refuses, the
// block by rule invalid with the parser's reason and the target as sent,
// its password hidden.
func TestCheckTarget(t *testing.T) {
	connect := func(host string, port uint16) Target {
		return Target{Host: host, Port: port, Method: "CONNECT"}
	}
	http := func(method, host string, port uint16, path string) Target {
		return Target{Host: host, Port: port, Method: method, Path: path}
	}
	tests := []struct {
		url, method, path string
		want              Target
		refused           string // the target as sent, when the gateway refuses it
		reason            string // a part of the refusal's reason
	}{
		// host[:port]
		{url: "example.com", want: connect("example.com", 443)},
		{url: "example.com:443", want: connect("example.com", 443)},
		{url: "example.com:8080", want: connect("example.com", 8080)},
		{url: "example.com:80", want: connect("example.com", 80)},
		{url: "Example.COM.", want: connect("Example.COM.", 443)}, // Decide normalizes
		{url: "[::1]:443", want: connect("::1", 443)},
		{url: "[2001:db8::1]", want: connect("2001:db8::1", 443)},
		{url: "2001:db8::1", want: connect("2001:db8::1", 443)},
		{url: "127.0.0.1:22", want: connect("127.0.0.1", 22)},
		{url: "127.1", want: connect("127.1", 443)}, // Decide says invalid
		{url: "example.com", method: "post", want: http("POST", "example.com", 80, "/")},
		{url: "example.com", path: "/v1/x", want: http("GET", "example.com", 80, "/v1/x")},
		{url: "example.com:443", method: "GET", want: http("GET", "example.com", 443, "/")},
		{url: "example.com:8080", path: "/a%2Fb?q=1#f", want: http("GET", "example.com", 8080, "/a%2Fb")},
		{url: "example.com", method: "CONNECT", want: connect("example.com", 443)},
		{url: "2001:db8::1", method: "GET", want: http("GET", "2001:db8::1", 80, "/")},

		// host[:port] the gateway refuses
		{url: "user@example.com", refused: "user@example.com:443", reason: "userinfo"},
		{url: "user:secret@example.com:443", refused: "user:xxxxx@example.com:443", reason: "userinfo"},
		{url: "[example.com]:443", refused: "[example.com]:443", reason: "brackets must hold an IPv6 address"},
		{url: "example.com:0", refused: "example.com:0", reason: "port 0"},
		{url: "example.com:65536", refused: "example.com:65536", reason: "out of range"},
		{url: "example.com:0443", refused: "example.com:0443", reason: "leading zeros"},
		{url: "example.com:", refused: "example.com:", reason: "empty port"},
		{url: "example.com:https", refused: "example.com:https", reason: "not a decimal number"},
		{url: ":443", refused: ":443", reason: "empty host"},
		{url: "[::1", refused: "[::1", reason: "unclosed '['"},
		{url: "[::1]443", refused: "[::1]443", reason: "after ']'"},
		{url: "[fe80::1%eth0]:443", refused: "[fe80::1%eth0]:443", reason: "zone"},
		{url: "ex%61mple.com", refused: "ex%61mple.com:443", reason: "percent-encoding"},
		{url: "b\u00fccher.de", refused: "b\u00fccher.de:443", reason: "non-ASCII"},
		{url: "example.com:443:443", refused: "example.com:443:443", reason: "brackets"},

		// URLs
		{url: "http://example.com", want: http("GET", "example.com", 80, "/")},
		{url: "http://example.com/admin?token=x#frag", want: http("GET", "example.com", 80, "/admin")},
		{url: "http://example.com:8080/a/b", want: http("GET", "example.com", 8080, "/a/b")},
		{url: "http://example.com/%61dmin", want: http("GET", "example.com", 80, "/%61dmin")},
		{url: "HTTP://example.com/", method: "delete", want: http("DELETE", "example.com", 80, "/")},
		{url: "http://example.com", path: "/x", want: http("GET", "example.com", 80, "/x")},
		{url: "http://example.com?q", path: "/x", want: http("GET", "example.com", 80, "/x")},
		{url: "http://example.com", method: "CONNECT", want: connect("example.com", 80)},
		{url: "http://[::1]:8080/", want: http("GET", "::1", 8080, "/")},
		{url: "https://example.com", want: connect("example.com", 443)},
		{url: "https://example.com/secret/path?q", want: connect("example.com", 443)},
		{url: "https://example.com:8443/", want: connect("example.com", 8443)},
		{url: "https://example.com/v1/", method: "GET", want: connect("example.com", 443)}, // not inspected: the tunnel
		{url: "https://[2001:db8::1]/", want: connect("2001:db8::1", 443)},
		{url: "ws://example.com/socket", want: http("GET", "example.com", 80, "/socket")},
		{url: "wss://example.com/socket", want: connect("example.com", 443)},
		{url: "http://127.1/", want: http("GET", "127.1", 80, "/")},
		{url: "http://example.com./", want: http("GET", "example.com.", 80, "/")},

		// URLs the gateway refuses
		{url: "http://user@example.com/", refused: "http://user@example.com/", reason: "userinfo"},
		{url: "https://user:secret@example.com/", refused: "user:xxxxx@example.com:443", reason: "userinfo"},
		{url: "http:///path", refused: "http:///path", reason: "empty host"},
		{url: "https:///path", refused: ":443", reason: "empty host"},
		{url: "http://exa mple.com/", refused: "http://exa mple.com/", reason: "whitespace"},
		{url: "http://example.com:99999/", refused: "http://example.com:99999/", reason: "out of range"},
		{url: "https://example.com:0/", refused: "example.com:0", reason: "port 0"},
		{url: "http://::1/", refused: "http://::1/", reason: "brackets"},
		{url: "http://ex%61mple.com/", refused: "http://ex%61mple.com/", reason: "percent-encoding"},
		{url: "http://example.com/a%zz", refused: "http://example.com/a%zz", reason: "two hex digits"},
		{url: "http://example.com/<x>", refused: "http://example.com/<x>", reason: "must be percent-encoded"},
		{url: "http://b\u00fccher.de/", refused: "http://b\u00fccher.de/", reason: "non-ASCII"},
		{url: "http://example.com", path: "/a b", refused: "http://example.com/a b", reason: "whitespace"},
	}
	p := mustCompile(t, Block)
	for _, tt := range tests {
		c, err := p.Check(Request{URL: tt.url, Method: tt.method, Path: tt.path})
		if err != nil {
			t.Errorf("Check(%q, %q, %q): %v", tt.url, tt.method, tt.path, err)
			continue
		}
		if tt.refused == "" {
			if diff := cmp.Diff(tt.want, c.Target); diff != "" || c.Refused != "" {
				t.Errorf("Check(%q, %q, %q): refused %q, target (-want +got):\n%s", tt.url, tt.method, tt.path, c.Refused, diff)
			}
			continue
		}
		if c.Refused != tt.refused || c.Decision.Action != Block || c.Decision.Rule != RuleInvalid || !strings.Contains(c.Decision.Reason, tt.reason) {
			t.Errorf("Check(%q, %q, %q) = refused %q, %+v; want refused %q, a block by rule invalid saying %q",
				tt.url, tt.method, tt.path, c.Refused, c.Decision, tt.refused, tt.reason)
		}
	}
}

func TestCheckTargetErrors(t *testing.T) {
	tests := []struct {
		url, method, path string
		wantErr           string // a part of the message
	}{
		{url: "", wantErr: "empty target"},
		{url: "ftp://example.com/", wantErr: `scheme "ftp" is not supported; use http://, https://, ws:// or wss://`},
		{url: "FILE:///etc/passwd", wantErr: `scheme "file" is not supported`},
		{url: "example.com/path", wantErr: "http://example.com/path"},
		{url: "example.com?q", wantErr: "neither host[:port] nor a URL"},
		{url: "example.com", method: "GET /", wantErr: "not an HTTP method"},
		{url: "example.com", path: "v1", wantErr: "must start with '/'"},
		{url: "example.com", method: "CONNECT", path: "/", wantErr: "a tunnel has no path"},
		{url: "http://example.com/a", path: "/b", wantErr: "give one of them"},
	}
	p := mustCompile(t, Block)
	for _, tt := range tests {
		c, err := p.Check(Request{URL: tt.url, Method: tt.method, Path: tt.path})
		if err == nil {
			t.Errorf("Check(%q, %q, %q) = %+v, want an error", tt.url, tt.method, tt.path, c)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Check(%q, %q, %q): got error %q, want it to hold %q", tt.url, tt.method, tt.path, err, tt.wantErr)
		}
		if _, _, lerr := (Request{URL: tt.url, Method: tt.method, Path: tt.path}).RequestLine(); lerr == nil || lerr.Error() != err.Error() {
			t.Errorf("RequestLine(%q, %q, %q): got error %v, want Check's, %v", tt.url, tt.method, tt.path, lerr, err)
		}
	}
	if _, err := p.Check(Request{URL: "http://example.com/a", Path: "/b"}); !errors.Is(err, ErrTwoPaths) {
		t.Errorf("Check with two paths: got %v, want ErrTwoPaths", err)
	}
}

// TestCheckInspected: a tunnel the policy inspects is decided as the
// gateway decides it: DecideTunnel, then the request of an https:// URL
// in it when the tunnel opens; a host[:port] names the tunnel alone.
func TestCheckInspected(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{ID: "read", Host: "api.example.com", Methods: []string{"GET"}, Action: Allow},
		Rule{ID: "shut", Host: "shut.example.com", Action: Block},
		Rule{ID: "shut-get", Host: "shut.example.com", Methods: []string{"GET"}, Action: Allow},
	)
	tests := []struct {
		url, method string
		want        Target
		rule        string
		action      Action
	}{
		{url: "https://api.example.com/v1", want: Target{Host: "api.example.com", Port: 443, Method: "GET", Path: "/v1"}, rule: "read", action: Allow},
		{url: "https://api.example.com/v1", method: "POST", want: Target{Host: "api.example.com", Port: 443, Method: "POST", Path: "/v1"}, rule: RuleDefault, action: Block},
		{url: "https://api.example.com/v1", method: "CONNECT", want: Target{Host: "api.example.com", Port: 443, Method: "CONNECT"}, rule: "read", action: Allow},
		{url: "api.example.com", want: Target{Host: "api.example.com", Port: 443, Method: "CONNECT"}, rule: "read", action: Allow},
		// The tunnel is refused: no request in it is decided.
		{url: "https://shut.example.com/", want: Target{Host: "shut.example.com", Port: 443, Method: "CONNECT"}, rule: "shut", action: Block},
	}
	for _, tt := range tests {
		c, err := p.Check(Request{URL: tt.url, Method: tt.method})
		if err != nil {
			t.Errorf("Check(%q, %q): %v", tt.url, tt.method, err)
			continue
		}
		if diff := cmp.Diff(tt.want, c.Target); diff != "" || !c.Inspected || c.Decision.Rule != tt.rule || c.Decision.Action != tt.action {
			t.Errorf("Check(%q, %q) = inspected %t, %+v; want inspected, %s by rule %s; target (-want +got):\n%s",
				tt.url, tt.method, c.Inspected, c.Decision, tt.action, tt.rule, diff)
		}
	}
}
