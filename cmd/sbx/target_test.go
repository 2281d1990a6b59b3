package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/netpolicy"
)

func TestParseTarget(t *testing.T) {
	connect := func(host string, port uint16) netpolicy.Target {
		return netpolicy.Target{Host: host, Port: port, Method: "CONNECT"}
	}
	http := func(method, host string, port uint16, path string) netpolicy.Target {
		return netpolicy.Target{Host: host, Port: port, Method: method, Path: path}
	}
	tests := []struct {
		arg, method, path string
		want              netpolicy.Target
	}{
		// host[:port]
		{arg: "example.com", want: connect("example.com", 443)},
		{arg: "example.com:443", want: connect("example.com", 443)},
		{arg: "example.com:8080", want: connect("example.com", 8080)},
		{arg: "example.com:80", want: connect("example.com", 80)},
		{arg: "Example.COM.", want: connect("Example.COM.", 443)}, // Decide normalizes
		{arg: "[::1]:443", want: connect("[::1]", 443)},
		{arg: "[2001:db8::1]", want: connect("[2001:db8::1]", 443)},
		{arg: "2001:db8::1", want: connect("2001:db8::1", 443)},
		{arg: "127.0.0.1:22", want: connect("127.0.0.1", 22)},
		{arg: "127.1", want: connect("127.1", 443)},                       // Decide says invalid
		{arg: "user@example.com", want: connect("user@example.com", 443)}, // Decide says invalid
		{arg: "[example.com]:443", want: connect("[example.com]", 443)},   // Decide says invalid
		{arg: "example.com", method: "post", want: http("POST", "example.com", 80, "/")},
		{arg: "example.com", path: "/v1/x", want: http("GET", "example.com", 80, "/v1/x")},
		{arg: "example.com:443", method: "GET", want: http("GET", "example.com", 443, "/")},
		{arg: "example.com:8080", path: "/a%2Fb?q=1#f", want: http("GET", "example.com", 8080, "/a%2Fb")},
		{arg: "example.com", method: "CONNECT", want: connect("example.com", 443)},

		// URLs
		{arg: "http://example.com", want: http("GET", "example.com", 80, "/")},
		{arg: "http://example.com/admin?token=x#frag", want: http("GET", "example.com", 80, "/admin")},
		{arg: "http://example.com:8080/a/b", want: http("GET", "example.com", 8080, "/a/b")},
		{arg: "http://example.com/%61dmin", want: http("GET", "example.com", 80, "/%61dmin")},
		{arg: "HTTP://example.com/", method: "delete", want: http("DELETE", "example.com", 80, "/")},
		{arg: "http://example.com", path: "/x", want: http("GET", "example.com", 80, "/x")},
		{arg: "http://example.com", method: "CONNECT", want: connect("example.com", 80)},
		{arg: "http://[::1]:8080/", want: http("GET", "::1", 8080, "/")},
		{arg: "https://example.com", want: connect("example.com", 443)},
		{arg: "https://example.com/secret/path?q", want: connect("example.com", 443)},
		{arg: "https://example.com:8443/", want: connect("example.com", 8443)},
		{arg: "https://example.com/v1/", method: "GET", want: http("GET", "example.com", 443, "/v1/")},
		{arg: "https://example.com", path: "/v1/", want: http("GET", "example.com", 443, "/v1/")},
		{arg: "ws://example.com/socket", want: http("GET", "example.com", 80, "/socket")},
		{arg: "wss://example.com/socket", want: connect("example.com", 443)},
		{arg: "http://127.1/", want: http("GET", "127.1", 80, "/")},
		{arg: "http://user@example.com/", want: http("GET", "user@example.com", 80, "/")},
		{arg: "https://user:secret@example.com/", want: connect("user:xxxxx@example.com", 443)},
	}
	for _, tt := range tests {
		got, err := parseTarget(tt.arg, tt.method, tt.path)
		if err != nil {
			t.Errorf("parseTarget(%q, %q, %q): %v", tt.arg, tt.method, tt.path, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseTarget(%q, %q, %q) (-want +got):\n%s", tt.arg, tt.method, tt.path, diff)
		}
	}
}

func TestParseTargetErrors(t *testing.T) {
	tests := []struct {
		arg, method, path string
		wantErr           string // a part of the message
	}{
		{arg: "", wantErr: "empty TARGET"},
		{arg: "ftp://example.com/", wantErr: `scheme "ftp" is not supported; use http://, https://, ws:// or wss://`},
		{arg: "file:///etc/passwd", wantErr: `scheme "file" is not supported`},
		{arg: "http:///path", wantErr: "has no host"},
		{arg: "http://exa mple.com/", wantErr: "not a valid URL"},
		{arg: "http://example.com:99999/", wantErr: `port "99999"`},
		{arg: "https://example.com:0/", wantErr: `port "0"`},
		{arg: "example.com:", wantErr: `port ""`},
		{arg: "example.com:https", wantErr: `port "https"`},
		{arg: "example.com:65536", wantErr: `port "65536"`},
		{arg: ":443", wantErr: "has no host"},
		{arg: "[::1", wantErr: "unclosed '['"},
		{arg: "[::1]443", wantErr: "after ']'"},
		{arg: "example.com/path", wantErr: "http://example.com/path"},
		{arg: "example.com", method: "GET /", wantErr: "--method"},
		{arg: "example.com", path: "v1", wantErr: "--path \"v1\" must start with '/'"},
		{arg: "example.com", method: "CONNECT", path: "/", wantErr: "a tunnel has no path"},
		{arg: "http://example.com/a", path: "/b", wantErr: "give one of them"},
	}
	for _, tt := range tests {
		got, err := parseTarget(tt.arg, tt.method, tt.path)
		if err == nil {
			t.Errorf("parseTarget(%q, %q, %q) = %+v, want an error", tt.arg, tt.method, tt.path, got)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseTarget(%q, %q, %q): got error %q, want it to hold %q", tt.arg, tt.method, tt.path, err, tt.wantErr)
		}
	}
}
