package netpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeSecrets(t *testing.T) {
	doc := `version: 1
secrets:
  - name: ANTHROPIC_API_KEY
    from_env: ANTHROPIC_API_KEY
    hosts: [api.anthropic.com]
  - name: GH_TOKEN
    from_file: gh.token
    hosts: ["api.github.com", "*.githubusercontent.com:8443"]
`
	p, err := Parse("p.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Secret{
		{Name: "ANTHROPIC_API_KEY", FromEnv: "ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}},
		{Name: "GH_TOKEN", FromFile: "gh.token", Hosts: []string{"api.github.com", "*.githubusercontent.com:8443"}},
	}
	if diff := cmp.Diff(want, p.Secrets()); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	// The policy's document round-trips: the API serves it.
	q, err := Compile(p.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if !SameSecrets(p.Secrets(), q.Secrets()) {
		t.Errorf("secrets after a round trip: got %v, want %v", q.Secrets(), p.Secrets())
	}
}

func TestDecodeSecretsRefused(t *testing.T) {
	tests := []struct {
		name, secrets, want string
	}{
		{"unknown field", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    value: x\n", `unknown field "value"`},
		{"bad name", "  - name: 1K\n    from_env: K\n    hosts: [a.test]\n", "is not an environment variable name"},
		{"name with a dash", "  - name: MY-KEY\n    from_env: K\n    hosts: [a.test]\n", "is not an environment variable name"},
		{"no source", "  - name: K\n    hosts: [a.test]\n", "no value"},
		{"two sources", "  - name: K\n    from_env: K\n    from_file: f\n    hosts: [a.test]\n", "both give the value"},
		{"bad env name", "  - name: K\n    from_env: A=B\n    hosts: [a.test]\n", "from_env"},
		{"no hosts", "  - name: K\n    from_env: K\n", "no hosts"},
		{"any host", "  - name: K\n    from_env: K\n    hosts: ['*']\n", "is not a host"},
		{"cidr", "  - name: K\n    from_env: K\n    hosts: [10.0.0.0/8]\n", "is not a host"},
		{"url", "  - name: K\n    from_env: K\n    hosts: ['https://a.test/']\n", "is not HOST[:PORT]"},
		{"any port", "  - name: K\n    from_env: K\n    hosts: ['a.test:*']\n", "port *"},
		{"bad name host", "  - name: K\n    from_env: K\n    hosts: ['a b']\n", "secret host"},
		{"twice", "  - name: K\n    from_env: K\n    hosts: [a.test]\n  - name: K\n    from_env: J\n    hosts: [b.test]\n", "already secret 1's"},
		{"a string", "  - K@a.test\n", "must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte("version: 1\nsecrets:\n"+tt.secrets))
			if err == nil {
				t.Fatalf("got no error, want one saying %q", tt.want)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("got %v, want it to wrap ErrInvalidPolicy", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to say %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "p.yaml:") {
				t.Errorf("got %q, want the file and line", err)
			}
		})
	}
}

func TestSecretHostMatch(t *testing.T) {
	tests := []struct {
		host   string
		target string
		port   uint16
		want   bool
	}{
		{"api.anthropic.com", "api.anthropic.com", 443, true},
		{"api.anthropic.com", "api.anthropic.com", 80, false},
		{"api.anthropic.com", "evil.anthropic.com", 443, false},
		{"API.Anthropic.com.", "api.anthropic.com", 443, true},
		{"api.test:8443", "api.test", 8443, true},
		{"api.test:8443", "api.test", 443, false},
		{"*.example.com", "a.example.com", 443, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "aexample.com", 443, false},
		{"203.0.113.7", "203.0.113.7", 443, true},
		{"203.0.113.7", "203.0.113.8", 443, false},
		{"[2001:db8::1]:8443", "2001:db8::1", 8443, true},
	}
	for _, tt := range tests {
		h, err := ParseSecretHost(tt.host)
		if err != nil {
			t.Fatalf("ParseSecretHost(%q): %v", tt.host, err)
		}
		if got := h.Match(tt.target, tt.port); got != tt.want {
			t.Errorf("%s (%s).Match(%s, %d): got %v, want %v", tt.host, h, tt.target, tt.port, got, tt.want)
		}
	}
}
