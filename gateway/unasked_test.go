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

// An upstream that answers a request twice (a buggy server, or one a
// sandbox desynchronised with a request hidden in a body) must not have
// its second answer taken for the answer to the next request sent on the
// kept connection, which may be another client's, for another host on
// the same address. The extra answer comes with the first, or after it.
func TestUpstreamUnaskedAnswerNotReused(t *testing.T) {
	for _, later := range []bool{false, true} {
		ln := tcpServer(t, func(c net.Conn) {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				const extra = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"
				if strings.HasPrefix(req.Host, "a.test") {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
					if later {
						time.Sleep(50 * time.Millisecond)
					}
					io.WriteString(c, extra)
					continue
				}
				body := "answer to " + req.Host
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
		})
		port := netpolicy.Port(ln.Addr().(*net.TCPAddr).Port)
		g := startGateway(t, loopbackPolicy(netpolicy.Block,
			netpolicy.Rule{ID: "a", Host: "a.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
			netpolicy.Rule{ID: "b", Host: "b.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
		), map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1"})
		// The same client connection (the upstream connection it holds),
		// then another, after the first left (the pool's).
		for _, fresh := range []bool{false, true} {
			dial := func() (net.Conn, func(string) string) {
				c, err := net.Dial("tcp", g.addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				return c, func(host string) string {
					fmt.Fprintf(c, "GET http://%s:%d/ HTTP/1.1\r\nHost: %s\r\n\r\n", host, port, host)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("GET %s: %v", host, err)
					}
					b, _ := io.ReadAll(resp.Body)
					return string(b)
				}
			}
			c, get := dial()
			if got := get("a.test"); got != "first" {
				t.Fatalf("later %v: a.test answered %q", later, got)
			}
			time.Sleep(100 * time.Millisecond) // the extra answer is in
			if fresh {
				c.Close() // its upstream connection goes to the pool
				time.Sleep(50 * time.Millisecond)
				c, get = dial()
			}
			if got := get("b.test"); !strings.HasPrefix(got, "answer to b.test") {
				t.Errorf("later %v, fresh client %v: b.test answered %q, want its own answer", later, fresh, got)
			}
			c.Close()
		}
	}
}
