package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// waitRecord waits up to 5 s for a record that ok accepts, and returns it.
func (g *testGateway) waitRecord(t *testing.T, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range g.records(t) {
			if ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s in %v", what, g.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A held request whose client hangs up ends its wait at once, on every
// path that holds a client's connection: its question no longer counts
// it, its decision is a block saying the request ended, and an allow
// that comes later sends nothing upstream.
func TestAskClientGoneEndsTheHold(t *testing.T) {
	g := startTransparent(t, askSpec(time.Minute), map[string]string{"api.test": "127.0.0.1"})
	for _, tc := range []struct {
		name string
		kind string
		// send opens a connection as the client does and sends what it
		// sends before it waits for the gateway.
		send func(t *testing.T, port uint16) net.Conn
	}{
		{"proxy", decisionlog.KindHTTP, func(t *testing.T, port uint16) net.Conn {
			c := dialProxy(t, g.testGateway.addr) // g.addr is the transparent listener
			fmt.Fprintf(c, "GET http://api.test:%d/x HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port, port)
			return c
		}},
		{"proxy with a body", decisionlog.KindHTTP, func(t *testing.T, port uint16) net.Conn {
			c := dialProxy(t, g.testGateway.addr) // g.addr is the transparent listener
			fmt.Fprintf(c, "POST http://api.test:%d/x HTTP/1.1\r\nHost: api.test:%d\r\nContent-Length: 5\r\n\r\nhello", port, port)
			return c
		}},
		{"connect", decisionlog.KindConnect, func(t *testing.T, port uint16) net.Conn {
			c := dialProxy(t, g.testGateway.addr) // g.addr is the transparent listener
			fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port, port)
			return c
		}},
		{"captured http", decisionlog.KindTransparent, func(t *testing.T, port uint16) net.Conn {
			c := g.dial(t, g.fake(t, "api.test", netpolicy.Port(port)))
			fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port)
			return c
		}},
		{"captured tls", decisionlog.KindTransparent, func(t *testing.T, port uint16) net.Conn {
			c := g.dial(t, g.fake(t, "api.test", netpolicy.Port(port)))
			// The handshake sends its ClientHello and waits; it fails when
			// the test closes c.
			go tls.Client(c, &tls.Config{ServerName: "api.test"}).Handshake()
			return c
		}},
		{"captured tcp", decisionlog.KindTransparent, func(t *testing.T, port uint16) net.Conn {
			return g.dial(t, g.fake(t, "api.test", netpolicy.Port(port))) // a server-speaks-first protocol: nothing sent
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var accepted atomic.Int32
			up := tcpServer(t, func(c net.Conn) {
				accepted.Add(1)
				defer c.Close()
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nup")
			})
			port := uint16(up.Addr().(*net.TCPAddr).Port)
			c := tc.send(t, port)
			q := waitQuestion(t, g.srv, "api.test", port, 1)
			if q.Kind != tc.kind {
				t.Errorf("question kind: got %s, want %s", q.Kind, tc.kind)
			}
			// The client leaves while it waits: an end of its stream at
			// once would be a half-close that came with the request.
			time.Sleep(halfCloseGrace + 100*time.Millisecond)
			gone := time.Now()
			c.Close()
			for waiting := 1; waiting != 0; {
				waiting = -1
				for _, a := range g.srv.approvals.List() {
					if a.ID == q.ID {
						waiting = a.Waiting
					}
				}
				if time.Since(gone) > 3*time.Second {
					t.Errorf("the question still counts %d waiting %v after the client hung up", waiting, time.Since(gone))
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
				t.Fatal(err)
			}
			dec := g.waitRecord(t, "the held request's decision", func(r map[string]any) bool {
				return r["event"] == decisionlog.EventDecision && r["port"] == float64(port)
			})
			if dec["action"] != "block" || !strings.HasSuffix(dec["reason"].(string), "the request ended before an answer came") {
				t.Errorf("decision: got %v, want a block: the request ended before an answer came", dec)
			}
			time.Sleep(100 * time.Millisecond)
			if n := accepted.Load(); n != 0 {
				t.Errorf("upstream connections after the allow: got %d, want 0 (the client was gone)", n)
			}
		})
	}
}

// askSpec is a policy that asks about everything on loopback, with
// timeout.
func askSpec(timeout time.Duration) netpolicy.Spec {
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(timeout)
	return spec
}

// dialProxy opens a connection to the proxy at addr, closed when the test
// ends.
func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// Watching for the client to hang up takes none of its bytes: requests
// pipelined behind a held one, a held request's body, and the first
// bytes of a held CONNECT tunnel all reach the upstream once it is
// allowed, and the connection serves on.
func TestAskHoldKeepsTheClientsBytes(t *testing.T) {
	echo := echoUpstream(t)
	port := uint16(portOf(t, echo))
	raw := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	rawPort := uint16(raw.Addr().(*net.TCPAddr).Port)
	g := startGatewayWith(t, askSpec(time.Minute), map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"}, nil)
	answer := func(port uint16, scope approval.Scope) {
		t.Helper()
		q := waitQuestion(t, g.srv, "api.test", port, 1)
		time.Sleep(50 * time.Millisecond) // the watch is reading by now
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: scope, By: approval.ByCLI}); err != nil {
			t.Fatal(err)
		}
	}
	type echoed struct{ Method, Path, Body string }
	readEcho := func(t *testing.T, br *bufio.Reader) echoed {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e echoed
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer: %d %v", resp.StatusCode, err)
		}
		return e
	}

	t.Run("pipelined", func(t *testing.T) {
		c := dialProxy(t, g.addr)
		fmt.Fprintf(c, "GET http://api.test:%[1]d/a HTTP/1.1\r\nHost: api.test:%[1]d\r\n\r\nGET http://api.test:%[1]d/a/b HTTP/1.1\r\nHost: api.test:%[1]d\r\n\r\n", port)
		answer(port, approval.ScopeSession) // the second request is then allowed by the session's rule (GET, path /a)
		br := bufio.NewReader(c)
		for _, want := range []string{"/a", "/a/b"} {
			if e := readEcho(t, br); e.Path != want {
				t.Errorf("pipelined: got %s, want %s", e.Path, want)
			}
		}
		fmt.Fprintf(c, "GET http://api.test:%[1]d/a/c HTTP/1.1\r\nHost: api.test:%[1]d\r\n\r\n", port)
		if e := readEcho(t, br); e.Path != "/a/c" {
			t.Errorf("after the hold: got %s, want /a/c", e.Path)
		}
	})
	t.Run("body", func(t *testing.T) {
		c := dialProxy(t, g.addr)
		fmt.Fprintf(c, "POST http://other.test:%[1]d/p HTTP/1.1\r\nHost: other.test:%[1]d\r\nContent-Length: 11\r\n\r\nhello", port)
		q := waitQuestion(t, g.srv, "other.test", port, 1)
		time.Sleep(50 * time.Millisecond)
		io.WriteString(c, " world") // the rest of the body comes during the hold
		time.Sleep(50 * time.Millisecond)
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
			t.Fatal(err)
		}
		if e := readEcho(t, bufio.NewReader(c)); e.Method != "POST" || e.Body != "hello world" {
			t.Errorf("body: got %+v, want POST hello world", e)
		}
	})
	t.Run("a body larger than the read buffer", func(t *testing.T) {
		// The watch stops when the buffer is full, without ending the
		// wait: the request is still held, and gets its answer.
		body := strings.Repeat("x", 20000)
		c := dialProxy(t, g.addr)
		fmt.Fprintf(c, "POST http://other.test:%[1]d/big HTTP/1.1\r\nHost: other.test:%[1]d\r\nContent-Length: %[2]d\r\n\r\n%[3]s", port, len(body), body)
		q := waitQuestion(t, g.srv, "other.test", port, 1)
		time.Sleep(100 * time.Millisecond)
		if p := g.srv.approvals.List(); len(p) != 1 || p[0].Waiting != 1 {
			t.Fatalf("pending: got %+v, want %s still with its request", p, q.ID)
		}
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
			t.Fatal(err)
		}
		if e := readEcho(t, bufio.NewReader(c)); e.Body != body {
			t.Errorf("large body: got %d bytes, want %d", len(e.Body), len(body))
		}
	})
	t.Run("half-closed with the request", func(t *testing.T) {
		// printf ... | nc: the client shuts down its sending side as soon
		// as it has sent, and waits for the answer.
		c := dialProxy(t, g.addr).(*net.TCPConn)
		fmt.Fprintf(c, "GET http://other.test:%[1]d/half HTTP/1.1\r\nHost: other.test:%[1]d\r\nConnection: close\r\n\r\n", port)
		c.CloseWrite()
		q := waitQuestion(t, g.srv, "other.test", port, 1)
		time.Sleep(halfCloseGrace + 100*time.Millisecond)
		if p := g.srv.approvals.List(); len(p) != 1 || p[0].Waiting != 1 {
			t.Fatalf("pending: got %+v, want %s still with its request", p, q.ID)
		}
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
			t.Fatal(err)
		}
		if e := readEcho(t, bufio.NewReader(c)); e.Path != "/half" {
			t.Errorf("half-closed: got %+v, want /half", e)
		}
	})
	t.Run("connect", func(t *testing.T) {
		c := dialProxy(t, g.addr)
		fmt.Fprintf(c, "CONNECT api.test:%[1]d HTTP/1.1\r\nHost: api.test:%[1]d\r\n\r\nping", rawPort)
		answer(rawPort, approval.ScopeOnce)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "pong")
		buf := make([]byte, 8)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "pingpong" {
			t.Errorf("tunnel: got %q %v, want pingpong", buf, err)
		}
	})
}

// An answer reaches every request held on its question, all of its
// method and path; its record counts them, less any whose client left.
func TestAskAnswerRecordCountsItsRequests(t *testing.T) {
	g, c, base, port := askGateway(t, time.Minute, nil)
	first := getAsync(c, base+"/same")
	waitQuestion(t, g.srv, "api.test", port, 1)
	second := getAsync(c, base+"/same")
	third := getAsync(c, base+"/same")
	gone := dialProxy(t, g.addr)
	fmt.Fprintf(gone, "GET %s/same HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", base, port)
	q := waitQuestion(t, g.srv, "api.test", port, 4)
	time.Sleep(halfCloseGrace + 100*time.Millisecond) // it leaves while it waits
	gone.Close()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p := g.srv.approvals.List(); len(p) == 1 && p[0].Waiting == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("pending: got %+v, want %s with 3 waiting once a client left", p, q.ID)
		}
	}
	if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByAPI}); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan askResult{"first": first, "second": second, "third": third} {
		if r := result(t, ch); r.status != 200 || !strings.Contains(r.body, `"path":"/same"`) {
			t.Errorf("%s: got %d %s, want 200 for /same", name, r.status, r.body)
		}
	}
	recs := g.approvalRecords(t)
	if len(recs) != 2 {
		t.Fatalf("approval records: got %v", recs)
	}
	if r := recs[1]; r["count"] != float64(3) || r["path"] != "/same" || r["method"] != "GET" {
		t.Errorf("answer record: got %v, want count 3, GET /same", r)
	}
}
