package netpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzNormalizeHost checks the properties the gateway relies on: a
// normalized host is stable (normalizing it again changes nothing), holds
// only characters that are safe to log and dial, is never an alternate IPv4
// spelling, and an exact rule for it matches the raw host it came from.
// The fast path must agree with the full one.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{
		"example.com", "EXAMPLE.com.", "bücher.de", "xn--bcher-kva.de", "[::1]", "::ffff:127.0.0.1",
		"127.0.0.1", "127.1", "0x7f.1", "2130706433", "0177.0.0.1", "user@host", "a..b", ".", "",
		"[fe80::1%eth0]", "ｅｘａｍｐｌｅ.com", "r3---sn-abc.googlevideo.com", "a_b.c", "exa\u00admple.com",
		"example.com。", "1.2.3.4.5", "x.0x1f", "[127.0.0.1]", "*.example.com",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NormalizeHost(in)
		if fast, ok := fastNormalize(in); ok {
			slow, serr := normalizeHost(in)
			if serr != nil || slow != fast {
				t.Fatalf("fast path %q = %q, slow path = %q, %v", in, fast, slow, serr)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("NormalizeHost(%q) error %v does not wrap ErrInvalidTarget", in, err)
			}
			if d := mustFuzzPolicy(t, "*").Decide(Target{Host: in, Port: 443, Method: "CONNECT"}); d.Rule != RuleInvalid {
				t.Fatalf("invalid host %q decided by %q, want %q", in, d.Rule, RuleInvalid)
			}
			return
		}
		again, err := NormalizeHost(out)
		if err != nil || again != out {
			t.Fatalf("NormalizeHost(%q) = %q, but NormalizeHost(%q) = %q, %v", in, out, out, again, err)
		}
		if out == "" || len(out) > maxHostLen || strings.HasSuffix(out, ".") {
			t.Fatalf("NormalizeHost(%q) = %q: empty, too long or ends in a dot", in, out)
		}
		for _, c := range []byte(out) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
				t.Fatalf("NormalizeHost(%q) = %q holds %q", in, out, c)
			}
		}
		if ip, perr := netip.ParseAddr(out); perr == nil {
			if ip.String() != out || ip.Is4In6() {
				t.Fatalf("NormalizeHost(%q) = %q, not the canonical form %q", in, out, ip.Unmap())
			}
		} else if endsInNumber(out) {
			t.Fatalf("NormalizeHost(%q) = %q ends in a number but is no IPv4 address", in, out)
		}
		if d := mustFuzzPolicy(t, out).Decide(Target{Host: in, Port: 443, Method: "CONNECT"}); d.Rule != "fuzz" {
			t.Fatalf("a rule for %q does not match %q: %+v", out, in, d)
		}
	})
}

// mustFuzzPolicy compiles a one-rule policy, allowing host on port 443.
func mustFuzzPolicy(t *testing.T, host string) *Policy {
	t.Helper()
	p, err := Compile(Spec{Rules: []Rule{{ID: "fuzz", Host: host, Ports: []Port{443}, Action: Allow}}})
	if err != nil {
		t.Fatalf("a normalized host %q does not make a rule: %v", host, err)
	}
	return p
}

// FuzzDecode checks that decoding never panics, that every problem comes
// back as an ErrorList of lined errors, and that whatever Decode accepts
// compiles and survives a JSON round trip unchanged, as the management API
// needs (GET the policy, PUT it back). On what Decode accepts it also
// checks that inspect-only rules inserted anywhere change no decision.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(examplePolicyYAML))
	f.Add([]byte(examplePolicyJSON))
	for _, s := range []string{
		"version: 1\n", "rules: []\n", "{}", "[]", "null", "rules:\n  - {host: a.test, action: allow}\n",
		"rules:\n  - host: \"*.\"\n    action: deny\n", "default: &a allow\nmode: *a\n", "a: b\n---\nc: d\n",
		"{\"rules\": [{\"host\": \"a\", \"ports\": [1e3]}]}", "allow_private: [::ffff:10.0.0.0/104]\n",
		"rules:\n  - {host: x.test, action: intercept, response: {headers: {A: b}}}\n",
		"rules:\n  - {host: x.test, action: intercept, response: {llm: ./a/../s.yaml}}\n", "{\"rules\": [{\"host\": \"x\", \"action\": \"intercept\", \"response\": {\"llm\": \"\"}}]}",
		"rules:\n  - {host: x.test, inspect: true}\n  - {host: x.test, action: block, inspect: true}\n",
		"{\"rules\": [{\"host\": \"x.test\", \"ports\": [443], \"methods\": [\"GET\"], \"action\": \"allow\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Decode("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Decode error %T %v is not a non-empty ErrorList", err, err)
			}
			for _, e := range list {
				if e.File != "fuzz.yaml" || e.Msg == "" || (e.Err != ErrInvalidPolicy && e.Err != ErrInvalidRule) {
					t.Fatalf("malformed error %#v", e)
				}
			}
			return
		}
		p, err := Compile(spec)
		if err != nil {
			t.Fatalf("Decode accepted what Compile rejects: %v", err)
		}
		js, err := json.Marshal(p.Spec())
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		q, err := Parse("roundtrip.json", js)
		if err != nil {
			t.Fatalf("the JSON of an accepted policy does not parse: %v\n%s", err, js)
		}
		if diff := cmp.Diff(p.Spec(), q.Spec(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Fatalf("JSON round trip changed the policy (-before +after):\n%s", diff)
		}
		checkInspectOnlyRulesDecideNothing(t, spec, seedOf(data))
	})
}

// FuzzParseFlagPattern checks that a command-line pattern either fails with
// ErrInvalidRule or yields a rule that compiles.
func FuzzParseFlagPattern(f *testing.F) {
	for _, s := range []string{"example.com", "example.com:8080", "*.example.com:*", "*:443", "10.0.0.0/8", "[2001:db8::]/32:443", "[::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, fp := range []FlagPatterns{{Block: []string{s}}, {Inspect: []string{s}}} {
			rules, err := fp.Rules()
			if err != nil {
				if !errors.Is(err, ErrInvalidRule) {
					t.Fatalf("%+v.Rules() error %v does not wrap ErrInvalidRule", fp, err)
				}
				continue
			}
			if _, err := Compile(Spec{Rules: rules}); err != nil {
				t.Fatalf("%+v.Rules() accepted %q but Compile rejects it: %v", fp, s, err)
			}
		}
	})
}
