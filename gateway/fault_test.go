package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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
			g := startGatewayWith(t, loopbackPolicy(netpolicy.Block, rule), map[string]string{"example.com": "127.0.0.1"}, func(c *Config) {
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
