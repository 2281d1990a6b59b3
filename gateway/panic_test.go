package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// panicsCounted returns sbx_gateway_panics_total{where} of m.
func panicsCounted(t *testing.T, m *Metrics, where string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sbx_gateway_panics_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "where" && l.GetValue() == where {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// checkPanicLogged fails unless logs name the panic value with a stack,
// and the ring holds want close records with its error, each naming its
// client and id.
func checkPanicLogged(t *testing.T, logs *syncBuffer, ring *decisionlog.Ring, value string, want int) {
	t.Helper()
	l := logs.String()
	if !strings.Contains(l, `panic="`+value+`"`) || !strings.Contains(l, "stack=") || !strings.Contains(l, "panic_test.go") {
		t.Errorf("the gateway's log does not name the panic %q with its stack:\n%s", value, l)
	}
	var got int
	for _, r := range ringRecords(t, ring) {
		if e, _ := r["error"].(string); r["event"] == decisionlog.EventClose && strings.HasPrefix(e, "gateway error: panic: ") {
			got++
			if e != "gateway error: panic: "+value {
				t.Errorf("close record: got error %q, want %q (and no stack)", e, "gateway error: panic: "+value)
			}
			if r["client"] == "" || r["id"] == "" {
				t.Errorf("close record without its client or id: %v", r)
			}
		}
	}
	if got != want {
		t.Errorf("got %d close records with the panic, want %d", got, want)
	}
}

// TestFaultPanicAnsweringOneDNSQuery: the DNS stub hands the close
// record of a UDP query whose answering panicked to the gateway
// (dnsstub's TestDNSPanicAnsweringOneQuery shows that the stub recovers,
// logs the stack and answers the next queries), which counts the panic as
// dns_udp and writes the record to its log.
func TestFaultPanicAnsweringOneDNSQuery(t *testing.T) {
	st := startDNS(t, stubPolicy(), nil, nil)
	dnsGateway{st.srv}.Panicked(&decisionlog.Record{Event: decisionlog.EventClose, ID: "7", Kind: decisionlog.KindDNS,
		Client: "127.0.0.1:5353", Error: "gateway error: panic: injected query fault"})
	if got := panicsCounted(t, st.srv.Metrics(), "dns_udp"); got != 1 {
		t.Errorf("sbx_gateway_panics_total{where=dns_udp}: got %v, want 1", got)
	}
	var got int
	for _, r := range ringRecords(t, st.ring) {
		if r["event"] == decisionlog.EventClose && r["kind"] == decisionlog.KindDNS && r["error"] == "gateway error: panic: injected query fault" && r["client"] == "127.0.0.1:5353" && r["id"] == "7" {
			got++
		}
	}
	if got != 1 {
		t.Errorf("got %d close records of the panic in the log, want 1", got)
	}
}

// TestFaultPanicRelayingOneTunnel: a panic in the goroutine that copies a
// tunnel's upstream to its client ends that tunnel alone: both its sides
// are closed, the panic is logged with its stack, counted, and named by
// the tunnel's close record, and the next tunnel relays both ways.
// Without the recover the panic ends the process.
func TestFaultPanicRelayingOneTunnel(t *testing.T) {
	var logs syncBuffer
	var calls atomic.Int32
	tunnelCopyHook = func() {
		if calls.Add(1) == 1 {
			panic("injected copy fault")
		}
	}
	// Reset after the gateway closed (cleanups run last first).
	t.Cleanup(func() { tunnelCopyHook = nil })
	echo := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
	})

	conn, br := connectRaw(t, g.addr, echo.Addr().String())
	conn.Write([]byte("ping\n"))
	if line, err := br.ReadString('\n'); err == nil {
		t.Errorf("the tunnel that panicked: got %q, want it closed", line)
	}

	conn2, br2 := connectRaw(t, g.addr, echo.Addr().String())
	conn2.Write([]byte("ping\n"))
	if line, err := br2.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the next tunnel: got %q, %v; want the echo", line, err)
	}
	conn2.Close()
	if got := panicsCounted(t, g.srv.Metrics(), "tunnel"); got != 1 {
		t.Errorf("sbx_gateway_panics_total{where=tunnel}: got %v, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		for _, r := range g.records(t) {
			if e, _ := r["error"].(string); strings.HasPrefix(e, "gateway error: panic: ") {
				n++
			}
		}
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkPanicLogged(t, &logs, g.ring, "injected copy fault", 1)
}

// TestFaultPanicDecidingATunnelGivesItsSlotBack: a panic while a CONNECT
// is decided, after it took one of its client's tunnel slots (here in
// the resolution of its name), ends that connection alone, and gives the
// slot back as the connection ends: the client's next CONNECT, at a cap
// of one tunnel, is let through, not answered 429 for a tunnel that is no
// longer open.
func TestFaultPanicDecidingATunnelGivesItsSlotBack(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(io.Discard, c) })
	_, port, _ := net.SplitHostPort(sink.Addr().String())
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), map[string]string{"ok.test": "127.0.0.1"}, func(c *serverConfig) {
		c.Limits.MaxTunnelsPerClient = 1
		c.Resolver.lookupNetIP = func(context.Context, string, string) ([]netip.Addr, error) {
			panic("injected resolver fault")
		}
	})
	conn, br := dialRaw(t, g.addr)
	fmt.Fprintf(conn, "CONNECT boom.test:%s HTTP/1.1\r\nHost: boom.test\r\n\r\n", port)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err == nil {
		t.Fatalf("CONNECT whose deciding panicked: got %s, want the connection closed", resp.Status)
	}
	conn.Close()
	waitPanics(t, g.srv.Metrics())
	connectRaw(t, g.addr, "ok.test:"+port)
}

// waitPanics waits until m counts a panic of a connection.
func waitPanics(t *testing.T, m *Metrics) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for panicsCounted(t, m, "proxy") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no panic of a connection counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
