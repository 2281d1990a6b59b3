package netpolicy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// decideLinear is the obvious implementation of Decide: try every rule in
// order but the inspect-only ones. It is the oracle that the indexed Decide
// is checked against, and the baseline of BenchmarkDecide.
func (p *Policy) decideLinear(t Target) Decision {
	host, err := normalizeTarget(t.Host)
	if err != nil || t.Port == 0 {
		return invalidDecision("")
	}
	rp := p.requestPaths(t)
	ip, ipErr := netip.ParseAddr(host)
	for i := range p.rules {
		r := &p.rules[i]
		if r.inspectOnly {
			continue
		}
		var hostMatch bool
		switch r.pat.kind {
		case patExact:
			hostMatch = host == r.pat.name
		case patWildcard:
			hostMatch = ipErr != nil && strings.HasSuffix(host, "."+r.pat.name)
		case patAny:
			hostMatch = true
		case patPrefix:
			hostMatch = ipErr == nil && r.pat.prefix.Contains(ip)
		}
		if hostMatch && r.matchesRest(t, rp) {
			if r.httpOnly && t.IsConnect() {
				return r.tunnelDecision
			}
			return r.decision
		}
	}
	return p.defaultDecision
}

// realisticRules builds n rules: mostly exact hosts, a quarter wildcards,
// some CIDRs, a few with methods and paths, and "*" rules for odd ports,
// as a large organisation's allowlist might look.
func realisticRules(n int, rng *rand.Rand) []Rule {
	tlds := []string{"com", "net", "org", "io", "dev", "co.uk"}
	rules := make([]Rule, 0, n)
	for i := 0; len(rules) < n; i++ {
		domain := fmt.Sprintf("site%d.%s", i, tlds[i%len(tlds)])
		action := Allow
		if i%7 == 0 {
			action = Block
		}
		switch k := rng.IntN(100); {
		case k < 65:
			rules = append(rules, Rule{Host: "api." + domain, Action: action})
		case k < 90:
			rules = append(rules, Rule{Host: "*." + domain, Action: action})
		case k < 95:
			rules = append(rules, Rule{Host: fmt.Sprintf("%d.%d.%d.0/24", 11+i%200, (i/200)%256, i%256), Action: action})
		case k < 99:
			rules = append(rules, Rule{Host: "www." + domain, Ports: []Port{80}, Methods: []string{"GET"}, Path: "/v1/", Action: action})
		default:
			rules = append(rules, Rule{Host: "*", Ports: []Port{Port(10000 + i%50000)}, Action: Block})
		}
	}
	return rules
}

// withInspectMarkers returns rules with n inspect-only rules for the
// hosts of random rules among them inserted at random places.
func withInspectMarkers(rules []Rule, n int, rng *rand.Rand) []Rule {
	rules = slices.Clone(rules)
	for range n {
		r := rules[rng.IntN(len(rules))]
		m := Rule{Host: r.Host, Ports: slices.Clone(r.Ports), Inspect: true}
		if m.Host == "*" && m.Ports == nil {
			m.Ports = []Port{443}
		}
		rules = slices.Insert(rules, rng.IntN(len(rules)+1), m)
	}
	return rules
}

// targetsFor makes targets that hit exact rules, wildcards at several
// depths, CIDRs, near misses (evil-prefix, apex of a wildcard) and misses.
func targetsFor(rules []Rule, n int, rng *rand.Rand) []Target {
	ts := make([]Target, 0, n)
	for len(ts) < n {
		r := rules[rng.IntN(len(rules))]
		var host string
		switch {
		case strings.HasPrefix(r.Host, "*."):
			d := strings.TrimPrefix(r.Host, "*.")
			host = []string{"a." + d, "x.y.z." + d, d, "evil-" + d}[rng.IntN(4)]
		case strings.Contains(r.Host, "/"):
			host = strings.TrimSuffix(r.Host, "0/24") + fmt.Sprint(rng.IntN(256))
		case r.Host == "*":
			host = "anything.example"
		default:
			host = []string{r.Host, "miss" + r.Host, strings.ToUpper(r.Host) + "."}[rng.IntN(3)]
		}
		t := Target{Host: host, Port: 443, Method: "CONNECT"}
		if rng.IntN(4) == 0 {
			t = Target{Host: host, Port: 80, Method: "GET", Path: "/v1/x"}
		}
		ts = append(ts, t)
	}
	return ts
}

// TestIndexAgreesWithLinearScan checks the index against the oracle on a
// large random policy, with rules that overlap so order matters.
func TestIndexAgreesWithLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rules := realisticRules(5000, rng)
	// Overlaps: a wildcard over an exact host, "*" rules, CIDR inside CIDR.
	rules = append(rules,
		Rule{Host: "*.com", Ports: []Port{443}, Action: Block},
		Rule{Host: "*", Ports: []Port{443}, Action: Allow},
		Rule{Host: "11.0.0.0/8", Action: Block},
	)
	rng.Shuffle(len(rules), func(i, j int) { rules[i], rules[j] = rules[j], rules[i] })
	rules = withInspectMarkers(rules, 500, rng)
	p := mustCompile(t, Block, rules...)
	for _, tg := range targetsFor(rules, 20000, rng) {
		if got, want := p.Decide(tg), p.decideLinear(tg); got.Rule != want.Rule {
			t.Fatalf("Decide(%+v) = rule %s, linear scan says %s", tg, got.Rule, want.Rule)
		}
	}
}

// BenchmarkDecide measures one decision against 10 000 rules
// (docs/performance.md: at most 1 µs), with the linear scan as the baseline.
func BenchmarkDecide(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	rules := realisticRules(10000, rng)
	p := mustCompile(b, Block, rules...)
	targets := targetsFor(p.Rules(), 4096, rng)
	b.Run("index/10000", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.Decide(targets[i&4095])
			i++
		}
	})
	b.Run("linear/10000", func(b *testing.B) {
		i := 0
		for b.Loop() {
			p.decideLinear(targets[i&4095])
			i++
		}
	})
}

// BenchmarkVerdict measures the gateway's verdict on one request to an
// allowed name and to an allowed IP literal (which Verdict also guards),
// against 10 000 rules.
func BenchmarkVerdict(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	rules := append(realisticRules(10000, rng),
		Rule{Host: "registry.npmjs.org", Ports: []Port{443}, Action: Allow},
		Rule{Host: "203.0.113.7", Ports: []Port{443}, Action: Allow})
	p := mustCompile(b, Block, rules...)
	for _, host := range []string{"registry.npmjs.org", "203.0.113.7"} {
		b.Run(host, func(b *testing.B) {
			t := Target{Host: host, Port: 443, Method: "GET", Path: "/"}
			if d := p.Verdict(t); d.Action != Allow {
				b.Fatalf("Verdict(%+v): got %s, want allow", t, d.Action)
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Verdict(t)
			}
		})
	}
}

// BenchmarkNormalizeHost measures the fast path and the IDNA path.
func BenchmarkNormalizeHost(b *testing.B) {
	for _, h := range []string{"registry.npmjs.org", "Registry.NPMJS.org.", "bücher.example.de", "[::ffff:127.0.0.1]"} {
		b.Run(h, func(b *testing.B) {
			for b.Loop() {
				NormalizeHost(h)
			}
		})
	}
}

// BenchmarkDecideHost measures the verdict on a host over every port, as
// the DNS stub asks it, against 10 000 rules.
func BenchmarkDecideHost(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := mustCompile(b, Block, realisticRules(10000, rng)...)
	targets := targetsFor(p.Rules(), 4096, rng)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.DecideHost(targets[i&4095].Host)
		i++
	}
}

// BenchmarkInspects measures the question the gateway asks of every
// CONNECT, against 10 000 rules of which some 600 mark hosts for
// inspection (inspect-only rules, and rules with methods and path).
func BenchmarkInspects(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := mustCompile(b, Block, withInspectMarkers(realisticRules(10000, rng), 500, rng)...)
	targets := targetsFor(p.Rules(), 4096, rng)
	for i := range targets {
		h, err := NormalizeHost(targets[i].Host)
		if err == nil {
			targets[i].Host = h // as the gateway has it, after Decide
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tg := targets[i&4095]
		p.Inspects(tg.Host, tg.Port)
		i++
	}
}

// BenchmarkDecideTunnel measures the verdict on an inspected CONNECT
// against 10 000 rules.
func BenchmarkDecideTunnel(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := mustCompile(b, Block, withInspectMarkers(realisticRules(10000, rng), 500, rng)...)
	targets := targetsFor(p.Rules(), 4096, rng)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.DecideTunnel(targets[i&4095])
		i++
	}
}
