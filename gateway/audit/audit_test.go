package audit

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

var t0 = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

// rec builds a decision record; mods set the rest.
func rec(sec int, kind, method, host string, port int, path, action, rule string, mods ...func(*decisionlog.Record)) decisionlog.Record {
	r := decisionlog.Record{V: 1, Event: decisionlog.EventDecision, Time: t0.Add(time.Duration(sec) * time.Second), Sandbox: "1a2b3c4d",
		Client: "10.213.0.2:40000", Kind: kind, Method: method, Host: host, Port: port, Path: path, Action: action,
		Enforced: true, Rule: rule, Reason: "because"}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func closed(out, in int64) func(*decisionlog.Record) {
	return func(r *decisionlog.Record) {
		r.Event, r.BytesOut, r.BytesIn, r.Status = decisionlog.EventClose, out, in, 200
	}
}

func by(comm string, pid int) func(*decisionlog.Record) {
	return func(r *decisionlog.Record) { r.Comm, r.PID, r.Exe = comm, pid, "/usr/bin/"+comm }
}

// sampleLog is a run of an extension: npm through the proxy, GitHub by
// CONNECT, a transparent plain-HTTP API, DNS, a blocked paste site, an
// intercepted telemetry endpoint, UDP and ICMP around the gateway.
func sampleLog() []decisionlog.Record {
	return []decisionlog.Record{
		{V: 1, Seq: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: "policy loaded"},
		rec(1, "dns", "A", "registry.npmjs.org", 53, "", "allow", "npm", by("node", 10)),
		rec(1, "http", "GET", "registry.npmjs.org", 80, "/left-pad", "allow", "npm", by("node", 10)),
		rec(2, "http", "GET", "registry.npmjs.org", 80, "/left-pad", "allow", "npm", by("node", 10), closed(120, 4000)),
		rec(2, "http", "GET", "registry.npmjs.org", 80, "/lodash/-/lodash-4.17.21.tgz", "allow", "npm", by("node", 10)),
		rec(3, "http", "HEAD", "registry.npmjs.org", 80, "/lodash", "allow", "npm", by("node", 11)),
		rec(4, "connect", "CONNECT", "api.github.com", 443, "", "allow", "gh", by("git", 12)),
		rec(9, "connect", "CONNECT", "api.github.com", 443, "", "allow", "gh", by("git", 12), closed(2000, 90000)),
		rec(5, "transparent", "POST", "api.example.com", 8080, "/v1/items", "allow", "api"),
		rec(6, "transparent", "POST", "api.example.com", 8080, "/v1/users/7", "allow", "api"),
		rec(7, "transparent", "", "pastebin.com", 443, "", "block", "default", by("curl", 13)),
		rec(7, "http", "POST", "telemetry.example.net", 80, "/collect", "intercept", "telemetry", func(r *decisionlog.Record) { r.Status = 204 }),
		rec(8, "dns", "TXT", "x7f3.exfil.example.org", 53, "", "block", "default", by("curl", 13), func(r *decisionlog.Record) { r.Status = 3 }),
		rec(8, "bypass", "", "10.99.0.5", 9999, "", "block", "guard", by("nc", 14), func(r *decisionlog.Record) { r.Proto, r.Count = "udp", 40 }),
		rec(8, "bypass", "", "10.99.0.6", 0, "", "block", "guard", func(r *decisionlog.Record) { r.Proto, r.Count = "icmp", 3 }),
		rec(9, "conn", "", "", 0, "", "block", "guard"),
	}
}

func summarize(t testing.TB, recs []decisionlog.Record) *Report {
	t.Helper()
	s := NewSummary(Limits{})
	s.AddLog("test.jsonl")
	for i := range recs {
		s.Add(&recs[i])
	}
	return s.Report()
}

func TestReport(t *testing.T) {
	rep := summarize(t, sampleLog())
	if rep.Records != 16 || rep.Requests != (Counts{Allowed: 6, Blocked: 1, Intercepted: 1}) ||
		rep.DNS != (Counts{Allowed: 1, Blocked: 1}) || rep.BypassPackets != 43 || rep.RefusedClients != 1 {
		t.Errorf("totals: got records %d, requests %+v, dns %+v, bypass %d, refused %d; want 16, 6/1/1, 1/1, 43, 1",
			rep.Records, rep.Requests, rep.DNS, rep.BypassPackets, rep.RefusedClients)
	}
	if rep.BytesOut != 2120 || rep.BytesIn != 94000 {
		t.Errorf("bytes: got %d out, %d in; want 2120, 94000", rep.BytesOut, rep.BytesIn)
	}
	var npm *Target
	for _, tg := range rep.Targets {
		if tg.Host == "registry.npmjs.org" {
			npm = tg
		}
	}
	if npm == nil {
		t.Fatal("no row for registry.npmjs.org:80")
	}
	want := &Target{Host: "registry.npmjs.org", Port: 80, Kinds: []string{"http"}, Methods: []string{"GET", "HEAD"},
		Paths:  []PathCount{{"/left-pad", 1}, {"/lodash", 1}, {"/lodash/-/lodash-4.17.21.tgz", 1}},
		Counts: Counts{Allowed: 3}, BytesOut: 120, BytesIn: 4000, Seen: Seen{t0.Add(time.Second), t0.Add(3 * time.Second)},
		Rules: map[string]uint64{"npm": 3}, Processes: []string{"node"}}
	if diff := cmp.Diff(want, npm, cmp.AllowUnexported(Target{}), cmp.FilterPath(func(p cmp.Path) bool {
		return strings.Contains(p.String(), "kinds") || strings.Contains(p.String(), "methods") || strings.Contains(p.String(), "procs") || strings.Contains(p.String(), "paths")
	}, cmp.Ignore())); diff != "" {
		t.Errorf("npm row (-want +got):\n%s", diff)
	}
	if len(rep.Targets) != 5 || len(rep.DNSNames) != 2 || len(rep.Bypass) != 2 || len(rep.Processes) != 4 {
		t.Errorf("rows: got %d targets, %d names, %d bypass, %d processes; want 5, 2, 2, 4",
			len(rep.Targets), len(rep.DNSNames), len(rep.Bypass), len(rep.Processes))
	}
	if len(rep.PolicyChanges) != 1 || rep.Sandboxes[0] != "1a2b3c4d" {
		t.Errorf("got policy changes %v, sandboxes %v", rep.PolicyChanges, rep.Sandboxes)
	}
}

// TestReportIgnoresOrder shows that merged logs give the same report in
// whatever order their records come.
func TestReportIgnoresOrder(t *testing.T) {
	recs := sampleLog()
	for i := range 200 { // a span long enough for the timeline to widen
		recs = append(recs, rec(i*97, "connect", "CONNECT", "h"+string(rune('a'+i%7))+".example", 443, "", "allow", "r"))
	}
	want := summarize(t, recs)
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		rnd.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		got := summarize(t, recs)
		got.PolicyChanges, want.PolicyChanges = nil, nil
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(Target{}, DNSName{}, Bypass{}, Process{})); diff != "" {
			t.Fatalf("the report depends on the records' order (-first +shuffled):\n%s", diff)
		}
	}
}

func TestTimelineIsBounded(t *testing.T) {
	var recs []decisionlog.Record
	for i := range 36000 { // ten hours, a request a second
		recs = append(recs, rec(i, "connect", "CONNECT", "a.example", 443, "", []string{"allow", "block"}[i%2], "r"))
	}
	rep := summarize(t, recs)
	if n := len(rep.Timeline); n > MaxBuckets || n < MaxBuckets/4 {
		t.Errorf("got %d buckets, want at most %d and not many fewer", n, MaxBuckets)
	}
	var sum Counts
	for _, b := range rep.Timeline {
		sum.Allowed += b.Allowed
		sum.Blocked += b.Blocked
	}
	if sum != rep.Requests || rep.BucketSeconds*int64(len(rep.Timeline)) < 36000 {
		t.Errorf("timeline: got %+v over %d×%ds, want %+v over 36000s", sum, len(rep.Timeline), rep.BucketSeconds, rep.Requests)
	}
}

// TestReportLimits shows a flood of distinct targets kept within the
// limits, counted and said.
func TestReportLimits(t *testing.T) {
	s := NewSummary(Limits{Targets: 10, Paths: 5})
	for i := range 1000 {
		r := rec(i, "http", "GET", "x"+strings.Repeat("a", i%50)+".example", 80, "/p"+string(rune('a'+i%26)), "block", "default")
		s.Add(&r)
		d := rec(i, "dns", "A", string(rune('a'+i%26))+"-"+strings.Repeat("b", i)+".example", 53, "", "block", "default")
		s.Add(&d)
	}
	rep := s.Report()
	if len(rep.Targets) != 10 || len(rep.DNSNames) != 10 || rep.Overflow.Targets == 0 || rep.Overflow.DNSNames != 990 || rep.Overflow.Paths == 0 {
		t.Errorf("got %d targets, %d names, overflow %+v; want 10, 10 and counts of the rest", len(rep.Targets), len(rep.DNSNames), rep.Overflow)
	}
	paths := 0
	for _, tg := range rep.Targets {
		paths += len(tg.Paths)
	}
	if paths != 5 || rep.Requests.Blocked != 1000 {
		t.Errorf("got %d paths kept, %d requests counted; want 5, 1000", paths, rep.Requests.Blocked)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, rep, FormatText); err != nil || !strings.Contains(b.String(), "WARNING: more targets than sbx audit keeps apart") {
		t.Errorf("the text report does not warn of the overflow (%v):\n%s", err, b.String())
	}
}

func mustPolicy(t testing.TB, yaml string) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.Parse("policy.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func logSource(recs []decisionlog.Record) []Source {
	var b bytes.Buffer
	for i := range recs {
		b.Write(recs[i].AppendJSON(nil))
		b.WriteByte('\n')
	}
	data := b.Bytes()
	return []Source{{Name: "test.jsonl", Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}}
}

func TestExpect(t *testing.T) {
	p := mustPolicy(t, `
version: 1
rules:
  - {host: registry.npmjs.org, methods: [GET], action: allow}
  - {host: api.github.com, action: allow}
  - {host: api.example.com, ports: [8080], path: /v1/items, action: allow}
  - {host: telemetry.example.net, action: intercept, response: {status: 204}}
  - {host: 10.99.0.5, ports: [9999], action: allow}
`)
	e, err := Expect(context.Background(), p, "policy.yaml", logSource(sampleLog()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range e.Unexpected {
		got = append(got, u.Kind+" "+unexpectedTarget(u))
	}
	want := []string{
		"bypass icmp 10.99.0.6",
		"dns TXT x7f3.exfil.example.org:53",
		"http HEAD registry.npmjs.org:80/lodash", // a method the policy does not name
		"transparent POST api.example.com:8080/v1/users/7",
		"transparent pastebin.com:443",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected targets (-want +got):\n%s", diff)
	}
	if e.Holds() || e.Attempts != 53 {
		t.Errorf("got holds %v after %d attempts, want false after 53", e.Holds(), e.Attempts)
	}

	// A log the gateway left records out of cannot show a policy holds.
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	recs := []decisionlog.Record{rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "default"),
		{V: 1, Event: decisionlog.EventDropped, Time: t0, Count: 7, Reason: "over budget"}}
	if e, err := Expect(context.Background(), open, "open", logSource(recs), Limits{}); err != nil || e.Holds() || e.Dropped != 7 {
		t.Errorf("with dropped records: got %+v, %v; want not holding, 7 dropped", e, err)
	}
	if e, err := Expect(context.Background(), open, "open", logSource(recs[:1]), Limits{}); err != nil || !e.Holds() {
		t.Errorf("default allow: got %+v, %v; want holding", e, err)
	}
}

// TestReplayTransparentIntercept: an intercept cannot answer a connection
// that is not plain HTTP, so the gateway blocks it, and so does Replay.
func TestReplayTransparentIntercept(t *testing.T) {
	p := mustPolicy(t, "version: 1\nrules:\n  - {host: a.example, ports: [443], action: intercept, response: {status: 200}}\n")
	tun := rec(1, "transparent", "", "a.example", 443, "", "block", "r1")
	if d, ok := Replay(p, &tun); !ok || d.Action != netpolicy.Block {
		t.Errorf("transparent tunnel under an intercept: got %v %v, want block", d.Action, ok)
	}
	req := rec(1, "transparent", "GET", "a.example", 443, "/", "intercept", "r1")
	if d, _ := Replay(p, &req); d.Action != netpolicy.Intercept {
		t.Errorf("transparent HTTP request under an intercept: got %v, want intercept", d.Action)
	}
	cl := rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "r1", closed(1, 1))
	if _, ok := Replay(p, &cl); ok {
		t.Error("a close record was replayed as an attempt")
	}
}

// TestSuggestThenExpect is the contract of --suggest: the policy
// compiles, and --expect of the same log against it holds.
func TestSuggestThenExpect(t *testing.T) {
	recs := sampleLog()
	for _, wild := range []bool{false, true} {
		out, err := Suggest(summarize(t, recs), SuggestOptions{Wildcards: wild})
		if err != nil {
			t.Fatal(err)
		}
		p := mustPolicy(t, string(out))
		e, err := Expect(context.Background(), p, "suggested", logSource(recs), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if !e.Holds() {
			t.Errorf("wildcards %v: --expect of the suggested policy lists %d targets:\n%s", wild, len(e.Unexpected), out)
		}
		s := string(out)
		for _, want := range []string{
			"# CAN CARRY DATA OUT: paste site\n",
			"  # github.com\n",
			"methods: [\"GET\", \"HEAD\"]", // npm: only plain HTTP seen
			"path: \"/v1/\"",               // the prefix the API paths share
			"action: intercept\n    response:\n      status: 204",
			"# Blocked when the log was written",
			"# Destinations of packets sent around the gateway",
			"ports: [\"*\"]", // ICMP names no port
		} {
			if !strings.Contains(s, want) {
				t.Errorf("the suggested policy lacks %q:\n%s", want, s)
			}
		}
		if strings.Index(s, "pastebin.com") < strings.Index(s, "# Blocked when") {
			t.Errorf("pastebin.com, blocked when logged, is listed before the blocked section:\n%s", s)
		}
	}
}

func TestSuggestWildcards(t *testing.T) {
	var recs []decisionlog.Record
	for _, h := range []string{"a.cdn.example.com", "b.cdn.example.com", "c.cdn.example.com", "x.co.uk", "y.co.uk", "z.co.uk", "one.other.example"} {
		recs = append(recs, rec(1, "connect", "CONNECT", h, 443, "", "allow", "r"))
	}
	out, err := Suggest(summarize(t, recs), SuggestOptions{Wildcards: true})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.Contains(s, `host: "*.cdn.example.com"`) || strings.Contains(s, `"a.cdn.example.com"`) {
		t.Errorf("three siblings under cdn.example.com are not folded:\n%s", s)
	}
	if strings.Contains(s, `"*.co.uk"`) || !strings.Contains(s, `host: "x.co.uk"`) {
		t.Errorf("siblings under a public suffix were folded wider than a registrable domain:\n%s", s)
	}
	if strings.Contains(s, "*.other.example") {
		t.Errorf("a single name was folded:\n%s", s)
	}
}

// FuzzSuggest: whatever a log holds, the suggested policy compiles and
// --expect of the log against it holds, bar what no policy can allow and
// what a person denied when asked (which it blocks).
func FuzzSuggest(f *testing.F) {
	f.Add([]byte("GET a.example 80 /x\nCONNECT b.example 443\n"))
	f.Add([]byte("dns c.example\nbypass 10.0.0.1 0\nPOST a.example 8080 /v1/a%2fb\nPOST a.example 8080 /v1/../c"))
	f.Add([]byte("GET a.example 80 /app/cart;jsessionid=1/view\nGET a.example 80 /app/cart;jsessionid=1/edit\nGET b.example 80 /x/%3Fy/z"))
	f.Add([]byte("comm node\x85\u2028-\x00host: x\nGET a.example 80 /x\ninvalid b.example 443\ncut c.example 80\nsni d.example 443"))
	f.Add([]byte("guard a.example 192.0.2.1 10.0.0.1\nguard b.example\nguard 10.1.2.3 10.1.2.3\nguard c.example fe80::1%eth0 x 8.8.8.8\nguard d.example ::ffff:192.0.2.9"))
	f.Add([]byte("askallow a.example 443\naskdeny b.example 80\ndns b.example\nasktimeout c.example 443\naskdeny d.example 443\nCONNECT d.example 443\naskdeny e.example 443\ninvalid e.example 443"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []decisionlog.Record
		comm := ""
		proc := func(r *decisionlog.Record) {
			if comm != "" {
				r.Comm, r.PID = comm, 7
			}
		}
		for i, line := range strings.Split(string(data), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 2 {
				continue
			}
			action := []string{"allow", "block", "intercept"}[i%3]
			port := 443
			if len(fs) > 2 {
				port = int(fs[2][0]) * 100
			}
			switch fs[0] {
			case "comm": // the process name of the records that follow
				comm = strings.TrimPrefix(line, "comm ")
			case "invalid": // refused whatever the policy
				recs = append(recs, rec(i, "transparent", "GET", fs[1], port, "/", "block", "invalid", proc))
			case "cut": // a path the log cut short
				recs = append(recs, rec(i, "http", "GET", fs[1], port, "/"+strings.Repeat("p", maxLoggedPath)+"...", action, "r", proc, func(r *decisionlog.Record) { r.Status = 200 }))
			case "guard": // refused by the address guard for the addresses that follow
				addrs := strings.Join(fs[2:], ",")
				recs = append(recs, rec(i, []string{"connect", "http", "https", "transparent"}[i%4], "CONNECT", fs[1], 443, "", "block", "guard", proc, func(r *decisionlog.Record) {
					r.Reason, r.Addrs = decisionlog.ReasonGuard+"it is special", addrs
				}))
			case "sni": // a tunnel the TLS check closed
				recs = append(recs, rec(i, "connect", "CONNECT", fs[1], port, "", "allow", "r", proc), rec(i, "connect", "CONNECT", fs[1], port, "", "allow", "r", proc, sniClose))
			case "dns":
				recs = append(recs, rec(i, "dns", "A", fs[1], 53, "", action, "r", proc))
			case "bypass":
				recs = append(recs, rec(i, "bypass", "", fs[1], port%3*1000, "", "block", "guard", func(r *decisionlog.Record) { r.Proto, r.Count = "udp", 1 }))
			case "askallow", "askdeny", "asktimeout": // a question, its answer, then the request it held
				answer, by, action := "allow", []string{"cli", "tty", "api", "ui"}[i%4], "allow"
				if fs[0] != "askallow" {
					answer, action = "deny", "block"
				}
				if fs[0] == "asktimeout" {
					by = "timeout"
				}
				id := "a" + strconv.Itoa(i)
				kind, method, path := []string{"connect", "http"}[i%2], []string{"CONNECT", "GET"}[i%2], []string{"", "/"}[i%2]
				recs = append(recs,
					rec(i, kind, method, fs[1], port, path, "ask", "default", proc, func(r *decisionlog.Record) { r.Event, r.ApprovalID = decisionlog.EventApproval, id }),
					rec(i, kind, method, fs[1], port, path, action, "default", proc, func(r *decisionlog.Record) {
						r.Event, r.ApprovalID, r.Answer, r.Scope, r.By = decisionlog.EventApproval, id, answer, "once", by
					}),
					rec(i, kind, method, fs[1], port, path, action, "default", proc))
			case "CONNECT":
				recs = append(recs, rec(i, []string{"connect", "transparent"}[i%2], "CONNECT", fs[1], port, "", action, "r"))
			default:
				path := "/"
				if len(fs) > 3 {
					path = fs[3]
				}
				recs = append(recs, rec(i, "http", fs[0], fs[1], port, path, action, "r", func(r *decisionlog.Record) { r.Status = 200 }))
			}
		}
		if len(recs) == 0 {
			return // Expect refuses a log without a record
		}
		// Through the log, as sbx audit reads it: what the encoder
		// changes (invalid UTF-8) is changed for both.
		sum, err := Summarize(context.Background(), logSource(recs), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := Suggest(sum.Report(), SuggestOptions{Wildcards: len(data)%2 == 0})
		if err != nil {
			t.Fatalf("Suggest: %v", err)
		}
		p, err := netpolicy.Parse("suggested", out)
		if err != nil {
			t.Fatalf("the suggested policy does not parse: %v\n%s", err, out)
		}
		e, err := Expect(context.Background(), p, "suggested", logSource(recs), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := netpolicy.Decode("suggested", out)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range spec.Rules {
			if r.Host == "*" || strings.Contains(r.Host, "\n") {
				t.Fatalf("a rule for %q, which no record names:\n%s", r.Host, out)
			}
		}
		for _, u := range e.Unexpected {
			if u.Rule == netpolicy.RuleInvalid && strings.Contains(u.Reason, "whatever the policy") ||
				u.Rule == netpolicy.RuleGuard && strings.Contains(u.Reason, "names none that a policy can exempt") {
				continue // refused whatever the policy: listed as not covered
			}
			if validTarget(u.Host, u.Port) && netpolicy.IsToken(u.Method+"X") {
				t.Fatalf("the suggested policy does not allow %s %s (%s: %s):\n%s", u.Kind, unexpectedTarget(u), u.Rule, u.Reason, out)
			}
		}
	})
}

func TestDiff(t *testing.T) {
	v1 := sampleLog()
	v2 := append(sampleLog(),
		rec(20, "connect", "CONNECT", "webhook.site", 443, "", "allow", "r"),             // a new host
		rec(21, "http", "DELETE", "registry.npmjs.org", 80, "/left-pad", "allow", "npm"), // a new method
		rec(22, "http", "GET", "registry.npmjs.org", 80, "/-/whoami", "allow", "npm"),    // a new path
	)
	for i := range 30 {
		v2 = append(v2, rec(30+i, "connect", "CONNECT", "api.github.com", 443, "", "allow", "gh"))
	}
	d := DiffReports(summarize(t, v1), summarize(t, v2), 10)
	if !d.ReachesNew() || len(d.NewTargets) != 1 || d.NewTargets[0].Host != "webhook.site" {
		t.Fatalf("got new targets %v, reaches new %v; want webhook.site", d.NewTargets, d.ReachesNew())
	}
	changed := map[string][]string{}
	for _, c := range d.Changed {
		changed[c.Host] = c.Changed
	}
	if got := changed["registry.npmjs.org"]; !cmp.Equal(got, []string{"new methods", "new paths"}) {
		t.Errorf("registry.npmjs.org: got %v, want new methods, new paths", got)
	}
	if got := changed["api.github.com"]; len(got) != 1 || !strings.HasPrefix(got[0], "attempts ×31") {
		t.Errorf("api.github.com: got %v, want attempts ×31", got)
	}

	if d := DiffReports(summarize(t, v1), summarize(t, v1), 10); d.ReachesNew() || len(d.Changed) != 0 {
		t.Errorf("a log against itself: got %+v, want nothing new", d)
	}
	back := DiffReports(summarize(t, v2), summarize(t, v1), 10)
	if back.ReachesNew() || len(back.GoneTargets) != 1 {
		t.Errorf("v2 → v1: got reaches new %v, gone %d; want false, 1", back.ReachesNew(), len(back.GoneTargets))
	}
	dropped := append(sampleLog(), decisionlog.Record{V: 1, Event: decisionlog.EventDropped, Time: t0, Count: 5})
	if d := DiffReports(summarize(t, v1), summarize(t, dropped), 10); !d.ReachesNew() {
		t.Error("a new log the gateway left records out of: the diff says nothing new, which it cannot know")
	}
}

// TestFormatsEscapeLogStrings: hosts, paths and process names come from the
// sandbox; they cannot drive a terminal, break a markdown table or add a
// line to a suggested policy.
func TestFormatsEscapeLogStrings(t *testing.T) {
	evil := "a\x1b[2J|`*\n- host: \"*\"\n  action: allow"
	recs := []decisionlog.Record{
		rec(1, "http", "GET", "ok.example", 80, "/x"+evil, "allow", "r", by(evil, 5)),
		rec(2, "dns", "A", evil, 53, "", "block", "invalid"),
	}
	rep := summarize(t, recs)
	var text, md bytes.Buffer
	if err := WriteReport(&text, rep, FormatText); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(text.String(), "\x1b") || strings.Contains(text.String(), "\n- host") {
		t.Errorf("the text report passes control characters through:\n%q", text.String())
	}
	if err := WriteReport(&md, rep, FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(line, "| ") && strings.Contains(line, "ok.example:80") {
			cells := strings.Count(line, "|") - strings.Count(line, "\\|")
			if cells != 11 {
				t.Errorf("a target row has %d cell borders, want 11: %s", cells, line)
			}
		}
	}
	policy, err := Suggest(rep, SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := netpolicy.Decode("suggested", policy)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Rules) != 1 || spec.Rules[0].Host != "ok.example" {
		t.Errorf("a process name added rules to the suggested policy: got %+v\n%s", spec.Rules, policy)
	}
}
