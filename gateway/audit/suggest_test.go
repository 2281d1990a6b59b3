package audit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

func TestPathPrefix(t *testing.T) {
	for _, tt := range []struct {
		paths []string
		want  string
	}{
		{[]string{"/v1/items", "/v1/users/7"}, "/v1/"},
		{[]string{"/v1/items"}, "/v1/items"},
		{[]string{"/a", "/b"}, ""},
		{[]string{"/a/b;x/c"}, "/a/"},                       // path parameters
		{[]string{"/a/b;x/c", "/a/b;x/d"}, "/a/"},           // in the shared prefix
		{[]string{"/a/b/c;jsessionid=1"}, "/a/b/"},          // in the last segment
		{[]string{"/a/b%3Bx/c"}, "/a/"},                     // an escaped ';' is one
		{[]string{"/a/%3Fq/c", "/a/%3Fq/d"}, "/a/"},         // an escaped '?'
		{[]string{"/a/b%23frag/c"}, "/a/"},                  // an escaped '#'
		{[]string{"/;x"}, ""},                               // nothing left
		{[]string{"/a/b%20c/d", "/a/b%20c/e"}, "/a/b%20c/"}, // a space stays escaped, which a rule takes
		{[]string{"*"}, ""},
	} {
		var pcs []PathCount
		for _, p := range tt.paths {
			pcs = append(pcs, PathCount{Path: p, Count: 1})
		}
		got := pathPrefix(pcs)
		if got != tt.want {
			t.Errorf("pathPrefix(%q): got %q, want %q", tt.paths, got, tt.want)
		}
		if got == "" {
			continue
		}
		if _, err := netpolicy.Compile(netpolicy.Spec{Rules: []netpolicy.Rule{{Host: "a.example", Ports: []netpolicy.Port{80}, Methods: []string{"GET"}, Path: got, Action: netpolicy.Allow}}}); err != nil {
			t.Errorf("pathPrefix(%q) = %q, which a rule refuses: %v", tt.paths, got, err)
		}
	}
}

// TestSuggestPathParameters: paths with ';' (which a path rule refuses)
// give a rule for the prefix before them, and --expect of the log holds.
func TestSuggestPathParameters(t *testing.T) {
	recs := []decisionlog.Record{
		rec(1, "http", "GET", "a.example", 80, "/app/cart;jsessionid=1A2B/view", "allow", "r"),
		rec(2, "http", "GET", "a.example", 80, "/app/cart;jsessionid=1A2B/edit", "allow", "r"),
		rec(3, "http", "GET", "b.example", 80, "/x/%3Fy/z", "allow", "r"),
	}
	out, err := Suggest(summarize(t, recs), SuggestOptions{})
	if err != nil {
		t.Fatalf("Suggest: %v", err)
	}
	if !strings.Contains(string(out), `path: "/app/"`) || !strings.Contains(string(out), `path: "/x/"`) {
		t.Errorf("want rules for /app/ and /x/:\n%s", out)
	}
	e, err := Expect(context.Background(), mustPolicy(t, string(out)), "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() {
		t.Errorf("--expect of the suggested policy lists %d targets:\n%s", len(e.Unexpected), out)
	}
}

// TestMethodsIncomplete: a target with more methods than are kept gets a
// rule without methods, and a diff cannot say no new method is reached.
func TestMethodsIncomplete(t *testing.T) {
	var recs []decisionlog.Record
	for i := range maxMethods + 8 {
		recs = append(recs, rec(i, "http", fmt.Sprintf("M%02d", i), "a.example", 80, "/x", "allow", "r"))
	}
	rep := summarize(t, recs)
	tg := rep.Targets[0]
	if !tg.MethodsIncomplete || len(tg.Methods) != maxMethods {
		t.Fatalf("got %d methods, incomplete %v; want %d, true", len(tg.Methods), tg.MethodsIncomplete, maxMethods)
	}
	out, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := netpolicy.Decode("suggested", out)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Rules) != 1 || spec.Rules[0].Methods != nil || spec.Rules[0].Path != "" {
		t.Errorf("want one rule for a.example without methods or path:\n%s", out)
	}
	e, err := Expect(context.Background(), mustPolicy(t, string(out)), "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() {
		t.Errorf("--expect of the suggested policy lists %d targets:\n%s", len(e.Unexpected), out)
	}
	if d := DiffReports(rep, rep, 10); !d.ReachesNew() || len(d.Incomplete) == 0 {
		t.Errorf("a diff with methods not kept: got reaches new %v, incomplete %q; want true and a reason", d.ReachesNew(), d.Incomplete)
	}
}

// TestSuggestInterceptStatus: an intercept rule is suggested only with a
// status a rule can have (200..599).
func TestSuggestInterceptStatus(t *testing.T) {
	for _, status := range []int{100, 199, 200, 599, 600, 1 << 20} {
		recs := []decisionlog.Record{rec(1, "http", "POST", "t.example", 80, "/c", "intercept", "r", func(r *decisionlog.Record) { r.Status = status })}
		out, err := Suggest(summarize(t, recs), SuggestOptions{})
		if err != nil {
			t.Errorf("status %d: %v", status, err)
			continue
		}
		wantIntercept := status >= 200 && status <= 599
		if got := strings.Contains(string(out), "action: intercept"); got != wantIntercept {
			t.Errorf("status %d: got an intercept rule %v, want %v:\n%s", status, got, wantIntercept, out)
		}
	}
}

// TestSuggestMockLLM: requests a scripted LLM answered are suggested as
// allowed, with a note, never as a canned intercept (which would answer
// the agent with an empty body), and --expect of the log passes.
func TestSuggestMockLLM(t *testing.T) {
	mocked := func(status int) func(*decisionlog.Record) {
		return func(r *decisionlog.Record) {
			r.Status, r.Reason = status, decisionlog.ReasonMockLLM+"turn 1 (s.yaml:2): reply"
		}
	}
	recs := []decisionlog.Record{
		rec(1, "http", "POST", "api.anthropic.com", 80, "/v1/messages", "intercept", "mock-llm", mocked(200)),
		rec(2, "http", "POST", "api.anthropic.com", 80, "/v1/messages", "intercept", "mock-llm", mocked(529)),
		rec(3, "http", "POST", "t.example", 80, "/c", "intercept", "r1", func(r *decisionlog.Record) { r.Status = 204 }),
	}
	rep := summarize(t, recs)
	out, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := string(out)
	for _, want := range []string{"2 requests answered by a mock LLM when logged", "host: \"api.anthropic.com\"", "status: 204"} {
		if !strings.Contains(policy, want) {
			t.Errorf("the suggested policy lacks %q:\n%s", want, policy)
		}
	}
	if strings.Contains(policy, "status: 529") || strings.Count(policy, "action: intercept") != 1 {
		t.Errorf("the mocked host got a canned intercept:\n%s", policy)
	}
	e, err := Expect(context.Background(), mustPolicy(t, policy), "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() {
		t.Errorf("--expect of the suggested policy lists %d targets:\n%s", len(e.Unexpected), policy)
	}
}

// TestSuggestListsOverflow: DNS names and bypass destinations beyond the
// report's limits, which no rule can name, are listed as not covered.
func TestSuggestListsOverflow(t *testing.T) {
	s := NewSummary(Limits{Targets: 2})
	for i := range 5 {
		d := rec(i, "dns", "A", fmt.Sprintf("n%d.example", i), 53, "", "allow", "r")
		s.Add(&d)
		b := rec(i, "bypass", "", fmt.Sprintf("192.0.2.%d", i+1), 53, "", "block", "guard", func(r *decisionlog.Record) { r.Proto, r.Count = "udp", 10 })
		s.Add(&b)
	}
	out, err := Suggest(s.Report(), SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#   3 DNS queries for names beyond the first 2, which were not kept apart\n",
		"#   30 packets around the gateway to destinations beyond the first 2, which were not kept apart\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the suggested policy lacks %q:\n%s", want, out)
		}
	}
}

// TestDiffFailsClosed: what the new report did not keep apart makes the
// diff incomplete, so it reaches new, even against itself.
func TestDiffFailsClosed(t *testing.T) {
	paths := func(s *Summary) {
		for i := range 5 {
			r := rec(i, "http", "GET", "a.example", 80, fmt.Sprintf("/p%d", i), "allow", "r")
			s.Add(&r)
		}
	}
	bypassOverflow := func(s *Summary) {
		r := rec(1, "bypass", "", "", 0, "", "block", "guard", func(r *decisionlog.Record) { r.Proto, r.Count = "udp", 5 })
		s.Add(&r)
	}
	for _, tt := range []struct {
		name string
		lim  Limits
		add  func(*Summary)
		want string
	}{
		{"paths over the limit", Limits{Paths: 2}, paths, "whose paths sbx audit did not keep"},
		{"bypass overflow record", Limits{}, bypassOverflow, "whose destinations the gateway did not keep apart"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSummary(tt.lim)
			tt.add(s)
			rep := s.Report()
			d := DiffReports(rep, rep, 10)
			if !d.ReachesNew() || !slices.ContainsFunc(d.Incomplete, func(m string) bool { return strings.Contains(m, tt.want) }) {
				t.Errorf("got reaches new %v, incomplete %q; want true and %q", d.ReachesNew(), d.Incomplete, tt.want)
			}
		})
	}
	// A target whose paths were not kept, in a report read back from
	// JSON without the overflow count.
	rep := summarize(t, []decisionlog.Record{rec(1, "http", "GET", "a.example", 80, "/", "allow", "r")})
	rep.Targets[0].PathsIncomplete = true
	if d := DiffReports(rep, rep, 10); !d.ReachesNew() || len(d.Incomplete) != 1 || !strings.Contains(d.Incomplete[0], "a.example:80") {
		t.Errorf("got reaches new %v, incomplete %q; want true and a.example:80 named", d.ReachesNew(), d.Incomplete)
	}
}

// TestSuggestInspectedHTTPS: a host whose HTTPS the gateway inspected has
// its requests logged with methods and paths (kind https); the suggested
// policy restricts it to them, its tunnels still open (the rule makes the
// host inspected), and --expect of the log passes.
func TestSuggestInspectedHTTPS(t *testing.T) {
	inspected := func(r *decisionlog.Record) { r.Reason = netpolicy.InspectedReason }
	recs := []decisionlog.Record{
		rec(1, "connect", "CONNECT", "api.example.com", 443, "", "allow", "r1", inspected),
		rec(2, "https", "GET", "api.example.com", 443, "/v1/items", "allow", "r1"),
		rec(3, "https", "GET", "api.example.com", 443, "/v1/users", "allow", "r1"),
		rec(4, "transparent", "", "api.example.com", 443, "", "allow", "r1", inspected),
		rec(5, "https", "GET", "api.example.com", 443, "/v1/items/2", "allow", "r1"),
	}
	rep := summarize(t, recs)
	out, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, `methods: ["GET"]`) || !strings.Contains(s, `path: "/v1/"`) {
		t.Errorf("the suggested policy does not keep the inspected requests' methods and path:\n%s", s)
	}
	e, err := Expect(context.Background(), mustPolicy(t, string(out)), "suggested", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Holds() {
		t.Errorf("--expect of the log against the suggested policy lists %d targets:\n%s", len(e.Unexpected), out)
	}
}
