package netpolicy

import (
	"encoding/json"
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
  - name: GITLAB_TOKEN
    from_env: GITLAB_TOKEN
    hosts: [gitlab.com]
    header: PRIVATE-TOKEN
    methods: [get, POST]
    paths: [/api/v4/projects, "/api/v4/./user"]
  - name: TWO
    from_env: TWO
    hosts: [two.test]
    header: [x-one, x-two]
`
	p, err := Parse("p.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Secret{
		{Name: "ANTHROPIC_API_KEY", FromEnv: "ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}},
		{Name: "GH_TOKEN", FromFile: "gh.token", Hosts: []string{"api.github.com", "*.githubusercontent.com:8443"}},
		{Name: "GITLAB_TOKEN", FromEnv: "GITLAB_TOKEN", Hosts: []string{"gitlab.com"}, Headers: []string{"PRIVATE-TOKEN"},
			Methods: []string{"get", "POST"}, Paths: []string{"/api/v4/projects", "/api/v4/./user"}},
		{Name: "TWO", FromEnv: "TWO", Hosts: []string{"two.test"}, Headers: []string{"x-one", "x-two"}},
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
	// And as JSON, as the API serves it and takes it back.
	js, err := json.Marshal(p.Spec())
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Decode("policy.json", js)
	if err != nil {
		t.Fatalf("decoding %s: %v", js, err)
	}
	if !SameSecrets(p.Secrets(), spec.Secrets) {
		t.Errorf("secrets after a JSON round trip: got %+v, want %+v", spec.Secrets, p.Secrets())
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
		{"bad header", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    header: 'x key'\n", `header "x key" is not a header field name`},
		{"framing header", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    header: [x-key, content-length]\n", "header Content-Length frames the request"},
		{"header a mapping", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    header: {a: b}\n", "header"},
		{"bad method", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    methods: ['PO ST']\n", `methods: "PO ST" is not an HTTP method`},
		{"connect", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    methods: [connect]\n", "methods: CONNECT opens a tunnel"},
		{"methods a string", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    methods: POST\n", "want a list"},
		{"relative path", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    paths: [v1/messages]\n", `paths: "v1/messages" must start with '/'`},
		{"path with a query", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    paths: ['/v1?x=1']\n", "cannot hold a query"},
		{"path with parameters", "  - name: K\n    from_env: K\n    hosts: [a.test]\n    paths: ['/v1;x']\n", "path parameters"},
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

// TestSecretScope: a binding's scope takes the default credential headers
// when it names none, and lets the value go with its methods and under
// its paths alone, every spelling of a path read as CanonicalPath reads
// it.
func TestSecretScope(t *testing.T) {
	def, err := ParseSecretScope(Secret{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultSecretHeaders, def.Headers); diff != "" {
		t.Errorf("default headers (-want +got):\n%s", diff)
	}
	for _, h := range []string{"authorization", "X-API-KEY", "x-api-key"} {
		if !def.Header(h) {
			t.Errorf("Header(%q): got false, want true", h)
		}
	}
	for _, h := range []string{"Anthropic-Beta", "Origin", "X-Api-Key2", "Proxy-Authorization"} {
		if def.Header(h) {
			t.Errorf("Header(%q): got true, want false", h)
		}
	}
	if !def.Allows("DELETE", "/anything") {
		t.Errorf("no methods or paths: got a refusal, want every request")
	}
	sc, err := ParseSecretScope(Secret{Headers: []string{"private-token"}, Methods: []string{"post"}, Paths: []string{"/v1/messages"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Private-Token"}, sc.Headers); diff != "" || sc.Header("Authorization") {
		t.Errorf("named headers (-want +got):\n%s, Authorization %v", diff, sc.Header("Authorization"))
	}
	for _, tt := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/messages", true},
		{"post", "/v1/messages/batches", true},
		{"POST", "//v1//messages", true},
		{"GET", "/v1/messages", false},
		{"POST", "/v1/api_keys", false},
		{"POST", "/v1/messages/../api_keys", false},
		{"POST", "/v1/messages/%2e%2e/api_keys", false},
		{"POST", "/v1/messages/..%2fapi_keys", false},
		{"POST", "/v1/messages;a/../../api_keys", false},
		{"POST", "/v1/message", false},
		{"POST", "/", false},
	} {
		if got := sc.Allows(tt.method, tt.path); got != tt.want {
			t.Errorf("Allows(%s, %s): got %v, want %v", tt.method, tt.path, got, tt.want)
		}
	}
}
