package secrets

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// scopedSet returns a Set of K (valueA), bound to api.test:443 for POST
// to paths under /v1/messages in the default credential headers, and
// OTHER (valueB), bound to other.test:8443 for anything.
func scopedSet(t *testing.T) (set *Set, k, other *Secret) {
	t.Helper()
	k, err := FromSpec(netpolicy.Secret{Name: "K", Hosts: []string{"api.test"}, Methods: []string{"POST"}, Paths: []string{"/v1/messages"}}, valueA)
	if err != nil {
		t.Fatal(err)
	}
	other, err = New("OTHER", valueB, []string{"other.test:8443"})
	if err != nil {
		t.Fatal(err)
	}
	set, err = NewSet([]*Secret{k, other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set, k, other
}

// TestBlockLeak: the rules of where a placeholder may go, one request at
// a time. To its own host a placeholder goes only over TLS, in one field
// line of a credential header, alone or after a scheme, with a method and
// path of the binding's however the path is spelled; anywhere else, and
// to any other host, the request is blocked by Rule and its record names
// the secret.
func TestBlockLeak(t *testing.T) {
	set, k, other := scopedSet(t)
	ph, oph := k.Placeholder(), other.Placeholder()
	const (
		scope = "is sent to api.test only with POST to paths under /v1/messages"
	)
	for _, tt := range []struct {
		name   string
		r      Request
		rule   string // the decision's rule before the check
		secret string // the secret blocked for; "" for none
		reason string // a part of the block's reason
	}{
		{"x-api-key", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}}}, "", "", ""},
		{"bearer", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"Authorization": {"Bearer " + ph}}}, "", "", ""},
		{"under the path", Request{Method: "POST", Path: "/v1/messages/count_tokens", Header: http.Header{"X-Api-Key": {ph}}}, "", "", ""},
		{"method in any case", Request{Method: "post", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}}}, "", "", ""},
		{"no placeholder", Request{Method: "GET", Path: "/v1/api_keys", Header: http.Header{"X-Api-Key": {"sk-own"}}}, "", "", ""},
		{"plain HTTP", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}}, TLS: false}, "", "K", "in a plain HTTP request to api.test"},
		{"in the method", Request{Method: ph, Path: "/v1/messages"}, "", "K", "in the method of a request to api.test"},
		{"in the query", Request{Method: "POST", Target: "/v1/messages?key=" + ph, Path: "/v1/messages"}, "", "K", "in the path or query"},
		{"percent-encoded in the path", Request{Method: "POST", Target: "/v1/" + strings.ReplaceAll(ph, "-", "%2D"), Path: "/v1/messages"}, "", "K", "in the path or query"},
		{"in a field's name", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-" + ph: {"1"}}}, "", "K", "in a header field's name"},
		{"another header", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"Anthropic-Beta": {ph}}}, "", "K", "in the header Anthropic-Beta"},
		{"upper case in another header", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"Origin": {strings.ToUpper(ph)}}}, "", "K", "in the header Origin"},
		{"two field lines", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph, ph}}}, "", "K", "in 2 header field lines"},
		{"the credential header again", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph, "x"}}}, "", "K", "in 2 header field lines"},
		{"two credential headers", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}, "Authorization": {"Bearer " + ph}}}, "", "K", "in 2 header field lines (Authorization, X-Api-Key)"},
		{"other text", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph + "x"}}}, "", "K", "with other text beside it"},
		{"two schemes", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"Authorization": {"Bearer x " + ph}}}, "", "K", "with other text beside it"},
		{"another method", Request{Method: "GET", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"another path", Request{Method: "POST", Path: "/v1/api_keys", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"dot segments", Request{Method: "POST", Path: "/v1/messages/../api_keys", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"escaped dot segments", Request{Method: "POST", Path: "/v1/messages/%2e%2e/api_keys", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"upper-case escaped dots", Request{Method: "POST", Path: "/v1/messages/%2E%2E/api_keys", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"a path parameter", Request{Method: "POST", Path: "/v1/messages;x/../../api_keys", Header: http.Header{"X-Api-Key": {ph}}}, "", "K", scope},
		{"another secret's placeholder", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}, "X-Other": {oph}}}, "", "OTHER", "secret OTHER's placeholder sent to api.test"},
		{"another secret's, beside the bound one's", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph + oph}}}, "", "OTHER", "secret OTHER's placeholder sent to api.test"},
		{"a host that did not normalize", Request{Method: "POST", Path: "/v1/messages", Header: http.Header{"X-Api-Key": {ph}}}, netpolicy.RuleInvalid, "K", "secret K's placeholder sent to api.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			r.Host, r.Port = "api.test", 443
			if tt.rule == netpolicy.RuleInvalid {
				r.Host = "api..test" // as sent: it did not normalize
			}
			r.TLS = tt.name != "plain HTTP"
			if r.Target == "" {
				r.Target = r.Path
			}
			rec := decisionlog.Record{Host: "api.test"}
			d := netpolicy.Decision{Action: netpolicy.Allow, Rule: tt.rule}
			blocked := set.BlockLeak(&rec, &d, r)
			if blocked != (tt.secret != "") || rec.Secret != tt.secret {
				t.Fatalf("got blocked %v, record's secret %q (%v); want blocked %v, %q", blocked, rec.Secret, d, tt.secret != "", tt.secret)
			}
			if !blocked {
				if d.Action != netpolicy.Allow {
					t.Errorf("got %v, want the decision as it was", d)
				}
				return
			}
			if d.Action != netpolicy.Block || d.Rule != Rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("got %v, want a block by rule %s with reason %q", d, Rule, tt.reason)
			}
			noValues(t, "the reason", d.Reason)
		})
	}
}

// TestBlockLeakElsewhere: to a host or port no secret is bound to, a
// placeholder anywhere (method, target, field name or value, in any case,
// percent-encoded in the target) is blocked, whatever the request is
// like; a decision made already by the host is kept.
func TestBlockLeakElsewhere(t *testing.T) {
	set, k, _ := scopedSet(t)
	ph := k.Placeholder()
	for _, tt := range []struct {
		name string
		r    Request
	}{
		{"bound host, another port", Request{Host: "api.test", Port: 8443, Header: http.Header{"X-Api-Key": {ph}}}},
		{"credential header", Request{Host: "evil.test", Port: 443, Header: http.Header{"Authorization": {"Bearer " + ph}}}},
		{"upper case", Request{Host: "evil.test", Port: 443, Header: http.Header{"Cookie": {"k=" + strings.ToUpper(ph)}}}},
		{"field name", Request{Host: "evil.test", Port: 443, Header: http.Header{ph: {"1"}}}},
		{"method", Request{Host: "evil.test", Port: 443, Method: ph}},
		{"query", Request{Host: "evil.test", Port: 443, Target: "/?k=" + ph}},
		{"escaped query", Request{Host: "evil.test", Port: 443, Target: "/?k=" + strings.ReplaceAll(ph, "s", "%73")}},
		{"a host that did not normalize", Request{Host: "", Port: 443, Header: http.Header{"X-Api-Key": {ph}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			r.TLS = true
			if r.Method == "" {
				r.Method = "POST"
			}
			rec := decisionlog.Record{Host: "evil.test"}
			d := netpolicy.Decision{Action: netpolicy.Allow}
			if !set.BlockLeak(&rec, &d, r) || rec.Secret != "K" {
				t.Fatalf("got %v, record's secret %q; want a block for K", d, rec.Secret)
			}
			if want := k.Block("evil.test"); d != want {
				t.Errorf("got %v, want %v", d, want)
			}
		})
	}
	rec := decisionlog.Record{Host: "x", Secret: "K"}
	d := k.Block("x")
	if !set.BlockLeak(&rec, &d, Request{Host: "evil.test", Port: 443}) || d != k.Block("x") {
		t.Errorf("a request blocked by its host: got %v, want it blocked as it was", d)
	}
}

// TestPlaceholderIn: a placeholder in a name that goes to no secret's
// host (a host, a CONNECT target, a TLS server name, a DNS name) is
// found in any case, every secret's; a nil Set finds none.
func TestPlaceholderIn(t *testing.T) {
	set, k, other := scopedSet(t)
	for _, tt := range []struct {
		text string
		want *Secret
	}{
		{"api.test", nil},
		{"sbx-secret-.evil.test", nil},
		{strings.ToLower(k.Placeholder()) + ".evil.test", k},
		{"x." + strings.ToUpper(other.Placeholder()), other},
	} {
		if got := set.PlaceholderIn(tt.text); got != tt.want {
			t.Errorf("PlaceholderIn(%q): got %v, want %v", tt.text, got, tt.want)
		}
	}
	var none *Set
	if got := none.PlaceholderIn(k.Placeholder()); got != nil {
		t.Errorf("a nil Set: got %v, want none", got)
	}
}

// TestNilSet: a gateway without secrets holds a nil Set, which binds no
// host, blocks, injects, redacts and scrubs nothing.
func TestNilSet(t *testing.T) {
	var s *Set
	h := http.Header{"Authorization": {"Bearer sbx-secret-K-0"}}
	rec, d := decisionlog.Record{}, netpolicy.Decision{Action: netpolicy.Allow}
	if s.Bound("api.test", 443) || s.BlockLeak(&rec, &d, Request{Host: "api.test", Port: 443, Header: h}) ||
		s.Inject(h, "api.test", 443, "GET", "/") || s.Redact("x") != "x" || s.ScrubberFor("api.test", 443) != nil {
		t.Errorf("a nil Set did something")
	}
}

// TestNewSet: a Set takes only secrets made by this package, each name
// once; with a store, a later policy that changes the policy's secrets
// is refused with ErrFixed, and one that keeps them is taken.
func TestNewSet(t *testing.T) {
	a, _ := New("K", valueA, []string{"api.test"})
	b, _ := New("K", valueB, []string{"other.test"})
	for _, tt := range []struct {
		name string
		list []*Secret
		want string
	}{
		{"nil", []*Secret{nil}, "holds a secret not made by secrets.New"},
		{"zero", []*Secret{{}}, "holds a secret not made by secrets.New"},
		{"twice", []*Secret{a, b}, "holds secret K twice"},
	} {
		if _, err := NewSet(tt.list, nil); err == nil || err.Error() != tt.want {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	spec := netpolicy.Spec{Secrets: []netpolicy.Secret{{Name: "K", FromEnv: "K", Hosts: []string{"api.test"}}}}
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	store := netpolicy.NewStore(p)
	if _, err := NewSet([]*Secret{a}, store); err != nil {
		t.Fatal(err)
	}
	changed := spec
	changed.Secrets = []netpolicy.Secret{{Name: "K", FromEnv: "K", Hosts: []string{"evil.test"}}}
	if _, err := store.Replace(changed, 0); !errors.Is(err, ErrFixed) {
		t.Errorf("changing the secrets: got %v, want ErrFixed", err)
	}
	kept := spec
	kept.Default = netpolicy.Allow
	if _, err := store.Replace(kept, 0); err != nil {
		t.Errorf("keeping the secrets: %v", err)
	}
}

// TestRedact: every secret's value in an upstream's error text, as it is
// and as Go's %q writes it, becomes its placeholder.
func TestRedact(t *testing.T) {
	const quotable = `sk-"quoted"\value`
	a, err := New("A", quotable, []string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New("B", valueB, []string{"other.test"})
	set, _ := NewSet([]*Secret{a, b}, nil)
	q := strconv.Quote(quotable)
	for _, tt := range []struct{ in, want string }{
		{"malformed header line: X-Echo: " + quotable, "malformed header line: X-Echo: " + a.Placeholder()},
		{"malformed MIME header line: " + q, `malformed MIME header line: "` + a.Placeholder() + `"`},
		{"both " + valueB + " and " + quotable, "both " + b.Placeholder() + " and " + a.Placeholder()},
		{"nothing", "nothing"},
	} {
		if got := set.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestScrubberFor: what a host a secret is bound to answers is scrubbed
// of every secret's value (a bound host may echo another's), with one
// scrubber made once; a host no secret is bound to gets none.
func TestScrubberFor(t *testing.T) {
	set, k, other := scopedSet(t)
	if sc := set.ScrubberFor("evil.test", 443); sc != nil {
		t.Errorf("an unbound host: got a scrubber, want none")
	}
	if sc := set.ScrubberFor("api.test", 8443); sc != nil {
		t.Errorf("a bound host on another port: got a scrubber, want none")
	}
	sc := set.ScrubberFor("api.test", 443)
	if sc == nil || set.ScrubberFor("other.test", 8443) != sc {
		t.Fatalf("bound hosts: got %p and %p, want one scrubber", sc, set.ScrubberFor("other.test", 8443))
	}
	var found []string
	got := sc.String("echo "+valueA+" "+valueB, func(name string) { found = append(found, name) })
	if want := "echo " + k.Placeholder() + " " + other.Placeholder(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if diff := cmp.Diff([]string{"K", "OTHER"}, found); diff != "" {
		t.Errorf("the secrets found (-want +got):\n%s", diff)
	}
}

// TestTrailerGuard: a placeholder in a request's trailers ends its body
// with an error instead of its end, and the guard names the secret; the
// block's record says why. A body whose trailers hold none ends as it
// does.
func TestTrailerGuard(t *testing.T) {
	set, k, _ := scopedSet(t)
	for _, tt := range []struct {
		name    string
		trailer http.Header
		want    *Secret
	}{
		{"none", http.Header{"X-Checksum": {"abc"}}, nil},
		{"in a value", http.Header{"X-Checksum": {"a " + k.Placeholder()}}, k},
		{"in a name", http.Header{"X-" + k.Placeholder(): {"1"}}, k},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := &http.Request{Trailer: tt.trailer}
			g := set.GuardTrailers(req, strings.NewReader("body"))
			b, err := io.ReadAll(g)
			if string(b) != "body" || (err != nil) != (tt.want != nil) || g.Found() != tt.want {
				t.Fatalf("got %q, %v, found %v; want the body, found %v", b, err, g.Found(), tt.want)
			}
			if tt.want == nil {
				return
			}
			var rec decisionlog.Record
			d := k.BlockTrailer(&rec, "api.test")
			if d.Action != netpolicy.Block || d.Rule != Rule || rec.Rule != Rule || rec.Secret != "K" || !rec.Enforced ||
				rec.Status != http.StatusForbidden || rec.Error != err.Error() || !strings.Contains(rec.Reason, "in a trailer of a request to api.test") {
				t.Errorf("got %v and record %+v, want a block by rule %s naming K", d, rec, Rule)
			}
		})
	}
}

// TestRotate: a rotated secret's value is put in from then on, with the
// placeholder it had, and both the new value and the old one are
// scrubbed from a bound host's answers and redacted from errors (a
// refreshed login's access token, gateway/login).
func TestRotate(t *testing.T) {
	sec, err := New("TOKEN", "old-value", []string{"api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewSet([]*Secret{sec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := set.ScrubberFor("api.example.com", 443)
	if err := set.Rotate("TOKEN", "new-value"); err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer " + sec.Placeholder()}}
	set.Inject(h, "api.example.com", 443, "GET", "/")
	if got, want := h.Get("Authorization"), "Bearer new-value"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	sc := set.ScrubberFor("api.example.com", 443)
	if sc == before {
		t.Errorf("got the scrubber made before the rotation, want a new one")
	}
	text := "old-value new-value"
	want := sec.Placeholder() + " " + sec.Placeholder()
	if got := sc.String(text, nil); got != want {
		t.Errorf("scrubbed: got %q, want %q", got, want)
	}
	if got := set.Redact(text); got != want {
		t.Errorf("redacted: got %q, want %q", got, want)
	}
	for _, tt := range []struct{ name, value string }{{"TOKEN", " "}, {"TOKEN", "a\nb"}, {"OTHER", "v"}} {
		if err := set.Rotate(tt.name, tt.value); err == nil {
			t.Errorf("Rotate(%q, %q): got no error, want one", tt.name, tt.value)
		}
	}
}
