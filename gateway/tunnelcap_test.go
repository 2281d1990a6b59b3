package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// tunnelCapCount sums the count fields of the decisions in ring that the
// tunnels cap refused, and fails on such a record that does not name the
// cap, the client, its status (429 for a CONNECT, 0 for a captured
// connection, closed unanswered) and a count.
func tunnelCapCount(t *testing.T, ring *decisionlog.Ring, kind string) (sum uint64, records int) {
	t.Helper()
	status := 429.0
	if kind == decisionlog.KindTransparent {
		status = 0
	}
	for _, r := range ringRecords(t, ring) {
		if r["event"] != decisionlog.EventDecision || r[decisionlog.FieldCap] != decisionlog.CapTunnels {
			continue
		}
		if got, _ := r["status"].(float64); got != status {
			t.Fatalf("record of a refusal by the tunnels cap: %v; want status %v", r, status)
		}
		n, ok := r[decisionlog.FieldCount].(float64)
		reason, _ := r["reason"].(string)
		client, _ := r["client"].(string)
		if !ok || n < 1 || r[decisionlog.FieldCap] != decisionlog.CapTunnels || r["kind"] != kind ||
			r["action"] != "block" || r["rule"] != "guard" || !strings.HasPrefix(client, "127.0.0.1:") ||
			!strings.HasPrefix(reason, "client 127.0.0.1 has 1 tunnels open, the limit per client") {
			t.Fatalf("record of a refusal by the tunnels cap: %v; want kind %s, block by guard, cap %s, the client and a count of at least 1",
				r, kind, decisionlog.CapTunnels)
		}
		sum += uint64(n)
		records++
	}
	return sum, records
}

// checkTunnelFlood refuses flood tunnels with refuse (each by the cap,
// one client holding its only tunnel already) and checks that the log
// counts each, in a bounded number of records written while the gateway
// runs, and that Close writes what is still folded.
func checkTunnelFlood(t *testing.T, g *testGateway, kind string, flood int, refuse func()) {
	t.Helper()
	start := time.Now()
	for range flood {
		refuse()
	}
	waitBlocked(t, g.srv, uint64(flood))
	deadline := time.Now().Add(3 * refusalEvery)
	for {
		sum, _ := tunnelCapCount(t, g.ring, kind)
		if sum == uint64(flood) {
			break
		}
		if sum > uint64(flood) || time.Now().After(deadline) {
			t.Fatalf("%d tunnels refused by the cap, the log counts %d", flood, sum)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The burst, one a second, and one a second of folded refusals.
	_, records := tunnelCapCount(t, g.ring, kind)
	if max := refusalBurst + 2*int(time.Since(start)/refusalEvery+1); records > max {
		t.Errorf("%d refusals in %v made %d records, want at most %d", flood, time.Since(start), records, max)
	}
	const more = 5
	for range more {
		refuse()
	}
	waitBlocked(t, g.srv, uint64(flood+more))
	g.srv.Close()
	if sum, _ := tunnelCapCount(t, g.ring, kind); sum != uint64(flood+more) {
		t.Errorf("after Close: %d tunnels refused by the cap, the log counts %d", flood+more, sum)
	}
}

// TestEveryTunnelOverTheCapIsCounted: a client holding its only tunnel
// sends 304 CONNECTs at once. Each is answered 429, and the log counts
// every one in a few records that name the client, the cap and the
// count. Red before: a record per refusal, without a count or the cap
// (a flood of the log itself).
func TestEveryTunnelOverTheCapIsCounted(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(io.Discard, c) })
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) { c.Limits.MaxTunnelsPerClient = 1 })
	connectRaw(t, g.addr, sink.Addr().String()) // held to the end
	// A refusal closes its connection: each CONNECT has one of its own.
	checkTunnelFlood(t, g, decisionlog.KindConnect, 304, func() {
		conn, br := dialRaw(t, g.addr)
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", sink.Addr())
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("CONNECT over the cap: %v %v, want 429", resp, err)
		}
		conn.Close()
	})
}

// TestTunnelCapHoldsForCapturedRaw: the tunnels cap holds for captured
// connections that speak neither HTTP nor TLS, whether the client speaks
// first or waits for the server, and it is one cap with the CONNECT
// tunnels': over it, a captured connection is closed without reaching its
// upstream and a CONNECT is answered 429.
func TestTunnelCapHoldsForCapturedRaw(t *testing.T) {
	var reached atomic.Int32
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); reached.Add(1); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"db.test": "127.0.0.1"},
		func(c *serverConfig) { c.Limits.MaxTunnelsPerClient = 2 })
	dst := g.fake(t, "db.test", port)
	echoes := func(c net.Conn, first string) bool {
		if first != "" {
			io.WriteString(c, first)
		}
		io.WriteString(c, "ping")
		buf := make([]byte, len(first)+4)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadFull(c, buf)
		return err == nil && string(buf) == first+"ping"
	}
	// Held: one whose client speaks first, one that waits for the server.
	if !echoes(g.dial(t, dst), "\x00raw") {
		t.Fatal("the first captured connection was not relayed")
	}
	quiet := g.dial(t, dst)
	time.Sleep(300 * time.Millisecond) // past FirstBytesTimeout: decided as a protocol whose server speaks first
	if !echoes(quiet, "") {
		t.Fatal("the second captured connection was not relayed")
	}
	for _, first := range []string{"\x00raw", ""} {
		c := g.dial(t, dst)
		if first == "" {
			time.Sleep(300 * time.Millisecond)
		}
		if echoes(c, first) {
			t.Errorf("a captured connection over the tunnels cap (first bytes %q) was relayed", first)
		}
	}
	if n := reached.Load(); n != 2 {
		t.Errorf("the upstream was reached %d times, want 2", n)
	}
	conn, br := dialRaw(t, g.testGateway.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", echo.Addr())
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("CONNECT with two captured tunnels open: %v %v, want 429", resp, err)
	}
}

// TestEveryCapturedTunnelOverTheCapIsCounted: a client holding its only
// tunnel opens 200 captured raw connections at once: each is closed
// unrelayed, and the log counts every one as TestEveryTunnelOverTheCapIsCounted
// says.
func TestEveryCapturedTunnelOverTheCapIsCounted(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"db.test": "127.0.0.1"},
		func(c *serverConfig) { c.Limits.MaxTunnelsPerClient = 1 })
	dst := g.fake(t, "db.test", port)
	held := g.dial(t, dst)
	io.WriteString(held, "\x00held")
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(held, make([]byte, 5)); err != nil {
		t.Fatalf("the held captured connection was not relayed: %v", err)
	}
	checkTunnelFlood(t, g.testGateway, decisionlog.KindTransparent, 200, func() {
		c := g.dial(t, dst)
		io.WriteString(c, "\x00raw")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 8)); err == nil {
			t.Fatalf("a captured connection over the cap was relayed (%d bytes back)", n)
		}
		c.Close()
	})
}
