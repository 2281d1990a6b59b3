package secrets

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// PlaceholderIn returns a secret whose placeholder text holds, in any
// case (a host name or a DNS name is lower-cased on its way), nil when
// there is none: text goes to no secret's host.
func (s *Set) PlaceholderIn(text string) *Secret {
	return s.foreignPlaceholder(text, false, "", 0)
}

// foreignPlaceholder returns a secret whose placeholder text holds, in any
// case, and that is not bound to host (normalized; "" is bound to none) on
// port: every secret is looked for, so a bound secret's placeholder hides
// no other's. encoded text (a request-target, a path) is percent-decoded
// first when it holds a '%': a placeholder written as it is stays whole,
// since no escape can take its characters ("sbx-secret-" starts it, and
// it holds no '%' or '+'). Nil when there is none.
func (s *Set) foreignPlaceholder(text string, encoded bool, host string, port uint16) *Secret {
	if len(s.list()) == 0 {
		return nil
	}
	if encoded && strings.IndexByte(text, '%') >= 0 {
		text = percentDecode(text)
	}
	if indexFold(text, PlaceholderPrefix) < 0 {
		return nil
	}
	for _, sec := range s.list() {
		if indexFold(text, sec.lower) >= 0 && (host == "" || !sec.bound(host, port)) {
			return sec
		}
	}
	return nil
}

// leaked returns a secret whose placeholder a request to host
// (normalized; "" for a host that did not normalize, which no secret is
// bound to) on port carries where the secret is not sent: in target (the
// request-target, or the path and query, percent-encoded or not) or in a
// header field's name or value. Nil when there is none. host itself is
// not looked at: the request's decision did (decide).
func (s *Set) leaked(host string, port uint16, target string, h http.Header) *Secret {
	if len(s.list()) == 0 {
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

// Request is a request as the secret checks see it.
type Request struct {
	Host   string // normalized; "" for a host that did not normalize
	Port   uint16
	Method string
	Target string      // the request-target, or the path and query; percent-encoded or not
	Path   string      // the path as sent, percent-encoded
	Header http.Header // the header fields as the client sent them
	TLS    bool        // HTTPS inside an inspected tunnel: the only requests a value goes in
}

// misused returns a secret whose placeholder r carries where its
// value is not sent, and why ("" for the reason of a placeholder sent to
// a host the secret is not bound to: Block's); nil when there is
// none. A secret not bound to r's host and port may not be in its method,
// target or header fields at all; one bound to it only in the way
// misuse allows.
func (s *Set) misused(r Request) (*Secret, string) {
	if sec := s.foreignPlaceholder(r.Method, false, r.Host, r.Port); sec != nil {
		return sec, ""
	}
	if sec := s.leaked(r.Host, r.Port, r.Target, r.Header); sec != nil {
		return sec, ""
	}
	if r.Host == "" {
		return nil, ""
	}
	for _, sec := range s.list() {
		if sec.bound(r.Host, r.Port) {
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
func (sec *Secret) misuse(r Request) string {
	var lines []string // the name of each field line that holds the placeholder
	inName := false
	for k, vs := range r.Header {
		if indexFold(k, sec.lower) >= 0 {
			inName = true
		}
		for _, v := range vs {
			if indexFold(v, sec.lower) >= 0 {
				lines = append(lines, k)
			}
		}
	}
	target := r.Target
	if strings.IndexByte(target, '%') >= 0 {
		target = percentDecode(target)
	}
	inMethod, inTarget := indexFold(r.Method, sec.lower) >= 0, indexFold(target, sec.lower) >= 0
	if !inName && !inMethod && !inTarget && len(lines) == 0 {
		return ""
	}
	slices.Sort(lines)
	// Words for a refusal, made only for one.
	headers := sec.headerList
	only := func() string {
		return fmt.Sprintf("its value goes only in %s of HTTPS requests to %s", headers(), r.Host)
	}
	switch {
	case !r.TLS:
		return fmt.Sprintf("secret %s's placeholder in a plain HTTP request to %s: its value is sent only over HTTPS, to a host whose certificate the gateway verified; send the request with https://", sec.name, r.Host)
	case inMethod:
		return fmt.Sprintf("secret %s's placeholder in the method of a request to %s: %s", sec.name, r.Host, only())
	case inTarget:
		return fmt.Sprintf("secret %s's placeholder in the path or query of a request to %s: %s; send it there", sec.name, r.Host, only())
	case inName:
		return fmt.Sprintf("secret %s's placeholder in a header field's name in a request to %s: %s; send it there", sec.name, r.Host, only())
	}
	for _, k := range lines {
		if !sec.scope.Header(k) {
			return fmt.Sprintf("secret %s's placeholder in the header %s of a request to %s: %s; send it there, or name the header for the secret (--secret-header %s=HEADER, or header: in the policy)",
				sec.name, truncate(k, 80), r.Host, only(), sec.name)
		}
	}
	if n := len(r.Header[lines[0]]); len(lines) > 1 || n > 1 {
		if len(lines) == 1 { // the credential header again, without the placeholder
			lines = slices.Repeat(lines, n)
		}
		return fmt.Sprintf("secret %s's placeholder in %d header field lines (%s) of a request to %s: its value is sent once, in one field line of %s; send it once",
			sec.name, len(lines), strings.Join(lines, ", "), r.Host, headers())
	}
	var v string
	for _, x := range r.Header[lines[0]] {
		if indexFold(x, sec.lower) >= 0 {
			v = x
		}
	}
	if !credentialForm(v, sec.placeholder) {
		return fmt.Sprintf("secret %s's placeholder in the header %s of a request to %s with other text beside it: send the placeholder alone (%s: $%s) or after a scheme (Authorization: Bearer $%s)",
			sec.name, lines[0], r.Host, lines[0], sec.name, sec.name)
	}
	if !sec.scope.Allows(r.Method, r.Path) {
		return fmt.Sprintf("secret %s is sent to %s only %s; this request's method or path is not among them: leave the placeholder out of it, or widen the secret's methods or paths in the policy",
			sec.name, r.Host, sec.scopeText())
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

// BlockLeak turns *d into the block of r when it carries a secret's
// placeholder where the value is not sent (see misused), naming the
// secret in rec; it reports whether it did. rec, *d and r.Host are as the
// request was decided (decide, or the inspected tunnel's host): rec.Host
// the host logged, r.Host normalized, and a placeholder in the host
// already found (rec.Secret names it); a host that did not normalize is
// decided invalid, and no secret is bound to it.
func (s *Set) BlockLeak(rec *decisionlog.Record, d *netpolicy.Decision, r Request) bool {
	if rec.Secret != "" { // decided so already, by its host
		return true
	}
	if len(s.list()) == 0 {
		return false
	}
	if d.Rule == netpolicy.RuleInvalid && !validTarget(r.Host, r.Port) { // not a method too long
		r.Host = ""
	}
	sec, why := s.misused(r)
	if sec == nil {
		return false
	}
	*d = sec.Block(rec.Host)
	if why != "" {
		d.Reason = why
	}
	rec.Secret = sec.name
	return true
}

// validTarget reports whether host normalizes (to itself: r.Host is the
// normalized host when it does) and port is one: a request refused as
// invalid for another reason (its method) still has a host its secrets
// are bound to or not.
func validTarget(host string, port uint16) bool {
	h, err := netpolicy.NormalizeHost(host)
	return err == nil && h == host && port != 0
}
