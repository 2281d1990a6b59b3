package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// These tests pin down attacks on the policy found in review: each is an
// input a hostile client can choose.

func TestGuardExemptionRespectsRuleOrder(t *testing.T) {
	// A later CIDR allow rule must not exempt an address an earlier rule
	// blocks, whatever host name resolves to it (DNS rebinding).
	p := mustCompile(t, Allow,
		Rule{ID: "no-metadata", Host: "169.254.169.254", Ports: []Port{AnyPort}, Action: Block},
		Rule{ID: "link-local", Host: "169.254.0.0/16", Ports: []Port{AnyPort}, Action: Allow},
	)
	rebind := connect("metadata.attacker.test", 80)
	if _, refused := p.GuardAddr(netip.MustParseAddr("169.254.169.254"), rebind); !refused {
		t.Errorf("169.254.169.254 exempted by a later CIDR rule although an earlier rule blocks it")
	}
	if _, refused := p.GuardAddr(netip.MustParseAddr("169.254.1.1"), rebind); refused {
		t.Errorf("169.254.1.1 refused although the link-local allow rule decides it")
	}
}

func TestGuardExemptionOnlyFromRulesInsideTheRange(t *testing.T) {
	p := mustCompile(t, Block,
		Rule{Host: "0.0.0.0/0", Ports: []Port{443}, Action: Allow},
		Rule{Host: "::/0", Ports: []Port{443}, Action: Allow},
	)
	for _, ip := range []string{"127.0.0.1", "169.254.169.254", "10.0.0.1", "::1", "fd00::1"} {
		if _, refused := p.GuardAddr(netip.MustParseAddr(ip), connect(ip, 443)); !refused {
			t.Errorf("allow 0.0.0.0/0 and ::/0 exempted %s; a rule wider than a special range must not", ip)
		}
	}
	q := mustCompile(t, Block, Rule{Host: "169.254.0.0/16", Ports: []Port{AnyPort}, Action: Allow})
	if _, refused := q.GuardAddr(netip.MustParseAddr("169.254.169.254"), connect("169.254.169.254", 80)); !refused {
		t.Errorf("allow 169.254.0.0/16 exempted the metadata address; it needs its own /32 rule or allow_private")
	}
	r := mustCompile(t, Block, Rule{Host: "169.254.169.254", Action: Allow})
	if _, refused := r.GuardAddr(netip.MustParseAddr("169.254.169.254"), connect("169.254.169.254", 80)); refused {
		t.Errorf("allow 169.254.169.254 did not exempt that address")
	}
}

func TestBlockPathRuleStopsTunnels(t *testing.T) {
	// A tunnel to port 80 could carry GET /admin; a block rule for it must
	// stop the tunnel, while a path allow rule never allows one.
	p := mustCompile(t, Allow, Rule{ID: "admin", Host: "a.test", Ports: []Port{80}, Path: "/admin", Action: Block})
	d := p.Decide(connect("a.test", 80))
	if d.Action != Block || d.Rule != "admin" || !strings.Contains(d.Reason, "cannot be checked inside a tunnel") {
		t.Errorf("CONNECT a.test:80 = %+v, want block by admin, saying why", d)
	}
	if d := p.Decide(get("a.test", 80, "/public")); d.Rule != RuleDefault {
		t.Errorf("GET /public = %+v, want the default", d)
	}
	q := mustCompile(t, Block, Rule{ID: "api", Host: "a.test", Ports: []Port{80}, Methods: []string{"GET"}, Action: Allow})
	if d := q.Decide(connect("a.test", 80)); d.Rule != RuleDefault {
		t.Errorf("CONNECT under a method allow rule = %+v, want the default", d)
	}
}

func TestEmptyPathIsRoot(t *testing.T) {
	p := mustCompile(t, Allow, Rule{ID: "root", Host: "a.test", Path: "/", Action: Block})
	if d := p.Decide(get("a.test", 80, "")); d.Rule != "root" {
		t.Errorf("GET with an empty path = %+v, want rule root (the upstream is asked for /)", d)
	}
}

func TestPathParameters(t *testing.T) {
	allow := mustCompile(t, Block, Rule{ID: "v1", Host: "a.test", Path: "/v1/", Action: Allow})
	block := mustCompile(t, Allow, Rule{ID: "admin", Host: "a.test", Path: "/admin", Action: Block})
	for _, path := range []string{"/v1/..;/admin", "/v1/%2e%2e;/admin", "/v1;x/../admin"} {
		if d := allow.Decide(get("a.test", 80, path)); d.Rule == "v1" {
			t.Errorf("allow /v1/ matched %q, which Tomcat serves as /admin", path)
		}
	}
	if d := allow.Decide(get("a.test", 80, "/v1/users;jsessionid=x")); d.Rule != "v1" {
		t.Errorf("allow /v1/ did not match a path with a parameter inside it: %+v", d)
	}
	for _, path := range []string{"/;x/admin", "/%3b/admin", "/admin;x", "/x/..;/admin"} {
		if d := block.Decide(get("a.test", 80, path)); d.Rule != "admin" {
			t.Errorf("block /admin missed %q: %+v", path, d)
		}
	}
	if _, err := Compile(Spec{Rules: []Rule{{Host: "a.test", Path: "/a;b", Action: Allow}}}); err == nil {
		t.Errorf("a rule path with ';' compiled; want an error")
	}
}

func TestMethodsFoldOnlyASCII(t *testing.T) {
	p := mustCompile(t, Block, Rule{ID: "post", Host: "a.test", Methods: []string{"POST"}, Action: Allow})
	if d := p.Decide(Target{Host: "a.test", Port: 80, Method: "POſT", Path: "/"}); d.Rule == "post" {
		t.Errorf("POſT matched methods [POST]")
	}
	if d := p.Decide(Target{Host: "a.test", Port: 80, Method: "post", Path: "/"}); d.Rule != "post" {
		t.Errorf("post did not match methods [POST]: %+v", d)
	}
}

func TestFullwidthTrailingDot(t *testing.T) {
	for _, in := range []string{"example.com。", "example.com．", "example.com｡"} {
		if got, err := NormalizeHost(in); err != nil || got != "example.com" {
			t.Errorf("NormalizeHost(%q) = %q, %v; want example.com", in, got, err)
		}
	}
}

func TestInvalidReasonIsBounded(t *testing.T) {
	p := mustCompile(t, Block)
	d := p.Decide(connect(strings.Repeat("x@", 32<<10), 443))
	if d.Rule != RuleInvalid || len(d.Reason) > 300 {
		t.Errorf("reason for a 64 KiB host is %d bytes, want at most 300", len(d.Reason))
	}
}

func TestStrictScalars(t *testing.T) {
	for _, doc := range []string{
		"rules:\n  - {host: a.test, action: intercept, response: {body: !!binary aGVsbG8=}}\n",
		"rules:\n  - {id: 1e3, host: a.test, action: allow}\n",
		"rules:\n  - {host: a.test, action: intercept, response: {body: true}}\n",
		"default: !foo allow\n",
		"version: 0\n",
		"{\"version\": -0}",
		"version: 1.0\n",
	} {
		if _, err := Parse("p.yaml", []byte(doc)); err == nil {
			t.Errorf("Parse accepted %q", doc)
		}
	}
}

func TestErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 200 {
		fmt.Fprintf(&b, "  - {host: h%d.test, action: deny}\n", i)
	}
	_, err := Parse("p.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != maxErrors+1 || !strings.Contains(list[maxErrors].Msg, "more than 50 problems") {
		t.Errorf("got %d errors, want %d and a last one saying there are more", len(list), maxErrors+1)
	}
}

func TestJSONAndYAMLHints(t *testing.T) {
	_, err := Parse("p", []byte("{version: 1}"))
	if err == nil || !strings.Contains(err.Error(), "read as JSON, where keys and strings need double quotes") {
		t.Errorf("unquoted JSON key: %v", err)
	}
	_, err = Parse("p.yaml", []byte("rules:\n\t- host: a\n"))
	if err == nil || !strings.Contains(err.Error(), "tabs for indentation") {
		t.Errorf("tab indentation: %v", err)
	}
}

func TestDecodeAddRule(t *testing.T) {
	r, pos, err := DecodeAddRule("body", []byte(`{"id": "gh", "host": "api.github.com", "action": "allow", "position": 0}`))
	if err != nil || r.ID != "gh" || pos != 0 {
		t.Errorf("DecodeAddRule = %+v, %d, %v; want gh at 0", r, pos, err)
	}
	if _, pos, err := DecodeAddRule("body", []byte(`{"host": "a.test", "action": "allow"}`)); err != nil || pos != -1 {
		t.Errorf("without position: %d, %v; want -1", pos, err)
	}
	for _, bad := range []string{
		`{"host": "a.test", "action": "allow", "position": -1}`,
		`{"host": "a.test", "action": "allow", "position": "0"}`,
		`{"host": "a.test", "action": "allow", "ports": ["443"]}`,
		`{"host": "a.test", "action": "allow", "Host": "b.test"}`,
	} {
		if _, _, err := DecodeAddRule("body", []byte(bad)); err == nil {
			t.Errorf("DecodeAddRule accepted %s", bad)
		} else if !strings.HasPrefix(err.Error(), "body:1: rule: ") {
			t.Errorf("DecodeAddRule(%s) error %q does not start with body:1: rule: ", bad, err)
		}
	}
}

func TestPortJSON(t *testing.T) {
	var ports []Port
	if err := json.Unmarshal([]byte(`[443, "*"]`), &ports); err != nil || len(ports) != 2 || ports[1] != AnyPort {
		t.Errorf("Unmarshal [443, \"*\"] = %v, %v", ports, err)
	}
	if err := json.Unmarshal([]byte(`["443"]`), &ports); err == nil {
		t.Errorf("Unmarshal [\"443\"] succeeded; a quoted number is not a port")
	}
	if b, err := json.Marshal([]Port{80, AnyPort}); err != nil || string(b) != `[80,"*"]` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
}

func TestStoreIDsSurviveReplaceAndHugeIDs(t *testing.T) {
	s := NewStore(mustCompile(t, Block, Rule{Host: "a.test", Action: Allow})) // r1
	if _, err := s.RemoveRule("r1", 0); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Replace(Spec{Rules: []Rule{{Host: "b.test", Action: Allow}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if id := snap.Policy().Rules()[0].ID; id != "r2" {
		t.Errorf("Replace after removing r1 named its rule %s, want r2", id)
	}
	if _, _, err := s.AddRule(Rule{ID: "r9223372036854775807", Host: "c.test", Action: Allow}, -1, 0); err != nil {
		t.Fatal(err)
	}
	_, added, err := s.AddRule(Rule{Host: "d.test", Action: Allow}, -1, 0)
	if err != nil || added.ID != "r3" {
		t.Errorf("after a huge id, AddRule = %q, %v; want r3", added.ID, err)
	}
}
