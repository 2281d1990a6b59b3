package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestFaultInspectedExpectContinueTeardown: an inspected POST with
// Expect: 100-continue whose body the client sends at once, answered 502
// because the upstream fails, then the gateway's Close while the client
// keeps its connection open. net/http drains the body the handler left,
// which starts a background read of the client that outlives the
// connection's end; the gateway gave the client's read buffer back to its
// pool at that end, and the read went on through it: a nil pointer that
// crashed the gateway, or a buffer shared with the next client. Run with
// -race: the race detector sees it even when the timing spares the crash.
func TestFaultInspectedExpectContinueTeardown(t *testing.T) {
	upstreams := []struct {
		name  string
		start func(t *testing.T) (netpolicy.Port, *x509.CertPool)
	}{
		{"hangs up", func(t *testing.T) (netpolicy.Port, *x509.CertPool) {
			up := tcpServer(t, func(c net.Conn) { c.Close() }) // its TLS handshake fails
			return netpolicy.Port(up.Addr().(*net.TCPAddr).Port), x509.NewCertPool()
		}},
		{"answers 502", func(t *testing.T) (netpolicy.Port, *x509.CertPool) {
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
			}))
			up.EnableHTTP2 = true
			up.StartTLS()
			t.Cleanup(up.Close)
			pool := x509.NewCertPool()
			pool.AddCert(up.Certificate())
			return portOf(t, up), pool
		}},
	}
	for _, tc := range upstreams {
		t.Run(tc.name, func(t *testing.T) {
			port, roots := tc.start(t)
			ca, err := NewCA("test", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rule := netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port}, Inspect: true, Action: netpolicy.Allow}
			g := startGatewayWith(t, loopbackPolicy(netpolicy.Block, rule), map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
				c.CA, c.UpstreamRoots = ca, roots
			})
			target := "example.com:" + strconv.Itoa(int(port))
			// Several clients, each on a connection of its own that it
			// keeps open: the crash needed the background read to lose
			// its race with the connection's end.
			for range 8 {
				conn, _ := connectRaw(t, g.addr, target)
				client := tls.Client(conn, &tls.Config{ServerName: "example.com", RootCAs: caTestPool(t, ca), NextProtos: []string{"http/1.1"}})
				fmt.Fprintf(client, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello", target)
				br := bufio.NewReader(client)
				for {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusContinue {
						continue
					}
					if resp.StatusCode != http.StatusBadGateway {
						t.Fatalf("got %d, want %d", resp.StatusCode, http.StatusBadGateway)
					}
					break
				}
			}
			// The clients keep their connections open while the gateway
			// closes.
			g.srv.Close()
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// faultRecords waits for the close records whose error says the gateway
// panicked, and returns them.
func faultRecords(t *testing.T, g *testGateway, want int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []map[string]any
		for _, r := range g.records(t) {
			if e, _ := r["error"].(string); r["event"] == decisionlog.EventClose && strings.HasPrefix(e, "gateway error: panic: ") {
				got = append(got, r)
			}
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFaultPanicServingOneConnection: a panic while serving one client
// connection (a proxy connection, a request in an inspected tunnel) is
// recovered: the gateway logs it with its stack, records it on that
// connection's close record without the stack, closes that connection,
// and serves the next one as before.
func TestFaultPanicServingOneConnection(t *testing.T) {
	up := echoUpstream(t)
	t.Run("proxy connection", func(t *testing.T) {
		var logs syncBuffer
		// Set before the gateway starts, and reset after it closed
		// (cleanups run last first).
		var calls atomic.Int32
		connHook = func(net.Conn) {
			if calls.Add(1) == 1 {
				panic("injected fault")
			}
		}
		t.Cleanup(func() { connHook = nil })
		g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, func(c *serverConfig) {
			c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
		})

		conn, br := dialRaw(t, g.addr)
		fmt.Fprintf(conn, "GET %s/ HTTP/1.1\r\nHost: %s\r\n\r\n", up.URL, up.Listener.Addr())
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("the connection that panicked: got a byte, want it closed")
		}
		conn2, br2 := dialRaw(t, g.addr)
		if status, _ := proxyGet(t, conn2, br2, up); status != http.StatusOK {
			t.Errorf("the next connection: got status %d, want 200", status)
		}
		checkFault(t, g, &logs, "injected fault", 1)
	})
	t.Run("inspected request", func(t *testing.T) {
		var logs syncBuffer
		var dials atomic.Int32
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		g, port, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow}, func(c *serverConfig) {
			c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
			dial := (&net.Dialer{}).DialContext
			c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) == 1 {
					panic("injected dial fault")
				}
				return dial(ctx, network, addr)
			}
		})
		proxy, _ := url.Parse("http://" + g.addr)
		tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		target := "https://example.com:" + strconv.Itoa(int(port)) + "/"
		if resp, err := client.Get(target); err == nil {
			resp.Body.Close()
			t.Errorf("the request that panicked: got status %d, want its connection closed", resp.StatusCode)
		}
		resp, err := client.Get(target)
		if err != nil {
			t.Fatalf("the next request: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the next request: got status %d, want 200", resp.StatusCode)
		}
		// The request's close record and its tunnel's.
		checkFault(t, g, &logs, "injected dial fault", 2)
	})
}

// checkFault checks that the gateway logged a panic of value with its
// stack, and wrote it in want close records without the stack.
func checkFault(t *testing.T, g *testGateway, logs *syncBuffer, value string, want int) {
	t.Helper()
	recs := faultRecords(t, g, want)
	if len(recs) != want {
		t.Fatalf("got %d close records with a panic, want %d: %v", len(recs), want, g.records(t))
	}
	for _, r := range recs {
		if e := r["error"].(string); e != "gateway error: panic: "+value {
			t.Errorf("got error %q, want %q (and no stack)", e, "gateway error: panic: "+value)
		}
		if r["client"] == "" || r["id"] == "" {
			t.Errorf("got a record without its client or id: %v", r)
		}
	}
	l := logs.String()
	if !strings.Contains(l, "panic="+strconv.Quote(value)) && !strings.Contains(l, "panic=\""+value+"\"") {
		t.Errorf("the gateway's log does not name the panic %q:\n%s", value, l)
	}
	if !strings.Contains(l, "stack=") || !strings.Contains(l, "fault_test.go") {
		t.Errorf("the gateway's log has no stack down to the panic:\n%s", l)
	}
}
