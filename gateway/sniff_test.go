package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

func TestSniffRequestLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want lineVerdict
	}{
		{"GET / HTTP/1.1\r\n", lineHTTP},
		{"GET /x", lineHTTP},
		{"\r\nGET /x HTTP/1.1\r\n", lineHTTP},
		{"\nGET /x HTTP/1.1\r\n", lineHTTP},
		{" \t GET /x HTTP/1.1\r\n", lineHTTP},
		{"GET\t/x HTTP/1.1\r\n", lineHTTP},
		{"GET\v/x HTTP/1.1\r\n", lineHTTP},
		{"GET\f/x HTTP/1.1\r\n", lineHTTP},
		{"GET\r/x HTTP/1.1\r\n", lineHTTP}, // a bare CR
		{"GET  \t /x", lineHTTP},
		{"OPTIONS * HTTP/1.1\r\n", lineHTTP},
		{"GET http://other.test/ HTTP/1.1\r\n", lineHTTP},
		{"GET HTTPS://other.test/ HTTP/1.1\r\n", lineHTTP},
		{"CONNECT other.test:443 HTTP/1.1\r\n", lineHTTP},
		{"CONNECT other.test:443 http/1.1\r\n", lineHTTP},
		{"CONNECT other.test:443\tHTTP/1.0\r\n", lineHTTP},
		{strings.Repeat("X", 100) + " /x HTTP/1.1\r\n", lineHTTP}, // any method's length
		{"GET /x\r\nHost: other.test\r\n\r\n", lineHTTP},          // HTTP/0.9 form, and headers for a lenient server

		{"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", lineOther},
		{"SSH-2.0-OpenSSH_9.6 FreeBSD-20240104\r\n", lineOther},
		{"SSH-2.0-Go\r\n", lineOther},
		{"*1\r\n$4\r\nPING\r\n", lineOther},
		{"SET key value\r\n", lineOther},
		{"get key\r\n", lineOther},
		{"PING\r\n", lineOther},
		{"PING\n", lineOther},
		{"EHLO example.test\r\n", lineOther},
		{"GET \r\n", lineOther},
		{"GET key HTTPS\r\n", lineOther},
		{"GET key xHTTP/1.1\r\n", lineOther},
		{"\x00\x00\x00\x08\x04\xd2\x16/", lineOther}, // Postgres' SSLRequest
		{"AMQP\x00\x00\x09\x01", lineOther},
		{"GET:/x HTTP/1.1\r\n", lineOther},

		{"", lineMore},
		{"\r\n", lineMore},
		{"GET", lineMore},
		{"GET ", lineMore},
		{"GET \t", lineMore},
		{"GET\r", lineMore},
		{"GET htt", lineMore},
		{"GET key", lineMore},
		{"GET key ", lineMore},
		{"GET key HTT", lineMore},
		{"GET key\r", lineMore},
	} {
		if got := sniffRequestLine([]byte(tc.in)); got != tc.want {
			t.Errorf("sniffRequestLine(%q) = %d, want %d", tc.in, got, tc.want)
		}
		// A verdict, once given, stays as bytes come: every prefix is
		// undecided or says the same.
		for n := range len(tc.in) {
			if got := sniffRequestLine([]byte(tc.in[:n])); got != lineMore && got != tc.want {
				t.Errorf("sniffRequestLine(%q), a prefix of %q, = %d, want %d or more bytes", tc.in[:n], tc.in, got, tc.want)
			}
		}
	}
}

// lenientUpstream stands in for a server that reads request lines as
// leniently as RFC 9112 lets it (as nginx, Apache, Node and Tomcat skip
// empty lines before one, and Python's http.server and Tomcat split one
// on any whitespace), as the servers behind a CDN do. It answers
// "served HOST" and reports the Hosts it served.
func lenientUpstream(t *testing.T) (netpolicy.Port, func() []string) {
	var mu sync.Mutex
	var hosts []string
	ln := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		tp := textproto.NewReader(bufio.NewReader(c))
		for {
			line, err := tp.ReadLine()
			if err != nil {
				return
			}
			if strings.TrimSpace(line) == "" {
				continue
			}
			if len(strings.Fields(line)) < 2 {
				return
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil {
				return
			}
			mu.Lock()
			hosts = append(hosts, h.Get("Host"))
			mu.Unlock()
			body := "served " + h.Get("Host")
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	return netpolicy.Port(ln.Addr().(*net.TCPAddr).Port), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), hosts...) }
}

// A captured connection to an allowed host carries a request for
// another host, in a request line the gateway's parser refuses but a
// lenient server takes: on time, it must be read as HTTP and refused,
// never relayed raw for the upstream to serve (domain fronting behind
// the allowed host's address).
func TestTransparentLenientRequestLines(t *testing.T) {
	port, served := lenientUpstream(t)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"})
	for _, req := range []string{
		"GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"\r\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET\t/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		" GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		strings.Repeat("G", 40) + " /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
	} {
		c := g.dial(t, g.fake(t, "api.test", port))
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%q: answered %d %q, want it refused", req, resp.StatusCode, b)
			}
		}
		c.Close()
	}
	if got := served(); len(got) != 0 {
		t.Errorf("the upstream served %q, want nothing", got)
	}
	// The same line for the connection's own host goes through.
	c := g.dial(t, g.fake(t, "api.test", port))
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a request for api.test: %v %v, want 200", resp, err)
	}
}

// Protocols whose first line starts as a request line's might (a word
// and a space) are relayed as they were, on time and late: an OpenSSH
// client's banner (whose version with its "p1" has 21 bytes before the
// space), Redis' and memcached's inline commands.
func TestTransparentRelaysWordsAndSpaces(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	port := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "git", Host: "git.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"git.test": "127.0.0.1"})
	for _, late := range []bool{false, true} {
		for _, line := range []string{
			"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n",
			"SSH-2.0-OpenSSH_9.6 FreeBSD-20240104\r\n",
			"SET key value\r\n",
			"get key\r\n",
		} {
			dst := g.fake(t, "git.test", port)
			var c net.Conn
			if late {
				c = g.dialLate(t, dst, "git.test")
			} else {
				c = g.dial(t, dst)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, line)
			got := make([]byte, len(line))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != line {
				t.Errorf("late %v: %q came back as %q, %v; want it relayed", late, line, got, err)
			}
			c.Close()
			if rec := waitClose(t, g.testGateway, decisionlog.KindTransparent, port); rec["action"] != "allow" {
				t.Errorf("late %v: %q: close record %v, want it relayed", late, line, rec)
			}
		}
	}
}

// The same lines late: after the first-bytes wait (the connection is then
// dialed, and its late bytes decided as if on time), or a byte at a
// time across it (the relay watches them). None may reach the upstream.
func TestTransparentLenientRequestLinesLate(t *testing.T) {
	port, served := lenientUpstream(t)
	g := startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"})
	wait := 3 * g.srv.limits.FirstBytesTimeout
	for _, tc := range []struct{ first, rest string }{
		{"", "\r\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"", "GET\t/x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"\r\n", "GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"GET", "\t/x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{"GET ", "/x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
		{strings.Repeat("G", 40), " /x HTTP/1.1\r\nHost: other.test\r\n\r\n"},
	} {
		for _, late := range []bool{false, true} {
			dst := g.fake(t, "api.test", port)
			var c net.Conn
			if late {
				c = g.dialLate(t, dst, "api.test")
			} else {
				c = g.dial(t, dst)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.first != "" {
				io.WriteString(c, tc.first)
				time.Sleep(wait)
			}
			io.WriteString(c, tc.rest)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusOK {
				t.Errorf("late %v: %q then %q: answered %d, want it refused", late, tc.first, tc.rest, resp.StatusCode)
			}
			c.Close()
		}
	}
	if got := served(); len(got) != 0 {
		t.Errorf("the upstream served %q, want nothing", got)
	}
}
