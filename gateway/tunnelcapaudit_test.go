package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/audit"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAuditCountsTunnelCapFlood: a sandbox holds its only tunnel (a
// captured connection to held.test) and opens 304 more to evil.test, 300
// CONNECTs and 4 captured connections, all refused by the tunnel cap. The
// gateway folds them into a few records; sbx audit of its log must count
// 304 refused by the tunnel cap, say so, not suggest an allow rule for
// evil.test, and --expect must count 304 attempts. Red on main: the
// report counted one request per record (about a dozen blocked), named
// no cap, and the suggested policy allowed evil.test.
func TestAuditCountsTunnelCapFlood(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"held.test": "127.0.0.1", "evil.test": "127.0.0.1"},
		func(c *serverConfig) { c.Limits.MaxTunnelsPerClient = 1 })
	held := g.dial(t, g.fake(t, "held.test", port))
	io.WriteString(held, "\x00held")
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(held, make([]byte, 5)); err != nil {
		t.Fatalf("the held captured connection was not relayed: %v", err)
	}
	const connects, captured = 300, 4
	evil := fmt.Sprintf("evil.test:%d", port)
	for range connects {
		conn, br := dialRaw(t, g.testGateway.addr)
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", evil, evil)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("CONNECT over the cap: %v %v, want 429", resp, err)
		}
		conn.Close()
	}
	dst := g.fake(t, "evil.test", port)
	for range captured {
		c := g.dial(t, dst)
		io.WriteString(c, "\x00raw")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 8)); err == nil {
			t.Fatalf("a captured connection over the cap was relayed (%d bytes back)", n)
		}
		c.Close()
	}
	const flood = connects + captured
	waitBlocked(t, g.srv, flood)
	g.srv.Close() // writes what is still folded

	lines, _ := g.ring.Since(0, 100000)
	if len(lines) >= flood/2 {
		t.Fatalf("%d records for %d refusals: the gateway did not fold them", len(lines), flood)
	}
	log := bytes.Join(lines, []byte("\n"))
	log = append(log, '\n')
	src := []audit.Source{{Name: "decisions.jsonl", Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(log)), nil }}}
	sum, err := audit.Summarize(context.Background(), src, audit.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	rep := sum.Report()
	if rep.Requests.Blocked != flood {
		t.Errorf("the report counts %d blocked requests, want %d (the log has %d records)", rep.Requests.Blocked, flood, len(lines))
	}
	var row *audit.Target
	for _, tg := range rep.Targets {
		if tg.Host == "evil.test" {
			row = tg
		}
	}
	if row == nil || row.Blocked != flood || row.Tunnels != flood {
		t.Errorf("evil.test's row: %+v, want %d blocked tunnels", row, flood)
	}
	var text strings.Builder
	if err := audit.WriteReport(&text, rep, audit.FormatText); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("the per-client tunnel cap (%s) refused %d tunnels", decisionlog.CapTunnels, flood); !strings.Contains(text.String(), want) {
		t.Errorf("the report does not say %q:\n%s", want, text.String())
	}

	out, err := audit.Suggest(rep, audit.SuggestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := netpolicy.Parse("suggested", out)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Verdict(netpolicy.Target{Host: "evil.test", Port: uint16(port), Method: "CONNECT"}); d.Action != netpolicy.Block || strings.Contains(string(out), `"evil.test"`) {
		t.Errorf("the suggested policy has a rule for evil.test (%s), which only the tunnel cap refused:\n%s", d.Action, out)
	}
	if d := p.Verdict(netpolicy.Target{Host: "held.test", Port: uint16(port), Method: "CONNECT"}); d.Action != netpolicy.Allow {
		t.Errorf("the suggested policy: %s for held.test, which was let through; want allow:\n%s", d.Action, out)
	}
	e, err := audit.Expect(context.Background(), p, "suggested", src, audit.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var attempts uint64
	for _, u := range e.Unexpected {
		if u.Host != "evil.test" {
			t.Errorf("unexpected under the suggested policy: %+v", u)
		}
		attempts += u.Attempts
	}
	if attempts != flood {
		t.Errorf("--expect counts %d attempts at evil.test, want %d", attempts, flood)
	}
}
