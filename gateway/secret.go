package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// This file keeps secrets out of the sandbox (docs/secrets.md): the
// sandbox holds a placeholder, and the gateway puts the value in its place
// in one credential header field (Authorization or x-api-key unless the
// binding names others) of HTTPS requests to the secret's hosts, within
// the binding's methods and paths, once the policy and the address guard
// let them through. A placeholder on its way anywhere else (the headers,
// path, query, method or host of a request to another host, a CONNECT
// target, a TLS server name, a DNS name; another header, the method, the
// path, a second field line, plain HTTP, or a method or path outside the
// binding on a request to its host) is blocked, by rule RuleSecret,
// whatever the mode.

// RuleSecret is the rule of the records of requests the gateway blocked
// because they carried a secret's placeholder where the secret is not
// sent; their record's Secret names the secret. Such a block is enforced
// in every mode.
const RuleSecret = "secret"

// PlaceholderPrefix starts every secret's placeholder:
// "sbx-secret-<NAME>-<random>".
const PlaceholderPrefix = "sbx-secret-"

// maxSecretSize bounds a secret's value, and the file it is read from.
const maxSecretSize = 16 << 10

// Errors a SecretError wraps.
var (
	// ErrSecretUnset is a variable that is not set.
	ErrSecretUnset = errors.New("is not set")
	// ErrSecretEmpty is a value that is empty, or only white space.
	ErrSecretEmpty = errors.New("is empty")
	// ErrSecretValue is a value that a header field cannot carry as it
	// is: a control character (a line break inside it), a byte that is
	// not ASCII, or more than 16 KiB.
	ErrSecretValue = errors.New("holds what a header cannot carry (a control character, a line break inside it, a byte that is not ASCII, or more than 16 KiB)")
	// ErrSecretName is a name that is not an environment variable name.
	ErrSecretName = errors.New("is not an environment variable name (a letter or '_', then letters, digits and '_')")
)

// SecretError is a secret that cannot be used: its Name, where its value
// was to come from (Env, a variable, or File, a file: ReadSecret's; neither
// for a value given to NewSecret), and why: Err is
// ErrSecretName, ErrSecretUnset, ErrSecretEmpty, ErrSecretValue, or the
// error of reading File (a *fs.PathError). It never holds the value.
type SecretError struct {
	Name string
	Env  string
	File string
	Err  error
}

func (e *SecretError) Error() string {
	switch {
	case errors.Is(e.Err, ErrSecretName):
		return fmt.Sprintf("secret %q: the name %v", e.Name, e.Err)
	case e.File != "" && !errors.Is(e.Err, ErrSecretEmpty) && !errors.Is(e.Err, ErrSecretValue):
		return fmt.Sprintf("secret %s: reading its value: %v", e.Name, e.Err)
	case e.File != "":
		return fmt.Sprintf("secret %s: the value in %s %v", e.Name, e.File, e.Err)
	case e.Env != "":
		return fmt.Sprintf("secret %s: the environment variable %s %v", e.Name, e.Env, e.Err)
	}
	return fmt.Sprintf("secret %s: the value %v", e.Name, e.Err)
}

func (e *SecretError) Unwrap() error { return e.Err }

// Secret is a value that the sandbox sees only as its placeholder, and
// that the gateway sends only to its hosts, in request headers. Make one
// with NewSecret or ReadSecret. Printing it (fmt, slog) shows its name,
// never its value.
type Secret struct {
	name        string
	placeholder string
	lower       string // placeholder, lower case: names are compared so
	value       string
	quoted      string // value as Go's %q writes it, without the quotes
	hosts       []netpolicy.SecretHost
	scope       netpolicy.SecretScope
	file        string // where the value was read from; "" for none
}

// NewSecret returns the secret name with value, sent to hosts
// (netpolicy.ParseSecretHost's HOST[:PORT]) in the default credential
// headers (netpolicy.DefaultSecretHeaders), with any method and path, and
// a placeholder of its own: "sbx-secret-<name>-" and 32 random hex
// digits, new on every call. value is trimmed of white space around it. A
// bad name or value is a *SecretError wrapping ErrSecretName,
// ErrSecretEmpty or ErrSecretValue, which does not say where the value
// came from; a bad host wraps netpolicy.ErrInvalidPolicy.
func NewSecret(name, value string, hosts []string) (*Secret, error) {
	return newSecret(netpolicy.Secret{Name: name, Hosts: hosts}, value)
}

// newSecret is NewSecret for the binding spec (its name, hosts, header,
// methods and paths; its source is not looked at): a bad header, method
// or path wraps netpolicy.ErrInvalidPolicy.
func newSecret(spec netpolicy.Secret, value string) (*Secret, error) {
	name, hosts := spec.Name, spec.Hosts
	if !netpolicy.ValidEnvName(name) {
		return nil, &SecretError{Name: name, Err: ErrSecretName}
	}
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, &SecretError{Name: name, Err: ErrSecretEmpty}
	}
	if !secretValueSafe(value) {
		return nil, &SecretError{Name: name, Err: ErrSecretValue}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("secret %s: no hosts: %w", name, netpolicy.ErrInvalidPolicy)
	}
	scope, err := netpolicy.ParseSecretScope(spec)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	q := strconv.Quote(value)
	s := &Secret{name: name, value: value, quoted: q[1 : len(q)-1], scope: scope}
	for _, h := range hosts {
		sh, err := netpolicy.ParseSecretHost(h)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", name, err)
		}
		s.hosts = append(s.hosts, sh)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("secret %s: making its placeholder: %w", name, err)
	}
	s.placeholder = PlaceholderPrefix + name + "-" + hex.EncodeToString(b[:])
	s.lower = strings.ToLower(s.placeholder)
	return s, nil
}

// ReadSecret reads the value of a policy's secret, from the environment
// variable spec.FromEnv (lookupEnv: nil means os.LookupEnv) or from the
// file spec.FromFile (relative to dir when not absolute), and returns it
// as NewSecret does. A value that cannot be had, or NewSecret refuses, is
// a *SecretError that says where the value came from.
func ReadSecret(spec netpolicy.Secret, dir string, lookupEnv func(string) (string, bool)) (*Secret, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var value, path string
	fail := func(err error) (*Secret, error) {
		if spec.FromFile != "" {
			return nil, &SecretError{Name: spec.Name, File: spec.FromFile, Err: err}
		}
		return nil, &SecretError{Name: spec.Name, Env: spec.FromEnv, Err: err}
	}
	if spec.FromFile != "" {
		path = spec.FromFile
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		f, err := os.Open(path)
		if err != nil {
			return fail(err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSecretSize+2))
		f.Close()
		if err != nil {
			return fail(&os.PathError{Op: "read", Path: path, Err: err})
		}
		value = string(b)
	} else {
		v, ok := lookupEnv(spec.FromEnv)
		if !ok {
			return fail(ErrSecretUnset)
		}
		value = v
	}
	sec, err := newSecret(spec, value)
	var se *SecretError
	switch {
	case errors.As(err, &se):
		return fail(se.Err)
	case err != nil:
		return nil, err
	}
	if spec.FromFile != "" {
		sec.file = path
	}
	return sec, nil
}

// secretValueSafe reports whether v can be a header value as it is: visible
// ASCII, spaces and tabs, at most maxSecretSize bytes.
func secretValueSafe(v string) bool {
	if len(v) > maxSecretSize {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c > '~' {
			return false
		}
	}
	return true
}

// Name is the secret's name, the variable that holds its placeholder in
// the sandbox.
func (s *Secret) Name() string { return s.name }

// Placeholder is what the sandbox holds in place of the value.
func (s *Secret) Placeholder() string { return s.placeholder }

// Hosts are the hosts the value is sent to, normalized, each HOST:PORT.
func (s *Secret) Hosts() []string {
	hosts := make([]string, len(s.hosts))
	for i, h := range s.hosts {
		hosts[i] = h.String()
	}
	return hosts
}

// File is the file the value was read from, "" when it was not read
// from a file: a file the sandbox can read would give the value away.
func (s *Secret) File() string { return s.file }

// String names the secret, never its value.
func (s *Secret) String() string { return "secret " + s.name }

// GoString is String, so that %#v shows no value either.
func (s *Secret) GoString() string { return s.String() }

// LogValue is the secret in a log: its name.
func (s *Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// bound reports whether the value is sent to host (normalized) on port.
func (s *Secret) bound(host string, port uint16) bool {
	for _, h := range s.hosts {
		if h.Match(host, port) {
			return true
		}
	}
	return false
}

// ErrSecretsFixed is a policy change that would change the policy's
// secrets: their values are read when the gateway starts, and only then.
var ErrSecretsFixed = errors.New("a policy's secrets are read when the gateway starts and cannot change while it runs; keep its secrets as they are")

// checkSecretsConfig checks Config.Secrets (each made by NewSecret, each
// name once), and keeps the policy's secrets as the gateway started with
// them: a later policy that changes them is refused with ErrSecretsFixed.
func (s *Server) checkSecretsConfig() error {
	seen := map[string]bool{}
	for _, sec := range s.cfg.Secrets {
		if sec == nil || sec.placeholder == "" {
			return errors.New("gateway: Config.Secrets holds a secret not made by NewSecret")
		}
		if seen[sec.name] {
			return fmt.Errorf("gateway: Config.Secrets holds secret %s twice", sec.name)
		}
		seen[sec.name] = true
	}
	start := s.cfg.Store.Load().Policy().Secrets()
	return s.cfg.Store.AddCheck(func(p *netpolicy.Policy) error {
		if !netpolicy.SameSecrets(start, p.Secrets()) {
			return ErrSecretsFixed
		}
		return nil
	})
}

// secretBound reports whether some secret's value is sent to host on
// port: such a host is inspected, so that its requests' headers can be
// rewritten.
func (s *Server) secretBound(host string, port uint16) bool {
	for _, sec := range s.cfg.Secrets {
		if sec.bound(host, port) {
			return true
		}
	}
	return false
}

// placeholderIn returns a secret whose placeholder text holds, in any
// case (a host name or a DNS name is lower-cased on its way), nil when
// there is none: text goes to no secret's host.
func (s *Server) placeholderIn(text string) *Secret {
	return s.foreignPlaceholder(text, false, "", 0)
}

// foreignPlaceholder returns a secret whose placeholder text holds, in any
// case, and that is not bound to host (normalized; "" is bound to none) on
// port: every secret is looked for, so a bound secret's placeholder hides
// no other's. encoded text (a request-target, a path) is percent-decoded
// first when it holds a '%': a placeholder written as it is stays whole,
// since no escape can take its characters ("sbx-secret-" starts it, and
// it holds no '%' or '+'). Nil when there is none.
func (s *Server) foreignPlaceholder(text string, encoded bool, host string, port uint16) *Secret {
	if len(s.cfg.Secrets) == 0 {
		return nil
	}
	if encoded && strings.IndexByte(text, '%') >= 0 {
		text = percentDecode(text)
	}
	if indexFold(text, PlaceholderPrefix) < 0 {
		return nil
	}
	for _, sec := range s.cfg.Secrets {
		if indexFold(text, sec.lower) >= 0 && (host == "" || !sec.bound(host, port)) {
			return sec
		}
	}
	return nil
}

// leakedSecret returns a secret whose placeholder a request to host
// (normalized; "" for a host that did not normalize, which no secret is
// bound to) on port carries where the secret is not sent: in target (the
// request-target, or the path and query, percent-encoded or not) or in a
// header field's name or value. Nil when there is none. host itself is
// not looked at: the request's decision did (decide).
func (s *Server) leakedSecret(host string, port uint16, target string, h http.Header) *Secret {
	if len(s.cfg.Secrets) == 0 {
		return nil
	}
	if sec := s.foreignPlaceholder(target, true, host, port); sec != nil {
		return sec
	}
	for k, vs := range h {
		if sec := s.foreignPlaceholder(k, false, host, port); sec != nil {
			return sec
		}
		for _, v := range vs {
			if sec := s.foreignPlaceholder(v, false, host, port); sec != nil {
				return sec
			}
		}
	}
	return nil
}

// secretRequest is a request as the secret checks see it.
type secretRequest struct {
	host   string // normalized; "" for a host that did not normalize
	port   uint16
	method string
	target string      // the request-target, or the path and query; percent-encoded or not
	path   string      // the path as sent, percent-encoded
	header http.Header // the header fields as the client sent them
	tls    bool        // HTTPS inside an inspected tunnel: the only requests a value goes in
}

// misusedSecret returns a secret whose placeholder r carries where its
// value is not sent, and why ("" for the reason of a placeholder sent to
// a host the secret is not bound to: secretDecision's); nil when there is
// none. A secret not bound to r's host and port may not be in its method,
// target or header fields at all; one bound to it only in the way
// misuse allows.
func (s *Server) misusedSecret(r secretRequest) (*Secret, string) {
	if sec := s.foreignPlaceholder(r.method, false, r.host, r.port); sec != nil {
		return sec, ""
	}
	if sec := s.leakedSecret(r.host, r.port, r.target, r.header); sec != nil {
		return sec, ""
	}
	if r.host == "" {
		return nil, ""
	}
	for _, sec := range s.cfg.Secrets {
		if sec.bound(r.host, r.port) {
			if why := sec.misuse(r); why != "" {
				return sec, why
			}
		}
	}
	return nil, ""
}

// misuse says why r, a request to one of sec's hosts, cannot carry sec's
// placeholder as it does, "" when it carries none or carries it as it
// may: over TLS, in one field line of one of the secret's credential
// header fields, alone or after an authentication scheme
// (credentialForm), with a method and path of the binding's. Anywhere
// else (the method, the target, a header field's name, another header
// field, a second field line) the value would go where the upstream may
// echo it; in plain HTTP it would cross the network in the clear.
func (sec *Secret) misuse(r secretRequest) string {
	var lines []string // the name of each field line that holds the placeholder
	inName := false
	for k, vs := range r.header {
		if indexFold(k, sec.lower) >= 0 {
			inName = true
		}
		for _, v := range vs {
			if indexFold(v, sec.lower) >= 0 {
				lines = append(lines, k)
			}
		}
	}
	target := r.target
	if strings.IndexByte(target, '%') >= 0 {
		target = percentDecode(target)
	}
	inMethod, inTarget := indexFold(r.method, sec.lower) >= 0, indexFold(target, sec.lower) >= 0
	if !inName && !inMethod && !inTarget && len(lines) == 0 {
		return ""
	}
	slices.Sort(lines)
	// Words for a refusal, made only for one.
	headers := sec.headerList
	only := func() string {
		return fmt.Sprintf("its value goes only in %s of HTTPS requests to %s", headers(), r.host)
	}
	switch {
	case !r.tls:
		return fmt.Sprintf("secret %s's placeholder in a plain HTTP request to %s: its value is sent only over HTTPS, to a host whose certificate the gateway verified; send the request with https://", sec.name, r.host)
	case inMethod:
		return fmt.Sprintf("secret %s's placeholder in the method of a request to %s: %s", sec.name, r.host, only())
	case inTarget:
		return fmt.Sprintf("secret %s's placeholder in the path or query of a request to %s: %s; send it there", sec.name, r.host, only())
	case inName:
		return fmt.Sprintf("secret %s's placeholder in a header field's name in a request to %s: %s; send it there", sec.name, r.host, only())
	}
	for _, k := range lines {
		if !sec.scope.Header(k) {
			return fmt.Sprintf("secret %s's placeholder in the header %s of a request to %s: %s; send it there, or name the header for the secret (--secret-header %s=HEADER, or header: in the policy)",
				sec.name, truncate(k, 80), r.host, only(), sec.name)
		}
	}
	if n := len(r.header[lines[0]]); len(lines) > 1 || n > 1 {
		if len(lines) == 1 { // the credential header again, without the placeholder
			lines = slices.Repeat(lines, n)
		}
		return fmt.Sprintf("secret %s's placeholder in %d header field lines (%s) of a request to %s: its value is sent once, in one field line of %s; send it once",
			sec.name, len(lines), strings.Join(lines, ", "), r.host, headers())
	}
	var v string
	for _, x := range r.header[lines[0]] {
		if indexFold(x, sec.lower) >= 0 {
			v = x
		}
	}
	if !credentialForm(v, sec.placeholder) {
		return fmt.Sprintf("secret %s's placeholder in the header %s of a request to %s with other text beside it: send the placeholder alone (%s: $%s) or after a scheme (Authorization: Bearer $%s)",
			sec.name, lines[0], r.host, lines[0], sec.name, sec.name)
	}
	if !sec.scope.Allows(r.method, r.path) {
		return fmt.Sprintf("secret %s is sent to %s only %s; this request's method or path is not among them: leave the placeholder out of it, or widen the secret's methods or paths in the policy",
			sec.name, r.host, sec.scopeText())
	}
	return ""
}

// credentialForm reports whether v, a credential header field's value,
// is placeholder alone, or an authentication scheme (a token), one space
// and placeholder: the value then goes in whole, with nothing the sandbox
// chose beside it but the scheme.
func credentialForm(v, placeholder string) bool {
	if v == placeholder {
		return true
	}
	scheme, rest, ok := strings.Cut(v, " ")
	return ok && rest == placeholder && netpolicy.IsToken(scheme)
}

// headerList names the secret's credential header fields, for messages:
// "Authorization or X-Api-Key".
func (sec *Secret) headerList() string {
	h := sec.scope.Headers
	if len(h) == 1 {
		return h[0]
	}
	return strings.Join(h[:len(h)-1], ", ") + " or " + h[len(h)-1]
}

// scopeText says which requests the value is sent with, for messages:
// "with POST to paths under /v1/messages".
func (sec *Secret) scopeText() string {
	var parts []string
	if len(sec.scope.Methods) > 0 {
		parts = append(parts, "with "+strings.Join(sec.scope.Methods, ", "))
	}
	if len(sec.scope.Paths) > 0 {
		parts = append(parts, "to paths under "+strings.Join(sec.scope.Paths, ", "))
	}
	return strings.Join(parts, " ")
}

// secretDecision is the block of a request that carries sec's placeholder
// to host.
func secretDecision(sec *Secret, host string) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: RuleSecret,
		Reason: fmt.Sprintf("secret %s's placeholder sent to %s", sec.name, host)}
}

// blockLeak turns *d into the block of r when it carries a secret's
// placeholder where the value is not sent (see misusedSecret), naming the
// secret in rec; it reports whether it did. rec, *d and r.host are as the
// request was decided (decide, or the inspected tunnel's host): rec.Host
// the host logged, r.host normalized, and a placeholder in the host
// already found (rec.Secret names it); a host that did not normalize is
// decided invalid, and no secret is bound to it.
func (s *Server) blockLeak(rec *decisionlog.Record, d *netpolicy.Decision, r secretRequest) bool {
	if rec.Secret != "" { // decided so already, by its host
		return true
	}
	if len(s.cfg.Secrets) == 0 {
		return false
	}
	if d.Rule == netpolicy.RuleInvalid { // its host did not normalize, or port 0
		r.host = ""
	}
	sec, why := s.misusedSecret(r)
	if sec == nil {
		return false
	}
	*d = secretDecision(sec, rec.Host)
	if why != "" {
		d.Reason = why
	}
	rec.Secret = sec.name
	return true
}

// injectSecrets puts the value of every secret bound to host (normalized)
// on port in place of its placeholder in h, in place, for a request of
// method to path over TLS: only in a credential header field of the
// secret's that holds one field line of credentialForm, and only when the
// binding's methods and paths allow the request. It reports whether it
// changed anything. blockLeak refused every other use of a placeholder
// before; this is the one place a value is written.
func (s *Server) injectSecrets(h http.Header, host string, port uint16, method, path string) bool {
	changed := false
	for _, sec := range s.cfg.Secrets {
		if !sec.bound(host, port) || !sec.scope.Allows(method, path) {
			continue
		}
		for _, k := range sec.scope.Headers {
			vs := h[k]
			if len(vs) != 1 || !credentialForm(vs[0], sec.placeholder) {
				continue
			}
			vs[0] = strings.Replace(vs[0], sec.placeholder, sec.value, 1)
			changed = true
		}
	}
	return changed
}

// withSecrets returns r, an HTTPS request to host (normalized) on port,
// with the values of the secrets bound there in place of their
// placeholders (injectSecrets): a copy of r when it changed anything, so
// that r keeps the placeholders (what the gateway logs, records or
// answers from r shows no value), else r itself. A request whose URL's
// scheme is not https gets no value.
func (s *Server) withSecrets(r *http.Request, host string, port uint16) *http.Request {
	if r.URL.Scheme != "https" {
		return r
	}
	h := r.Header.Clone()
	if !s.injectSecrets(h, host, port, r.Method, r.URL.EscapedPath()) {
		return r
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.Header = h
	return r2
}

// secretInjector is the round tripper of inspected HTTPS requests that
// puts the values of the secrets bound to the request's host in their
// headers (withSecrets): a recorder above it (--record-llm) sees the
// placeholder.
type secretInjector struct {
	s    *Server
	host string
	port uint16
	next http.RoundTripper
}

func (si secretInjector) RoundTrip(r *http.Request) (*http.Response, error) {
	return si.next.RoundTrip(si.s.withSecrets(r, si.host, si.port))
}

// errSecretTrailer ends the body of an inspected request whose trailers
// carry a secret's placeholder.
var errSecretTrailer = errors.New("a secret's placeholder in the request's trailers")

// trailerGuard reads an inspected request's body and, at its end, looks
// for a secret's placeholder in the request's trailers, which the client
// sends after the body: one found ends the body with errSecretTrailer
// instead of its end, so that the request upstream is cut off, and found
// names its secret. (Trailers never get a value, and the gateway sends
// the upstream none of their values; the guard makes the attempt a block
// that is logged.) It is safe to read found while the body is read.
type trailerGuard struct {
	s     *Server
	req   *http.Request
	r     io.Reader
	found atomic.Pointer[Secret]
}

func (g *trailerGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err == io.EOF && len(g.s.cfg.Secrets) > 0 {
		for k, vs := range g.req.Trailer {
			sec := g.s.placeholderIn(k)
			for _, v := range vs {
				if sec == nil {
					sec = g.s.placeholderIn(v)
				}
			}
			if sec != nil {
				g.found.Store(sec)
				return n, errSecretTrailer
			}
		}
	}
	return n, err
}

// blockTrailer turns closeRec, the close record of an inspected request
// to host whose trailers carried sec's placeholder (trailerGuard), into
// the record of its block by rule RuleSecret, and returns the decision.
func blockTrailer(closeRec *decisionlog.Record, sec *Secret, host string) netpolicy.Decision {
	d := netpolicy.Decision{Action: netpolicy.Block, Rule: RuleSecret,
		Reason: fmt.Sprintf("secret %s's placeholder in a trailer of a request to %s: a trailer never carries a value; the request was cut off at its trailers", sec.name, host)}
	closeRec.Action, closeRec.Rule, closeRec.Reason, closeRec.Enforced = string(d.Action), d.Rule, d.Reason, true
	closeRec.Secret, closeRec.Status, closeRec.Error = sec.name, http.StatusForbidden, errSecretTrailer.Error()
	return d
}

// redactValues returns text, the text of an error that came from an
// upstream (a malformed status line or header it sent, a transport's
// failure), with every secret's value, as it is and as Go's %q quotes it,
// replaced by its placeholder: an upstream that echoes a request's
// credential in a broken answer must not hand it to the sandbox through
// the gateway's error answer, or to the decision log.
func (s *Server) redactValues(text string) string {
	for _, sec := range s.cfg.Secrets {
		text = strings.ReplaceAll(text, sec.value, sec.placeholder)
		if sec.quoted != sec.value {
			text = strings.ReplaceAll(text, sec.quoted, sec.placeholder)
		}
	}
	return text
}

// indexFold is strings.Index for an ASCII substr in lower case, with s
// compared in any case; it allocates nothing.
func indexFold(s, substr string) int {
	n := len(substr)
	for i := 0; i+n <= len(s); i++ {
		j := 0
		for ; j < n; j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != substr[j] {
				break
			}
		}
		if j == n {
			return i
		}
	}
	return -1
}

// percentDecode decodes the %XX escapes of s, leaving a malformed one as
// it is, and '+' as a space.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		if c == '+' {
			c = ' '
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}
