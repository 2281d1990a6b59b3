package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

func TestHeadBuffered(t *testing.T) {
	for in, want := range map[string]bool{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n":          true,
		"GET / HTTP/1.1\r\n\r\n":                     true,
		"GET / HTTP/1.1\nHost: a\n\n":                true,
		"GET / HTTP/1.1\r\nHost: a\n\r\n":            true,
		"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n":  true,
		"GET / HTTP/1.1\r\nHost: a\r\n":              false,
		"GET / HTTP/1.1\r\nHost: a\r\n\r":            false,
		"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n":      false, // the empty lines before are not the end
		"\n\r\nGET / HTTP/1.1\r\n":                   false,
		"\r\n\r\n\r\n":                               false,
		"GET / HTTP/1.1\r\nX: a\rb\r\nHost: a\r\n\r": false,
	} {
		br := bufio.NewReader(strings.NewReader(in))
		br.Peek(1)
		if got := headBuffered(br); got != want {
			t.Errorf("headBuffered(%q) = %t, want %t", in, got, want)
		}
	}
}

func TestStaleDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := 160 * time.Second // slack: 10 s
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{time.Time{}, true},
		{now.Add(idle), false},
		{now.Add(idle - 10*time.Second), false},
		{now.Add(idle - 10*time.Second - 1), true},
		{now.Add(idle + 1), true}, // set for a longer timeout
		{now.Add(-time.Second), true},
	} {
		if got := staleDeadline(tc.at, now, idle); got != tc.want {
			t.Errorf("staleDeadline(now%+v, now, %v) = %t, want %t", tc.at.Sub(now), idle, got, tc.want)
		}
	}
}

// TestHeaderReadTimeoutOnKeepAlive sends a second request's head slowly
// on a kept connection: it is cut off after HeaderReadTimeout, though the
// idle deadline set before its first byte is minutes away.
func TestHeaderReadTimeoutOnKeepAlive(t *testing.T) {
	port := portOf(t, echoUpstream(t))
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"}, func(c *serverConfig) {
		c.Limits.HeaderReadTimeout = 200 * time.Millisecond
		c.Limits.IdleConnTimeout = time.Minute
	})
	conn, br := dialRaw(t, g.addr)
	for range 2 {
		fmt.Fprintf(conn, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v, %v; want 200", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Fprintf(conn, "GET http://api.test:%d/ HTTP/1.1\r\nHost: a", port) // and nothing more
	start := time.Now()
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("the gateway did not close a slow head's connection: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want about 200ms", d)
	}
}

// TestCloseEndsAWaitingExchange closes the gateway while a client's second
// request on a kept connection waits for an upstream that never answers
// it: Close returns at once, as the connection's upstreamWatch closes the
// upstream connection, and the request's close record is logged.
func TestCloseEndsAWaitingExchange(t *testing.T) {
	up := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		http.ReadRequest(br)
		io.Copy(io.Discard, c) // and no answer
	})
	g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"up.test": "127.0.0.1"})
	conn, br := dialRaw(t, g.addr)
	target := fmt.Sprintf("http://up.test:%d/", up.Addr().(*net.TCPAddr).Port)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: up.test\r\n\r\n", target)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v, %v", resp, err)
	}
	io.CopyN(io.Discard, br, 2)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: up.test\r\n\r\n", target)
	time.Sleep(100 * time.Millisecond) // the request waits for its answer
	start := time.Now()
	g.srv.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a request waiting upstream, want it at once", d)
	}
	var closes int
	for _, r := range g.records(t) {
		if r["event"] == "close" {
			closes++
		}
	}
	if closes != 2 {
		t.Errorf("got %d close records, want 2", closes)
	}
}

// TestAnswerAfterALongWait has a kept connection's second request wait on
// its upstream longer than the idle timeout, which the first answer's
// write deadline was set for: the 502 still reaches the client.
func TestAnswerAfterALongWait(t *testing.T) {
	var answered atomic.Bool
	up := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if answered.Swap(true) {
				// Every later request, also on the connection the gateway
				// retries on, waits and is hung up on.
				time.Sleep(400 * time.Millisecond)
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), map[string]string{"up.test": "127.0.0.1"}, func(c *serverConfig) {
		c.Limits.IdleConnTimeout = 300 * time.Millisecond
	})
	conn, br := dialRaw(t, g.addr)
	target := fmt.Sprintf("http://up.test:%d/", up.Addr().(*net.TCPAddr).Port)
	for i, want := range []int{200, 502} {
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: up.test\r\n\r\n", target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("request %d: got %v, %v; want %d", i+1, resp, err, want)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
