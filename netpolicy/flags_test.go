package netpolicy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlagPattern(t *testing.T) {
	tests := []struct {
		in    string
		host  string
		ports []Port
	}{
		{"example.com", "example.com", nil},
		{"example.com:8080", "example.com", []Port{8080}},
		{"example.com:*", "example.com", []Port{AnyPort}},
		{"*.example.com", "*.example.com", nil},
		{"*.example.com:443", "*.example.com", []Port{443}},
		{"*:443", "*", []Port{443}},
		{"*", "*", nil},
		{"10.0.0.0/8", "10.0.0.0/8", nil},
		{"10.0.0.0/8:5432", "10.0.0.0/8", []Port{5432}},
		{"203.0.113.7:22", "203.0.113.7", []Port{22}},
		{"2001:db8::1", "2001:db8::1", nil},
		{"2001:db8::/32", "2001:db8::/32", nil},
		{"[2001:db8::1]", "2001:db8::1", nil},
		{"[2001:db8::1]:443", "2001:db8::1", []Port{443}},
		{"[2001:db8::]/32", "2001:db8::/32", nil},
		{"[2001:db8::]/32:*", "2001:db8::/32", []Port{AnyPort}},
	}
	for _, tt := range tests {
		host, ports, err := ParseFlagPattern(tt.in)
		if err != nil || host != tt.host || !cmp.Equal(ports, tt.ports) {
			t.Errorf("ParseFlagPattern(%q) = %q, %v, %v; want %q, %v", tt.in, host, ports, err, tt.host, tt.ports)
		}
	}
	for _, bad := range []string{"", "example.com:", "example.com:0", "example.com:65536", "example.com:http", "[::1", "[::1]x", "[::1]:", "[::1]:99999"} {
		if _, _, err := ParseFlagPattern(bad); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("ParseFlagPattern(%q) error = %v, want ErrInvalidRule", bad, err)
		}
	}
}

// compileLikeFile compiles flag rules, and fails the test unless they are
// the rules of the policy file yaml.
func compileLikeFile(t *testing.T, rules []Rule, yaml string) *Policy {
	t.Helper()
	p, err := Compile(Spec{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := Parse("p.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromFile.Spec(), p.Spec()); diff != "" {
		t.Errorf("flag rules differ from the file's (-file +flags):\n%s", diff)
	}
	return p
}

func TestFlagRulesOrderAndForms(t *testing.T) {
	rules, err := FlagRules(
		[]InterceptFlag{{Pattern: "mock.test", Response: Response{Body: "canned"}}},
		[]string{"*.evil.test", "10.0.0.0/8"},
		[]string{"registry.npmjs.org:443", "*.github.com", "api.test:*"},
	)
	if err != nil {
		t.Fatal(err)
	}
	// The same rules written in a policy file.
	compileLikeFile(t, rules, `rules:
  - {host: mock.test, action: intercept, response: {body: canned}}
  - {host: "*.evil.test", action: block}
  - {host: 10.0.0.0/8, action: block}
  - {host: registry.npmjs.org, ports: [443], action: allow}
  - {host: "*.github.com", action: allow}
  - {host: api.test, ports: ["*"], action: allow}
`)
}

func TestFlagRulesBlockBeatsAllowInterceptBeatsBoth(t *testing.T) {
	// Given in the "wrong" order on the command line: allow first.
	rules, err := FlagRules(
		[]InterceptFlag{{Pattern: "x.test", Response: Response{Body: "i"}}},
		[]string{"x.test", "y.test"},
		[]string{"x.test", "y.test", "z.test"},
	)
	if err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, Block, rules...)
	for host, want := range map[string]Action{"x.test": Intercept, "y.test": Block, "z.test": Allow} {
		if got := p.Decide(connect(host, 443)).Action; got != want {
			t.Errorf("Decide(%s) = %s, want %s", host, got, want)
		}
	}
}

func TestFlagRulesErrors(t *testing.T) {
	_, err := FlagRules(nil, []string{"*.", "ok.test"}, []string{"*", "x.test:0", "127.1"})
	if err == nil {
		t.Fatal("FlagRules succeeded, want errors")
	}
	for _, want := range []string{
		`--block *.: "*.": '*.' needs a domain after it`,
		`--allow *: "*" matches every host`,
		`--allow x.test:0: pattern "x.test:0": port "0"`,
		`--allow 127.1: "127.1": a name ending in a number`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("FlagRules error lacks %q:\n%v", want, err)
		}
	}
	if !errors.Is(err, ErrInvalidRule) {
		t.Errorf("FlagRules error does not wrap ErrInvalidRule")
	}
}

func TestFlagPatternsInspect(t *testing.T) {
	rules, err := FlagPatterns{
		Allow:     []string{"api.test", "*.cdn.test:443"},
		Block:     []string{"evil.test"},
		Intercept: []InterceptFlag{{Pattern: "mock.test:443", Response: Response{Body: "canned"}}},
		Inspect:   []string{"api.test", "*.cdn.test:443", "10.0.0.0/8:*", "*:8443", "[2001:db8::1]:443"},
	}.Rules()
	if err != nil {
		t.Fatal(err)
	}
	// The same rules written in a policy file: inspect-only rules first.
	p := compileLikeFile(t, rules, `rules:
  - {host: api.test, inspect: true}
  - {host: "*.cdn.test", ports: [443], inspect: true}
  - {host: 10.0.0.0/8, ports: ["*"], inspect: true}
  - {host: "*", ports: [8443], inspect: true}
  - {host: "2001:db8::1", ports: [443], inspect: true}
  - {host: mock.test, ports: [443], action: intercept, response: {body: canned}}
  - {host: evil.test, action: block}
  - {host: api.test, action: allow}
  - {host: "*.cdn.test", ports: [443], action: allow}
`)
	// They decide nothing: the deciding flags decide as without them.
	for _, tt := range []struct {
		target Target
		action Action
		host   string // of the deciding rule; "" for the default
	}{
		{connect("api.test", 443), Allow, "api.test"},
		{connect("x.cdn.test", 443), Allow, "*.cdn.test"},
		{connect("evil.test", 443), Block, "evil.test"},
		{connect("mock.test", 443), Intercept, "mock.test"},
		{connect("10.1.2.3", 22), Block, ""},
		{connect("other.test", 8443), Block, ""},
	} {
		d := p.Decide(tt.target)
		host := ""
		if i := slices.IndexFunc(p.Rules(), func(r Rule) bool { return r.ID == d.Rule }); i >= 0 {
			host = p.Rules()[i].Host
		}
		if d.Action != tt.action || host != tt.host {
			t.Errorf("Decide(%+v): got %s by the rule for %q, want %s by the rule for %q", tt.target, d.Action, host, tt.action, tt.host)
		}
	}
	for _, tt := range []struct {
		host string
		port uint16
		want bool
	}{
		{"api.test", 443, true},
		{"x.cdn.test", 443, true},
		{"x.cdn.test", 80, false},
		{"10.1.2.3", 5432, true},
		{"other.test", 8443, true},
		{"2001:db8::1", 443, true},
		{"mock.test", 443, true}, // implied by --intercept
		{"evil.test", 443, false},
	} {
		if got := p.Inspects(tt.host, tt.port); got != tt.want {
			t.Errorf("Inspects(%q, %d): got %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
}

func TestFlagPatternsInspectErrors(t *testing.T) {
	_, err := FlagPatterns{Inspect: []string{"*", "*.", "x.test:0", "ok.test"}}.Rules()
	if err == nil {
		t.Fatal("Rules succeeded, want errors")
	}
	for _, want := range []string{
		`--inspect *: "*" matches every host, so as an inspect-only rule it needs an explicit port list`,
		`--inspect *.: "*.": '*.' needs a domain after it`,
		`--inspect x.test:0: pattern "x.test:0": port "0"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Rules error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "ok.test") {
		t.Errorf("Rules error names the good pattern ok.test:\n%v", err)
	}
	if !errors.Is(err, ErrInvalidRule) {
		t.Errorf("Rules error does not wrap ErrInvalidRule")
	}
}
