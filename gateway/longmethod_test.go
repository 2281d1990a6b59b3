package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// A sandbox that sends requests with long methods (any token up to the
// head's limit) must not make each of their records as long: the path is
// logged cut, and the method must not be the way around that cut. The
// request is refused as invalid, and its record holds the method cut.
func TestLongMethodRefused(t *testing.T) {
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
	for _, n := range []int{netpolicy.MaxMethodLen + 1, 60000} {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%s http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", strings.Repeat("A", n))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a %d-byte method: %v", n, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		rec := g.lastDecision(t)
		if resp.StatusCode != http.StatusForbidden || rec["rule"] != netpolicy.RuleInvalid || !strings.Contains(string(b), "at most 32 bytes") {
			t.Errorf("a %d-byte method: %d %q, rule %v, want 403 by rule invalid saying the method is too long", n, resp.StatusCode, b, rec["rule"])
		}
		if m, _ := rec["method"].(string); len(m) > netpolicy.MaxMethodLen+len("...") {
			t.Errorf("a %d-byte method: the record holds a %d-byte method, want it cut to %d", n, len(m), netpolicy.MaxMethodLen)
		}
	}
	// The longest method taken is decided as any other.
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s http://api.test:1/ HTTP/1.1\r\nHost: api.test\r\n\r\n", strings.Repeat("A", netpolicy.MaxMethodLen))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusBadRequest || g.lastDecision(t)["rule"] == netpolicy.RuleInvalid {
		t.Errorf("a %d-byte method: %d, want it decided", netpolicy.MaxMethodLen, resp.StatusCode)
	}
}

// A method longer than MaxMethodLen is not one a policy can name, and
// the record of a target that has one (inside an inspected tunnel,
// where net/http reads the method) holds it cut.
func TestLongMethodInPolicyAndRecord(t *testing.T) {
	long := strings.Repeat("A", netpolicy.MaxMethodLen+1)
	if netpolicy.ValidMethod(long) || !netpolicy.ValidMethod(long[1:]) {
		t.Errorf("ValidMethod: want %d bytes taken and %d refused", netpolicy.MaxMethodLen, len(long))
	}
	spec := netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{{Host: "api.test", Methods: []string{long}, Action: netpolicy.Allow}}}
	if _, err := netpolicy.Compile(spec); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a rule with a %d-byte method compiled: %v", len(long), err)
	}
	p, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Allow})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Verdict(netpolicy.Target{Host: "api.test", Port: 80, Method: long}); d.Action != netpolicy.Block || d.Rule != netpolicy.RuleInvalid {
		t.Errorf("a %d-byte method was decided %v, want invalid", len(long), d)
	}
	s := &Server{}
	c := &conn{}
	rec := s.newRecord(c, "https", strings.Repeat("A", 60000), 443)
	if len(rec.Method) > netpolicy.MaxMethodLen+len("...") {
		t.Errorf("the record holds a %d-byte method", len(rec.Method))
	}
}
