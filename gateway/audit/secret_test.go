package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestSecretBlocksAreRefusalsNoPolicyLifts: a request or DNS name blocked
// for a secret's placeholder (the record's secret set) replays as a
// refusal whatever the policy, and the suggested policy allows no rule
// for a target that saw nothing else.
func TestSecretBlocksAreRefusalsNoPolicyLifts(t *testing.T) {
	secret := func(r *decisionlog.Record) {
		r.Secret, r.Reason = "API_KEY", "secret API_KEY's placeholder sent to "+r.Host
	}
	recs := []decisionlog.Record{
		{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "policy loaded"},
		rec(1, "https", "GET", "paste.example", 443, "/", "block", "secret", secret),
		rec(2, "dns", "A", "sbx-secret-api_key-0123.evil.example", 53, "", "block", "secret", secret),
		rec(3, "http", "GET", "ok.example", 80, "/", "allow", "default"),
	}
	p := mustPolicy(t, "version: 1\ndefault: allow\n")
	for _, r := range recs[1:3] {
		if d, ok := Replay(p, &r); !ok || d.Action != netpolicy.Block || !strings.Contains(d.Reason, "placeholder") {
			t.Errorf("%s under default allow: got %v, %v; want a block whatever the policy, with the logged reason", r.Host, d, ok)
		}
	}
	out, err := Suggest(summarize(t, recs), SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if strings.Contains(s, "host: paste.example") || !strings.Contains(s, "rule secret") {
		t.Errorf("the suggested policy allows paste.example, or does not say why it is skipped:\n%s", s)
	}
	e, err := Expect(context.Background(), mustPolicy(t, s), "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range e.Unexpected {
		if u.Rule != netpolicy.RuleInvalid {
			t.Errorf("the suggested policy does not allow %s %s (%s: %s):\n%s", u.Kind, unexpectedTarget(u), u.Rule, u.Reason, s)
		}
	}
}
