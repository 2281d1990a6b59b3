package audit

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// capped marks a record as the refusal of count tunnels or connections
// by the per-client cap capName, as the gateway writes one.
func capped(capName string, count uint64) func(*decisionlog.Record) {
	return func(r *decisionlog.Record) {
		r.Cap, r.Count, r.Status = capName, count, 429
		r.Reason = "client 10.213.0.2 has 1 tunnels open, the limit per client"
		if capName == decisionlog.CapConns {
			r.Reason = "client 10.213.0.2 has 256 connections open, the limit per client"
		}
	}
}

// capFlood is the log of a sandbox that holds its only tunnel open (to
// allowed.test, which its policy allows) and then opens 304 more to
// evil.test: 300 CONNECTs and 4 captured connections, all refused by the
// tunnel cap, which the gateway folds into a few records (10 of count 1,
// then a summary of 290; the captured ones in one of 4); and 60
// connections over the connection cap, folded the same way.
func capFlood() []decisionlog.Record {
	recs := []decisionlog.Record{
		{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "started"},
		rec(1, "connect", "CONNECT", "allowed.test", 443, "", "allow", "ok"),
	}
	for range 10 {
		recs = append(recs, rec(2, "connect", "CONNECT", "evil.test", 443, "", "block", "guard", capped(decisionlog.CapTunnels, 1)))
	}
	recs = append(recs,
		rec(3, "connect", "CONNECT", "evil.test", 443, "", "block", "guard", capped(decisionlog.CapTunnels, 290)),
		rec(3, "transparent", "", "evil.test", 443, "", "block", "guard", capped(decisionlog.CapTunnels, 4)),
		rec(4, "conn", "", "", 0, "", "block", "guard", capped(decisionlog.CapConns, 1)),
		rec(5, "conn", "", "", 0, "", "block", "guard", capped(decisionlog.CapConns, 59)),
	)
	return recs
}

// TestCapRefusalsAreCountedAndNotSuggested: a sandbox opens 304 tunnels
// over its tunnel cap, which the log holds in 12 records. The report
// counts 304 refused by the tunnel cap (and 60 connections by the
// connection cap), says it is the cap and not the policy, the suggested
// policy has no rule for them, and --expect counts 304 attempts. Red on
// main: the report counted 12 blocked requests and 2 refused connections,
// called them rule guard, and suggested allowing evil.test.
func TestCapRefusalsAreCountedAndNotSuggested(t *testing.T) {
	recs := capFlood()
	rep := summarize(t, recs)

	if got, want := rep.Requests, (Counts{Allowed: 1, Blocked: 304}); got != want {
		t.Errorf("requests: got %+v, want %+v", got, want)
	}
	if rep.RefusedClients != 60 {
		t.Errorf("refused clients: got %d, want 60", rep.RefusedClients)
	}
	if diff := cmp.Diff(map[string]uint64{decisionlog.CapConns: 60, decisionlog.CapTunnels: 304}, rep.Capped); diff != "" {
		t.Errorf("refusals by cap (-want +got):\n%s", diff)
	}
	var evil *Target
	for _, tg := range rep.Targets {
		if tg.Host == "evil.test" {
			evil = tg
		}
	}
	if evil == nil {
		t.Fatalf("no row for evil.test in %+v", rep.Targets)
	}
	if evil.Blocked != 304 || evil.Capped != 304 || evil.Tunnels != 304 {
		t.Errorf("evil.test: got %d blocked, %d capped, %d tunnels; want 304 each", evil.Blocked, evil.Capped, evil.Tunnels)
	}
	if diff := cmp.Diff(map[string]uint64{"cap " + decisionlog.CapTunnels: 304}, evil.Rules); diff != "" {
		t.Errorf("evil.test's rules (-want +got):\n%s", diff)
	}
	var timeline uint64
	for _, b := range rep.Timeline {
		timeline += b.Blocked
	}
	if timeline != 304 {
		t.Errorf("the timeline counts %d blocked, want 304", timeline)
	}

	const capSays = "the per-client tunnel cap (tunnels_per_client) refused 304 tunnels"
	for _, format := range []string{FormatText, FormatMarkdown, FormatHTML} {
		var b strings.Builder
		if err := WriteReport(&b, rep, format); err != nil {
			t.Fatal(err)
		}
		got := b.String()
		if format == FormatMarkdown {
			got = strings.ReplaceAll(got, `\`, "") // its escapes
		}
		for _, want := range []string{capSays, "the per-client connection cap (conns_per_client) refused 60 connections", "not a policy block"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s report lacks %q:\n%s", format, want, got)
			}
		}
	}

	// The HTML report's stats count them by cap.
	stats := map[string]string{}
	walk(parseHTML(t, renderHTML(t, rep)), func(n *html.Node) {
		if k, ok := attr(n, "data-stat"); ok && strings.HasPrefix(k, "capped.") {
			stats[k], _ = attr(n, "data-value")
		}
	})
	if diff := cmp.Diff(map[string]string{"capped." + decisionlog.CapConns: "60", "capped." + decisionlog.CapTunnels: "304"}, stats); diff != "" {
		t.Errorf("the HTML report's cap stats (-want +got):\n%s", diff)
	}

	out, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if strings.Contains(s, `host: "evil.test"`) {
		t.Errorf("the suggested policy has a rule for evil.test, which only the tunnel cap refused:\n%s", s)
	}
	if want := "304 attempts at evil.test:443 that the per-client tunnel cap (tunnels_per_client) refused"; !strings.Contains(s, want) {
		t.Errorf("the suggested policy lacks %q:\n%s", want, s)
	}
	p := mustPolicy(t, s)
	if d := p.Verdict(netpolicy.Target{Host: "evil.test", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Block {
		t.Errorf("the suggested policy: %s for evil.test:443, want block", d.Action)
	}

	e, err := Expect(context.Background(), p, "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Attempts != 305 {
		t.Errorf("--expect replayed %d attempts, want 305", e.Attempts)
	}
	var got []string
	for _, u := range e.Unexpected {
		got = append(got, u.Kind+" "+unexpectedTarget(u)+" "+u.Logged+" ×"+strconv.FormatUint(u.Attempts, 10))
	}
	want := []string{
		"connect evil.test:443 block by the per-client tunnel cap (tunnels_per_client) ×300",
		"transparent evil.test:443 block by the per-client tunnel cap (tunnels_per_client) ×4",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected (-want +got):\n%s", diff)
	}
	// A policy that allows evil.test: the cap refused them, not the
	// policy, and the attempts are expected.
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	if e, err := Expect(context.Background(), open, "open", logSource(recs), Limits{}); err != nil || !e.Holds() || e.Attempts != 305 {
		t.Errorf("default allow: got %+v, %v; want holding after 305 attempts", e, err)
	}
}
