package secrets

import (
	"net/http"
	"strings"
)

// Inject puts the value of every secret bound to host (normalized)
// on port in place of its placeholder in h, in place, for a request of
// method to path over TLS: only in a credential header field of the
// secret's that holds one field line of credentialForm, and only when the
// binding's methods and paths allow the request. It reports whether it
// changed anything. BlockLeak refused every other use of a placeholder
// before; this is the one place a value is written.
func (s *Set) Inject(h http.Header, host string, port uint16, method, path string) bool {
	changed := false
	for _, sec := range s.list() {
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

// WithValues returns r, an HTTPS request to host (normalized) on port,
// with the values of the secrets bound there in place of their
// placeholders (Inject): a copy of r when it changed anything, so
// that r keeps the placeholders (what the gateway logs, records or
// answers from r shows no value), else r itself. A request whose URL's
// scheme is not https gets no value.
func (s *Set) WithValues(r *http.Request, host string, port uint16) *http.Request {
	if r.URL.Scheme != "https" {
		return r
	}
	h := r.Header.Clone()
	if !s.Inject(h, host, port, r.Method, r.URL.EscapedPath()) {
		return r
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.Header = h
	return r2
}

// Injector returns the round tripper of inspected HTTPS requests to
// host (normalized) on port that puts the values of the secrets bound
// there in their headers (WithValues) and sends them on with next: a
// recorder above it (--record-llm) sees the placeholder.
func (s *Set) Injector(host string, port uint16, next http.RoundTripper) http.RoundTripper {
	return injector{set: s, host: host, port: port, next: next}
}

// injector is Injector's round tripper.
type injector struct {
	set  *Set
	host string
	port uint16
	next http.RoundTripper
}

func (in injector) RoundTrip(r *http.Request) (*http.Response, error) {
	return in.next.RoundTrip(in.set.WithValues(r, in.host, in.port))
}

// Redact returns text, the text of an error that came from an
// upstream (a malformed status line or header it sent, a transport's
// failure), with every secret's value, as it is and as Go's %q quotes it,
// replaced by its placeholder: an upstream that echoes a request's
// credential in a broken answer must not hand it to the sandbox through
// the gateway's error answer, or to the decision log.
func (s *Set) Redact(text string) string {
	for _, sec := range s.list() {
		text = strings.ReplaceAll(text, sec.value, sec.placeholder)
		if sec.quoted != sec.value {
			text = strings.ReplaceAll(text, sec.quoted, sec.placeholder)
		}
	}
	for _, r := range s.retired() {
		text = strings.ReplaceAll(text, r.Value, r.Placeholder)
	}
	return text
}
