package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// cutPath is a path as the gateway logs one of more than 1024 bytes.
var cutPath = "/ok/" + strings.Repeat("a", maxLoggedPath-4) + "..."

func invalid(reason string) func(*decisionlog.Record) {
	return func(r *decisionlog.Record) { r.Reason = reason }
}

// sniClose is the close record of a tunnel the gateway's TLS check
// closed, as gateway/tunnel.go's relay writes it.
func sniClose(r *decisionlog.Record) {
	r.Event, r.Status, r.Upstream = decisionlog.EventClose, 200, "192.0.2.1:443"
	r.Action, r.Rule, r.Reason, r.Enforced, r.Error = "block", "invalid", "sni mismatch", true, "sni mismatch"
}

// TestReplayGatewayRefusals: what the gateway refuses whatever the
// policy, or answers otherwise than Verdict says, replays as the gateway
// did.
func TestReplayGatewayRefusals(t *testing.T) {
	p := mustPolicy(t, `
version: 1
default: allow
rules:
  - {host: i.example, ports: [80, 443], action: intercept, response: {status: 204}}
  - {host: p.example, ports: [80], methods: [GET], path: /ok/, action: allow}
  - {host: p.example, ports: [80], action: block}
`)
	tests := []struct {
		name       string
		r          decisionlog.Record
		want       netpolicy.Action
		wantRule   string
		wantReason string
		notAttempt bool
	}{
		{name: "transparent sni mismatch", r: rec(1, "transparent", "", "a.example", 443, "", "block", "invalid",
			invalid("sni mismatch: the TLS server name is b.example, but the address was given for a.example")),
			want: netpolicy.Block, wantRule: "invalid", wantReason: "no policy can allow it"},
		{name: "transparent host mismatch", r: rec(1, "transparent", "GET", "a.example", 80, "/", "block", "invalid",
			invalid("host mismatch: the request names b.example, but the connection is to a.example")),
			want: netpolicy.Block, wantRule: "invalid", wantReason: "host mismatch"},
		{name: "malformed ClientHello", r: rec(1, "transparent", "", "a.example", 443, "", "block", "invalid", invalid("malformed TLS ClientHello")),
			want: netpolicy.Block, wantRule: "invalid"},
		{name: "malformed request", r: rec(1, "http", "GET", "a.example", 80, "/", "block", "invalid", invalid("malformed request: obsolete line folding")),
			want: netpolicy.Block, wantRule: "invalid"},
		{name: "invalid connect target", r: rec(1, "connect", "CONNECT", "a.example", 0, "", "block", "invalid", invalid("invalid target: port 0")),
			want: netpolicy.Block, wantRule: "invalid"},
		{name: "connect closed by the sni check", r: rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "default", sniClose),
			want: netpolicy.Block, wantRule: "invalid", wantReason: "sni mismatch"},
		{name: "an allowed tunnel's close", r: rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "default", closed(1, 1)),
			notAttempt: true},
		// An intercept makes its host inspected (docs/inspection.md): the
		// tunnel opens, and the requests in it are answered.
		{name: "connect to an intercepted host", r: rec(1, "connect", "CONNECT", "i.example", 443, "", "allow", "r1"),
			want: netpolicy.Allow, wantRule: "r1", wantReason: netpolicy.InspectedReason},
		{name: "inspected transparent TLS to an intercepted host", r: rec(1, "transparent", "", "i.example", 443, "", "allow", "r1",
			func(r *decisionlog.Record) { r.Reason = netpolicy.InspectedReason }),
			want: netpolicy.Allow, wantRule: "r1"},
		{name: "another transparent tunnel to an intercepted host", r: rec(1, "transparent", "", "i.example", 443, "", "block", "r1"),
			want: netpolicy.Block, wantRule: "r1", wantReason: "inside a tunnel"},
		{name: "an inspected request", r: rec(1, "https", "GET", "i.example", 443, "/x", "intercept", "r1"),
			want: netpolicy.Intercept, wantRule: "r1"},
		{name: "request to an intercepted host", r: rec(1, "http", "GET", "i.example", 80, "/x", "intercept", "r1"),
			want: netpolicy.Intercept, wantRule: "r1"},
		{name: "a path the log cut short", r: rec(1, "http", "GET", "p.example", 80, cutPath, "allow", "r2"),
			want: netpolicy.Block, wantRule: "r3", wantReason: "cut this request's path at 1024 bytes"},
		{name: "a path just short of the cut", r: rec(1, "http", "GET", "p.example", 80, cutPath[:maxLoggedPath], "allow", "r2"),
			want: netpolicy.Allow, wantRule: "r2"},
		{name: "a cut path to an intercepted host", r: rec(1, "http", "GET", "i.example", 80, cutPath, "intercept", "r1"),
			want: netpolicy.Block, wantRule: "r1"},
		{name: "a cut path under the default", r: rec(1, "http", "GET", "o.example", 80, cutPath, "allow", "default"),
			want: netpolicy.Allow, wantRule: "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := Replay(p, &tt.r)
			if ok == tt.notAttempt {
				t.Fatalf("got attempt %v, want %v", ok, !tt.notAttempt)
			}
			if tt.notAttempt {
				return
			}
			if d.Action != tt.want || d.Rule != tt.wantRule || !strings.Contains(d.Reason, tt.wantReason) {
				t.Errorf("got %s by %s (%s), want %s by %s with a reason containing %q", d.Action, d.Rule, d.Reason, tt.want, tt.wantRule, tt.wantReason)
			}
		})
	}
}

// tlsCheckLog is a CONNECT the gateway allowed and then closed when the
// client's ClientHello named another host, a transparent request with a
// Host header that was not the target's, and requests with paths the log
// cut short.
func tlsCheckLog() []decisionlog.Record {
	return []decisionlog.Record{
		{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "policy loaded"},
		rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "default"),
		rec(2, "connect", "CONNECT", "a.example", 443, "", "allow", "default", sniClose),
		rec(3, "transparent", "GET", "h.example", 80, "/", "block", "invalid", invalid("host mismatch: the request names x.example, but the connection is to h.example")),
		rec(4, "http", "GET", "c.example", 80, cutPath, "allow", "default"),
		rec(5, "http", "GET", "c.example", 80, "/ok/short", "allow", "default"),
		rec(6, "http", "GET", "i.example", 80, cutPath, "intercept", "r1", func(r *decisionlog.Record) { r.Status = 204 }),
	}
}

func TestReportCountsTLSCheckCloses(t *testing.T) {
	rep := summarize(t, tlsCheckLog())
	var a *Target
	for _, tg := range rep.Targets {
		if tg.Host == "a.example" {
			a = tg
		}
	}
	if a == nil {
		t.Fatal("no row for a.example:443")
	}
	got := []uint64{a.Allowed, a.Blocked, a.Invalid, a.ClosedByTLSCheck, a.Rules["invalid"], rep.ClosedByTLSCheck, rep.Requests.Blocked}
	if want := []uint64{1, 1, 1, 1, 1, 1, 2}; !cmp.Equal(got, want) {
		t.Errorf("a.example: got allowed, blocked, invalid, closed by the TLS check, rule invalid, report's closed, report's blocked %v; want %v", got, want)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, rep, FormatText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "WARNING: the gateway closed 1 tunnel after opening them") || !strings.Contains(b.String(), "sni mismatch") {
		t.Errorf("the text report does not say why a.example was blocked:\n%s", b.String())
	}
}

func TestExpectCountsTLSCheckCloses(t *testing.T) {
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules:\n  - {host: i.example, action: intercept, response: {status: 204}}\n")
	e, err := Expect(context.Background(), open, "open", logSource(tlsCheckLog()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range e.Unexpected {
		got = append(got, u.Kind+" "+unexpectedTarget(u)+" "+u.Rule)
	}
	want := []string{
		"connect a.example:443 invalid",
		"http GET i.example:80" + cutPath + " r1",
		"transparent GET h.example:80/ invalid",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected (-want +got):\n%s", diff)
	}
	if e.Holds() || e.Attempts != 6 {
		t.Errorf("got holds %v after %d attempts, want false after 6", e.Holds(), e.Attempts)
	}
}

// TestSuggestGatewayRefusals: what the gateway refused whatever the policy
// is listed as not covered and gets no rule of its own; a path the log cut
// short gets a rule without methods or path.
func TestSuggestGatewayRefusals(t *testing.T) {
	recs := tlsCheckLog()
	out, err := Suggest(summarize(t, recs), SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"#   1 attempt at a.example:443 that the gateway refused whatever the policy",
		"#   1 attempt at h.example:80 that the gateway refused whatever the policy",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the suggested policy lacks %q:\n%s", want, s)
		}
	}
	spec, err := netpolicy.Decode("suggested", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range spec.Rules {
		if r.Host == "h.example" {
			t.Errorf("a rule for h.example, every attempt at which the gateway refused whatever the policy:\n%s", s)
		}
		if (r.Host == "c.example" || r.Host == "i.example") && (r.Path != "" || r.Methods != nil || r.Action != netpolicy.Allow) {
			t.Errorf("%s, whose path the log cut short, got %s with methods %v and path %q; want allow without either:\n%s", r.Host, r.Action, r.Methods, r.Path, s)
		}
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

// TestReplayPortlessBypassGuard: a packet without a port (ICMP) to an
// address the guard refuses is refused as Verdict refuses an IP literal,
// unless a rule for the address and every port exempts it.
func TestReplayPortlessBypassGuard(t *testing.T) {
	p := mustPolicy(t, `
version: 1
rules:
  - {host: 10.99.0.6, ports: [80], action: allow}
  - {host: 10.99.0.7, ports: ["*"], action: allow}
  - {host: 192.0.2.0/24, ports: ["*"], action: allow}
  - {host: 203.0.113.9, ports: [80], action: allow}
`)
	for _, tt := range []struct {
		host     string
		want     netpolicy.Action
		wantRule string
	}{
		{"10.99.0.6", netpolicy.Block, netpolicy.RuleGuard}, // the guard, which a rule for port 80 does not lift
		{"10.99.0.7", netpolicy.Allow, "r2"},
		{"192.0.2.5", netpolicy.Allow, "r3"},                  // a documentation range its CIDR rule exempts
		{"203.0.113.9", netpolicy.Block, netpolicy.RuleGuard}, // documentation range, rule for port 80 only
		{"10.99.0.8", netpolicy.Block, netpolicy.RuleDefault},
		{"198.51.100.1", netpolicy.Block, netpolicy.RuleDefault},
	} {
		r := rec(1, "bypass", "", tt.host, 0, "", "block", "guard", func(r *decisionlog.Record) { r.Proto, r.Count = "icmp", 1 })
		if d, ok := Replay(p, &r); !ok || d.Action != tt.want || d.Rule != tt.wantRule {
			t.Errorf("icmp to %s: got %s by %s (%s), want %s by %s", tt.host, d.Action, d.Rule, d.Reason, tt.want, tt.wantRule)
		}
	}
}

// newerLog has records a newer gateway might write: a decision of a kind
// this package does not know, and a record of an unknown event.
func newerLog() []decisionlog.Record {
	return []decisionlog.Record{
		{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "policy loaded"},
		rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "default"),
		rec(2, "quic", "", "a.example", 443, "", "allow", "default"),
		rec(3, "quic", "", "a.example", 443, "", "allow", "default"),
		{V: 1, Event: "stats", Time: t0.Add(4 * time.Second)},
	}
}

// TestUnknownKindsFailClosed: what this sbx audit does not know fails
// --expect, is counted in the report, and makes a diff incomplete.
func TestUnknownKindsFailClosed(t *testing.T) {
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	recs := newerLog()
	e, err := Expect(context.Background(), open, "open", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range e.Unexpected {
		got = append(got, fmt.Sprintf("%s %s ×%d %s: %s", u.Kind, unexpectedTarget(u), u.Attempts, u.Rule, u.Reason))
	}
	want := []string{
		`event "stats" (no target) ×1 unknown: event "stats" is not known to this sbx audit: upgrade sbx`,
		`quic a.example:443 ×2 unknown: kind "quic" is not known to this sbx audit: upgrade sbx`,
	}
	if diff := cmp.Diff(want, got); diff != "" || e.Holds() {
		t.Errorf("holds %v; unexpected (-want +got):\n%s", e.Holds(), diff)
	}

	rep := summarize(t, recs)
	if want := map[string]uint64{`kind "quic"`: 2, `event "stats"`: 1}; !cmp.Equal(rep.Unknown, want) || len(rep.Targets) != 1 || rep.Requests.Total() != 1 {
		t.Errorf("got unknown %v, %d targets, %d requests; want %v, 1, 1", rep.Unknown, len(rep.Targets), rep.Requests.Total(), want)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, rep, FormatText); err != nil || !strings.Contains(b.String(), "WARNING: 3 records of kinds or events this sbx audit does not know") {
		t.Errorf("the text report does not count the unknown records (%v):\n%s", err, b.String())
	}
	if d := DiffReports(summarize(t, recs[:2]), rep, 10); !d.ReachesNew() || len(d.Incomplete) != 1 {
		t.Errorf("diff against a log with unknown records: got reaches new %v, incomplete %q; want true, one reason", d.ReachesNew(), d.Incomplete)
	}
	out, err := Suggest(rep, SuggestOptions{})
	if err != nil || !strings.Contains(string(out), "#   3 records of kinds or events this sbx audit does not know") {
		t.Errorf("the suggested policy does not list the unknown records as not covered (%v):\n%s", err, out)
	}
}

func TestExpectNoRecords(t *testing.T) {
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	_, err := Expect(context.Background(), open, "open", logSource(nil), Limits{})
	if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), "no decision records in test.jsonl: is this a decision log?") {
		t.Errorf("an empty log: got %v, want ErrNoRecords naming it", err)
	}
}
