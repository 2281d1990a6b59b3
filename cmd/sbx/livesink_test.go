package main

import (
	"strings"
	"testing"

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
