package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The values of the test secrets: what must reach the bound hosts and
// nothing else.
const (
	valueA = "sk-test-VALUE-A-5f2c81"
	valueB = "sk-test-VALUE-B-9d1e44"
)

// noValues fails the test when what holds either secret's value.
func noValues(t *testing.T, where, what string) {
	t.Helper()
	for _, v := range []string{valueA, valueB} {
		if strings.Contains(what, v) {
			t.Errorf("%s holds a secret's value: %q", where, what)
		}
	}
}

// TestInjectSecretsOnlyForBoundHosts: the rewrite itself puts a value
// only in a request to a host and port its secret is bound to, whatever
// checks ran before it; a host that only looks like a bound one, or a
// bound host on another port, keeps the placeholder.
func TestInjectSecretsOnlyForBoundHosts(t *testing.T) {
	a, err := New("API_KEY", valueA, []string{"api.test", "*.wild.test:8443"})
	if err != nil {
		t.Fatal(err)
	}
	s := setOf(a)
	for _, tt := range []struct {
		host string
		port uint16
		want bool
	}{
		{"api.test", 443, true},
		{"x.wild.test", 8443, true},
		{"api.test", 8443, false},
		{"x.wild.test", 443, false},
		{"evil.test", 443, false},
		{"api.test.evil.test", 443, false},
		{"wild.test", 8443, false},
	} {
		h := http.Header{"Authorization": {"Bearer " + a.Placeholder()}}
		changed := s.Inject(h, tt.host, tt.port, "GET", "/")
		got := h.Get("Authorization") == "Bearer "+valueA
		if changed != tt.want || got != tt.want {
			t.Errorf("%s:%d: changed %v, value sent %v; want %v", tt.host, tt.port, changed, got, tt.want)
		}
	}
}

// TestWithSecrets: both ways an inspected request reaches its upstream
// (the tunnel's own connection, the shared transport) put the values in
// a copy of the request, and the request the gateway keeps holds the
// placeholders; a request with nothing to put in is not copied.
func TestWithSecrets(t *testing.T) {
	a, err := New("API_KEY", valueA, []string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	s := setOf(a)
	var sent *http.Request
	rt := s.Injector("api.test", 443, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return nil, errors.New("not sent")
	}))
	for _, tt := range []struct {
		name string
		send func(r *http.Request) *http.Request
	}{
		{"WithValues", func(r *http.Request) *http.Request { return s.WithValues(r, "api.test", 443) }},
		{"Injector", func(r *http.Request) *http.Request { rt.RoundTrip(r); return sent }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "https://api.test/", nil)
			r.Header.Set("Authorization", "Bearer "+a.Placeholder())
			got := tt.send(r)
			if got == r || got.Header.Get("Authorization") != "Bearer "+valueA {
				t.Errorf("got the same request %v with Authorization %q, want a copy with the value", got == r, got.Header.Get("Authorization"))
			}
			if r.Header.Get("Authorization") != "Bearer "+a.Placeholder() {
				t.Errorf("the gateway's request got Authorization %q, want the placeholder", r.Header.Get("Authorization"))
			}
			plain := httptest.NewRequest("GET", "https://api.test/", nil)
			plain.Header.Set("Authorization", "Bearer other")
			if got := tt.send(plain); got != plain {
				t.Errorf("a request without placeholders was copied")
			}
		})
	}
}

func TestSecretShowsNoValue(t *testing.T) {
	a, err := New("API_KEY", "  "+valueA+"\n", []string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	if a.value != valueA {
		t.Errorf("got the value %q, want it trimmed", a.value)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "secret", a, "secrets", []*Secret{a})
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%v %+v %#v %s %q %x", a, a, a, a, a, a), fmt.Sprintf("%+v", []*Secret{a}), logged.String()} {
		noValues(t, "a printed secret", s)
	}
	if p := a.Placeholder(); !strings.HasPrefix(p, "sbx-secret-API_KEY-") || len(p) != len("sbx-secret-API_KEY-")+32 {
		t.Errorf("got the placeholder %q, want sbx-secret-API_KEY- and 32 hex digits", p)
	}
	b, _ := New("API_KEY", valueA, []string{"api.test"})
	if a.Placeholder() == b.Placeholder() {
		t.Errorf("two secrets got the same placeholder %s", a.Placeholder())
	}
}

// TestNewSecretErrors: New, which is given the value, says what is
// wrong with it and nothing of where it came from (Read adds that).
func TestNewSecretErrors(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		want        error
		msg         string
	}{
		{"K", " \n", ErrEmpty, "secret K: the value is empty"},
		{"K", "a\x01b", ErrValue, "secret K: the value " + ErrValue.Error()},
		{"A-B", valueA, ErrName, `secret "A-B": the name ` + ErrName.Error()},
	} {
		_, err := New(tt.name, tt.value, []string{"api.test"})
		var se *Error
		if !errors.Is(err, tt.want) || !errors.As(err, &se) {
			t.Errorf("%s=%q: got %v, want a *Error wrapping %v", tt.name, tt.value, err, tt.want)
			continue
		}
		if se.Env != "" || se.File != "" || err.Error() != tt.msg {
			t.Errorf("%s=%q: got %q (Env %q, File %q), want %q, no source", tt.name, tt.value, err, se.Env, se.File, tt.msg)
		}
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("key", valueA+"\n", 0o600)
	write("empty", " \n", 0o600)
	write("twolines", valueA+"\n"+valueB+"\n", 0o600)
	env := map[string]string{"SET": valueA, "EMPTY": "", "CTL": "a\x01b"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	hosts := []string{"api.test"}
	tests := []struct {
		name string
		spec netpolicy.Secret
		want error
	}{
		{"env", netpolicy.Secret{Name: "K", FromEnv: "SET", Hosts: hosts}, nil},
		{"file", netpolicy.Secret{Name: "K", FromFile: "key", Hosts: hosts}, nil},
		{"unset", netpolicy.Secret{Name: "K", FromEnv: "UNSET", Hosts: hosts}, ErrUnset},
		{"empty env", netpolicy.Secret{Name: "K", FromEnv: "EMPTY", Hosts: hosts}, ErrEmpty},
		{"control character", netpolicy.Secret{Name: "K", FromEnv: "CTL", Hosts: hosts}, ErrValue},
		{"empty file", netpolicy.Secret{Name: "K", FromFile: "empty", Hosts: hosts}, ErrEmpty},
		{"two lines", netpolicy.Secret{Name: "K", FromFile: "twolines", Hosts: hosts}, ErrValue},
		{"missing file", netpolicy.Secret{Name: "K", FromFile: "missing", Hosts: hosts}, fs.ErrNotExist},
		{"bad name", netpolicy.Secret{Name: "A-B", FromEnv: "SET", Hosts: hosts}, ErrName},
		{"bad host", netpolicy.Secret{Name: "K", FromEnv: "SET", Hosts: []string{"*"}}, netpolicy.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec, err := Read(tt.spec, dir, lookup)
			if tt.want == nil {
				if err != nil || sec.value != valueA {
					t.Fatalf("got %v, %v; want the value", sec, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			noValues(t, "the error", err.Error())
			var se *Error
			if tt.want == netpolicy.ErrInvalidPolicy {
				return
			}
			if !errors.As(err, &se) {
				t.Fatalf("got %T, want a *Error", err)
			}
			if tt.want != ErrName && (se.Env != tt.spec.FromEnv || se.File != tt.spec.FromFile) {
				t.Errorf("got Env %q, File %q; want the value's source, Env %q, File %q", se.Env, se.File, tt.spec.FromEnv, tt.spec.FromFile)
			}
		})
	}
}

// FuzzSecretHeaderRewrite: whatever the header fields and the target,
// the value of a secret is never in what goes to a host the secret is
// not bound to, nor anywhere but one field line of a credential header: either the request is blocked (its host by decide, the
// rest by leaked), or after Inject only the bound secrets'
// values are in it.
func FuzzSecretHeaderRewrite(f *testing.F) {
	f.Add("Authorization", "Bearer \x00A", uint8(0), uint16(443))
	f.Add("X-Api-Key", "\x00A", uint8(1), uint16(443))
	f.Add("X-\x00B", "\x00a,\x00B", uint8(2), uint16(8443))
	f.Add("Cookie", "k=\x00A; j=\x00B", uint8(0), uint16(8443))
	f.Add("Authorization", "SBX-SECRET-API_KEY-\x00A", uint8(3), uint16(443))
	a, _ := New("API_KEY", valueA, []string{"api.test", "*.wild.test:8443"})
	b, _ := New("OTHER", valueB, []string{"other.test:8443"})
	s := setOf(a, b)
	hosts := []string{"api.test", "evil.test", "x.wild.test", "other.test", "API.test", a.Placeholder() + ".test"}
	f.Fuzz(func(t *testing.T, name, value string, hostIdx uint8, port uint16) {
		// \x00A and \x00B stand for the placeholders, \x00a for A's in
		// upper case.
		expand := func(s string) string {
			s = strings.ReplaceAll(s, "\x00A", a.Placeholder())
			s = strings.ReplaceAll(s, "\x00a", strings.ToUpper(a.Placeholder()))
			return strings.ReplaceAll(s, "\x00B", b.Placeholder())
		}
		name, value = expand(name), expand(value)
		if strings.Contains(name+value, valueA) || strings.Contains(name+value, valueB) {
			t.Skip("the client sent the value itself")
		}
		host := hosts[int(hostIdx)%len(hosts)]
		h := http.Header{name: {value}}
		norm, err := netpolicy.NormalizeHost(host) // as decide does
		if s.PlaceholderIn(host) != nil || s.leaked(norm, port, "/", h) != nil {
			return // blocked: nothing goes
		}
		if err != nil {
			return // the policy refuses it as invalid
		}
		s.Inject(h, norm, port, "GET", "/")
		var sent bytes.Buffer
		h.Write(&sent)
		for k, vs := range h {
			for _, v := range vs {
				for _, sec := range []*Secret{a, b} {
					if strings.Contains(v, sec.value) && (!sec.scope.Header(k) || len(vs) != 1) {
						t.Fatalf("%s's value went in %s, not one field line of a credential header: %q", sec.name, k, v)
					}
				}
			}
		}
		for _, sec := range []*Secret{a, b} {
			if strings.Contains(sent.String(), sec.value) && !sec.bound(norm, port) {
				t.Fatalf("%s's value went to %s:%d, which it is not bound to: %q", sec.name, norm, port, sent.String())
			}
			if !sec.bound(norm, port) && indexFold(sent.String(), sec.lower) >= 0 {
				t.Fatalf("%s's placeholder went to %s:%d unblocked: %q", sec.name, norm, port, sent.String())
			}
		}
	})
}

// BenchmarkBlockLeak: the secret check of an allowed request to a bound
// host, as forwardHTTP and inspected tunnels make it.
func BenchmarkBlockLeak(b *testing.B) {
	a, _ := New("API_KEY", valueA, []string{"api.test"})
	o, _ := New("OTHER", valueB, []string{"other.test:8443"})
	s := setOf(a, o)
	h := http.Header{
		"Authorization":     {"Bearer " + a.Placeholder()},
		"Content-Type":      {"application/json"},
		"Anthropic-Version": {"2023-06-01"},
		"User-Agent":        {"claude-cli/1.0"},
	}
	b.ReportAllocs()
	for b.Loop() {
		var rec decisionlog.Record
		d := netpolicy.Decision{Action: netpolicy.Allow}
		if s.BlockLeak(&rec, &d, Request{Host: "api.test", Port: 443, Method: "POST", Target: "/v1/messages?beta=true", Path: "/v1/messages", Header: h, TLS: true}) {
			b.Fatal("blocked")
		}
	}
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestInjectSecretsScope: the one place a value is written puts it only
// in a credential header field of a request to a bound host, one field
// line holding the placeholder alone or after a scheme, within the
// binding's methods and paths, whatever the checks before it let
// through; WithValues only in an HTTPS request.
func TestInjectSecretsScope(t *testing.T) {
	a, err := FromSpec(netpolicy.Secret{Name: "K", Hosts: []string{"api.test"}, Methods: []string{"POST"}, Paths: []string{"/v1/messages"}}, valueA)
	if err != nil {
		t.Fatal(err)
	}
	ph := a.Placeholder()
	s := setOf(a)
	for _, tt := range []struct {
		name         string
		header       http.Header
		method, path string
		want         http.Header
	}{
		{"x-api-key", http.Header{"X-Api-Key": {ph}}, "POST", "/v1/messages", http.Header{"X-Api-Key": {valueA}}},
		{"bearer", http.Header{"Authorization": {"Bearer " + ph}}, "POST", "/v1/messages", http.Header{"Authorization": {"Bearer " + valueA}}},
		{"other headers", http.Header{"Anthropic-Beta": {ph}, "Origin": {ph}, "X-Request-Id": {"a " + ph}}, "POST", "/v1/messages", http.Header{"Anthropic-Beta": {ph}, "Origin": {ph}, "X-Request-Id": {"a " + ph}}},
		{"two lines", http.Header{"X-Api-Key": {ph, ph}}, "POST", "/v1/messages", http.Header{"X-Api-Key": {ph, ph}}},
		{"other text", http.Header{"X-Api-Key": {ph + "x"}, "Authorization": {"Bearer " + ph + " " + ph}}, "POST", "/v1/messages", http.Header{"X-Api-Key": {ph + "x"}, "Authorization": {"Bearer " + ph + " " + ph}}},
		{"method", http.Header{"X-Api-Key": {ph}}, "GET", "/v1/messages", http.Header{"X-Api-Key": {ph}}},
		{"path", http.Header{"X-Api-Key": {ph}}, "POST", "/v1/api_keys", http.Header{"X-Api-Key": {ph}}},
	} {
		h := tt.header.Clone()
		s.Inject(h, "api.test", 443, tt.method, tt.path)
		for k, want := range tt.want {
			if got := h[k]; !slices.Equal(got, want) {
				t.Errorf("%s: got %s %q, want %q", tt.name, k, got, want)
			}
		}
	}
	r := httptest.NewRequest("POST", "http://api.test:443/v1/messages", nil)
	r.Header.Set("X-Api-Key", ph)
	if got := s.WithValues(r, "api.test", 443); got.Header.Get("X-Api-Key") != ph {
		t.Errorf("plain HTTP: got X-Api-Key %q, want the placeholder", got.Header.Get("X-Api-Key"))
	}
}

// setOf is the Set of secs, made without NewSet's checks.
func setOf(secs ...*Secret) *Set {
	s := &Set{}
	s.cur.Store(&setState{secrets: secs})
	return s
}
