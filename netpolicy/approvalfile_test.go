package netpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddApprovedRule(t *testing.T) {
	allow := Rule{Host: "pypi.org", Ports: []Port{443}, Action: Allow}
	tests := []struct {
		name, before string
		wantOrder    []string // substrings of the file after, in order
	}{
		{"new file", "", []string{"version: 1", "rules:", "# allowed always by cli", "host: pypi.org", "ports: [443]", "action: allow"}},
		{"no rules", "# mine\nversion: 1\ndefault: ask\n", []string{"# mine", "default: ask", "rules:", "host: pypi.org"}},
		{"appended without an ask rule", "version: 1\nrules:\n  - host: a.example # first\n    action: allow\n",
			[]string{"a.example", "# first", "# allowed always", "pypi.org"}},
		{"before the first ask rule", "version: 1\nrules:\n  - host: a.example\n    action: block\n  - host: '*'\n    ports: [443]\n    action: ask\n  - host: b.example\n    action: ask\n",
			[]string{"a.example", "pypi.org", "action: ask", "b.example"}},
		{"flow list", "version: 1\nrules: [{host: a.example, action: allow}]\n", []string{"a.example", "# allowed always", "pypi.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "approvals.yaml")
			if tt.before != "" {
				if err := os.WriteFile(path, []byte(tt.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := AddApprovedRule(path, allow, "allowed always by cli at 2026-11-25T10:00:00Z"); err != nil {
				t.Fatalf("AddApprovedRule: %v", err)
			}
			data, _ := os.ReadFile(path)
			text, at := string(data), 0
			for _, s := range tt.wantOrder {
				i := strings.Index(text[at:], s)
				if i < 0 {
					t.Fatalf("the file lacks %q after byte %d:\n%s", s, at, text)
				}
				at += i + len(s)
			}
			p, err := ParseFile(path)
			if err != nil {
				t.Fatalf("the file does not parse: %v\n%s", err, text)
			}
			if d := p.Verdict(Target{Host: "pypi.org", Port: 443, Method: "CONNECT"}); d.Action != Allow {
				t.Errorf("Verdict: got %s, want allow\n%s", d.Action, text)
			}
		})
	}
}

func TestAddApprovedRuleRefuses(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "p.json")
	os.WriteFile(jsonFile, []byte(`{"version": 1}`), 0o600)
	list := filepath.Join(dir, "list.yaml")
	os.WriteFile(list, []byte("- a\n- b\n"), 0o600)
	badRules := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badRules, []byte("version: 1\nrules: nope\n"), 0o600)
	r := Rule{Host: "pypi.org", Ports: []Port{443}, Action: Allow}
	for _, tt := range []struct {
		path string
		want error
	}{{jsonFile, ErrNotYAML}, {list, ErrInvalidPolicy}, {badRules, ErrInvalidPolicy}} {
		before, _ := os.ReadFile(tt.path)
		if err := AddApprovedRule(tt.path, r, "x"); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", filepath.Base(tt.path), err, tt.want)
		}
		if after, _ := os.ReadFile(tt.path); string(after) != string(before) {
			t.Errorf("%s changed: %q", filepath.Base(tt.path), after)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("the directory holds %d files, want 3 (no temporary file left)", len(entries))
	}
}
