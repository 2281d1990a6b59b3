package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// TestLiveSinkSaysHowToAllow: the live line of a refusal by the address
// guard ends with the --allow-private flags that exempt the addresses it
// refused (a CONNECT client never shows the 403's body that says so), and
// the close of a tunnel whose client rejected the sbx CA gets a line that
// names the host and the fix.
func TestLiveSinkSaysHowToAllow(t *testing.T) {
	guard := func(kind, method, host string, port int, addrs string) decisionlog.Record {
		first, _, _ := strings.Cut(addrs, ",")
		return decisionlog.Record{Event: decisionlog.EventDecision, Kind: kind, Method: method, Host: host, Port: port,
			Action: "block", Enforced: true, Rule: "guard", Reason: decisionlog.ReasonGuard + first + " is documentation (TEST-NET-1)",
			Status: 403, Addrs: addrs}
	}
	closed := func(errText string) decisionlog.Record {
		return decisionlog.Record{Event: decisionlog.EventClose, Kind: decisionlog.KindConnect, Method: "CONNECT", Host: "api.example.com",
			Port: 443, Action: "allow", Enforced: true, Rule: "r1", Reason: "inspected: each request is decided", Status: 200,
			PID: 12, Comm: "node", Error: errText}
	}
	fence := guard("connect", "CONNECT", "gw.test", 3128, "")
	fence.Reason = decisionlog.ReasonGuard + "10.213.0.1:3128 is the gateway itself"
	bypass := decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindBypass, Host: "192.0.2.10", Port: 53000,
		Action: "block", Enforced: true, Rule: "guard", Reason: "UDP to 192.0.2.10:53000 was refused: only TCP and DNS leave the sandbox", Proto: "udp", Count: 1}
	tests := []struct {
		name string
		rec  decisionlog.Record
		want string // the line, "" for none
	}{
		{"CONNECT to a name the guard refused", guard("connect", "CONNECT", "registry.npmjs.org", 443, "192.0.2.1"),
			"sbx: block     CONNECT registry.npmjs.org:443  (address guard: 192.0.2.1 is documentation (TEST-NET-1); " +
				"if it is meant to be there (a mirror, a lab network), run with --allow-private 192.0.2.1/32 (allow_private in a policy file))\n"},
		{"several addresses, IPv6", guard("http", "GET", "mirror.lab", 80, "192.0.2.1,2001:db8::7"),
			"sbx: block     GET mirror.lab:80  (address guard: 192.0.2.1 is documentation (TEST-NET-1); " +
				"if it is meant to be there (a mirror, a lab network), run with --allow-private 192.0.2.1/32 --allow-private 2001:db8::7/128 (allow_private in a policy file))\n"},
		{"the fence: no flag lets it through", fence,
			"sbx: block     CONNECT gw.test:3128  (address guard: 10.213.0.1:3128 is the gateway itself)\n"},
		{"a packet around the gateway", bypass,
			"sbx: block     bypass UDP 192.0.2.10:53000  (guard: UDP to 192.0.2.10:53000 was refused: only TCP and DNS leave the sandbox)\n"},
		{"the client rejected the sbx CA", closed(decisionlog.ErrorCARejected + ": remote error: tls: unknown certificate authority"),
			"sbx: ca-reject CONNECT api.example.com:443 by node[12]  (the client does not trust the sbx CA, so this inspected connection failed: " +
				"point it at the CA (sbx sets SSL_CERT_FILE=/run/sbx-ca/bundle.pem, NODE_EXTRA_CA_CERTS=/run/sbx-ca/ca.pem and the like; " +
				"a client that reads none of them, or pins certificates, needs its own setting), or stop inspecting api.example.com " +
				"(no --inspect or --intercept for it, no inspect, methods, path or intercept in its rules))\n"},
		{"another close", closed("upstream reset"), ""},
		{"a close without an error", closed(""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			s := &liveSink{w: &out}
			if err := s.WriteRecord(1, tt.rec.AppendJSON(nil)); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("got  %q\nwant %q", out.String(), tt.want)
			}
		})
	}
}

// TestLiveSinkLevels: each --show level prints its records' lines and no
// others; a mock LLM's fixed answers to requests that are not for a model
// get no line at any level, its errors for requests no turn was for get
// one at blocks.
func TestLiveSinkLevels(t *testing.T) {
	decision := func(action, method, host, path, rule, reason string, enforced bool) decisionlog.Record {
		return decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindHTTPS, Method: method, Host: host, Port: 443, Path: path,
			Action: action, Enforced: enforced, Rule: rule, Reason: reason, Status: 200}
	}
	records := []struct {
		rec  decisionlog.Record
		line string
	}{
		{decision("allow", "CONNECT", "registry.npmjs.org", "", "r1", "rule r1: allow registry.npmjs.org", true),
			"sbx: allow     CONNECT registry.npmjs.org:443  (rule r1: allow registry.npmjs.org)\n"},
		{decision("block", "GET", "evil.test", "/x", "default", "no rule matched; the default is block", true),
			"sbx: block     GET evil.test:443/x  (no rule matched; the default is block)\n"},
		{decision("block", "GET", "audited.test", "/", "default", "no rule matched; the default is block", false),
			"sbx: block     GET audited.test:443/  (no rule matched; the default is block; audit mode let it through)\n"},
		{decision("intercept", "POST", "api.anthropic.com", "/v1/messages", "mock-llm", decisionlog.ReasonMockLLM+"turn 1 (s.yaml:2): reply", true),
			"sbx: intercept POST api.anthropic.com:443/v1/messages  (mock-llm: mock LLM: turn 1 (s.yaml:2): reply)\n"},
		{decision("intercept", "POST", "api.anthropic.com", "/v1/messages", "mock-llm", decisionlog.ReasonMockUnmatched+"the script is used up; request 2 of the mock's journal says more (sbx mock requests --host api.anthropic.com)", true),
			"sbx: intercept POST api.anthropic.com:443/v1/messages  (mock-llm: mock LLM: unmatched: the script is used up; request 2 of the mock's journal says more (sbx mock requests --host api.anthropic.com))\n"},
		{decision("intercept", "GET", "api.anthropic.com", "/api/claude_cli_feature_flags", "mock-llm", decisionlog.ReasonMockDefault+"not a model endpoint: 404", true), ""},
		{decision("intercept", "POST", "api.anthropic.com", "/api/event_logging/batch", "model", decisionlog.ReasonMockDefault+"not a model endpoint: 200 {}", true), ""},
		{decisionlog.Record{Event: decisionlog.EventClose, Kind: decisionlog.KindConnect, Method: "CONNECT", Host: "api.example.com", Port: 443,
			Action: "allow", Enforced: true, Rule: "r1", Reason: "inspected: each request is decided", Error: decisionlog.ErrorCARejected + ": bad certificate"},
			"sbx: ca-reject CONNECT api.example.com:443  (" + caRejectedHint("api.example.com") + ")\n"},
	}
	levels := []struct {
		show  showLevel
		shown []int // indexes of records that get their line
	}{
		{showAll, []int{0, 1, 2, 3, 4, 7}},
		{showBlocks, []int{1, 2, 4, 7}},
		{showNone, nil},
	}
	for _, l := range levels {
		t.Run(showLevels[l.show], func(t *testing.T) {
			var out, want strings.Builder
			s := &liveSink{w: &out, show: l.show}
			for i, r := range records {
				if err := s.WriteRecord(uint64(i+1), r.rec.AppendJSON(nil)); err != nil {
					t.Fatal(err)
				}
				if slices.Contains(l.shown, i) {
					want.WriteString(r.line)
				}
			}
			if out.String() != want.String() {
				t.Errorf("got\n%s\nwant\n%s", out.String(), want.String())
			}
		})
	}
}

// TestParseShow: --show takes its three levels and nothing else; the
// zero level, a liveSink's default, is all.
func TestParseShow(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    showLevel
		wantErr bool
	}{
		{"all", showAll, false}, {"blocks", showBlocks, false}, {"none", showNone, false},
		{"", 0, true}, {"ALL", 0, true}, {"block", 0, true},
	} {
		got, err := parseShow(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseShow(%q): got %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if (liveSink{}).show != showAll {
		t.Errorf("got a liveSink's zero show %v, want showAll", (liveSink{}).show)
	}
}

// TestRunShowFlags: sbx run's live lines are all by default, --show's
// level when given, and none with --quiet, which is --show none and keeps
// working in scripts; --quiet with --show none is not a conflict.
func TestRunShowFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want showLevel
	}{
		{nil, showAll},
		{[]string{"--show", "all"}, showAll},
		{[]string{"--show", "blocks"}, showBlocks},
		{[]string{"--show", "none"}, showNone},
		{[]string{"--quiet"}, showNone},
		{[]string{"--quiet", "--show", "none"}, showNone},
	} {
		name := "sbx run " + strings.Join(tt.args, " ")
		var o runOptions
		cmd := &cobra.Command{Use: "run"}
		o.addFlags(cmd.Flags())
		if err := cmd.Flags().Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if err := o.checkValues(cmd); err != nil {
			t.Errorf("%s: got %v, want no error", name, err)
		}
		if got := o.showLevel(); got != tt.want {
			t.Errorf("%s: got level %v, want %v", name, got, tt.want)
		}
		if got := o.silent(); got != (tt.want == showNone) {
			t.Errorf("%s: got silent %v, want %v", name, got, tt.want == showNone)
		}
	}
}
