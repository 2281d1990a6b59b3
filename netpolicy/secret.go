package netpolicy

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
)

// Secret is one entry of a policy's secrets (docs/secrets.md): a value
// that the sandbox sees only as a placeholder, and that the gateway puts
// in place of the placeholder in the credential header fields (Headers)
// of HTTPS requests to the secret's hosts, for the Methods and Paths
// given. The policy names where the value comes from, never the
// value: FromEnv, a variable of the environment of the process that
// starts the gateway, or FromFile, a file (a path relative to the policy
// file's directory), exactly one of them. netpolicy reads neither: the
// caller reads the values when the gateway starts, and a later policy
// (from the management API) cannot change the secrets.
type Secret struct {
	// Name is the environment variable that holds the placeholder in the
	// sandbox: a letter or '_', then letters, digits and '_'.
	Name string `json:"name"`
	// FromEnv names the environment variable that holds the value.
	FromEnv string `json:"from_env,omitempty"`
	// FromFile is the file that holds the value.
	FromFile string `json:"from_file,omitempty"`
	// Hosts are the hosts the value is sent to, each HOST[:PORT] (see
	// ParseSecretHost).
	Hosts []string `json:"hosts"`
	// Headers are the request header fields the value goes in, the
	// policy's header: one name or a list; none means
	// DefaultSecretHeaders.
	Headers []string `json:"header,omitempty"`
	// Methods, when set, are the only methods of the requests the value
	// is sent with; none means every method.
	Methods []string `json:"methods,omitempty"`
	// Paths, when set, are the only paths the value is sent with: a
	// request's path must start with one of them, compared as a rule's
	// path is (CanonicalPath); none means every path.
	Paths []string `json:"paths,omitempty"`
}

// clone returns a deep copy of the secret.
func (s Secret) clone() Secret {
	s.Hosts = append([]string(nil), s.Hosts...)
	s.Headers = slices.Clone(s.Headers)
	s.Methods = slices.Clone(s.Methods)
	s.Paths = slices.Clone(s.Paths)
	return s
}

// DefaultSecretHeaders are the header fields a secret's value goes in when
// its binding names none: where API clients send a key.
var DefaultSecretHeaders = []string{"Authorization", "X-Api-Key"}

// SecretScope is where a secret's value may go in a request to one of its
// hosts: the header fields that carry it, and the methods and paths of the
// requests it is sent with. Make one with ParseSecretScope.
type SecretScope struct {
	// Headers are the credential header fields, in canonical form
	// (textproto.CanonicalMIMEHeaderKey).
	Headers []string
	// Methods are the methods the value is sent with, in upper case;
	// empty for every method.
	Methods []string
	// Paths are the path prefixes the value is sent with, in the form
	// CanonicalPath gives; empty for every path.
	Paths []string
}

// notCredentialHeaders are the header fields no secret's value may go in:
// they frame the message or concern one connection, and the gateway sets
// or drops them itself.
var notCredentialHeaders = []string{"Host", "Connection", "Content-Length", "Content-Type", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive", "Expect", "Proxy-Authorization", "Proxy-Connection"}

// ParseSecretScope checks a secret's header, methods and paths and returns
// its scope. Errors wrap ErrInvalidPolicy.
func ParseSecretScope(s Secret) (SecretScope, error) {
	var sc SecretScope
	for _, h := range s.Headers {
		if !IsToken(h) {
			return SecretScope{}, errorf(ErrInvalidPolicy, "header %q is not a header field name", h)
		}
		c := textproto.CanonicalMIMEHeaderKey(h)
		if slices.Contains(notCredentialHeaders, c) {
			return SecretScope{}, errorf(ErrInvalidPolicy, "header %s frames the request or concerns one connection; a secret's value cannot go in it", c)
		}
		if !slices.Contains(sc.Headers, c) {
			sc.Headers = append(sc.Headers, c)
		}
	}
	if len(sc.Headers) == 0 {
		sc.Headers = slices.Clone(DefaultSecretHeaders)
	}
	for _, m := range s.Methods {
		up := strings.ToUpper(m)
		switch {
		case !ValidMethod(m):
			return SecretScope{}, errorf(ErrInvalidPolicy, "methods: %q is not an HTTP method of at most %d bytes", truncate(m, 40), MaxMethodLen)
		case up == "CONNECT":
			return SecretScope{}, errorf(ErrInvalidPolicy, "methods: CONNECT opens a tunnel, which carries no secret; list the methods of the requests the secret is for")
		}
		if !slices.Contains(sc.Methods, up) {
			sc.Methods = append(sc.Methods, up)
		}
	}
	for _, p := range s.Paths {
		c, problem := checkPathPrefix(p)
		if problem != "" {
			return SecretScope{}, errorf(ErrInvalidPolicy, "paths: %s", problem)
		}
		sc.Paths = append(sc.Paths, c)
	}
	return sc, nil
}

// Header reports whether the value goes in the header field name (any
// case).
func (sc SecretScope) Header(name string) bool {
	for _, h := range sc.Headers {
		if asciiEqualFold(h, name) {
			return true
		}
	}
	return false
}

// Allows reports whether the value is sent with a request of method for
// path (as sent, percent-encoded): method one of Methods, path under one
// of Paths in both the forms an allow rule's path must match (with and
// without path parameters), when they are set.
func (sc SecretScope) Allows(method, path string) bool {
	if len(sc.Methods) > 0 && !slices.ContainsFunc(sc.Methods, func(m string) bool { return asciiEqualFold(m, method) }) {
		return false
	}
	if len(sc.Paths) == 0 {
		return true
	}
	plain := CanonicalPath(path)
	stripped := plain
	if strings.IndexByte(plain, ';') >= 0 {
		stripped = canonicalPath(path, true)
	}
	return slices.ContainsFunc(sc.Paths, func(p string) bool {
		return strings.HasPrefix(plain, p) && strings.HasPrefix(stripped, p)
	})
}

// DefaultSecretPort is the port of a secret's host that names none: a
// key goes to its API over HTTPS.
const DefaultSecretPort = 443

// SecretHost is a host a secret's value is sent to: a host name, every
// name below a domain ("*.example.com"), or an IP address, on one port.
type SecretHost struct {
	pat  pattern
	Port uint16
}

// ParseSecretHost parses a secret's host, HOST[:PORT]: a host name,
// *.domain or an IP ([IPv6]:PORT with a port), the port 443 when none is
// given. "*", a CIDR and a port "*" are refused: a secret is sent to the
// hosts named, not to every host. Errors wrap ErrInvalidPolicy.
func ParseSecretHost(s string) (SecretHost, error) {
	host, ports, err := ParseFlagPattern(s)
	if err != nil {
		return SecretHost{}, errorf(ErrInvalidPolicy, "secret host %q is not HOST[:PORT] (e.g. api.example.com or api.example.com:8443)", s)
	}
	pat, err := parsePattern(host)
	if err != nil {
		return SecretHost{}, errorf(ErrInvalidPolicy, "secret host %q: %v", s, err)
	}
	if pat.kind == patAny || pat.kind == patPrefix && !pat.prefix.IsSingleIP() {
		return SecretHost{}, errorf(ErrInvalidPolicy, "secret host %q is not a host: name the hosts the secret is for (e.g. api.example.com or *.example.com)", s)
	}
	port := uint16(DefaultSecretPort)
	if len(ports) == 1 {
		if ports[0] == AnyPort {
			return SecretHost{}, errorf(ErrInvalidPolicy, "secret host %q: port * would send the secret to every port; name one", s)
		}
		port = uint16(ports[0])
	}
	return SecretHost{pat: pat, Port: port}, nil
}

// Match reports whether host (normalized, as NormalizeHost gives it) on
// port is this secret host.
func (h SecretHost) Match(host string, port uint16) bool {
	if port != h.Port {
		return false
	}
	switch h.pat.kind {
	case patExact:
		return host == h.pat.name
	case patWildcard:
		return strings.HasSuffix(host, "."+h.pat.name)
	case patPrefix:
		ip, err := netip.ParseAddr(host)
		return err == nil && h.pat.prefix.Contains(ip.Unmap())
	}
	return false
}

// String returns the host in its normalized written form, HOST:PORT.
func (h SecretHost) String() string {
	host := h.pat.String()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, h.Port)
}

// ValidEnvName reports whether s can name an environment variable that
// a shell can set: a letter or '_', then letters, digits and '_'.
func ValidEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkSecrets checks a policy's secrets: names that are environment
// variable names, each once; exactly one source; at least one host, each
// one ParseSecretHost takes.
func checkSecrets(secrets []Secret) []fieldError {
	var errs []fieldError
	bad := func(i int, format string, args ...any) {
		errs = append(errs, fieldError{"secrets", fmt.Sprintf("secret %d: ", i+1) + fmt.Sprintf(format, args...)})
	}
	seen := map[string]int{}
	for i, s := range secrets {
		if !ValidEnvName(s.Name) {
			bad(i, "name %q is not an environment variable name (a letter or '_', then letters, digits and '_')", s.Name)
		} else if first, dup := seen[s.Name]; dup {
			bad(i, "name %s is already secret %d's; give each secret once, with all its hosts", s.Name, first+1)
		} else {
			seen[s.Name] = i
		}
		switch {
		case s.FromEnv == "" && s.FromFile == "":
			bad(i, "no value: write from_env: VARIABLE or from_file: FILE")
		case s.FromEnv != "" && s.FromFile != "":
			bad(i, "from_env and from_file both give the value; write one of them")
		case s.FromEnv != "" && !ValidEnvName(s.FromEnv):
			bad(i, "from_env %q is not an environment variable name", s.FromEnv)
		}
		if len(s.Hosts) == 0 {
			bad(i, "no hosts: write hosts: [HOST[:PORT], ...], the hosts the secret is sent to")
		}
		for _, h := range s.Hosts {
			if _, err := ParseSecretHost(h); err != nil {
				bad(i, "%v", err)
			}
		}
		if _, err := ParseSecretScope(s); err != nil {
			bad(i, "%v", err)
		}
	}
	return errs
}

// Secrets returns a copy of the policy's secrets.
func (p *Policy) Secrets() []Secret {
	return p.Spec().Secrets
}

// SameSecrets reports whether a and b hold the same secrets, in the same
// order: a later policy must keep the secrets the gateway started with.
func SameSecrets(a, b []Secret) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.FromEnv != y.FromEnv || x.FromFile != y.FromFile || !slices.Equal(x.Hosts, y.Hosts) ||
			!slices.Equal(x.Headers, y.Headers) || !slices.Equal(x.Methods, y.Methods) || !slices.Equal(x.Paths, y.Paths) {
			return false
		}
	}
	return true
}
