package netpolicy

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInspects(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{ID: "all-block", Host: "all.test", Ports: []Port{AnyPort}, Action: Block},
		Rule{Host: "tls.test", Inspect: true},
		Rule{Host: "*.corp.test", Ports: []Port{8443}, Inspect: true},
		Rule{Host: "plain.test", Action: Allow},
		Rule{Host: "api.test", Ports: []Port{443}, Methods: []string{"GET"}, Action: Allow},
		Rule{Host: "up.test", Path: "/upload", Action: Block},
		Rule{Host: "mock.test", Ports: []Port{443}, Action: Intercept, Response: &Response{}},
		Rule{Host: "both.test", Ports: []Port{443}, Action: Allow, Inspect: true},
		Rule{Host: "10.0.0.0/8", Ports: []Port{443}, Inspect: true},
		Rule{Host: "2001:db8::/32", Ports: []Port{443}, Inspect: true},
		Rule{Host: "*", Ports: []Port{9443}, Inspect: true},
		Rule{Host: "all.test", Inspect: true}, // after the rule that decides all.test
	)
	tests := []struct {
		host string
		port uint16
		want bool
	}{
		// Inspect-only rules, on their ports (by default 80 and 443).
		{"tls.test", 443, true},
		{"TLS.test.", 443, true},
		{"tls.test", 80, true},
		{"tls.test", 8443, false},
		{"www.tls.test", 443, false},
		{"a.corp.test", 8443, true},
		{"a.b.corp.test", 8443, true},
		{"corp.test", 8443, false},
		{"evil-corp.test", 8443, false},
		{"a.corp.test", 443, false},
		{"all.test", 443, true}, // order does not matter
		{"all.test", 22, false},

		// Implied by methods, path and intercept; not by allow alone.
		{"plain.test", 443, false},
		{"api.test", 443, true},
		{"api.test", 80, false},
		{"up.test", 443, true},
		{"up.test", 80, true},
		{"mock.test", 443, true},
		{"mock.test", 80, false},
		{"both.test", 443, true},
		{"both.test", 80, false},

		// IPs and networks; "*" with a port.
		{"10.1.2.3", 443, true},
		{"10.1.2.3", 80, false},
		{"[::ffff:10.1.2.3]", 443, true},
		{"11.0.0.1", 443, false},
		{"[2001:db8::7]", 443, true},
		{"2001:db9::7", 443, false},
		{"anything.example", 9443, true},
		{"203.0.113.7", 9443, true},
		{"anything.example", 443, false},

		// Invalid targets are never inspected.
		{"127.1", 9443, false},
		{"a..test", 9443, false},
		{"", 9443, false},
		{"user@tls.test", 443, false},
		{"tls.test", 0, false},
	}
	for _, tt := range tests {
		if got := p.Inspects(tt.host, tt.port); got != tt.want {
			t.Errorf("Inspects(%q, %d): got %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}

	q := mustCompile(t, Allow, Rule{Host: "plain.test", Action: Allow}, Rule{Host: "*", Ports: []Port{AnyPort}, Action: Block})
	for _, host := range []string{"plain.test", "other.test", "10.0.0.1"} {
		if q.Inspects(host, 443) {
			t.Errorf("Inspects(%q, 443) under a policy that asks for no inspection: got true, want false", host)
		}
	}
}

func TestInspectsAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	p := mustCompile(t, Block, withInspectMarkers(realisticRules(2000, rng), 200, rng)...)
	for _, host := range []string{"api.site3.io", "a.b.site1.net", "miss.example.com", "11.0.3.7", "2001:db8::1"} {
		if n := testing.AllocsPerRun(100, func() { p.Inspects(host, 443) }); n != 0 {
			t.Errorf("Inspects(%q, 443) allocates %v times, want 0", host, n)
		}
		tg := connect(host, 443)
		if n := testing.AllocsPerRun(100, func() { p.DecideTunnel(tg) }); n != 0 {
			t.Errorf("DecideTunnel(%+v) allocates %v times, want 0", tg, n)
		}
	}
}

// TestInspectsAgreesWithLinearScan checks the inspect index against the
// definition: some rule matching host and port has inspect: true,
// methods, a path or action intercept.
func TestInspectsAgreesWithLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	rules := withInspectMarkers(realisticRules(3000, rng), 300, rng)
	rules = append(rules,
		Rule{Host: "*.com", Ports: []Port{443}, Inspect: true},
		Rule{Host: "11.0.0.0/8", Ports: []Port{AnyPort}, Action: Allow, Inspect: true},
	)
	p := mustCompile(t, Block, rules...)
	var inspected int
	for _, tg := range targetsFor(p.Rules(), 10000, rng) {
		host, err := NormalizeHost(tg.Host)
		want := false
		for i := range p.rules {
			if r := &p.rules[i]; err == nil && r.inspect && r.pat.matches(host) && r.matchesPort(tg.Port) {
				want = true
				break
			}
		}
		if got := p.Inspects(tg.Host, tg.Port); got != want {
			t.Fatalf("Inspects(%q, %d): got %v, the linear scan says %v", tg.Host, tg.Port, got, want)
		}
		if want {
			inspected++
		}
	}
	if inspected == 0 {
		t.Errorf("no target inspected; the test checks nothing")
	}
}

// matches reports whether a normalized host matches the pattern, the slow
// way, for oracles.
func (p pattern) matches(host string) bool {
	ip, err := netip.ParseAddr(host)
	switch p.kind {
	case patExact:
		return host == p.name
	case patWildcard:
		return err != nil && strings.HasSuffix(host, "."+p.name)
	case patAny:
		return true
	default:
		return err == nil && p.prefix.Contains(ip)
	}
}

func TestDecideTunnel(t *testing.T) {
	mock := &Response{Body: "mock"}
	tests := []struct {
		name   string
		def    Action
		rules  []Rule
		target Target
		action Action
		rule   string
	}{
		{"no rule, default block", Block, nil, connect("a.test", 443), Block, RuleDefault},
		{"no rule, default allow", Allow, nil, connect("a.test", 443), Allow, RuleDefault},
		{"allow", Block, []Rule{{ID: "a", Host: "a.test", Action: Allow}}, connect("a.test", 443), Allow, "a"},
		{"allow on another port", Block, []Rule{{ID: "a", Host: "a.test", Ports: []Port{80}, Action: Allow}}, connect("a.test", 443), Block, RuleDefault},
		{"block", Allow, []Rule{{ID: "b", Host: "a.test", Action: Block}}, connect("a.test", 443), Block, "b"},
		{"block, then allow", Block, []Rule{
			{ID: "b", Host: "a.test", Ports: []Port{443}, Action: Block},
			{ID: "a", Host: "a.test", Action: Allow},
		}, connect("a.test", 443), Block, "b"},
		{"allow, then block", Block, []Rule{
			{ID: "a", Host: "a.test", Action: Allow},
			{ID: "b", Host: "a.test", Ports: []Port{443}, Action: Block},
		}, connect("a.test", 443), Allow, "a"},
		// Block rules with methods or path stop an uninspected tunnel
		// (Decide) but not an inspected one: other requests pass them.
		{"path block, default allow", Allow, []Rule{{ID: "admin", Host: "a.test", Path: "/admin", Action: Block}}, connect("a.test", 443), Allow, RuleDefault},
		{"path block, then allow", Block, []Rule{
			{ID: "admin", Host: "a.test", Path: "/admin", Action: Block},
			{ID: "a", Host: "a.test", Action: Allow},
		}, connect("a.test", 443), Allow, "a"},
		{"method block, default block", Block, []Rule{{ID: "post", Host: "a.test", Ports: []Port{443}, Methods: []string{"POST"}, Action: Block}}, connect("a.test", 443), Block, RuleDefault},
		{"path block, then block", Allow, []Rule{
			{ID: "admin", Host: "a.test", Path: "/admin", Action: Block},
			{ID: "b", Host: "a.test", Action: Block},
		}, connect("a.test", 443), Block, "b"},
		// Allow and intercept rules with methods or path open the tunnel
		// that Decide keeps shut.
		{"method allow", Block, []Rule{{ID: "get", Host: "a.test", Ports: []Port{443}, Methods: []string{"GET"}, Path: "/v1/", Action: Allow}}, connect("a.test", 443), Allow, "get"},
		{"intercept", Block, []Rule{{ID: "m", Host: "a.test", Action: Intercept, Response: mock}}, connect("a.test", 443), Allow, "m"},
		{"path intercept, then block", Block, []Rule{
			{ID: "m", Host: "a.test", Path: "/telemetry", Action: Intercept, Response: mock},
			{ID: "b", Host: "a.test", Action: Block},
		}, connect("a.test", 443), Allow, "m"},
		// Host patterns.
		{"star blocks the port", Block, []Rule{
			{ID: "s", Host: "*", Ports: []Port{443}, Action: Block},
			{ID: "a", Host: "a.test", Action: Allow},
		}, connect("a.test", 443), Block, "s"},
		{"wildcard any port", Block, []Rule{{ID: "w", Host: "*.a.test", Ports: []Port{AnyPort}, Action: Allow}}, connect("x.y.a.test", 8443), Allow, "w"},
		{"CIDR", Block, []Rule{{ID: "net", Host: "203.0.113.0/24", Ports: []Port{443}, Action: Allow}}, connect("203.0.113.9", 443), Allow, "net"},
		// Inspect-only rules decide nothing; method and path are ignored.
		{"inspect-only", Block, []Rule{{ID: "i", Host: "a.test", Inspect: true}}, connect("a.test", 443), Block, RuleDefault},
		{"inspect-only before a block", Allow, []Rule{
			{ID: "i", Host: "a.test", Inspect: true},
			{ID: "b", Host: "a.test", Action: Block},
		}, connect("a.test", 443), Block, "b"},
		{"method and path ignored", Block, []Rule{{ID: "a", Host: "a.test", Action: Allow}}, get("a.test", 443, "/x"), Allow, "a"},
		// Invalid targets.
		{"invalid host", Allow, nil, connect("127.1", 443), Block, RuleInvalid},
		{"invalid port", Allow, nil, connect("a.test", 0), Block, RuleInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, tt.def, tt.rules...)
			d := p.DecideTunnel(tt.target)
			if d.Action != tt.action || d.Rule != tt.rule {
				t.Errorf("DecideTunnel(%+v): got %s by %s (%s), want %s by %s", tt.target, d.Action, d.Rule, d.Reason, tt.action, tt.rule)
			}
			if d.Action == Allow && d.Reason != InspectedReason {
				t.Errorf("DecideTunnel(%+v).Reason: got %q, want %q", tt.target, d.Reason, InspectedReason)
			}
			if d.Response != nil {
				t.Errorf("DecideTunnel(%+v).Response: got %+v, want nil: the requests inside are answered, not the tunnel", tt.target, d.Response)
			}
			if tt.rule != RuleInvalid {
				if got := letThroughOnPort(p, tt.target.Host, tt.target.Port) != ""; got != (tt.action == Allow) {
					t.Errorf("brute force over requests on port %d says %v, the table %s", tt.target.Port, got, tt.action)
				}
			}
		})
	}
}

func TestDecideTunnelReasons(t *testing.T) {
	p := mustCompile(t, Block, Rule{ID: "b", Host: "b.test", Action: Block}, Rule{ID: "a", Host: "a.test", Action: Allow})
	tests := []struct {
		host, reason string
	}{
		{"a.test", "inspected: each request is decided"},
		{"b.test", "rule b: block b.test"},
		{"c.test", "no rule allows a request to it on this port; the default is block"},
		{"127.1", `invalid target "127.1": a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)`},
	}
	for _, tt := range tests {
		if got := p.DecideTunnel(connect(tt.host, 443)).Reason; got != tt.reason {
			t.Errorf("DecideTunnel(%s:443).Reason: got %q, want %q", tt.host, got, tt.reason)
		}
	}
}

// letThroughOnPort is the slow oracle of DecideTunnel: it asks Decide about
// requests to host on port with every method and path the rules name, an
// unknown method, and the paths "/" and "*", and returns the rule (or
// default) of the lowest position that lets one through, or "".
func letThroughOnPort(p *Policy, host string, port uint16) string {
	_, methods, paths := probes(p)
	best, bestPos := "", len(p.rules)+1
	pos := make(map[string]int, len(p.rules))
	for i, r := range p.spec.Rules {
		pos[r.ID] = i
	}
	pos[RuleDefault] = len(p.rules)
	for _, m := range append(methods, "GET") {
		for _, path := range paths {
			d := p.Decide(Target{Host: host, Port: port, Method: m, Path: path})
			if d.Action != Block && pos[d.Rule] < bestPos {
				best, bestPos = d.Rule, pos[d.Rule]
			}
		}
	}
	return best
}

// TestDecideTunnelRandomPolicies checks DecideTunnel against the oracle on
// many small random policies whose rules all overlap: it must agree
// exactly unless a block rule has methods or a path (then it may err
// towards allow, as documented), never block what the oracle lets through,
// and allow every CONNECT that Decide lets through.
func TestDecideTunnelRandomPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	hosts := []string{"a.test", "b.a.test", "c.test", "10.0.0.1", "10.0.0.2"}
	ports := []uint16{80, 443, 22, 8443}
	var exact, overAllowed, checked int
	for range 3000 {
		p, err := Compile(randomSpec(rng))
		if err != nil {
			t.Fatalf("random spec does not compile: %v", err)
		}
		shadowable := slices.ContainsFunc(p.rules, func(r compiledRule) bool { return r.httpOnly && r.decision.Action == Block })
		for _, h := range hosts {
			for _, port := range ports {
				checked++
				d := p.DecideTunnel(connect(h, port))
				want := letThroughOnPort(p, h, port)
				if c := p.Decide(connect(h, port)); c.Action != Block && d.Action == Block {
					t.Fatalf("policy %s: Decide lets CONNECT %s:%d through (%s), DecideTunnel blocks it", describe(p), h, port, c.Rule)
				}
				switch {
				case want != "" && d.Action == Block:
					t.Fatalf("policy %s: DecideTunnel(%s:%d) blocks, but %s lets a request through", describe(p), h, port, want)
				case want == "" && d.Action == Block, want != "" && d.Rule == want:
					exact++
				case shadowable:
					overAllowed++
				default:
					t.Fatalf("policy %s: DecideTunnel(%s:%d) = %s by %s, brute force says %q", describe(p), h, port, d.Action, d.Rule, want)
				}
			}
		}
	}
	t.Logf("%d checks: %d exact, %d allowed where block rules with methods or path shadow every allowing rule", checked, exact, overAllowed)
	if exact < checked*9/10 {
		t.Errorf("only %d of %d checks exact", exact, checked)
	}
}

// randomSpec makes a small policy of overlapping rules, inspect-only ones
// among them, that compiles.
func randomSpec(rng *rand.Rand) Spec {
	patterns := []string{"a.test", "b.a.test", "*.test", "*.a.test", "*", "10.0.0.0/8", "10.0.0.1"}
	portLists := [][]Port{nil, {80}, {443}, {22}, {22, 443}, {8443}, {AnyPort}}
	var rules []Rule
	for range 1 + rng.IntN(6) {
		r := Rule{Host: patterns[rng.IntN(len(patterns))], Ports: portLists[rng.IntN(len(portLists))]}
		switch rng.IntN(4) {
		case 0:
			r.Action = Allow
		case 1:
			r.Action = Block
		case 2:
			r.Action, r.Response = Intercept, &Response{}
		default:
			r.Inspect = true // inspect-only
		}
		if r.Action != "" {
			r.Inspect = rng.IntN(4) == 0
			if rng.IntN(4) == 0 {
				r.Methods = []string{"GET"}
			}
			if rng.IntN(4) == 0 {
				r.Path = []string{"/", "/v1/"}[rng.IntN(2)]
			}
		}
		if r.Host == "*" && r.Ports == nil && r.Action != Block {
			r.Ports = []Port{443}
		}
		rules = append(rules, r)
	}
	return Spec{Default: []Action{Allow, Block}[rng.IntN(2)], Rules: rules}
}

// TestInspectOnlyRulesDecideNothing checks on random policies that adding
// inspect-only rules anywhere changes no decision. FuzzDecode checks the
// same over its corpus.
func TestInspectOnlyRulesDecideNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for i := range 1000 {
		spec := randomSpec(rng)
		spec.Rules = slices.DeleteFunc(spec.Rules, func(r Rule) bool { return r.Inspect && r.Action == "" })
		checkInspectOnlyRulesDecideNothing(t, spec, uint64(i))
	}
}

// checkInspectOnlyRulesDecideNothing inserts inspect-only rules into spec,
// which compiles, at places chosen by seed, and checks that Decide,
// Verdict, GuardAddr, DecideHost, MayAllowHost and DecideTunnel give the
// same decisions on targets made from the rules, and that Inspects still
// holds wherever it held.
func checkInspectOnlyRulesDecideNothing(t *testing.T, spec Spec, seed uint64) {
	t.Helper()
	base, err := Compile(spec)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 19))
	var hosts []string
	var ports []uint16
	methods, paths := []string{"CONNECT", "GET", "SBXPROBE"}, []string{"/"}
	for _, r := range base.rules {
		switch r.pat.kind {
		case patExact:
			hosts = append(hosts, r.pat.name, "x."+r.pat.name)
		case patWildcard:
			hosts = append(hosts, "a."+r.pat.name, r.pat.name)
		case patPrefix:
			hosts = append(hosts, r.pat.prefix.Addr().String())
		}
	}
	ports, methods, paths = addRuleProbes(base, ports, methods, paths)
	hosts = append(hosts, "example.com", "10.0.0.1", "203.0.113.7", "::1", "127.1")
	ports = append(ports, 80, 443, 1)
	// Bound the work on large documents.
	hosts, ports, methods, paths = hosts[max(0, len(hosts)-24):], ports[max(0, len(ports)-6):], methods[:min(len(methods), 6)], paths[:min(len(paths), 4)]

	marked := spec
	marked.Rules = slices.Clone(spec.Rules)
	used := map[string]bool{}
	for _, r := range spec.Rules {
		used[r.ID] = true
	}
	for i := range 1 + rng.IntN(4) {
		m := Rule{ID: fmt.Sprintf("inspect-only-%d", i), Inspect: true}
		for used[m.ID] {
			m.ID += "x"
		}
		used[m.ID] = true
		if n := len(base.spec.Rules); n > 0 && rng.IntN(4) > 0 {
			from := base.spec.Rules[rng.IntN(n)]
			m.Host, m.Ports = from.Host, slices.Clone(from.Ports)
		} else {
			m.Host = []string{"*", "*.com", "example.com", "10.0.0.0/8", "::/0"}[rng.IntN(5)]
		}
		if rng.IntN(3) == 0 {
			m.Ports = [][]Port{nil, {443}, {AnyPort}}[rng.IntN(3)]
		}
		if m.Host == "*" && m.Ports == nil {
			m.Ports = []Port{AnyPort}
		}
		marked.Rules = slices.Insert(marked.Rules, rng.IntN(len(marked.Rules)+1), m)
	}
	with, err := Compile(marked)
	if err != nil {
		t.Fatalf("Compile with inspect-only rules: %v", err)
	}

	same := func(what string, a, b Decision) {
		t.Helper()
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("%s differs with inspect-only rules (-without +with):\n%s\npolicy without: %s\npolicy with: %s", what, diff, describe(base), describe(with))
		}
	}
	for _, h := range hosts {
		same(fmt.Sprintf("DecideHost(%q)", h), base.DecideHost(h), with.DecideHost(h))
		if a, b := base.MayAllowHost(h), with.MayAllowHost(h); a != b {
			t.Fatalf("MayAllowHost(%q): got %v with inspect-only rules, %v without", h, b, a)
		}
		ip, ipErr := netip.ParseAddr(h)
		for _, port := range ports {
			same(fmt.Sprintf("DecideTunnel(%s:%d)", h, port), base.DecideTunnel(connect(h, port)), with.DecideTunnel(connect(h, port)))
			if base.Inspects(h, port) && !with.Inspects(h, port) {
				t.Fatalf("Inspects(%q, %d): got false with inspect-only rules, true without", h, port)
			}
			for _, m := range methods {
				for _, path := range paths {
					tg := Target{Host: h, Port: port, Method: m, Path: path}
					if m == "CONNECT" {
						tg.Path = ""
					}
					same(fmt.Sprintf("Decide(%+v)", tg), base.Decide(tg), with.Decide(tg))
					same(fmt.Sprintf("Verdict(%+v)", tg), base.Verdict(tg), with.Verdict(tg))
					if ipErr == nil {
						da, ra := base.GuardAddr(ip, tg)
						db, rb := with.GuardAddr(ip, tg)
						if ra != rb {
							t.Fatalf("GuardAddr(%s, %+v): refused %v with inspect-only rules, %v without", ip, tg, rb, ra)
						}
						same(fmt.Sprintf("GuardAddr(%s, %+v)", ip, tg), da, db)
					}
				}
			}
		}
	}
}

func TestMethodsAndPathApplyToInspectedHTTPS(t *testing.T) {
	// Once rejected as "reached by CONNECT": a rule for HTTPS requests.
	p := mustCompile(t, Block,
		Rule{ID: "no-upload", Host: "api.test", Ports: []Port{443}, Methods: []string{"POST"}, Path: "/upload", Action: Block},
		Rule{ID: "read", Host: "api.test", Ports: []Port{443}, Methods: []string{"GET"}, Path: "/v1/", Action: Allow},
	)
	if !p.Inspects("api.test", 443) {
		t.Errorf("Inspects(api.test, 443): got false, want true (rules with methods and path imply inspection)")
	}
	tests := []struct {
		name   string
		got    Decision
		action Action
		rule   string
	}{
		{"GET /v1/x inside the tunnel", p.Decide(get("api.test", 443, "/v1/x")), Allow, "read"},
		{"GET /v2/x inside the tunnel", p.Decide(get("api.test", 443, "/v2/x")), Block, RuleDefault},
		{"POST /upload inside the tunnel", p.Decide(Target{Host: "api.test", Port: 443, Method: "POST", Path: "/upload"}), Block, "no-upload"},
		{"uninspected CONNECT", p.Decide(connect("api.test", 443)), Block, "no-upload"}, // as before
		{"inspected CONNECT", p.DecideTunnel(connect("api.test", 443)), Allow, "read"},
	}
	for _, tt := range tests {
		if tt.got.Action != tt.action || tt.got.Rule != tt.rule {
			t.Errorf("%s: got %s by %s (%s), want %s by %s", tt.name, tt.got.Action, tt.got.Rule, tt.got.Reason, tt.action, tt.rule)
		}
	}
}

func TestInspectRuleJSON(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{ID: "mark", Host: "A.test", Inspect: true},
		Rule{ID: "both", Host: "b.test", Ports: []Port{443}, Action: Allow, Inspect: true},
		Rule{ID: "plain", Host: "c.test", Action: Allow},
	)
	var got []string
	for _, r := range p.Rules() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	want := []string{
		`{"id":"mark","host":"a.test","ports":[80,443],"inspect":true}`,
		`{"id":"both","host":"b.test","ports":[443],"action":"allow","inspect":true}`,
		`{"id":"plain","host":"c.test","ports":[80,443],"action":"allow"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON of the rules (-want +got):\n%s", diff)
	}
	js, err := json.Marshal(p.Spec())
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse("policy.json", js)
	if err != nil {
		t.Fatalf("the JSON of a policy with inspect rules does not parse: %v\n%s", err, js)
	}
	if diff := cmp.Diff(p.Spec(), q.Spec(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("JSON round trip changed the policy (-before +after):\n%s", diff)
	}
	r, err := DecodeRule("body", []byte(`{"host": "d.test", "ports": [443], "inspect": true}`))
	if err != nil || !r.Inspect || r.Action != "" {
		t.Errorf("DecodeRule of an inspect-only rule: got %+v, %v; want inspect and no action", r, err)
	}
}

func TestStoreAddsInspectOnlyRules(t *testing.T) {
	s := NewStore(mustCompile(t, Allow, Rule{ID: "b", Host: "a.test", Action: Block}))
	snap, added, err := s.AddRule(Rule{Host: "a.test", Ports: []Port{443}, Inspect: true}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Policy()
	if !p.Inspects("a.test", 443) {
		t.Errorf("Inspects(a.test, 443) after adding %s: got false, want true", added.ID)
	}
	if d := p.Decide(connect("a.test", 443)); d.Rule != "b" {
		t.Errorf("Decide(a.test:443) after adding an inspect-only rule first: got rule %s, want b", d.Rule)
	}
}

// seedOf is a fuzz input's seed for the random choices of a property.
func seedOf(data []byte) uint64 {
	h := fnv.New64a()
	h.Write(data)
	return h.Sum64()
}

func TestSpliced(t *testing.T) {
	for _, d := range []Decision{
		{Action: Allow, Rule: "a", Reason: "allowed"},
		{Action: Block, Rule: "b", Reason: "blocked"},
	} {
		if got := d.Spliced("why"); got != d {
			t.Errorf("Spliced(%+v) = %+v, want it unchanged", d, got)
		}
	}
	d := Decision{Action: Intercept, Rule: "i", Reason: "intercepted", Response: &Response{Status: 204}}
	if got := d.Spliced("why"); got.Action != Block || got.Rule != "i" || got.Reason != "why" || got.Response != nil {
		t.Errorf("Spliced of an intercept = %+v, want a block by rule i for why", got)
	}
}
