package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// agreePolicy is the policy of the agreement tests: nothing is allowed,
// so that the gateway resolves and dials nothing, and the verdicts differ
// by rule (default, b1) or are invalid.
var agreePolicy = netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
	{ID: "b1", Host: "blocked.test", Action: netpolicy.Block},
	{ID: "b2", Host: "2001:db8::1", Action: netpolicy.Block},
}}

// agreementGateway is a gateway under agreePolicy and a way to ask it
// what it decides for a request line.
type agreementGateway struct {
	g    *testGateway
	next uint64 // the seq after which to read the next request's record
}

func startAgreementGateway(tb testing.TB) *agreementGateway {
	return &agreementGateway{g: startGatewayWith(tb, agreePolicy, nil, nil)}
}

// decide sends the request line method target to the gateway and returns
// the decision it logged for it.
func (a *agreementGateway) decide(t *testing.T, method, target string) netpolicy.Decision {
	t.Helper()
	conn, err := net.Dial("tcp", a.g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", method, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, target, err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines, next := a.g.ring.Since(a.next, 100)
		a.next = next
		for _, l := range lines {
			var r decisionlog.Record
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatalf("record %q: %v", l, err)
			}
			if r.Event == decisionlog.EventDecision {
				return netpolicy.Decision{Action: netpolicy.Action(r.Action), Rule: r.Rule, Reason: r.Reason}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: no decision record", method, target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkAgrees fails when sbx policy check (netpolicy's Check) and the
// gateway decide differently for the request a client sends for arg. A
// request line the gateway's head reader refuses (whitespace, a control
// or non-ASCII in the target: no client sends one) is refused by rule
// invalid by both, for reasons of their own.
func checkAgrees(t *testing.T, a *agreementGateway, p *netpolicy.Policy, arg string) {
	t.Helper()
	req := netpolicy.Request{URL: arg}
	method, target, err := req.RequestLine()
	if err != nil {
		return // no request: a usage error of check's
	}
	c, err := p.Check(req)
	if err != nil {
		t.Fatalf("Check(%q): %v, but RequestLine gave %s %s", arg, err, method, target)
	}
	got := a.decide(t, method, target)
	if strings.IndexFunc(target, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		if got.Action != netpolicy.Block || got.Rule != netpolicy.RuleInvalid || c.Decision.Action != netpolicy.Block || c.Decision.Rule != netpolicy.RuleInvalid {
			t.Errorf("%q (%s %q): check says %s by rule %s, the gateway %s by rule %s; want both a block by rule invalid",
				arg, method, target, c.Decision.Action, c.Decision.Rule, got.Action, got.Rule)
		}
		return
	}
	want := c.Decision
	want.Response = nil
	if got != want {
		t.Errorf("%q (%s %s): check says %+v, the gateway %+v", arg, method, target, want, got)
	}
}

// TestCheckAgreesWithGateway: for each target, what sbx policy check
// decides (netpolicy's Check) is what the gateway logs for the request a
// client sends for it: the same action, rule and reason, the refusals of
// the gateway's target parser included.
func TestCheckAgreesWithGateway(t *testing.T) {
	a := startAgreementGateway(t)
	p, err := netpolicy.Compile(agreePolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{
		"example.com", "example.com:8443", "blocked.test", "BLOCKED.test.", "blocked.test..", "http://blocked.test/x",
		"http://Blocked.TEST.:8080/a%2Fb?q=1", "https://blocked.test/", "ws://blocked.test/", "wss://blocked.test:8443/",
		// userinfo
		"user@blocked.test", "user:pw@blocked.test:443", "http://user@blocked.test/", "https://user:pw@blocked.test/",
		// IPv6 with and without brackets
		"[2001:db8::1]:443", "[2001:db8::1]", "2001:db8::1", "http://[2001:db8::1]/", "http://2001:db8::1/",
		"https://[2001:db8::1]:8443/", "[fe80::1%25eth0]:443", "[::ffff:127.0.0.1]:80", "[blocked.test]:443",
		// ports
		"blocked.test:0", "blocked.test:65535", "blocked.test:65536", "blocked.test:0443", "blocked.test:",
		"http://blocked.test:0/", "http://blocked.test:65536/", "https://blocked.test:0/", "blocked.test:443:443",
		// trailing dots and empty labels
		"blocked.test.:443", "http://blocked.test./", "blocked..test", ".blocked.test",
		// percent-escapes
		"bl%6fcked.test", "http://bl%6fcked.test/", "http://blocked.test/%2e%2e/x", "http://blocked.test/a%zz",
		// IDNA and odd characters
		"b\u00fccher.test", "xn--bcher-kva.test", "http://b\u00fccher.test/", "http://xn--bcher-kva.test/",
		"http://blocked.test/<x>", "under_score.test", "exa mple.test", "http://blocked.test/a b",
		// IPv4 spellings
		"127.1", "0x7f.0.0.1", "2130706433:80", "http://127.0.0.1/", "http://010.1.2.3/",
		// empty and odd hosts
		":443", "https:///x", "http:///x", "[::1", "[::1]443", "http://blocked.test#frag",
	} {
		checkAgrees(t, a, p, arg)
	}
}

// FuzzCheckTargetAgreesWithGateway: for any target, what sbx policy check
// decides is what the gateway logs for the request a client sends for it.
func FuzzCheckTargetAgreesWithGateway(f *testing.F) {
	for _, s := range []string{
		"blocked.test", "user@blocked.test", "[2001:db8::1]", "2001:db8::1", "blocked.test:65536",
		"http://bl%6fcked.test/", "https://user:pw@[::1]:0/", "b\u00fccher.test", "http://blocked.test./a%2F",
		"wss://blocked.test", "[fe80::1%25eth0]:443", "127.1",
	} {
		f.Add(s)
	}
	a := startAgreementGateway(f)
	p, err := netpolicy.Compile(agreePolicy)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		if strings.ContainsAny(arg, "\r\n") {
			return // a second header line, not a target
		}
		checkAgrees(t, a, p, arg)
	})
}
