package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/netpolicy"
)

// handoffGateway serves a gateway's transparent path as sbx kube's
// gateway pod does: connections handed over by a capture shim, each
// naming its original destination in a handoff header.
type handoffGateway struct {
	*testGateway
	addr string // the capture listener
}

func startHandoff(t *testing.T, spec netpolicy.Spec, static map[string]string) *handoffGateway {
	t.Helper()
	g := &handoffGateway{testGateway: startGatewayWith(t, spec, static, nil)}
	g.srv.limits.FirstBytesTimeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- g.srv.ServeTransparent(context.Background(), handoff.Listener(ln), handoff.Dst) }()
	t.Cleanup(func() {
		g.srv.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeTransparent: %v", err)
		}
	})
	return g
}

// dial connects to the capture listener and writes the header naming dst
// followed by first, in one write, as a shim whose client spoke at once.
func (g *handoffGateway) dial(t *testing.T, dst netip.AddrPort, first string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b bytes.Buffer
	if err := handoff.Write(&b, netip.MustParseAddrPort(c.LocalAddr().String()), dst); err != nil {
		t.Fatal(err)
	}
	b.WriteString(first)
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// TestHandoffTransparent: a handed-over connection is decided by the
// destination its header names, and relayed with the bytes that came
// with the header; one without a valid header is refused and logged.
func TestHandoffTransparent(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startHandoff(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "echo", Host: "127.0.0.1", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), nil)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))

	c := g.dial(t, dst, "\x00\x01binary")
	buf := make([]byte, 8)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "\x00\x01binary" {
		t.Fatalf("echo through the handoff: got %q, %v; want the bytes written with the header", buf, err)
	}
	if rec := g.testGatewayDecision(t, "127.0.0.1"); rec["action"] != "allow" || rec["rule"] != "echo" {
		t.Errorf("record: got %v, want allow by echo", rec)
	}

	// The same destination, blocked by its port.
	c = g.dial(t, netip.AddrPortFrom(dst.Addr(), 1), "x")
	if n, err := c.Read(buf); err == nil {
		t.Errorf("a blocked destination was relayed: %q", buf[:n])
	}

	for _, tc := range []struct{ name, header string }{
		{"no header", "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"bad destination", "PROXY TCP4 127.0.0.1 300.0.0.1 1 80\r\n"},
		{"closed before the header's end", "PROXY TCP4 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(g.records(t))
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.header)
			c.(*net.TCPConn).CloseWrite()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if n, err := c.Read(buf); err == nil {
				t.Errorf("got %q, want the connection refused", buf[:n])
			}
			var rec map[string]any
			for deadline := time.Now().Add(5 * time.Second); rec == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, r := range g.records(t)[before:] {
					if r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindTransparent {
						rec = r
					}
				}
			}
			if rec == nil || rec["action"] != "block" || rec["rule"] != netpolicy.RuleInvalid || !strings.Contains(rec["reason"].(string), "handoff header") {
				t.Errorf("record: got %v, want a block by rule %s naming the handoff header", rec, netpolicy.RuleInvalid)
			}
		})
	}
}

// testGatewayDecision waits for the decision record of a transparent
// connection to host.
func (g *handoffGateway) testGatewayDecision(t *testing.T, host string) map[string]any {
	t.Helper()
	return (&transparentGateway{testGateway: g.testGateway}).waitDecision(t, host)
}

// TestHandoffHalfCloseAndReset: a handed-over connection's ends pass
// through as on any captured connection: the upstream's half-close is the
// client's (which can still send), and the upstream's reset is the
// client's reset.
func TestHandoffHalfCloseAndReset(t *testing.T) {
	got := make(chan string, 1)
	halfClose := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		io.WriteString(c, "hello")
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		got <- string(b)
	})
	reset := tcpServer(t, func(c net.Conn) {
		c.Read(make([]byte, 1))
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	hcPort := netpolicy.Port(halfClose.Addr().(*net.TCPAddr).Port)
	rsPort := netpolicy.Port(reset.Addr().(*net.TCPAddr).Port)
	g := startHandoff(t, loopbackPolicy(netpolicy.Allow), nil)
	lo := netip.MustParseAddr("127.0.0.1")

	t.Run("half-close", func(t *testing.T) {
		c := g.dial(t, netip.AddrPortFrom(lo, uint16(hcPort)), "")
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "hello" {
			t.Fatalf("from the upstream: got %q, %v; want hello and its end", b, err)
		}
		io.WriteString(c, "after")
		c.CloseWrite()
		select {
		case s := <-got:
			if s != "after" {
				t.Errorf("the upstream read %q after its half-close, want %q: the client's side was closed with it", s, "after")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream read nothing to its end")
		}
	})
	t.Run("reset", func(t *testing.T) {
		c := g.dial(t, netip.AddrPortFrom(lo, uint16(rsPort)), "x")
		_, err := io.ReadAll(c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the client read to %v, want a reset (ECONNRESET) as the upstream's", err)
		}
	})
}
