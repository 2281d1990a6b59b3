package netpolicy

import (
	"net/netip"
	"testing"
)

// mustCompile compiles rules under the given default or fails the test.
func mustCompile(t testing.TB, def Action, rules ...Rule) *Policy {
	t.Helper()
	p, err := Compile(Spec{Default: def, Rules: rules})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

func connect(host string, port uint16) Target {
	return Target{Host: host, Port: port, Method: "CONNECT"}
}

func get(host string, port uint16, path string) Target {
	return Target{Host: host, Port: port, Method: "GET", Path: path}
}

func TestDecidePatterns(t *testing.T) {
	tests := []struct {
		name   string
		rule   Rule
		target Target
		match  bool
	}{
		// Exact names.
		{"exact", Rule{Host: "example.com"}, connect("example.com", 443), true},
		{"exact upper case target", Rule{Host: "example.com"}, connect("EXAMPLE.com", 443), true},
		{"exact trailing dot target", Rule{Host: "example.com"}, connect("EXAMPLE.com.", 443), true},
		{"exact upper case rule", Rule{Host: "EXAMPLE.COM."}, connect("example.com", 443), true},
		{"exact not subdomain", Rule{Host: "example.com"}, connect("www.example.com", 443), false},
		{"exact not evil prefix", Rule{Host: "example.com"}, connect("evil-example.com", 443), false},
		{"exact not suffix appended", Rule{Host: "example.com"}, connect("example.com.evil.net", 443), false},
		{"exact not parent", Rule{Host: "www.example.com"}, connect("example.com", 443), false},
		{"exact IDN rule, punycode target", Rule{Host: "bücher.de"}, connect("xn--bcher-kva.de", 443), true},
		{"exact punycode rule, IDN target", Rule{Host: "xn--bcher-kva.de"}, connect("BÜCHER.de", 443), true},
		{"exact name does not match IP", Rule{Host: "localhost"}, connect("127.0.0.1", 443), false},

		// Wildcards.
		{"wildcard one level", Rule{Host: "*.example.com"}, connect("www.example.com", 443), true},
		{"wildcard any depth", Rule{Host: "*.example.com"}, connect("a.b.c.example.com", 443), true},
		{"wildcard upper case target", Rule{Host: "*.example.com"}, connect("WWW.Example.COM.", 443), true},
		{"wildcard not apex", Rule{Host: "*.example.com"}, connect("example.com", 443), false},
		{"wildcard not evil prefix", Rule{Host: "*.example.com"}, connect("evil-example.com", 443), false},
		{"wildcard not evil label", Rule{Host: "*.example.com"}, connect("wwwexample.com", 443), false},
		{"wildcard not suffix appended", Rule{Host: "*.example.com"}, connect("www.example.com.evil.net", 443), false},
		{"wildcard not other domain", Rule{Host: "*.example.com"}, connect("example.net", 443), false},
		{"wildcard IDN", Rule{Host: "*.bücher.de"}, connect("shop.xn--bcher-kva.de", 443), true},
		{"wildcard TLD", Rule{Host: "*.com"}, connect("example.com", 443), true},

		// Any host.
		{"star with ports matches name", Rule{Host: "*", Ports: []Port{443}}, connect("example.com", 443), true},
		{"star with ports matches IP", Rule{Host: "*", Ports: []Port{443}}, connect("203.0.113.7", 443), true},
		{"star with ports not other port", Rule{Host: "*", Ports: []Port{443}}, connect("example.com", 8443), false},
		{"star block default ports", Rule{Host: "*", Action: Block}, connect("example.com", 80), true},

		// IP literals.
		{"IPv4", Rule{Host: "203.0.113.7"}, connect("203.0.113.7", 443), true},
		{"IPv4 other", Rule{Host: "203.0.113.7"}, connect("203.0.113.8", 443), false},
		{"IPv4 mapped target", Rule{Host: "203.0.113.7"}, connect("[::ffff:203.0.113.7]", 443), true},
		{"IPv4 alternate spelling target", Rule{Host: "127.0.0.1"}, connect("2130706433", 443), false},
		{"IPv4 short target", Rule{Host: "127.0.0.1"}, connect("127.1", 443), false},
		{"IPv4 octal target", Rule{Host: "127.0.0.1"}, connect("0177.0.0.1", 443), false},
		{"IPv4 hex target", Rule{Host: "127.0.0.1"}, connect("0x7f.1", 443), false},
		{"IPv6", Rule{Host: "2001:db8::1"}, connect("[2001:DB8:0::1]", 443), true},
		{"IPv6 bracketed rule", Rule{Host: "[2001:db8::1]"}, connect("2001:db8::1", 443), true},
		{"IPv6 other", Rule{Host: "2001:db8::1"}, connect("2001:db8::2", 443), false},
		{"IPv6 rule not its mapped IPv4", Rule{Host: "::ffff:7f00:1"}, connect("127.0.0.1", 443), true},

		// CIDRs.
		{"CIDR v4 inside", Rule{Host: "10.0.0.0/8"}, connect("10.1.2.3", 443), true},
		{"CIDR v4 outside", Rule{Host: "10.0.0.0/8"}, connect("11.0.0.1", 443), false},
		{"CIDR v4 not a name", Rule{Host: "10.0.0.0/8"}, connect("10.example.com", 443), false},
		{"CIDR v6 inside", Rule{Host: "2001:db8::/32"}, connect("[2001:db8:ffff::1]", 443), true},
		{"CIDR v6 outside", Rule{Host: "2001:db8::/32"}, connect("[2001:db9::1]", 443), false},
		{"CIDR v4 matches mapped target", Rule{Host: "10.0.0.0/8"}, connect("::ffff:10.0.0.1", 443), true},
		{"CIDR v6 does not match v4", Rule{Host: "::/0"}, connect("10.0.0.1", 443), false},
		{"CIDR /0 v4", Rule{Host: "0.0.0.0/0"}, connect("203.0.113.7", 443), true},

		// Ports.
		{"default ports 80", Rule{Host: "example.com"}, get("example.com", 80, "/"), true},
		{"default ports 443", Rule{Host: "example.com"}, connect("example.com", 443), true},
		{"default ports not 8080", Rule{Host: "example.com"}, get("example.com", 8080, "/"), false},
		{"port list", Rule{Host: "example.com", Ports: []Port{8080, 8443}}, connect("example.com", 8443), true},
		{"port list not default", Rule{Host: "example.com", Ports: []Port{8080}}, connect("example.com", 443), false},
		{"any port", Rule{Host: "example.com", Ports: []Port{AnyPort}}, connect("example.com", 22), true},
		{"port 0 never", Rule{Host: "example.com", Ports: []Port{AnyPort}}, connect("example.com", 0), false},

		// Methods and path: HTTP requests (plain, or inside an inspected
		// tunnel, on its port), never a CONNECT.
		{"method on 443, inside an inspected tunnel", Rule{Host: "example.com", Ports: []Port{443}, Methods: []string{"GET"}}, get("example.com", 443, "/"), true},
		{"path on 443, inside an inspected tunnel", Rule{Host: "example.com", Ports: []Port{443}, Path: "/v1/"}, get("example.com", 443, "/v1/x"), true},
		{"method on 443 never CONNECT", Rule{Host: "example.com", Ports: []Port{443}, Methods: []string{"GET"}}, connect("example.com", 443), false},
		{"method", Rule{Host: "example.com", Methods: []string{"GET"}}, get("example.com", 80, "/"), true},
		{"method lower case in rule", Rule{Host: "example.com", Methods: []string{"get"}}, get("example.com", 80, "/"), true},
		{"method other", Rule{Host: "example.com", Methods: []string{"GET"}}, Target{Host: "example.com", Port: 80, Method: "POST", Path: "/"}, false},
		{"method case-insensitive", Rule{Host: "example.com", Methods: []string{"POST"}, Action: Block}, Target{Host: "example.com", Port: 80, Method: "post", Path: "/"}, true},
		{"method lower-case connect", Rule{Host: "example.com", Methods: []string{"GET"}}, Target{Host: "example.com", Port: 443, Method: "connect"}, false},
		{"method never CONNECT", Rule{Host: "example.com", Methods: []string{"GET"}}, connect("example.com", 443), false},
		{"path prefix", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/v1/users"), true},
		{"path other", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/v2/users"), false},
		{"path never CONNECT", Rule{Host: "example.com", Path: "/"}, connect("example.com", 443), false},
		{"path dot segments resolved", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/v1/../admin"), false},
		{"path encoded dot segments resolved", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/v1/%2e%2E/admin"), false},
		{"path dot segments into prefix", Rule{Host: "example.com", Path: "/admin"}, get("example.com", 80, "/public/../admin/x"), true},
		{"path single dot", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/./v1/x"), true},
		{"path encoded letters", Rule{Host: "example.com", Path: "/admin", Action: Block}, get("example.com", 80, "/%61dmin"), true},
		{"path double slash", Rule{Host: "example.com", Path: "/admin", Action: Block}, get("example.com", 80, "//admin"), true},
		{"path backslash", Rule{Host: "example.com", Path: "/admin", Action: Block}, get("example.com", 80, "/x\\..\\admin"), true},
		{"path encoded slash and dots", Rule{Host: "example.com", Path: "/v1/"}, get("example.com", 80, "/v1%2F..%2Fadmin"), false},
		{"path encoded percent stays", Rule{Host: "example.com", Path: "/admin", Action: Block}, get("example.com", 80, "/%2561dmin"), false},
		{"path non-ASCII rule", Rule{Host: "example.com", Path: "/café/"}, get("example.com", 80, "/caf%c3%a9/menu"), true},
		{"path rule with dot segments", Rule{Host: "example.com", Path: "/v1/../admin"}, get("example.com", 80, "/admin"), true},
		{"path and method", Rule{Host: "example.com", Methods: []string{"GET"}, Path: "/v1/"}, get("example.com", 80, "/v1/x"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rule
			if r.Action == "" {
				r.Action = Allow
			}
			r.ID = "rule"
			// The default is the opposite of the rule, so a match is visible.
			def := Block
			if r.Action == Block {
				def = Allow
			}
			p := mustCompile(t, def, r)
			d := p.Decide(tt.target)
			gotMatch := d.Rule == "rule"
			if gotMatch != tt.match {
				t.Errorf("Decide(%+v) = %+v; match = %v, want %v", tt.target, d, gotMatch, tt.match)
			}
		})
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	p := mustCompile(t, Allow,
		Rule{ID: "exact-block", Host: "api.example.com", Ports: []Port{443}, Action: Block},
		Rule{ID: "wild-allow", Host: "*.example.com", Action: Allow},
		Rule{ID: "deep-block", Host: "*.internal.example.com", Action: Block},
		Rule{ID: "get-intercept", Host: "www.example.com", Methods: []string{"GET"}, Ports: []Port{80}, Action: Intercept, Response: &Response{Body: "hi"}},
		Rule{ID: "any-block", Host: "*", Ports: []Port{22}, Action: Block},
		Rule{ID: "ssh-allow", Host: "git.example.org", Ports: []Port{22}, Action: Allow},
		Rule{ID: "net-block", Host: "203.0.113.0/24", Action: Block},
		Rule{ID: "ip-allow", Host: "203.0.113.7", Action: Allow},
	)
	tests := []struct {
		target Target
		rule   string
		action Action
	}{
		{connect("api.example.com", 443), "exact-block", Block},
		{get("api.example.com", 80, "/"), "wild-allow", Allow},
		{connect("x.internal.example.com", 443), "wild-allow", Allow}, // an earlier wildcard wins over a deeper one
		{get("www.example.com", 80, "/"), "wild-allow", Allow},
		{connect("git.example.org", 22), "any-block", Block}, // "*" before the exact rule wins
		{connect("203.0.113.7", 443), "net-block", Block},
		{connect("198.51.100.1", 443), RuleDefault, Allow},
		{connect("127.1", 443), RuleInvalid, Block}, // invalid is blocked even under default allow
		{connect("user@example.com", 443), RuleInvalid, Block},
		{connect("example.com", 0), RuleInvalid, Block},
	}
	for _, tt := range tests {
		d := p.Decide(tt.target)
		if d.Rule != tt.rule || d.Action != tt.action {
			t.Errorf("Decide(%+v) = %s by %s, want %s by %s", tt.target, d.Action, d.Rule, tt.action, tt.rule)
		}
	}
}

func TestDecideIntercept(t *testing.T) {
	p := mustCompile(t, Block, Rule{ID: "mock", Host: "mock.test", Action: Intercept,
		Response: &Response{Status: 418, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "teapot"}})
	d := p.Decide(get("mock.test", 80, "/"))
	if d.Action != Intercept || d.Response == nil || d.Response.Status != 418 || d.Response.Body != "teapot" {
		t.Fatalf("Decide = %+v (response %+v), want intercept with status 418 and body teapot", d, d.Response)
	}
	if r := p.Decide(get("other.test", 80, "/")); r.Response != nil {
		t.Errorf("default decision has response %+v, want nil", r.Response)
	}
}

func TestDecideReasonsAreSentences(t *testing.T) {
	p := mustCompile(t, Block, Rule{ID: "npm", Host: "registry.npmjs.org", Action: Allow})
	tests := []struct {
		target Target
		reason string
	}{
		{connect("registry.npmjs.org", 443), "rule npm: allow registry.npmjs.org"},
		{connect("example.com", 443), "no rule matched; the default is block"},
		{connect("127.1", 443), `invalid target "127.1": a name ending in a number must be a dotted-quad IPv4 address (a.b.c.d, no leading zeros)`},
	}
	for _, tt := range tests {
		if got := p.Decide(tt.target).Reason; got != tt.reason {
			t.Errorf("Decide(%+v).Reason = %q, want %q", tt.target, got, tt.reason)
		}
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{Host: "*.example.com", Action: Allow},
		Rule{Host: "10.0.0.0/8", Action: Allow},
		Rule{Host: "api.example.org", Path: "/v1/", Action: Allow})
	for _, tg := range []Target{connect("a.b.example.com", 443), connect("10.1.2.3", 443), connect("2001:db8::1", 443), get("api.example.org", 80, "/v1/x")} {
		if n := testing.AllocsPerRun(100, func() { p.Decide(tg) }); n != 0 {
			t.Errorf("Decide(%+v) allocates %v times, want 0", tg, n)
		}
	}
}

func TestGuardAddr(t *testing.T) {
	p, err := Compile(Spec{
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")},
		Rules: []Rule{
			{ID: "lo", Host: "127.0.0.1", Ports: []Port{8080}, Action: Allow},
			{ID: "net", Host: "10.0.0.0/8", Ports: []Port{AnyPort}, Action: Allow},
			{ID: "blk", Host: "172.16.0.0/12", Action: Block},
			{ID: "name", Host: "internal.example.com", Action: Allow},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ip      string
		port    uint16
		refused bool
		reason  string
	}{
		{"203.0.113.7", 443, true, "address guard: 203.0.113.7 is documentation (TEST-NET-3)"},
		{"8.8.8.8", 443, false, ""},
		{"2606:4700::1111", 443, false, ""},
		{"127.0.0.1", 8080, false, ""}, // IP allow rule, its port
		{"127.0.0.1", 80, true, "address guard: 127.0.0.1 is loopback"},
		{"127.0.0.2", 8080, true, "address guard: 127.0.0.2 is loopback"},
		{"10.9.9.9", 5432, false, ""},                                               // CIDR allow rule, any port
		{"172.16.0.1", 80, true, "address guard: 172.16.0.1 is private (RFC 1918)"}, // a block rule exempts nothing
		{"192.168.1.5", 22, false, ""},                                              // allow_private, every port
		{"192.168.2.5", 80, true, "address guard: 192.168.2.5 is private (RFC 1918)"},
		{"169.254.169.254", 80, true, "address guard: 169.254.169.254 is the cloud metadata address"},
		{"169.254.1.1", 80, true, "address guard: 169.254.1.1 is link-local"},
		{"100.64.0.1", 80, true, "address guard: 100.64.0.1 is shared address space (CGNAT, 100.64.0.0/10)"},
		{"0.0.0.0", 80, true, "address guard: 0.0.0.0 is unspecified"},
		{"::", 80, true, "address guard: :: is unspecified"},
		{"::1", 80, true, "address guard: ::1 is loopback"},
		{"fd00::1", 80, true, "address guard: fd00::1 is unique local (ULA)"},
		{"fe80::1", 80, true, "address guard: fe80::1 is link-local"},
		{"ff02::1", 80, true, "address guard: ff02::1 is multicast"},
		{"224.0.0.1", 80, true, "address guard: 224.0.0.1 is multicast"},
		{"255.255.255.255", 80, true, "address guard: 255.255.255.255 is broadcast"},
		{"240.0.0.1", 80, true, "address guard: 240.0.0.1 is reserved (240.0.0.0/4)"},
		{"192.0.0.8", 80, true, "address guard: 192.0.0.8 is IETF protocol assignments (192.0.0.0/24)"},
		{"198.18.0.1", 80, true, "address guard: 198.18.0.1 is benchmarking (198.18.0.0/15)"},
		{"::ffff:8.8.8.8", 80, false, ""}, // dialed as 8.8.8.8
		{"::ffff:127.0.0.1", 80, true, "address guard: 127.0.0.1 is loopback"},
		{"::ffff:0:7f00:1", 80, true, "address guard: ::ffff:0:7f00:1 is IPv4-translated IPv6 (SIIT)"},
		{"2001:2::1", 80, true, "address guard: 2001:2::1 is benchmarking (2001:2::/48)"},
		{"2001:10::1", 80, true, "address guard: 2001:10::1 is ORCHID (2001:10::/28)"},
		{"2001:100::1", 80, true, "address guard: 2001:100::1 is IETF protocol assignments (2001::/23)"},
		{"192.88.99.1", 80, true, "address guard: 192.88.99.1 is 6to4 relay anycast (192.88.99.0/24)"},
		{"5f00::1", 80, true, "address guard: 5f00::1 is SRv6 SIDs (5f00::/16)"},
		{"64:ff9b::7f00:1", 80, true, "address guard: 64:ff9b::7f00:1 is NAT64 (64:ff9b::/96)"},
		{"2002:7f00:1::", 80, true, "address guard: 2002:7f00:1:: is 6to4 (2002::/16)"},
		{"2001:0:4136:e378::1", 80, true, "address guard: 2001:0:4136:e378::1 is Teredo (2001::/32)"},
		{"2001:db8::1", 80, true, "address guard: 2001:db8::1 is documentation (2001:db8::/32)"},
		{"::7f00:1", 80, true, "address guard: ::7f00:1 is IPv4-compatible IPv6 (deprecated)"},
	}
	for _, tt := range tests {
		d, refused := p.GuardAddr(netip.MustParseAddr(tt.ip), connect(tt.ip, tt.port))
		if refused != tt.refused || d.Reason != tt.reason {
			t.Errorf("GuardAddr(%s, %d) = %v, %q; want %v, %q", tt.ip, tt.port, refused, d.Reason, tt.refused, tt.reason)
		}
		if refused && (d.Action != Block || d.Rule != RuleGuard) {
			t.Errorf("GuardAddr(%s, %d) = %+v, want a block by rule guard", tt.ip, tt.port, d)
		}
	}
}

func TestGuardExemptionFollowsTheWholeRule(t *testing.T) {
	// An IP allow rule limited to GET /health exempts its address only for
	// what it allows, not for a tunnel that the default let through.
	p := mustCompile(t, Allow, Rule{Host: "10.0.0.5", Ports: []Port{80}, Methods: []string{"GET"}, Path: "/health", Action: Allow})
	ip := netip.MustParseAddr("10.0.0.5")
	tests := []struct {
		target  Target
		refused bool
	}{
		{get("10.0.0.5", 80, "/health"), false},
		{get("10.0.0.5", 80, "/health/../admin"), true},
		{Target{Host: "10.0.0.5", Port: 80, Method: "POST", Path: "/health"}, true},
		{connect("10.0.0.5", 80), true},
	}
	for _, tt := range tests {
		if _, refused := p.GuardAddr(ip, tt.target); refused != tt.refused {
			t.Errorf("GuardAddr(%s, %+v) refused = %v, want %v", ip, tt.target, refused, tt.refused)
		}
	}
}

func TestGuardHostNameRuleExemptsNothing(t *testing.T) {
	// A host-name allow rule never exempts the addresses its name resolves
	// to: only allow_private and IP/CIDR rules do.
	p := mustCompile(t, Block, Rule{Host: "localhost", Action: Allow})
	if _, refused := p.GuardAddr(netip.MustParseAddr("127.0.0.1"), get("localhost", 80, "/")); !refused {
		t.Errorf("GuardAddr(127.0.0.1) passed under a host-name rule, want refused")
	}
}

// TestVerdict shows the verdict the gateway, sbx policy check and sbx
// audit share: Decide, with the address guard's refusal of an allowed IP
// literal.
func TestVerdict(t *testing.T) {
	spec := Spec{Version: 1, Default: Block, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, Rules: []Rule{
		{ID: "any", Host: "*", Ports: []Port{8080}, Action: Allow},
		{ID: "lan", Host: "192.168.1.0/24", Action: Allow},
		{ID: "mock", Host: "127.0.0.1", Ports: []Port{9}, Action: Intercept, Response: &Response{Status: 204}},
		{ID: "gh", Host: "api.github.com", Action: Allow},
	}}
	p, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host   string
		port   uint16
		action Action
		rule   string
	}{
		{"api.github.com", 443, Allow, "gh"},
		{"10.1.2.3", 8080, Block, RuleGuard}, // allowed by "*": a host pattern exempts nothing
		{"10.9.2.3", 8080, Allow, "any"},     // allow_private
		{"192.168.1.7", 443, Allow, "lan"},   // an allow rule for the range exempts it
		{"169.254.169.254", 8080, Block, RuleGuard},
		{"127.0.0.1", 9, Intercept, "mock"}, // an intercept dials nothing
		{"evil.example", 443, Block, RuleDefault},
	} {
		d := p.Verdict(Target{Host: tt.host, Port: tt.port, Method: "CONNECT"})
		if d.Action != tt.action || d.Rule != tt.rule {
			t.Errorf("Verdict(%s:%d): got %s by %s, want %s by %s", tt.host, tt.port, d.Action, d.Rule, tt.action, tt.rule)
		}
	}
}
