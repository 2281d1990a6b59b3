package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// --default ask and --ask-timeout make the policy ask, and --ask-timeout
// takes the place of the file's ask_timeout.
func TestPolicyFlagsAsk(t *testing.T) {
	file := writeFile(t, "policy.yaml", "version: 1\nask_timeout: 90s\n")
	tests := []struct {
		name        string
		flags       policyFlags
		wantDefault netpolicy.Action
		wantTimeout time.Duration
	}{
		{"default ask", policyFlags{Default: "ask"}, netpolicy.Ask, 0},
		{"flag timeout", policyFlags{Default: "ask", AskTimeout: "5s"}, netpolicy.Ask, 5 * time.Second},
		{"file timeout", policyFlags{Policy: file}, netpolicy.Block, 90 * time.Second},
		{"flag beats file", policyFlags{Policy: file, AskTimeout: "2m"}, netpolicy.Block, 2 * time.Minute},
	}
	for _, tt := range tests {
		p, err := tt.flags.Build()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if p.Default() != tt.wantDefault || p.AskTimeout() != tt.wantTimeout {
			t.Errorf("%s: got default %s, timeout %v; want %s, %v", tt.name, p.Default(), p.AskTimeout(), tt.wantDefault, tt.wantTimeout)
		}
	}
}

func TestPolicyFlagsAskErrors(t *testing.T) {
	tests := []struct {
		flags policyFlags
		want  string
	}{
		{policyFlags{AskTimeout: "60"}, `--ask-timeout "60": want a duration from 1s to 1h, e.g. --ask-timeout 2m`},
		{policyFlags{AskTimeout: "2h"}, `--ask-timeout "2h": want a duration from 1s to 1h`},
		{policyFlags{Default: "deny"}, `--default "deny": want allow, block or ask`},
	}
	for _, tt := range tests {
		_, err := tt.flags.Build()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Errorf("%+v: got %v, want a usage error", tt.flags, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %q, want it to hold %q", tt.flags, err, tt.want)
		}
	}
}

// --approvals FILE's rules come before the policy's first ask rule, and
// always answers go to it, else to a YAML --policy file.
func TestPolicyFlagsApprovals(t *testing.T) {
	policy := writeFile(t, "policy.yaml", "version: 1\nrules:\n  - host: a.example\n    action: allow\n  - host: '*'\n    ports: [443]\n    action: ask\n")
	approvals := writeFile(t, "approvals.yaml", "version: 1\nrules:\n  # allowed always by cli\n  - host: pypi.org\n    ports: [443]\n    action: allow\n")
	jsonPolicy := writeFile(t, "policy.json", `{"version": 1}`)
	f := policyFlags{Policy: policy, Approvals: approvals}
	p, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, r := range p.Rules() {
		hosts = append(hosts, r.Host)
	}
	if got, want := strings.Join(hosts, " "), "a.example pypi.org *"; got != want {
		t.Errorf("rules: got %s, want %s", got, want)
	}
	if d := p.Verdict(netpolicy.Target{Host: "pypi.org", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Allow {
		t.Errorf("pypi.org: got %s, want allow (not asked)", d.Action)
	}
	missing := policyFlags{Default: "ask", Approvals: approvals + ".new"}
	if _, err := missing.Build(); err != nil {
		t.Errorf("a missing approvals file: got %v, want none (the first always answer makes it)", err)
	}
	for _, tt := range []struct {
		flags policyFlags
		want  string
	}{
		{policyFlags{Policy: policy, Approvals: approvals}, approvals},
		{policyFlags{Policy: policy}, policy},
		{policyFlags{Policy: jsonPolicy}, ""},
		{policyFlags{Default: "ask"}, ""},
	} {
		if got := tt.flags.approvalsFile(); got != tt.want {
			t.Errorf("approvalsFile of %+v: got %q, want %q", tt.flags, got, tt.want)
		}
	}
}
