package netpolicy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestDecideHost(t *testing.T) {
	mock := &Response{Body: "mock"}
	tests := []struct {
		name   string
		def    Action
		rules  []Rule
		host   string
		action Action
		rule   string
	}{
		{"default block, no rule", Block, nil, "example.com", Block, RuleDefault},
		{"default allow, no rule", Allow, nil, "example.com", Allow, RuleDefault},
		{"exact allow", Block, []Rule{{ID: "a", Host: "api.test", Action: Allow}}, "API.test.", Allow, "a"},
		{"exact allow, other host", Block, []Rule{{ID: "a", Host: "api.test", Action: Allow}}, "www.api.test", Block, RuleDefault},
		{"wildcard allow, subdomain", Block, []Rule{{ID: "w", Host: "*.api.test", Action: Allow}}, "x.y.api.test", Allow, "w"},
		{"wildcard allow, apex", Block, []Rule{{ID: "w", Host: "*.api.test", Action: Allow}}, "api.test", Block, RuleDefault},
		{"allow on an odd port only", Block, []Rule{{ID: "ssh", Host: "git.test", Ports: []Port{22}, Action: Allow}}, "git.test", Allow, "ssh"},
		{"intercept lets the name through", Block, []Rule{{ID: "m", Host: "mock.test", Action: Intercept, Response: mock}}, "mock.test", Allow, "m"},
		{"allow with methods and path", Block, []Rule{{ID: "g", Host: "api.test", Ports: []Port{80}, Methods: []string{"GET"}, Path: "/v1/", Action: Allow}}, "api.test", Allow, "g"},

		// Block rules close their ports; an allow on a port left open wins.
		{"block every port", Allow, []Rule{{ID: "b", Host: "evil.test", Ports: []Port{AnyPort}, Action: Block}}, "evil.test", Block, "b"},
		{"block default ports, default allow", Allow, []Rule{{ID: "b", Host: "evil.test", Action: Block}}, "evil.test", Allow, RuleDefault},
		{"block default ports, then allow them", Block, []Rule{
			{ID: "b", Host: "evil.test", Action: Block},
			{ID: "a", Host: "evil.test", Action: Allow},
		}, "evil.test", Block, RuleDefault},
		{"block 443, then allow 80 and 443", Block, []Rule{
			{ID: "b", Host: "x.test", Ports: []Port{443}, Action: Block},
			{ID: "a", Host: "x.test", Action: Allow},
		}, "x.test", Allow, "a"},
		{"block every port, then allow", Allow, []Rule{
			{ID: "b", Host: "*.evil.test", Ports: []Port{AnyPort}, Action: Block},
			{ID: "a", Host: "www.evil.test", Action: Allow},
		}, "www.evil.test", Block, "b"},
		{"allow before block every port", Block, []Rule{
			{ID: "a", Host: "www.evil.test", Action: Allow},
			{ID: "b", Host: "*.evil.test", Ports: []Port{AnyPort}, Action: Block},
		}, "www.evil.test", Allow, "a"},
		{"block with a path closes nothing", Block, []Rule{
			{ID: "b", Host: "x.test", Ports: []Port{80}, Path: "/", Action: Block},
			{ID: "a", Host: "x.test", Ports: []Port{80}, Action: Allow},
		}, "x.test", Allow, "a"},
		{"star blocks a port, exact allows it", Block, []Rule{
			{ID: "s", Host: "*", Ports: []Port{22}, Action: Block},
			{ID: "a", Host: "git.test", Ports: []Port{22}, Action: Allow},
		}, "git.test", Block, RuleDefault},
		{"star blocks a port, exact allows it and another", Block, []Rule{
			{ID: "s", Host: "*", Ports: []Port{22}, Action: Block},
			{ID: "a", Host: "git.test", Ports: []Port{22, 2222}, Action: Allow},
		}, "git.test", Allow, "a"},
		{"exact allows a port before star blocks it", Block, []Rule{
			{ID: "a", Host: "git.test", Ports: []Port{22}, Action: Allow},
			{ID: "s", Host: "*", Ports: []Port{22}, Action: Block},
		}, "git.test", Allow, "a"},
		{"star blocks every port", Allow, []Rule{{ID: "s", Host: "*", Action: Block, Ports: []Port{AnyPort}}}, "example.com", Block, "s"},
		{"star allows one port", Block, []Rule{{ID: "s", Host: "*", Ports: []Port{443}, Action: Allow}}, "example.com", Allow, "s"},

		// IP literals and networks.
		{"IP allow", Block, []Rule{{ID: "ip", Host: "203.0.113.7", Action: Allow}}, "203.0.113.7", Allow, "ip"},
		{"CIDR allow", Block, []Rule{{ID: "net", Host: "203.0.113.0/24", Action: Allow}}, "203.0.113.9", Allow, "net"},
		{"CIDR allow, outside", Block, []Rule{{ID: "net", Host: "203.0.113.0/24", Action: Allow}}, "203.0.114.9", Block, RuleDefault},
		{"CIDR block every port, IP allow after", Block, []Rule{
			{ID: "net", Host: "10.0.0.0/8", Ports: []Port{AnyPort}, Action: Block},
			{ID: "ip", Host: "10.1.2.3", Action: Allow},
		}, "10.1.2.3", Block, "net"},
		{"star rule matches an IP", Block, []Rule{{ID: "s", Host: "*", Ports: []Port{443}, Action: Allow}}, "203.0.113.7", Allow, "s"},

		// Invalid hosts are blocked whatever the default.
		{"invalid short IPv4", Allow, nil, "127.1", Block, RuleInvalid},
		{"invalid empty label", Allow, nil, "a..test", Block, RuleInvalid},
		{"invalid character", Allow, nil, "a b.test", Block, RuleInvalid},
		{"invalid empty", Allow, nil, "", Block, RuleInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, tt.def, tt.rules...)
			d := p.DecideHost(tt.host)
			if d.Action != tt.action || d.Rule != tt.rule {
				t.Errorf("DecideHost(%q) = %s by %s (%s), want %s by %s", tt.host, d.Action, d.Rule, d.Reason, tt.action, tt.rule)
			}
			if d.Reason == "" {
				t.Errorf("DecideHost(%q) has no reason", tt.host)
			}
			if got, want := p.MayAllowHost(tt.host), tt.action == Allow; got != want {
				t.Errorf("MayAllowHost(%q) = %v, want %v", tt.host, got, want)
			}
			// The oracle agrees with every row: none has a shadowed rule.
			if got := letThroughSomewhere(p, tt.host); got != (tt.action == Allow) {
				t.Errorf("brute force over ports and requests says %v for %q, the table %s", got, tt.host, tt.action)
			}
		})
	}
}

func TestDecideHostReasons(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{ID: "npm", Host: "registry.npmjs.org", Action: Allow},
		Rule{ID: "mock", Host: "mock.test", Action: Intercept, Response: &Response{}})
	tests := []struct{ host, reason string }{
		{"registry.npmjs.org", "rule npm: allow registry.npmjs.org"},
		{"mock.test", "rule mock: intercept mock.test (the gateway answers its requests, so the host is let through to it)"},
		{"example.com", "no rule allows it on any port; the default is block"},
		{"127.1", `invalid target "127.1": a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)`},
	}
	for _, tt := range tests {
		if got := p.DecideHost(tt.host).Reason; got != tt.reason {
			t.Errorf("DecideHost(%q).Reason = %q, want %q", tt.host, got, tt.reason)
		}
	}
	if d := p.DecideHost("mock.test"); d.Response != nil {
		t.Errorf("DecideHost(mock.test).Response = %+v, want nil: a host is not answered with a response", d.Response)
	}
}

func TestMayAllowHostAuditMode(t *testing.T) {
	p, err := Compile(Spec{Mode: Audit, Rules: []Rule{{Host: "*", Ports: []Port{AnyPort}, Action: Block}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"example.com", "evil.test", "203.0.113.7"} {
		if d := p.DecideHost(host); d.Action != Block {
			t.Errorf("DecideHost(%q) = %+v, want block: the verdict ignores the mode", host, d)
		}
		if !p.MayAllowHost(host) {
			t.Errorf("MayAllowHost(%q) = false in audit mode, want true", host)
		}
	}
	for _, host := range []string{"127.1", "a..b", ""} {
		if p.MayAllowHost(host) {
			t.Errorf("MayAllowHost(%q) = true in audit mode, want false: invalid hosts are blocked in every mode", host)
		}
	}
}

func TestDecideHostAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := mustCompile(t, Block, realisticRules(2000, rng)...)
	for _, host := range []string{"api.site3.io", "a.b.site1.net", "miss.example.com", "11.0.3.7"} {
		if n := testing.AllocsPerRun(100, func() { p.DecideHost(host) }); n != 0 {
			t.Errorf("DecideHost(%q) allocates %v times, want 0", host, n)
		}
	}
}

// letThroughSomewhere is the slow oracle of DecideHost: it asks Decide
// (itself checked against a linear scan) about host on every port a rule
// names and on one that none names, with a CONNECT and with plain HTTP
// requests of every method and path the rules name, an unknown method, and
// the paths "/" and "*", and reports whether any is let through.
func letThroughSomewhere(p *Policy, host string) bool {
	return firstLetThrough(p, host) != ""
}

// firstLetThrough returns the rule (or default) of the lowest position
// that lets some probe of host through, or "".
func firstLetThrough(p *Policy, host string) string {
	ports, methods, paths := probes(p)
	best, bestPos := "", len(p.rules)+1
	pos := make(map[string]int, len(p.rules))
	for i, r := range p.spec.Rules {
		pos[r.ID] = i
	}
	pos[RuleDefault] = len(p.rules)
	try := func(tg Target) {
		d := p.Decide(tg)
		if d.Action != Block && pos[d.Rule] < bestPos {
			best, bestPos = d.Rule, pos[d.Rule]
		}
	}
	for _, port := range ports {
		try(Target{Host: host, Port: port, Method: "CONNECT"})
		for _, m := range methods {
			for _, path := range paths {
				try(Target{Host: host, Port: port, Method: m, Path: path})
			}
		}
	}
	return best
}

// addRuleProbes adds to ports, methods and paths those p's rules name,
// each once, in the rules' order.
func addRuleProbes(p *Policy, ports []uint16, methods, paths []string) ([]uint16, []string, []string) {
	for _, r := range p.rules {
		for _, port := range r.ports {
			if !slices.Contains(ports, port) {
				ports = append(ports, port)
			}
		}
		for _, m := range r.methods {
			if !slices.Contains(methods, m) {
				methods = append(methods, m)
			}
		}
		if r.path != "" && !slices.Contains(paths, r.path) {
			paths = append(paths, r.path)
		}
	}
	return ports, methods, paths
}

// probes returns the ports, methods and paths letThroughSomewhere tries.
func probes(p *Policy) (ports []uint16, methods, paths []string) {
	ports, methods, paths = addRuleProbes(p, nil, []string{"SBXPROBE"}, []string{"/", "*"})
	for port := uint16(1); ; port++ {
		if !slices.Contains(ports, port) {
			return append(ports, port), methods, paths
		}
	}
}

// TestDecideHostAgreesWithBruteForce checks DecideHost against the oracle
// on a large random policy with overlapping rules.
func TestDecideHostAgreesWithBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rules := realisticRules(3000, rng)
	rules = append(rules,
		Rule{Host: "*.com", Ports: []Port{AnyPort}, Action: Block},
		Rule{Host: "*", Ports: []Port{8443}, Action: Allow},
		Rule{Host: "*", Ports: []Port{443}, Action: Block},
		Rule{Host: "11.0.0.0/8", Ports: []Port{AnyPort}, Action: Block},
	)
	rng.Shuffle(len(rules), func(i, j int) { rules[i], rules[j] = rules[j], rules[i] })
	for _, def := range []Action{Block, Allow} {
		p := mustCompile(t, def, rules...)
		var allowed, blocked int
		for _, tg := range targetsFor(p.Rules(), 1500, rng) {
			d := p.DecideHost(tg.Host)
			want := firstLetThrough(p, tg.Host)
			switch {
			case want == "" && d.Action != Block, want != "" && (d.Action == Block || d.Rule != want):
				t.Fatalf("default %s: DecideHost(%q) = %s by %s, brute force says %q", def, tg.Host, d.Action, d.Rule, want)
			case want == "":
				blocked++
			default:
				allowed++
			}
		}
		if allowed == 0 || blocked == 0 {
			t.Errorf("default %s: %d hosts allowed, %d blocked; want some of each", def, allowed, blocked)
		}
	}
}

// TestDecideHostRandomPolicies checks DecideHost against the oracle on
// many small random policies whose rules all overlap: it must agree
// exactly unless a block rule has methods or a path (then it may err
// towards allow, as documented), and never block what the oracle lets
// through.
func TestDecideHostRandomPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	hosts := []string{"a.test", "b.a.test", "c.test", "10.0.0.1", "10.0.0.2", "A.TEST."}
	patterns := []string{"a.test", "b.a.test", "*.test", "*.a.test", "*", "10.0.0.0/8", "10.0.0.1"}
	portLists := [][]Port{nil, {80}, {443}, {22}, {22, 80}, {AnyPort}}
	var exact, overAllowed, checked int
	for range 3000 {
		var rules []Rule
		for range 1 + rng.IntN(5) {
			r := Rule{Host: patterns[rng.IntN(len(patterns))], Ports: portLists[rng.IntN(len(portLists))]}
			switch rng.IntN(3) {
			case 0:
				r.Action = Allow
			case 1:
				r.Action = Block
			default:
				r.Action, r.Response = Intercept, &Response{}
			}
			if rng.IntN(4) == 0 {
				r.Methods = []string{"GET"}
			}
			if rng.IntN(4) == 0 {
				r.Path = []string{"/", "/v1/"}[rng.IntN(2)]
			}
			rules = append(rules, r)
		}
		p, err := Compile(Spec{Default: []Action{Allow, Block}[rng.IntN(2)], Rules: rules})
		if err != nil {
			continue // "*" without ports
		}
		shadowable := slices.ContainsFunc(p.rules, func(r compiledRule) bool { return r.httpOnly && r.decision.Action == Block })
		for _, h := range hosts {
			checked++
			d := p.DecideHost(h)
			want := firstLetThrough(p, h)
			switch {
			case want != "" && d.Action == Block:
				t.Fatalf("policy %s: DecideHost(%q) blocks, but %s lets it through", describe(p), h, want)
			case want == "" && d.Action == Block, want != "" && d.Rule == want:
				exact++
			case shadowable:
				overAllowed++ // an allowing rule DecideHost named is shadowed
			default:
				t.Fatalf("policy %s: DecideHost(%q) = %s by %s, brute force says %q", describe(p), h, d.Action, d.Rule, want)
			}
		}
	}
	t.Logf("%d checks: %d exact, %d allowed where block rules with methods or path shadow every allowing rule", checked, exact, overAllowed)
	if exact < checked*9/10 {
		t.Errorf("only %d of %d checks exact", exact, checked)
	}
}

// describe writes a policy's rules on one line for a failure message.
func describe(p *Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "default %s:", p.Default())
	for _, r := range p.Rules() {
		fmt.Fprintf(&b, " [%s %s %v %v %q]", r.Action, r.Host, r.Ports, r.Methods, r.Path)
	}
	return b.String()
}

func TestDecideHostEveryPortClosedByLists(t *testing.T) {
	// Block rules whose port lists together name every port block the host
	// under a default allow; leave one port out and the default decides.
	for _, missing := range []int{0, 1, 40000, 65535} {
		var rules []Rule
		for start := 1; start <= 65535; start += 1000 {
			r := Rule{Host: "x.test", Action: Block}
			if start%2000 == 1 {
				r.Host = "*" // half of the ports closed by rules "*"
			}
			for port := start; port < start+1000 && port <= 65535; port++ {
				if port != missing {
					r.Ports = append(r.Ports, Port(port))
				}
			}
			rules = append(rules, r)
		}
		p := mustCompile(t, Allow, rules...)
		d := p.DecideHost("x.test")
		if want := map[bool]Action{true: Block, false: Allow}[missing == 0]; d.Action != want {
			t.Errorf("port %d left open: DecideHost = %+v, want %s", missing, d, want)
		}
		if missing == 0 {
			if d := p.DecideHost("y.test"); d.Action != Allow {
				t.Errorf("DecideHost(y.test) = %+v, want allow: rules \"*\" close only half the ports", d)
			}
		}
	}
}
