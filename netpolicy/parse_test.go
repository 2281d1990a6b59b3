package netpolicy

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const examplePolicyYAML = `version: 1
default: block
mode: audit
allow_private: [10.0.0.0/8, "fd00::/8"]
rules:
  - id: npm
    host: registry.npmjs.org
    ports: [443]
    action: allow
  - host: "*.GitHub.com."
    action: allow
  - host: api.example.com
    ports: [80, 8080]
    methods: [get, HEAD]
    path: /v1/
    action: allow
  - host: "*"
    ports: ["*"]
    action: block
  - id: mock
    host: mock.test
    action: intercept
    response:
      status: 200
      headers: {Content-Type: application/json}
      body: '{"ok": true}'
  - id: tls
    host: "*.corp.example"
    ports: [443, 8443]
    inspect: true
  - host: uploads.example.org
    ports: [443]
    methods: [POST]
    action: block
  - host: git.example.org
    action: allow
    inspect: true
`

// The same policy in JSON, written with tabs and a "\/" escape, which the
// YAML parser would reject.
const examplePolicyJSON = "{\n\t\"version\": 1,\n\t\"default\": \"block\",\n\t\"mode\": \"audit\",\n" +
	"\t\"allow_private\": [\"10.0.0.0/8\", \"fd00::/8\"],\n\t\"rules\": [\n" +
	"\t\t{\"id\": \"npm\", \"host\": \"registry.npmjs.org\", \"ports\": [443], \"action\": \"allow\"},\n" +
	"\t\t{\"host\": \"*.GitHub.com.\", \"action\": \"allow\"},\n" +
	"\t\t{\"host\": \"api.example.com\", \"ports\": [80, 8080], \"methods\": [\"get\", \"HEAD\"], \"path\": \"\\/v1\\/\", \"action\": \"allow\"},\n" +
	"\t\t{\"host\": \"*\", \"ports\": [\"*\"], \"action\": \"block\"},\n" +
	"\t\t{\"id\": \"mock\", \"host\": \"mock.test\", \"action\": \"intercept\",\n" +
	"\t\t \"response\": {\"status\": 200, \"headers\": {\"Content-Type\": \"application/json\"}, \"body\": \"{\\\"ok\\\": true}\"}},\n" +
	"\t\t{\"id\": \"tls\", \"host\": \"*.corp.example\", \"ports\": [443, 8443], \"inspect\": true},\n" +
	"\t\t{\"host\": \"uploads.example.org\", \"ports\": [443], \"methods\": [\"POST\"], \"action\": \"block\"},\n" +
	"\t\t{\"host\": \"git.example.org\", \"action\": \"allow\", \"inspect\": true}\n" +
	"\t]\n}\n"

func TestParseYAMLAndJSONAgree(t *testing.T) {
	want := Spec{
		Version:      1,
		Default:      Block,
		Mode:         Audit,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		Rules: []Rule{
			{ID: "npm", Host: "registry.npmjs.org", Ports: []Port{443}, Action: Allow},
			{ID: "r1", Host: "*.github.com", Ports: []Port{80, 443}, Action: Allow},
			{ID: "r2", Host: "api.example.com", Ports: []Port{80, 8080}, Methods: []string{"GET", "HEAD"}, Path: "/v1/", Action: Allow},
			{ID: "r3", Host: "*", Ports: []Port{AnyPort}, Action: Block},
			{ID: "mock", Host: "mock.test", Ports: []Port{80, 443}, Action: Intercept, Response: &Response{
				Status: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"ok": true}`}},
			{ID: "tls", Host: "*.corp.example", Ports: []Port{443, 8443}, Inspect: true},
			{ID: "r4", Host: "uploads.example.org", Ports: []Port{443}, Methods: []string{"POST"}, Action: Block},
			{ID: "r5", Host: "git.example.org", Ports: []Port{80, 443}, Action: Allow, Inspect: true},
		},
	}
	for _, doc := range []struct{ name, data string }{
		{"policy.yaml", examplePolicyYAML},
		{"policy.json", examplePolicyJSON},
		{"body", examplePolicyJSON}, // JSON recognized by its first character
	} {
		p, err := Parse(doc.name, []byte(doc.data))
		if err != nil {
			t.Fatalf("Parse(%s): %v", doc.name, err)
		}
		if diff := cmp.Diff(want, p.Spec(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("Parse(%s) spec mismatch (-want +got):\n%s", doc.name, diff)
		}
		if p.Mode() != Audit {
			t.Errorf("Parse(%s).Mode() = %q, want audit", doc.name, p.Mode())
		}
		if got := p.AllowPrivate(); len(got) != 2 {
			t.Errorf("Parse(%s).AllowPrivate() = %v, want two networks", doc.name, got)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Parse("p.yaml", []byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Default() != Block || p.Mode() != Enforce || p.Spec().Version != 1 {
		t.Errorf("defaults = %q, %q, version %d; want block, enforce, 1", p.Default(), p.Mode(), p.Spec().Version)
	}
}

func TestAssignIDs(t *testing.T) {
	// Missing ids take the first free rN; explicit ones are kept.
	p, err := Parse("p.yaml", []byte(`rules:
  - {host: a.test, action: allow}
  - {id: r2, host: b.test, action: allow}
  - {host: c.test, action: allow}
  - {host: d.test, action: allow}
`))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range p.Rules() {
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"r1", "r2", "r3", "r4"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // "LINE: substring"
	}{
		{"unknown top-level field", "version: 1\ndefualt: allow\n",
			[]string{`2: policy: unknown field "defualt"; did you mean "default"?`}},
		{"unknown rule field", "rules:\n  - host: a.test\n    action: allow\n    port: [80]\n",
			[]string{`4: rule 1: unknown field "port"; did you mean "ports"?`}},
		{"unknown response field", "rules:\n  - host: a.test\n    action: intercept\n    response:\n      code: 200\n",
			[]string{`5: rule 1: response: unknown field "code"`}},
		{"bad action", "rules:\n  - host: a.test\n    action: deny\n",
			[]string{`3: rule 1: action: "deny" is not an action; write allow, block, intercept or ask`}},
		{"missing action", "rules:\n  - host: a.test\n",
			[]string{`2: rule 1: action: missing`}},
		{"missing host", "rules:\n  - action: allow\n",
			[]string{`2: rule 1: host: "": empty host`}},
		{"bad CIDR", "rules:\n  - host: 10.0.0.0/33\n    action: allow\n",
			[]string{`2: rule 1: host: "10.0.0.0/33": not a valid CIDR`}},
		{"CIDR with host bits", "rules:\n  - host: 10.0.0.1/8\n    action: allow\n",
			[]string{`2: rule 1: host: "10.0.0.1/8": 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?`}},
		{"star dot alone", "rules:\n  - host: \"*.\"\n    action: allow\n",
			[]string{`2: rule 1: host: "*.": '*.' needs a domain after it, e.g. *.example.com`}},
		{"star inside", "rules:\n  - host: \"a.*.com\"\n    action: allow\n",
			[]string{`2: rule 1: host: "a.*.com": '*' may only stand alone`}},
		{"star wildcard on IP", "rules:\n  - host: \"*.10.0.0.1\"\n    action: allow\n",
			[]string{`2: rule 1: host: "*.10.0.0.1": '*.' must be followed by a domain name`}},
		{"star allow needs ports", "rules:\n  - host: \"*\"\n    action: allow\n",
			[]string{`2: rule 1: host: "*" matches every host`}},
		{"alternate IPv4 spelling", "rules:\n  - host: \"127.1\"\n    action: allow\n",
			[]string{`2: rule 1: host: "127.1": a name ending in a number must be a dotted-quad IPv4 address`}},
		{"duplicate ids", "rules:\n  - id: a\n    host: a.test\n    action: allow\n  - id: a\n    host: b.test\n    action: allow\n",
			[]string{`5: rule 2: id "a" is already used on line 2; ids must be unique`}},
		{"reserved id", "rules:\n  - id: default\n    host: a.test\n    action: allow\n",
			[]string{`2: rule 1: id: "default" is reserved`}},
		{"response on allow", "rules:\n  - host: a.test\n    action: allow\n    response: {status: 200}\n",
			[]string{`4: rule 1: response: only intercept rules have a response`}},
		{"intercept without response", "rules:\n  - host: a.test\n    action: intercept\n",
			[]string{`2: rule 1: response: an intercept rule needs a response`}},
		{"intercept bad status", "rules:\n  - host: a.test\n    action: intercept\n    response: {status: 99}\n",
			[]string{`4: rule 1: response: status 99 is not in 200..599`}},
		{"intercept reserved header", "rules:\n  - host: a.test\n    action: intercept\n    response: {headers: {X-Sbx-Decision: allow}}\n",
			[]string{`4: rule 1: response: header "X-Sbx-Decision" is reserved`}},
		{"intercept framing header", "rules:\n  - host: a.test\n    action: intercept\n    response: {headers: {Content-Length: \"5\"}}\n",
			[]string{`4: rule 1: response: header "Content-Length" is set by the gateway`}},
		{"inspect quoted", "rules:\n  - host: a.test\n    inspect: \"true\"\n",
			[]string{`3: rule 1: inspect: want true or false without quotes, got "true"`}},
		{"inspect yes", "rules:\n  - host: a.test\n    inspect: yes\n",
			[]string{`3: rule 1: inspect: want true or false without quotes, got "yes"`}},
		{"inspect number", "rules:\n  - host: a.test\n    action: allow\n    inspect: 1\n",
			[]string{`4: rule 1: inspect: want true or false without quotes, got "1"`}},
		{"inspect list", "rules:\n  - host: a.test\n    action: allow\n    inspect: [true]\n",
			[]string{`4: rule 1: inspect: want true or false without quotes, got a list or mapping`}},
		{"inspect typo", "rules:\n  - host: a.test\n    inspcet: true\n",
			[]string{`3: rule 1: unknown field "inspcet"; did you mean "inspect"?`}},
		{"inspect false without action", "rules:\n  - host: a.test\n    inspect: false\n",
			[]string{`2: rule 1: action: missing; write action: allow, block, intercept or ask (or inspect: true alone`}},
		{"inspect-only with methods", "rules:\n  - host: a.test\n    inspect: true\n    methods: [GET]\n",
			[]string{`4: rule 1: methods: an inspect-only rule (inspect: true, no action) decides nothing, so it takes no methods; add an action`}},
		{"inspect-only with path", "rules:\n  - host: a.test\n    inspect: true\n    path: /v1/\n",
			[]string{`4: rule 1: path: an inspect-only rule (inspect: true, no action) decides nothing, so it takes no path`}},
		{"inspect-only with response", "rules:\n  - host: a.test\n    inspect: true\n    response: {status: 204}\n",
			[]string{`4: rule 1: response: an inspect-only rule (inspect: true, no action) decides nothing, so it has no response; write action: intercept`}},
		{"llm with a status", "rules:\n  - host: a.test\n    action: intercept\n    response: {llm: agent.yaml, status: 200}\n",
			[]string{`4: rule 1: response: an llm response is answered by its script, which chooses status, headers and body; remove status, headers and body, or remove llm`}},
		{"llm with a body", "rules:\n  - host: a.test\n    action: intercept\n    response:\n      llm: agent.yaml\n      body: hi\n",
			[]string{`4: rule 1: response: an llm response is answered by its script`}},
		{"llm not a string", "rules:\n  - host: a.test\n    action: intercept\n    response:\n      llm: {turns: []}\n",
			[]string{`5: rule 1: response: llm: want a string, got a list or mapping`}},
		{"llm with a line break", "rules:\n  - host: a.test\n    action: intercept\n    response: {llm: \"a\\nb.yaml\"}\n",
			[]string{`4: rule 1: response: llm: "a\nb.yaml" holds a control character`}},
		{"empty llm", "rules:\n  - host: a.test\n    action: intercept\n    response: {llm: \"\"}\n",
			[]string{`4: rule 1: response: llm: empty; give the script's path`}},
		{"llm on allow", "rules:\n  - host: a.test\n    action: allow\n    response: {llm: agent.yaml}\n",
			[]string{`4: rule 1: response: only intercept rules have a response`}},
		{"inspect-only star without ports", "rules:\n  - host: \"*\"\n    inspect: true\n",
			[]string{`2: rule 1: host: "*" matches every host, so as an inspect-only rule it needs an explicit port list`}},
		{"json inspect string", "{\"rules\": [\n  {\"host\": \"a.test\",\n   \"inspect\": \"true\"}]}",
			[]string{`3: rule 1: inspect: want true or false without quotes, got "true"`}},
		{"json inspect null", "{\"rules\": [{\"host\": \"a.test\", \"action\": \"allow\", \"inspect\": null}]}",
			[]string{`1: rule 1: inspect: want true or false without quotes, got "null"`}},
		{"CONNECT method", "rules:\n  - host: a.test\n    methods: [CONNECT]\n    action: allow\n",
			[]string{`3: rule 1: methods: CONNECT cannot be listed`}},
		{"bad method", "rules:\n  - host: a.test\n    methods: [\"GE T\"]\n    action: allow\n",
			[]string{`3: rule 1: methods: "GE T" is not an HTTP method`}},
		{"relative path", "rules:\n  - host: a.test\n    path: v1/\n    action: allow\n",
			[]string{`3: rule 1: path: "v1/" must start with '/'`}},
		{"path with a space", "rules:\n  - host: a.test\n    path: /a b\n    action: allow\n",
			[]string{`3: rule 1: path: "/a b" holds a space or control character; write it percent-encoded (%20)`}},
		{"bad port", "rules:\n  - host: a.test\n    ports: [0, 65536, http]\n    action: allow\n",
			[]string{`3: rule 1: ports: "0" is not a port`, `3: rule 1: ports: "65536" is not a port`, `3: rule 1: ports: "http" is not a port`}},
		{"quoted port", "rules:\n  - host: a.test\n    ports: [\"443\"]\n    action: allow\n",
			[]string{`3: rule 1: ports: "443" is not a port`}},
		{"star port with others", "rules:\n  - host: a.test\n    ports: [\"*\", 443]\n    action: allow\n",
			[]string{`3: rule 1: ports: "*" already means every port`}},
		{"empty ports", "rules:\n  - host: a.test\n    ports: []\n    action: allow\n",
			[]string{`3: rule 1: ports: empty list`}},
		{"bad default", "default: intercept\n",
			[]string{`1: default: "intercept" is not a default action; write allow, block or ask`}},
		{"bad mode", "mode: permissive\n",
			[]string{`1: mode: "permissive" is not a mode; write enforce or audit`}},
		{"bad version", "version: 2\n",
			[]string{`1: version: version 2 is not supported; write version: 1`}},
		{"version as string", "version: \"one\"\n",
			[]string{`1: version: want a whole number`}},
		{"allow_private address", "allow_private: [10.0.0.1]\n",
			[]string{`1: allow_private: "10.0.0.1" is an address; write a CIDR such as 10.0.0.1/32`}},
		{"allow_private bad", "allow_private: [10.0.0.0/8, nonsense]\n",
			[]string{`1: allow_private: "nonsense" is not a CIDR`}},
		{"allow_private host bits", "allow_private:\n  - 10.1.0.0/8\n",
			[]string{`2: allow_private: 10.1.0.0/8 has host bits set; did you mean 10.0.0.0/8?`}},
		{"rules not a list", "rules: {host: a.test}\n",
			[]string{`1: rules: want a list`}},
		{"rule not a mapping", "rules:\n  - a.test\n",
			[]string{`2: rule 1 must be a mapping`}},
		{"duplicate key", "default: allow\ndefault: block\n",
			[]string{`2: policy: field "default" given twice (first on line 1)`}},
		{"yaml alias", "x: &a 1\n",
			[]string{`1: policy: unknown field "x"`}},
		{"alias value", "default: &d allow\nmode: *d\n",
			[]string{`2: policy: YAML aliases are not supported`}},
		{"bad YAML", "rules:\n  - host: [\n",
			[]string{`not valid YAML`}},
		{"two documents", "default: allow\n---\ndefault: block\n",
			[]string{`more than one YAML document`}},
		{"empty", "  \n", []string{`empty document`}},
		{"not a mapping", "- a\n- b\n", []string{`1: policy must be a mapping`}},
		{"several errors, in order", "rules:\n  - host: \"*.\"\n    action: deny\n  - host: a.test\n    action: allow\n    bogus: 1\n",
			[]string{`2: rule 1: host`, `3: rule 1: action`, `6: rule 2: unknown field "bogus"`}},
		// JSON keeps its lines too.
		{"json unknown field", "{\n  \"rules\": [\n    {\"host\": \"a.test\",\n     \"action\": \"allow\",\n     \"port\": 80}\n  ]\n}\n",
			[]string{`5: rule 1: unknown field "port"`}},
		{"json bad action", "{\"rules\": [\n  {\"host\": \"a.test\",\n   \"action\": \"deny\"}]}",
			[]string{`3: rule 1: action: "deny" is not an action`}},
		{"json syntax", "{\n  \"rules\": [\n    {\"host\": \"a.test\",,}\n  ]\n}\n",
			[]string{`3: not valid JSON`}},
		{"json truncated", "{\n  \"rules\": [\n", []string{`not valid JSON`}},
		{"json trailing data", "{\"default\": \"allow\"}\n{}", []string{`2: not valid JSON: data after the end`}},
		{"json duplicate key", "{\"default\": \"allow\",\n \"default\": \"block\"}",
			[]string{`2: policy: field "default" given twice (first on line 1)`}},
		{"json deep", `{"rules": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}", []string{`nested too deeply`}},
		{"json port float", "{\"rules\": [{\"host\": \"a.test\", \"ports\": [44.3], \"action\": \"allow\"}]}",
			[]string{`1: rule 1: ports: "44.3" is not a port`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse succeeded, want errors %q", tt.want)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %T %v is not an ErrorList", err, err)
			}
			if len(list) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(list), len(tt.want), err)
			}
			for i, want := range tt.want {
				got := list[i].Error()
				if !strings.HasPrefix(got, "p.yaml:") {
					t.Errorf("error %q does not start with the file name", got)
				}
				if line, msg, ok := strings.Cut(want, ": "); ok && isDigits(line) {
					if !strings.HasPrefix(got, "p.yaml:"+line+": ") || !strings.Contains(got, msg) {
						t.Errorf("error %d = %q, want line %s and %q", i, got, line, msg)
					}
				} else if !strings.Contains(got, want) {
					t.Errorf("error %d = %q, want it to contain %q", i, got, want)
				}
			}
			if !errors.Is(err, ErrInvalidPolicy) && !errors.Is(err, ErrInvalidRule) {
				t.Errorf("error does not wrap ErrInvalidPolicy or ErrInvalidRule: %v", err)
			}
		})
	}
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(examplePolicyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(good); err != nil {
		t.Errorf("ParseFile(good) = %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n\"rules\": [{\"host\": \"*.\", \"action\": \"allow\"}]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+":2: rule 1: host") {
		t.Errorf("ParseFile(bad) = %v, want %s:2: rule 1: host ...", err, bad)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ParseFile(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestDecodeRule(t *testing.T) {
	r, err := DecodeRule("body", []byte(`{"id": "gh", "host": "API.github.com", "ports": [443], "action": "allow"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "gh" || r.Host != "API.github.com" || r.Action != Allow {
		t.Errorf("DecodeRule = %+v", r)
	}
	if _, err := DecodeRule("body", []byte(`{"host": "a.test", "action": "allow", "position": 0}`)); err == nil || !strings.Contains(err.Error(), `unknown field "position"`) {
		t.Errorf("DecodeRule with unknown field = %v, want unknown field error", err)
	}
}

func TestCompileErrorsNameTheRule(t *testing.T) {
	_, err := Compile(Spec{Rules: []Rule{
		{ID: "ok", Host: "a.test", Action: Allow},
		{ID: "bad", Host: "*.", Action: Allow},
		{ID: "ok", Host: "b.test", Action: Allow},
	}})
	if err == nil {
		t.Fatal("Compile succeeded, want errors")
	}
	for _, want := range []string{`rule 2 (bad): host: "*.": '*.' needs a domain`, `rule 3: id "ok" is already used by rule 1`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Compile error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, ErrInvalidRule) {
		t.Errorf("Compile error does not wrap ErrInvalidRule")
	}
}

func TestCompileDoesNotModifyItsInput(t *testing.T) {
	spec := Spec{Rules: []Rule{{Host: "EXAMPLE.com", Methods: []string{"get"}, Action: Allow}}}
	if _, err := Compile(spec); err != nil {
		t.Fatal(err)
	}
	if r := spec.Rules[0]; r.Host != "EXAMPLE.com" || r.ID != "" || r.Ports != nil || r.Methods[0] != "get" {
		t.Errorf("Compile modified its input: %+v", r)
	}
}

func TestSpecRoundTrip(t *testing.T) {
	p, err := Parse("p.yaml", []byte(examplePolicyYAML))
	if err != nil {
		t.Fatal(err)
	}
	q, err := Compile(p.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p.Spec(), q.Spec(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Compile(p.Spec()) differs (-p +q):\n%s", diff)
	}
}
