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

	"github.com/sbx-dev/sbx/gateway/approval"
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
		{"GET\x1f/x HTTP/1.1\r\n", lineHTTP},                      // Python's str.split whitespace
		{"GET\x85/x HTTP/1.1\r\n", lineHTTP},
		{"GET\xa0/x HTTP/1.1\r\n", lineHTTP},
		{"PROXY TCP4 10.0.0.1 10.0.0.2 1111 80\r\nGET /x HTTP/1.1\r\n", lineHTTP},
		{"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c", lineHTTP}, // PROXY v2

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

		{"\r\n\r\n\x00\r\nQUI", lineMore},
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
			if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "PROXY ") { // an optional PROXY header, as go-proxyproto's default takes one
				continue
			}
			if len(pythonFields(line)) < 2 {
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

// pythonFields splits line as Python's http.server splits a request
// line (decoded as Latin-1, then str.split()).
func pythonFields(line string) []string {
	var fields []string
	start := -1
	for i := 0; i <= len(line); i++ {
		space := i == len(line) || strings.IndexByte(" \t\n\v\f\r\x1c\x1d\x1e\x1f\x85\xa0", line[i]) >= 0
		switch {
		case space && start >= 0:
			fields, start = append(fields, line[start:i]), -1
		case !space && start < 0:
			start = i
		}
	}
	return fields
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
		"GET\x1f/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET\xa0/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"PROXY TCP4 10.0.0.1 10.0.0.2 1111 80\r\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
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
			c := g.dialAt(t, g.fake(t, "git.test", port), "git.test", late)
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
			c := g.dialAt(t, g.fake(t, "api.test", port), "api.test", late)
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

// connectTunnel opens a CONNECT tunnel to target through the gateway at
// proxy and returns it once the gateway answered 200.
func connectTunnel(t *testing.T, proxy, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return c, br
}

// A CONNECT tunnel to an allowed host's plain-HTTP port (rules allow 80
// and 443 by default) carries a request for another host behind the
// same address: it must be decided as the proxy decides a request, its
// Host the CONNECT's, and refused, never relayed for the upstream to
// serve. The tunnel's requests for its own host are decided one by one,
// with their methods and paths, as clients that send plain HTTP through
// CONNECT (undici's ProxyAgent) need.
func TestConnectPlainHTTPDecidedByRequest(t *testing.T) {
	port, served := lenientUpstream(t)
	g := startGateway(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "api.test", Ports: []netpolicy.Port{port}, Action: netpolicy.Allow},
	), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"})
	target := fmt.Sprintf("api.test:%d", port)
	for _, req := range []string{
		"GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"\r\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET\t/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET http://other.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET\x1f/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"PROXY TCP4 10.0.0.1 10.0.0.2 1111 80\r\nGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n",
	} {
		c, br := connectTunnel(t, g.addr, target)
		io.WriteString(c, req)
		if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%q in a CONNECT tunnel to %s: answered %d %q, want it refused", req, target, resp.StatusCode, b)
		}
		c.Close()
	}
	// A byte at a time, past the first-bytes wait: the tunnel is closed.
	c, br := connectTunnel(t, g.addr, target)
	io.WriteString(c, "G")
	time.Sleep(3 * g.srv.limits.FirstBytesTimeout)
	io.WriteString(c, "ET /x HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == http.StatusOK {
		t.Errorf("a trickled request in a CONNECT tunnel was answered %d, want the tunnel closed", resp.StatusCode)
	}
	c.Close()
	if got := served(); len(got) != 0 {
		t.Errorf("the upstream served %q, want nothing", got)
	}
	// The tunnel's host, two requests on one tunnel, each decided.
	c, br = connectTunnel(t, g.addr, target)
	for _, path := range []string{"/a", "/b"} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s in the tunnel: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "served api.test") {
			t.Errorf("GET %s in the tunnel: %d %q, want the upstream's answer", path, resp.StatusCode, b)
		}
		if rec := g.lastDecision(t); rec["kind"] != decisionlog.KindHTTP || rec["path"] != path || rec["method"] != "GET" {
			t.Errorf("GET %s in the tunnel: record %v, want kind http with its method and path", path, rec)
		}
	}
}

// What is not HTTP still goes through a CONNECT tunnel as it came: a
// banner with a word and a space (OpenSSH's), and a protocol where the
// server speaks first, whose greeting is not held back.
func TestConnectRelaysWhatIsNotHTTP(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	greet := tcpServer(t, func(c net.Conn) { defer c.Close(); io.WriteString(c, "220 ready\r\n"); io.Copy(c, c) })
	echoPort := netpolicy.Port(echo.Addr().(*net.TCPAddr).Port)
	greetPort := netpolicy.Port(greet.Addr().(*net.TCPAddr).Port)
	g := startGateway(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "git", Host: "git.test", Ports: []netpolicy.Port{echoPort, greetPort}, Action: netpolicy.Allow},
	), map[string]string{"git.test": "127.0.0.1"})
	c, br := connectTunnel(t, g.addr, fmt.Sprintf("git.test:%d", echoPort))
	const banner = "SSH-2.0-OpenSSH_9.6 FreeBSD-20240104\r\n"
	io.WriteString(c, banner)
	got := make([]byte, len(banner))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != banner {
		t.Errorf("a banner through CONNECT came back as %q, %v", got, err)
	}
	c, br = connectTunnel(t, g.addr, fmt.Sprintf("git.test:%d", greetPort))
	start := time.Now()
	line, err := br.ReadString('\n')
	if err != nil || line != "220 ready\r\n" {
		t.Fatalf("the server's greeting: %q %v", line, err)
	}
	if waited := time.Since(start); waited > g.srv.limits.FirstBytesTimeout {
		t.Errorf("the server's greeting came after %v, held back", waited)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n") // after the server's: relayed as the protocol's
	if line, err := br.ReadString('\n'); err != nil || line != "GET / HTTP/1.1\r\n" {
		t.Errorf("after the greeting: %q %v", line, err)
	}
}

// A CONNECT tunnel to a host whose verdict is ask is asked about once:
// allowed, the plain HTTP it carries is decided request by request, and
// a request whose verdict is the same ask takes the tunnel's answer, not
// a second question.
func TestConnectPlainHTTPAskedOnce(t *testing.T) {
	port, served := lenientUpstream(t)
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Minute)
	g := startGateway(t, spec, map[string]string{"api.test": "127.0.0.1"})
	target := fmt.Sprintf("api.test:%d", port)
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	q := waitQuestion(t, g.srv, "api.test", uint16(port), 1)
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT, allowed: %v %v", resp, err)
	}
	for _, path := range []string{"/a", "/b"} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s in the allowed tunnel: %v (pending questions: %+v)", path, err, g.srv.approvals.List())
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s in the allowed tunnel: %d, want 200", path, resp.StatusCode)
		}
	}
	if n := len(g.approvalRecords(t)); n != 2 { // the question and its answer
		t.Errorf("%d approval records, want the tunnel's question and answer alone", n)
	}
	if got := served(); len(got) != 2 {
		t.Errorf("the upstream served %q, want the two requests", got)
	}
}
