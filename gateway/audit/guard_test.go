package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// guarded is a mod that makes a record a refusal by the address guard of
// addrs, as the gateway logs one.
func guarded(addrs string) func(*decisionlog.Record) {
	return func(r *decisionlog.Record) {
		first, _, _ := strings.Cut(addrs, ",")
		r.Action, r.Rule, r.Enforced, r.Status = "block", netpolicy.RuleGuard, true, 403
		r.Reason = decisionlog.ReasonGuard + first + " is documentation (TEST-NET-1)"
		r.Addrs = addrs
	}
}

// issueRun is the run of the issue: sbx run --allow registry.npmjs.org --
// npm install, with registry.npmjs.org at a documentation address, 11
// attempts the address guard refused.
func issueRun() []decisionlog.Record {
	recs := []decisionlog.Record{{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "policy loaded"}}
	for i := range 11 {
		recs = append(recs, rec(i, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", by("node", 10), guarded("192.0.2.1")))
	}
	return recs
}

func TestReplayGuardRefusal(t *testing.T) {
	const allowNpm = "version: 1\nrules:\n  - {host: registry.npmjs.org, action: allow}\n"
	const allowIP = "version: 1\nrules:\n  - {host: 192.0.2.1, action: allow}\n"
	tunnelCap := rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", func(r *decisionlog.Record) {
		r.Reason, r.Status = "client 10.213.0.2 has 256 tunnels open, the limit per client", 429
	})
	tests := []struct {
		name   string
		policy string
		rec    decisionlog.Record
		want   netpolicy.Action
		rule   string
		reason string // a part of the reason
	}{
		{"the rule alone", allowNpm, rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Block, "guard", "192.0.2.1 is documentation (TEST-NET-1) (where registry.npmjs.org:443 resolved when logged; allow_private: [192.0.2.1/32] exempts it)"},
		{"allow_private of the address", allowNpm + "allow_private: [192.0.2.1/32]\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Allow, "r1", ""},
		{"allow_private of its network, plain HTTP", allowNpm + "allow_private: [192.0.2.0/24]\n", rec(1, "http", "GET", "registry.npmjs.org", 80, "/left-pad", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Allow, "r1", ""},
		{"an inspected request", allowNpm + "allow_private: [192.0.2.0/24]\n", rec(1, "https", "GET", "registry.npmjs.org", 443, "/left-pad", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Allow, "r1", ""},
		{"a transparent tunnel, no allow_private", allowNpm, rec(1, "transparent", "", "registry.npmjs.org", 443, "", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Block, "guard", "allow_private: [192.0.2.1/32]"},
		{"one address of two exempt", allowNpm + "allow_private: [198.51.100.7/32]\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("192.0.2.1,198.51.100.7")),
			netpolicy.Allow, "r1", ""},
		{"IPv6", allowNpm + "allow_private: [\"2001:db8::/32\"]\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("2001:db8::5")),
			netpolicy.Allow, "r1", ""},
		{"the rule blocks first", "version: 1\nallow_private: [192.0.2.1/32]\nrules: []\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Block, "default", ""},
		{"an IP target an IP rule exempts", allowIP, rec(1, "connect", "CONNECT", "192.0.2.1", 443, "", "block", "guard", guarded("192.0.2.1")),
			netpolicy.Allow, "r1", ""},
		{"no address named: the fence", allowNpm + "allow_private: [0.0.0.0/1]\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("")),
			netpolicy.Block, "guard", "names none that a policy can exempt"},
		{"not an address", allowNpm + "allow_private: [0.0.0.0/1]\n", rec(1, "connect", "CONNECT", "registry.npmjs.org", 443, "", "block", "guard", guarded("x")),
			netpolicy.Block, "guard", "names none"},
		{"the tunnel cap is not the address guard", allowNpm, tunnelCap, netpolicy.Allow, "r1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := Replay(mustPolicy(t, tt.policy), &tt.rec)
			if !ok || d.Action != tt.want || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("got %v %s %q (%v), want %s by %s, reason with %q", d.Action, d.Rule, d.Reason, ok, tt.want, tt.rule, tt.reason)
			}
		})
	}
}

// TestExpectGuardRefusal: --expect of the issue's run against the policy
// it ran under fails, naming the address and the allow_private that
// exempts it; against the policy --suggest writes, it passes.
func TestExpectGuardRefusal(t *testing.T) {
	recs := issueRun()
	p := mustPolicy(t, "version: 1\nrules:\n  - {host: registry.npmjs.org, action: allow}\n")
	e, err := Expect(context.Background(), p, "run.yaml", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Holds() || len(e.Unexpected) != 1 {
		t.Fatalf("got holds %v, %d unexpected, want a failure at registry.npmjs.org:443", e.Holds(), len(e.Unexpected))
	}
	u := e.Unexpected[0]
	if u.Host != "registry.npmjs.org" || u.Attempts != 11 || u.Rule != netpolicy.RuleGuard || !strings.Contains(u.Reason, "allow_private: [192.0.2.1/32]") {
		t.Errorf("got %+v, want 11 attempts at registry.npmjs.org by the guard, naming allow_private: [192.0.2.1/32]", u)
	}
}

func TestSuggestAllowPrivate(t *testing.T) {
	recs := issueRun()
	// An IP target the guard refused, and a name at the gateway itself,
	// which no policy reaches.
	recs = append(recs,
		rec(20, "http", "GET", "10.1.2.3", 80, "/", "block", "guard", guarded("10.1.2.3"), func(r *decisionlog.Record) {
			r.Reason = decisionlog.ReasonGuard + "10.1.2.3 is private (RFC 1918)"
		}),
		rec(21, "connect", "CONNECT", "gw.example", 3128, "", "block", "guard", guarded(""), func(r *decisionlog.Record) {
			r.Reason = decisionlog.ReasonGuard + "127.0.0.1:3128 is the gateway itself"
		}),
	)
	rep := summarize(t, recs)
	want := []GuardAddr{
		{Addr: "10.1.2.3", Class: "private (RFC 1918)", Host: "10.1.2.3", Attempts: 1},
		{Addr: "192.0.2.1", Class: "documentation (TEST-NET-1)", Host: "registry.npmjs.org", Attempts: 11},
	}
	if diff := cmp.Diff(want, rep.GuardAddrs); diff != "" {
		t.Errorf("guard addresses (-want +got):\n%s", diff)
	}
	out, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"allow_private:\n  # private (RFC 1918), for 10.1.2.3 (1 attempt)\n  - \"10.1.2.3/32\"\n  # documentation (TEST-NET-1), for registry.npmjs.org (11 attempts)\n  - \"192.0.2.1/32\"\n",
		"11 blocked when logged (11 by the address guard)",
		"1 attempt at gw.example:3128 that the address guard refused for addresses no policy reaches",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the suggested policy lacks %q:\n%s", want, s)
		}
	}
	if i := strings.Index(s, "# Blocked when"); i >= 0 && i < strings.Index(s, "registry.npmjs.org\"") {
		t.Errorf("registry.npmjs.org, which its rule allowed, is listed with what was blocked:\n%s", s)
	}
	if strings.Contains(s, "host: \"gw.example\"") {
		t.Errorf("a rule for gw.example, which no policy can let through:\n%s", s)
	}
	p := mustPolicy(t, s)
	e, err := Expect(context.Background(), p, "suggested", logSource(recs[:len(recs)-1]), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() {
		t.Errorf("--expect of the suggested policy lists %+v:\n%s", e.Unexpected, s)
	}
	// The text report says so too.
	var b strings.Builder
	if err := WriteReport(&b, rep, FormatText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "192.0.2.1 (documentation (TEST-NET-1), for registry.npmjs.org)") {
		t.Errorf("the report does not name the refused address:\n%s", b.String())
	}
}
