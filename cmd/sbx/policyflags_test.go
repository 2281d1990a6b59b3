package main

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/netpolicy"
)

func TestPolicyFlagsParse(t *testing.T) {
	var f policyFlags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs)
	err := fs.Parse([]string{
		"--policy", "p.yaml",
		"--allow", "a.example", "--allow", "b.example,c.example",
		"--block", "d.example",
		"--intercept", "e.example=reply,v2.json",
		"--inspect", "f.example", "--inspect", "*.g.example:8443",
		"--default", "allow",
		"--audit",
		"--allow-private", "10.0.0.0/8", "--allow-private", "fd00::/8",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := policyFlags{
		Policy:       "p.yaml",
		Allow:        []string{"a.example", "b.example,c.example"}, // no comma splitting
		Block:        []string{"d.example"},
		Intercept:    []string{"e.example=reply,v2.json"},
		Inspect:      []string{"f.example", "*.g.example:8443"},
		AllowPrivate: []string{"10.0.0.0/8", "fd00::/8"},
		Default:      "allow",
		Audit:        true,
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("parsed flags (-want +got):\n%s", diff)
	}
}

func TestPolicyFlagsBuild(t *testing.T) {
	jsonReply := writeFile(t, "reply.json", `{"ok":true}`)
	plainReply := writeFile(t, "reply", "nope")
	file := writeFile(t, "policy.yaml", `version: 1
default: allow
allow_private: [192.168.0.0/16]
rules:
  - id: file-rule
    host: file.example
    action: block
`)
	f := policyFlags{
		Policy:       file,
		Allow:        []string{"allowed.example:8080"},
		Block:        []string{"*.blocked.example"},
		Intercept:    []string{"json.example=" + jsonReply, "plain.example=" + plainReply},
		Inspect:      []string{"allowed.example:8080", "*.tls.example:443"},
		AllowPrivate: []string{"10.0.0.0/8"},
		Default:      "block",
		Audit:        true,
	}
	p, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := []netpolicy.Rule{
		{ID: "r1", Host: "allowed.example", Ports: []netpolicy.Port{8080}, Inspect: true},
		{ID: "r2", Host: "*.tls.example", Ports: []netpolicy.Port{443}, Inspect: true},
		{ID: "r3", Host: "json.example", Ports: netpolicy.DefaultPorts, Action: netpolicy.Intercept,
			Response: &netpolicy.Response{Status: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"ok":true}`}},
		{ID: "r4", Host: "plain.example", Ports: netpolicy.DefaultPorts, Action: netpolicy.Intercept,
			Response: &netpolicy.Response{Status: 200, Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, Body: "nope"}},
		{ID: "r5", Host: "*.blocked.example", Ports: netpolicy.DefaultPorts, Action: netpolicy.Block},
		{ID: "r6", Host: "allowed.example", Ports: []netpolicy.Port{8080}, Action: netpolicy.Allow},
		{ID: "file-rule", Host: "file.example", Ports: netpolicy.DefaultPorts, Action: netpolicy.Block},
	}
	if diff := cmp.Diff(want, p.Rules()); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		host string
		port uint16
		want bool
	}{
		{"allowed.example", 8080, true},
		{"a.tls.example", 443, true},
		{"json.example", 443, true}, // implied by --intercept
		{"file.example", 443, false},
	} {
		if got := p.Inspects(tt.host, tt.port); got != tt.want {
			t.Errorf("Inspects(%s, %d): got %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
	// Inspect-only rules decide nothing: allowed.example:8080 is decided
	// by the --allow rule after them.
	if d := p.Decide(netpolicy.Target{Host: "allowed.example", Port: 8080, Method: "CONNECT"}); d.Action != netpolicy.Allow || d.Rule != "r6" {
		t.Errorf("Decide(CONNECT allowed.example:8080): got %s by %s, want allow by r6", d.Action, d.Rule)
	}
	if p.Default() != netpolicy.Block {
		t.Errorf("default: got %s, want block (--default beats the file)", p.Default())
	}
	if p.Mode() != netpolicy.Audit {
		t.Errorf("mode: got %s, want audit", p.Mode())
	}
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, p.AllowPrivate(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("allow_private, replaced by the flag (-want +got):\n%s", diff)
	}

	// Without the overriding flags the file's settings stay.
	p, err = (&policyFlags{Policy: file}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if p.Default() != netpolicy.Allow || p.Mode() != netpolicy.Enforce || len(p.AllowPrivate()) != 1 {
		t.Errorf("file settings: got default %s, mode %s, allow_private %v; want allow, enforce, [192.168.0.0/16]",
			p.Default(), p.Mode(), p.AllowPrivate())
	}

	// No flags at all: the empty policy blocks everything.
	p, err = (&policyFlags{}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(netpolicy.Target{Host: "example.com", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Block || d.Rule != netpolicy.RuleDefault {
		t.Errorf("empty policy: got %+v, want a block by the default", d)
	}
}

func TestPolicyFlagsBuildErrors(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "version: 2\n")
	tests := []struct {
		name     string
		flags    policyFlags
		wantCode int
	}{
		{"bad allow", policyFlags{Allow: []string{"*."}}, exitUsage},
		{"bad block", policyFlags{Block: []string{"exa_mple..com"}}, exitUsage},
		{"bad intercept", policyFlags{Intercept: []string{"=x"}}, exitUsage},
		{"bad inspect", policyFlags{Inspect: []string{"*.:443"}}, exitUsage},
		{"inspect every host without a port", policyFlags{Inspect: []string{"*"}}, exitUsage},
		{"bad default", policyFlags{Default: "Allow"}, exitUsage},
		{"bad allow-private", policyFlags{AllowPrivate: []string{"10.0.0.0/33"}}, exitUsage},
		{"invalid file", policyFlags{Policy: bad}, exitFailure},
		{"missing file", policyFlags{Policy: bad + ".missing"}, exitFailure},
	}
	for _, tt := range tests {
		_, err := tt.flags.Build()
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Errorf("%s: got error %v, want an exitError", tt.name, err)
			continue
		}
		if ee.code != tt.wantCode {
			t.Errorf("%s: got exit code %d (%v), want %d", tt.name, ee.code, err, tt.wantCode)
		}
	}
}
