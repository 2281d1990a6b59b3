package netpolicy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeAsk(t *testing.T) {
	tests := []struct {
		name        string
		doc         string
		wantDefault Action
		wantTimeout time.Duration
		wantAction  Action // of the first rule, when there is one
	}{
		{"default ask", "version: 1\ndefault: ask\n", Ask, 0, ""},
		{"ask rule", "version: 1\nrules:\n  - host: example.com\n    action: ask\n", Block, 0, Ask},
		{"ask timeout", "version: 1\ndefault: ask\nask_timeout: 90s\n", Ask, 90 * time.Second, ""},
		{"ask timeout minutes", "version: 1\nask_timeout: 2m\nrules:\n  - host: '*'\n    ports: [443]\n    action: ask\n", Block, 2 * time.Minute, Ask},
		{"json", `{"version": 1, "default": "ask", "ask_timeout": "5s"}`, Ask, 5 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := p.Default(); got != tt.wantDefault {
				t.Errorf("Default: got %q, want %q", got, tt.wantDefault)
			}
			if got := p.AskTimeout(); got != tt.wantTimeout {
				t.Errorf("AskTimeout: got %v, want %v", got, tt.wantTimeout)
			}
			if tt.wantAction != "" {
				if got := p.Rules()[0].Action; got != tt.wantAction {
					t.Errorf("rule action: got %q, want %q", got, tt.wantAction)
				}
			}
			if !p.Asks() {
				t.Errorf("Asks: got false, want true")
			}
			// The spec goes through JSON (the management API) and back.
			data, err := json.Marshal(p.Spec())
			if err != nil {
				t.Fatal(err)
			}
			q, err := Parse("p.json", data)
			if err != nil {
				t.Fatalf("Parse of the spec's JSON %s: %v", data, err)
			}
			if q.AskTimeout() != p.AskTimeout() || q.Default() != p.Default() {
				t.Errorf("after JSON: got timeout %v default %q, want %v %q", q.AskTimeout(), q.Default(), p.AskTimeout(), p.Default())
			}
		})
	}
}

func TestDecodeAskErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      string
		sentinel  error
	}{
		{"timeout not a duration", "version: 1\nask_timeout: soon\n", `2: ask_timeout "soon" is not a duration; write e.g. 60s or 2m`, ErrInvalidPolicy},
		{"timeout a number", "version: 1\nask_timeout: 60\n", `2: ask_timeout: 60 has no unit; write e.g. 60s`, ErrInvalidPolicy},
		{"timeout too short", "version: 1\nask_timeout: 10ms\n", "2: ask_timeout 10ms is outside 1s..1h0m0s; write e.g. 60s", ErrInvalidPolicy},
		{"timeout too long", "version: 1\nask_timeout: 2h\n", "2: ask_timeout 2h0m0s is outside 1s..1h0m0s; write e.g. 60s", ErrInvalidPolicy},
		{"ask with methods", "version: 1\nrules:\n  - host: example.com\n    methods: [GET]\n    action: ask\n",
			"4: rule 1: methods: an ask rule asks about a host and port, not single requests; remove methods", ErrInvalidRule},
		{"ask with path", "version: 1\nrules:\n  - host: example.com\n    path: /x\n    action: ask\n",
			"4: rule 1: path: an ask rule asks about a host and port, not single requests; remove path", ErrInvalidRule},
		{"ask with response", "version: 1\nrules:\n  - host: example.com\n    action: ask\n    response: {body: x}\n",
			"5: rule 1: response: only intercept rules have a response", ErrInvalidRule},
		{"ask any host without ports", "version: 1\nrules:\n  - host: '*'\n    action: ask\n",
			`3: rule 1: host: "*" matches every host, so with action ask it needs an explicit port list`, ErrInvalidRule},
		{"unknown field", "version: 1\nask_timout: 60s\n", `ask_timout`, ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse: got no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: got %q, want it to hold %q", err, tt.want)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("Parse: got %v, want an error wrapping %v", err, tt.sentinel)
			}
		})
	}
	// Compile checks a spec made in code the same way.
	if _, err := Compile(Spec{AskTimeout: Duration(time.Millisecond)}); err == nil || !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("Compile with ask_timeout 1ms: got %v, want an ErrInvalidPolicy", err)
	}
}

func TestDecideAsk(t *testing.T) {
	askDefault := mustCompile(t, Ask,
		Rule{Host: "allowed.example", Action: Allow},
		Rule{Host: "blocked.example", Ports: []Port{AnyPort}, Action: Block},
	)
	askRule := mustCompile(t, Block,
		Rule{ID: "q", Host: "*.example.org", Action: Ask},
		Rule{Host: "10.0.0.0/8", Ports: []Port{AnyPort}, Action: Ask},
	)
	tests := []struct {
		name     string
		p        *Policy
		t        Target
		want     Action
		wantRule string
	}{
		{"default asks", askDefault, connect("unlisted.example", 443), Ask, RuleDefault},
		{"allow rule still allows", askDefault, connect("allowed.example", 443), Allow, "r1"},
		{"block rule still blocks", askDefault, connect("blocked.example", 443), Block, "r2"},
		{"ask rule asks", askRule, connect("a.example.org", 443), Ask, "q"},
		{"ask rule asks over http", askRule, get("a.example.org", 80, "/x"), Ask, "q"},
		{"other host blocked", askRule, connect("example.net", 443), Block, RuleDefault},
		{"invalid target never asks", askDefault, connect("bad host", 443), Block, RuleInvalid},
		{"port 0 never asks", askDefault, connect("unlisted.example", 0), Block, RuleInvalid},
		// The address guard refuses these before anything is asked.
		{"loopback literal never asks", askDefault, connect("127.0.0.1", 443), Block, RuleGuard},
		{"metadata literal never asks", askDefault, get("169.254.169.254", 80, "/"), Block, RuleGuard},
		{"private literal under an ask rule never asks", askRule, connect("10.1.2.3", 22), Block, RuleGuard},
		{"public literal asks", askDefault, connect("8.8.8.8", 443), Ask, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.p.Verdict(tt.t)
			if d.Action != tt.want || d.Rule != tt.wantRule {
				t.Errorf("Verdict(%+v): got %s by %s (%s), want %s by %s", tt.t, d.Action, d.Rule, d.Reason, tt.want, tt.wantRule)
			}
		})
	}
	if d := askDefault.Decide(connect("x.example", 443)); d.Reason != "no rule matched; the default is ask" {
		t.Errorf("default ask reason: got %q, want %q", d.Reason, "no rule matched; the default is ask")
	}
	if d := askRule.Decide(connect("a.example.org", 443)); d.Reason != "rule q: ask *.example.org" {
		t.Errorf("ask rule reason: got %q, want %q", d.Reason, "rule q: ask *.example.org")
	}
}

// A name whose connections are asked about resolves, so that the question
// happens on the connection; and an inspected tunnel to it opens, so that
// the request in it is asked about.
func TestDecideHostAndTunnelAsk(t *testing.T) {
	askDefault := mustCompile(t, Ask, Rule{Host: "blocked.example", Ports: []Port{AnyPort}, Action: Block})
	askRule := mustCompile(t, Block, Rule{ID: "q", Host: "asked.example", Action: Ask, Inspect: true})
	tests := []struct {
		name string
		p    *Policy
		host string
		want Action
	}{
		{"default ask", askDefault, "unlisted.example", Allow},
		{"blocked on every port", askDefault, "blocked.example", Block},
		{"ask rule", askRule, "asked.example", Allow},
		{"not asked", askRule, "other.example", Block},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.DecideHost(tt.host); got.Action != tt.want {
				t.Errorf("DecideHost(%q): got %s (%s), want %s", tt.host, got.Action, got.Reason, tt.want)
			}
			if got := tt.p.DecideTunnel(connect(tt.host, 443)); got.Action != tt.want {
				t.Errorf("DecideTunnel(%q): got %s (%s), want %s", tt.host, got.Action, got.Reason, tt.want)
			}
		})
	}
	if !askRule.Inspects("asked.example", 443) {
		t.Fatalf("Inspects(asked.example, 443): got false, want true")
	}
	if d := askRule.Verdict(get("asked.example", 443, "/")); d.Action != Ask {
		t.Errorf("the request in the inspected tunnel: got %s, want ask", d.Action)
	}
}

func TestCheckSaysAsk(t *testing.T) {
	p := mustCompile(t, Ask)
	for _, url := range []string{"https://example.com/", "http://example.com/", "example.com:22"} {
		c, err := p.Check(Request{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		if c.Decision.Action != Ask {
			t.Errorf("Check(%s): got %s, want ask", url, c.Decision.Action)
		}
	}
	c, err := p.Check(Request{URL: "https://127.0.0.1/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Decision.Action != Block || c.Decision.Rule != RuleGuard {
		t.Errorf("Check(https://127.0.0.1/): got %s by %s, want block by guard", c.Decision.Action, c.Decision.Rule)
	}
}
