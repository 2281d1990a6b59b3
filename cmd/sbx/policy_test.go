package main

import (
	"encoding/json"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/netpolicy"
)

const validPolicy = `version: 1
default: block
mode: enforce
rules:
  - id: npm
    host: registry.npmjs.org
    ports: [443]
    action: allow
  - host: "*.example.com"
    action: allow
  - id: api-read
    host: api.example.org
    ports: [80]
    methods: [GET]
    path: /v1/
    action: allow
`

// invalidPolicy has problems on lines 2, 6, 9 and 11.
const invalidPolicy = `version: 1
default: maybe
rules:
  - host: example.com
    action: allow
  - host: "*."
    action: allow
  - host: ok.example.com
    action: explode
  - host: x.example.com
    colour: red
    action: allow
`

func TestPolicyValidate(t *testing.T) {
	valid := writeFile(t, "policy.yaml", validPolicy)
	stdout, stderr, code := runCLI(t, "policy", "validate", valid)
	if want := valid + ": valid (3 rules, default block, mode enforce)\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("validate valid file: got exit %d, stdout %q, stderr %q; want exit 0, stdout %q", code, stdout, stderr, want)
	}

	audit := writeFile(t, "audit.json", `{"version": 1, "default": "allow", "mode": "audit", "rules": [{"host": "a.example", "action": "block"}]}`)
	stdout, _, code = runCLI(t, "policy", "validate", audit)
	if want := audit + ": valid (1 rule, default allow, mode audit)\n"; code != 0 || stdout != want {
		t.Errorf("validate JSON file: got exit %d, stdout %q; want exit 0, stdout %q", code, stdout, want)
	}

	invalid := writeFile(t, "bad.yaml", invalidPolicy)
	stdout, stderr, code = runCLI(t, "policy", "validate", invalid)
	if code != exitFailure || stdout != "" {
		t.Errorf("validate invalid file: got exit %d, stdout %q; want exit 1, no stdout", code, stdout)
	}
	assertFileErrors(t, stderr, invalid, []int{2, 6, 9, 11})

	stdout, stderr, code = runCLI(t, "policy", "validate", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "missing.yaml: no such file or directory") {
		t.Errorf("validate missing file: got exit %d, stdout %q, stderr %q; want exit 1 and a message naming the file", code, stdout, stderr)
	}
}

// assertFileErrors checks that stderr is one "FILE:LINE: message" line per
// wanted line number, in order.
func assertFileErrors(t *testing.T, stderr, file string, wantLines []int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	var got []string
	for _, l := range lines {
		prefix, msg, ok := strings.Cut(strings.TrimPrefix(l, file+":"), ": ")
		if !strings.HasPrefix(l, file+":") || !ok || msg == "" {
			t.Errorf("error line %q is not FILE:LINE: message with FILE %s", l, file)
			continue
		}
		got = append(got, prefix)
	}
	var want []string
	for _, n := range wantLines {
		want = append(want, strconv.Itoa(n))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("line numbers of the errors (-want +got):\n%s\nstderr:\n%s", diff, stderr)
	}
}

func TestPolicyCheck(t *testing.T) {
	reply := writeFile(t, "reply.json", `{"ok": true}`)
	policy := writeFile(t, "policy.yaml", validPolicy)
	auditPolicy := writeFile(t, "audit.yaml", "version: 1\nmode: audit\n")
	tests := []struct {
		name string
		args []string
		want string // stdout
	}{
		{
			name: "default block, as in the help",
			args: []string{"http://example.com/admin"},
			want: "block  GET http://example.com:80/admin\n  rule:   default\n  reason: no rule matched; the default is block\n",
		},
		{
			name: "allow",
			args: []string{"--allow", "example.com", "example.com"},
			want: "allow  CONNECT example.com:443\n  rule:   r1\n  reason: rule r1: allow example.com\n",
		},
		{
			name: "block beats allow, whatever the order of the flags",
			args: []string{"--allow", "example.com", "--block", "example.com", "example.com"},
			want: "block  CONNECT example.com:443\n  rule:   r1\n  reason: rule r1: block example.com\n",
		},
		{
			name: "intercept beats block and allow",
			args: []string{"--allow", "example.com", "--block", "example.com", "--intercept", "example.com=" + reply, "http://example.com/"},
			want: "intercept  GET http://example.com:80/\n  rule:   r1\n  reason: rule r1: intercept example.com\n  answer: status 200, body of 12 bytes\n",
		},
		{
			// The gateway sees only the tunnel of a host it does not
			// inspect: --method does not make it a plain HTTP request
			// to port 443, which no client would send.
			name: "an https:// target with --method, not inspected: the tunnel's verdict",
			args: []string{"--allow", "example.com", "--method", "POST", "https://example.com/upload"},
			want: "allow  CONNECT example.com:443\n  rule:   r1\n  reason: rule r1: allow example.com\n",
		},
		{
			name: "an HTTPS intercept: the host is inspected and its request answered",
			args: []string{"--intercept", "example.com:443=" + reply, "https://example.com/"},
			want: "intercept  GET https://example.com:443/\n  rule:   r1\n  reason: rule r1: intercept example.com\n  answer: status 200, body of 12 bytes\n" +
				"  inspected: the policy inspects this host, so the gateway decrypts its tunnels and decides each request\n",
		},
		{
			name: "default allow",
			args: []string{"--default", "allow", "example.com:8080"},
			want: "allow  CONNECT example.com:8080\n  rule:   default\n  reason: no rule matched; the default is allow\n",
		},
		{
			name: "a flag's port list",
			args: []string{"--allow", "example.com:8080", "example.com:8443"},
			want: "block  CONNECT example.com:8443\n  rule:   default\n  reason: no rule matched; the default is block\n",
		},
		{
			name: "http URL: port 80 and the path",
			args: []string{"--allow", "example.com:80", "http://EXAMPLE.com/a/b?q=secret"},
			want: "allow  GET http://example.com:80/a/b\n  rule:   r1\n  reason: rule r1: allow example.com\n",
		},
		{
			name: "http URL is not port 443",
			args: []string{"--allow", "example.com:443", "http://example.com/"},
			want: "block  GET http://example.com:80/\n  rule:   default\n  reason: no rule matched; the default is block\n",
		},
		{
			name: "https URL is a CONNECT to 443",
			args: []string{"--allow", "example.com:443", "https://example.com/a"},
			want: "allow  CONNECT example.com:443\n  rule:   r1\n  reason: rule r1: allow example.com\n",
		},
		{
			name: "path rules match plain HTTP",
			args: []string{"--policy", policy, "http://api.example.org/v1/items"},
			want: "allow  GET http://api.example.org:80/v1/items\n  rule:   api-read\n  reason: rule api-read: allow api.example.org\n",
		},
		{
			name: "a path rule makes its host inspected: the CONNECT opens, each request in it is decided",
			args: []string{"--policy", policy, "api.example.org:80"},
			want: "allow  CONNECT api.example.org:80\n  rule:   api-read\n  reason: inspected: each request is decided\n" +
				"  inspected: the policy inspects this host, so the gateway decrypts its tunnels and decides each request\n",
		},
		{
			name: "--method on a host makes a plain request to port 80",
			args: []string{"--policy", policy, "--method", "POST", "api.example.org"},
			want: "block  POST http://api.example.org:80/\n  rule:   default\n  reason: no rule matched; the default is block\n",
		},
		{
			name: "flag rules come before the file's",
			args: []string{"--policy", policy, "--block", "registry.npmjs.org", "registry.npmjs.org"},
			want: "block  CONNECT registry.npmjs.org:443\n  rule:   r1\n  reason: rule r1: block registry.npmjs.org\n",
		},
		{
			name: "file rule",
			args: []string{"--policy", policy, "https://registry.npmjs.org/"},
			want: "allow  CONNECT registry.npmjs.org:443\n  rule:   npm\n  reason: rule npm: allow registry.npmjs.org\n",
		},
		{
			name: "invalid host",
			args: []string{"--default", "allow", "127.1"},
			want: "block  CONNECT 127.1:443\n  rule:   invalid\n" +
				"  reason: invalid target \"127.1\": a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)\n",
		},
		{
			// The gateway's parser refuses userinfo: the verdict is the
			// block it logs, the target as sent, its password hidden.
			name: "a target the gateway refuses",
			args: []string{"--default", "allow", "https://user:secret@example.com/"},
			want: "block  CONNECT user:xxxxx@example.com:443\n  rule:   invalid\n" +
				"  reason: invalid CONNECT target: userinfo (user@) is not allowed; want host:port, such as example.com:443 or [2001:db8::1]:443\n",
		},
		{
			name: "a port the gateway refuses",
			args: []string{"--default", "allow", "http://example.com:0/"},
			want: "block  GET http://example.com:0/\n  rule:   invalid\n  reason: invalid port in the URL: port 0 is not allowed\n",
		},
		{
			name: "guard refuses loopback allowed by the default",
			args: []string{"--default", "allow", "127.0.0.1"},
			want: "block  CONNECT 127.0.0.1:443\n  rule:   guard\n  reason: address guard: 127.0.0.1 is loopback\n",
		},
		{
			name: "an IP allow rule exempts from the guard",
			args: []string{"--allow", "127.0.0.1", "127.0.0.1"},
			want: "allow  CONNECT 127.0.0.1:443\n  rule:   r1\n  reason: rule r1: allow 127.0.0.1\n",
		},
		{
			name: "audit mode",
			args: []string{"--audit", "example.com"},
			want: "block  CONNECT example.com:443\n  rule:   default\n  reason: no rule matched; the default is block\n" +
				"  audit:  the policy is in audit mode: this block would be logged but not enforced\n",
		},
		{
			name: "audit mode from the file",
			args: []string{"--policy", auditPolicy, "--block", "example.com", "http://example.com/"},
			want: "block  GET http://example.com:80/\n  rule:   r1\n  reason: rule r1: block example.com\n" +
				"  audit:  the policy is in audit mode: this block would be logged but not enforced\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"policy", "check"}, tt.args...)
			stdout, stderr, code := runCLI(t, args...)
			if code != 0 || stderr != "" {
				t.Errorf("sbx %s: got exit %d, stderr %q; want exit 0, no stderr", strings.Join(args, " "), code, stderr)
			}
			if diff := cmp.Diff(tt.want, stdout); diff != "" {
				t.Errorf("sbx %s: stdout (-want +got):\n%s", strings.Join(args, " "), diff)
			}
		})
	}
}

func TestPolicyCheckJSON(t *testing.T) {
	tests := []struct {
		args []string
		want netpolicy.Decision
	}{
		{[]string{"example.com"}, netpolicy.Decision{Action: "block", Rule: "default", Reason: "no rule matched; the default is block"}},
		{[]string{"--allow", "example.com", "http://example.com/x&y"}, netpolicy.Decision{Action: "allow", Rule: "r1", Reason: "rule r1: allow example.com"}},
		// The gateway refuses an unescaped '<' in a path: so does check,
		// with the gateway's reason, not HTML-escaped.
		{[]string{"--allow", "example.com", "http://example.com/<x>&"}, netpolicy.Decision{Action: "block", Rule: "invalid", Reason: "invalid path in the URL: '<' must be percent-encoded"}},
		{[]string{"127.1"}, netpolicy.Decision{Action: "block", Rule: "invalid", Reason: `invalid target "127.1": a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)`}},
		{[]string{"--default", "allow", "127.0.0.1"}, netpolicy.Decision{Action: "block", Rule: "guard", Reason: "address guard: 127.0.0.1 is loopback"}},
		{[]string{"--default", "allow", "[::ffff:10.1.2.3]:443"}, netpolicy.Decision{Action: "block", Rule: "guard", Reason: "address guard: 10.1.2.3 is private (RFC 1918)"}},
		{[]string{"--allow", "127.0.0.1", "127.0.0.1"}, netpolicy.Decision{Action: "allow", Rule: "r1", Reason: "rule r1: allow 127.0.0.1"}},
		{[]string{"--default", "allow", "--allow-private", "127.0.0.0/8", "127.0.0.1"}, netpolicy.Decision{Action: "allow", Rule: "default", Reason: "no rule matched; the default is allow"}},
		{[]string{"--audit", "example.com"}, netpolicy.Decision{Action: "block", Rule: "default", Reason: "no rule matched; the default is block"}},
	}
	for _, tt := range tests {
		args := append([]string{"policy", "check", "--json"}, tt.args...)
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 || stderr != "" {
			t.Errorf("sbx %s: got exit %d, stderr %q; want exit 0, no stderr", strings.Join(args, " "), code, stderr)
		}
		if !strings.HasSuffix(stdout, "}\n") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("sbx %s: got %q, want one line with one JSON object", strings.Join(args, " "), stdout)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Errorf("sbx %s: got %q: %v", strings.Join(args, " "), stdout, err)
			continue
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Errorf("sbx %s: got %q, want exactly one JSON value", strings.Join(args, " "), stdout)
		}
		keys := slices.Sorted(maps.Keys(obj))
		if want := []string{"action", "reason", "rule"}; !slices.Equal(keys, want) {
			t.Errorf("sbx %s: got keys %q, want %q", strings.Join(args, " "), keys, want)
		}
		got := netpolicy.Decision{Action: netpolicy.Action(str(obj["action"])), Rule: str(obj["rule"]), Reason: str(obj["reason"])}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("sbx %s: decision (-want +got):\n%s", strings.Join(args, " "), diff)
		}
	}
}

// str returns v if it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

func TestPolicyCheckErrors(t *testing.T) {
	badPolicy := writeFile(t, "bad.yaml", invalidPolicy)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // parts of stderr
	}{
		{"bad allow pattern", []string{"--allow", "*.", "example.com"}, exitUsage,
			[]string{"sbx: --allow *.: ", "*.example.com"}},
		{"bad block port", []string{"--block", "example.com:http", "example.com"}, exitUsage,
			[]string{"sbx: --block example.com:http: ", "example.com:8080"}},
		{"star needs ports to allow", []string{"--allow", "*", "example.com"}, exitUsage,
			[]string{"sbx: --allow *: ", "*:443"}},
		{"bad intercept pattern", []string{"--intercept", "a b=" + badPolicy, "example.com"}, exitUsage,
			[]string{"sbx: --intercept a b: "}},
		{"intercept without file", []string{"--intercept", "example.com", "example.com"}, exitUsage,
			[]string{`sbx: --intercept "example.com": want PATTERN=FILE`}},
		{"intercept file missing", []string{"--intercept", "example.com=/nonexistent/x.json", "example.com"}, exitFailure,
			[]string{"sbx: --intercept example.com=/nonexistent/x.json: ", "no such file or directory"}},
		{"bad default", []string{"--default", "deny", "example.com"}, exitUsage,
			[]string{`sbx: --default "deny": want allow, block or ask`}},
		{"allow-private not a CIDR", []string{"--allow-private", "private", "example.com"}, exitUsage,
			[]string{`sbx: --allow-private "private" is not a CIDR; write e.g. --allow-private 10.0.0.0/8`}},
		{"allow-private an address", []string{"--allow-private", "10.1.2.3", "example.com"}, exitUsage,
			[]string{"write --allow-private 10.1.2.3/32"}},
		{"allow-private host bits", []string{"--allow-private", "10.1.2.3/8", "example.com"}, exitUsage,
			[]string{"did you mean --allow-private 10.0.0.0/8?"}},
		{"bad scheme", []string{"ftp://example.com/"}, exitUsage,
			[]string{`scheme "ftp" is not supported; use http://, https://, ws:// or wss://`}},
		{"bad method", []string{"--method", "GE T", "example.com"}, exitUsage, []string{"--method"}},
		{"two targets", []string{"a.example", "b.example"}, exitUsage, []string{"takes TARGET, got 2 arguments"}},
		{"policy file missing", []string{"--policy", "/nonexistent/p.yaml", "example.com"}, exitFailure,
			[]string{"sbx: policy file /nonexistent/p.yaml: no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"policy", "check"}, tt.args...)
			stdout, stderr, code := runCLI(t, args...)
			if code != tt.wantCode || stdout != "" {
				t.Errorf("sbx %s: got exit %d, stdout %q; want exit %d, no stdout", strings.Join(args, " "), code, stdout, tt.wantCode)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("sbx %s: got stderr %q, want it to hold %q", strings.Join(args, " "), stderr, w)
				}
			}
		})
	}

	// An invalid policy file: exit 1 and its problems as FILE:LINE lines.
	stdout, stderr, code := runCLI(t, "policy", "check", "--policy", badPolicy, "--allow", "example.com", "example.com")
	if code != exitFailure || stdout != "" {
		t.Errorf("check with an invalid policy file: got exit %d, stdout %q; want exit 1, no stdout", code, stdout)
	}
	assertFileErrors(t, stderr, badPolicy, []int{2, 6, 9, 11})
}
