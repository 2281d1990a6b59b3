package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The fault suite (go test -run Fault): an upstream's failure reaches the
// client as a failure, never as a clean end, and streamed answers reach
// the client as they come.

// resetTCP closes c with a reset (RST) instead of a FIN.
func resetTCP(t testing.TB, c net.Conn) {
	t.Helper()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	} else {
		t.Errorf("resetting %T: not a *net.TCPConn", c)
	}
	c.Close()
}

// readToError reads c until a read fails, and returns what it read and
// the read's error (io.EOF for a clean end).
func readToError(c io.Reader) ([]byte, error) {
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
	}
}

// faultPaths are the two ways a plain-HTTP request reaches the gateway: as
// a proxy's client, and captured (the transparent listener).
var faultPaths = []string{"proxy", "transparent"}

// faultClient opens a client connection to the gateway by path, for a
// plain-HTTP request to host:port, and returns it with the request line's
// target.
func faultClient(t *testing.T, path string, port netpolicy.Port) (g *testGateway, conn net.Conn, target string) {
	t.Helper()
	spec := loopbackPolicy(netpolicy.Allow)
	static := map[string]string{"api.test": "127.0.0.1"}
	hostport := "api.test:" + strconv.Itoa(int(port))
	if path == "proxy" {
		g = startGateway(t, spec, static)
		conn, _ = dialRaw(t, g.addr)
		return g, conn, "http://" + hostport + "/"
	}
	tg := startTransparent(t, spec, static)
	conn = tg.dial(t, tg.fake(t, "api.test", port))
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return tg.testGateway, conn, "/"
}

// TestFaultUpstreamFailureReachesClient: when the upstream resets, or
// ends a body before its length or its last chunk, the client's
// connection is reset (it never sees a clean end, nor a chunked body's
// terminator), and the close record has the error. An answer that ends
// when the upstream closes cleanly still ends cleanly.
func TestFaultUpstreamFailureReachesClient(t *testing.T) {
	body := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name      string
		head      string // the upstream's response head
		body      string
		reset     bool // the upstream resets, else it closes
		wantReset bool
		wantErr   string // in the close record's error; "" for none
	}{
		{"no length, reset", "HTTP/1.1 200 OK\r\n\r\n", body, true, true, "reset"},
		{"no length, clean close", "HTTP/1.1 200 OK\r\n\r\n", body, false, false, ""},
		{"content-length short, close", "HTTP/1.1 200 OK\r\nContent-Length: 40000\r\n\r\n", body, false, true, "before"},
		{"content-length short, reset", "HTTP/1.1 200 OK\r\nContent-Length: 40000\r\n\r\n", body, true, true, "reset"},
		{"chunked cut, close", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(body), body), false, true, "before"},
		{"chunked cut, reset", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(body), body), true, true, "reset"},
	} {
		for _, path := range faultPaths {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				ln := tcpServer(t, func(c net.Conn) {
					defer c.Close()
					br := bufio.NewReader(c)
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					io.WriteString(c, tc.head+tc.body)
					time.Sleep(50 * time.Millisecond) // mid-stream, as the client reads
					if tc.reset {
						resetTCP(t, c)
					}
				})
				port := netpolicy.Port(ln.Addr().(*net.TCPAddr).Port)
				g, conn, target := faultClient(t, path, port)
				fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", target, port)
				got, err := readToError(conn)
				if !strings.Contains(string(got), body) {
					t.Errorf("the client got %q, want the body's first bytes", truncate(string(got), 200))
				}
				if gotReset := errors.Is(err, syscall.ECONNRESET); gotReset != tc.wantReset {
					t.Errorf("the client's read ended with %v, reset %v; want reset %v", err, gotReset, tc.wantReset)
				}
				if !tc.wantReset && err != io.EOF {
					t.Errorf("the client's read ended with %v, want EOF", err)
				}
				if strings.Contains(string(got), "\r\n0\r\n") {
					t.Errorf("the client got a chunked terminator for a body the upstream cut: %q", got)
				}
				kind := decisionlog.KindHTTP
				if path == "transparent" {
					kind = decisionlog.KindTransparent
				}
				rec := lastClose(t, g, kind)
				if e := rec["error"].(string); tc.wantErr == "" && e != "" || !strings.Contains(e, tc.wantErr) {
					t.Errorf("close record error %q, want one with %q", e, tc.wantErr)
				}
			})
		}
	}
}

// tunnelPaths are the ways a tunnel goes through the gateway: CONNECT,
// a captured connection that does not speak HTTP or TLS, and a relayed
// WebSocket upgrade.
var tunnelPaths = []string{"proxy", "transparent", "websocket"}

// faultTunnel opens a tunnel by path to an upstream that serves it with
// handle (after the 101 of a WebSocket upgrade), and returns the gateway,
// the client's connection, its reader, and the close record's kind.
func faultTunnel(t *testing.T, path string, handle func(net.Conn)) (g *testGateway, conn net.Conn, r io.Reader, kind string) {
	t.Helper()
	ln := tcpServer(t, func(c net.Conn) {
		if path == "websocket" {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				c.Close()
				return
			}
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		}
		handle(c)
	})
	port := ln.Addr().(*net.TCPAddr).Port
	spec := loopbackPolicy(netpolicy.Allow)
	static := map[string]string{"api.test": "127.0.0.1"}
	switch path {
	case "proxy":
		g = startGateway(t, spec, static)
		conn, br := connectRaw(t, g.addr, "api.test:"+strconv.Itoa(port))
		return g, conn, br, decisionlog.KindConnect
	case "websocket":
		g = startGateway(t, spec, static)
		conn, br := dialRaw(t, g.addr)
		fmt.Fprintf(conn, "GET http://api.test:%d/ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "GET"}); err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		return g, conn, br, decisionlog.KindHTTP
	}
	tg := startTransparent(t, spec, static)
	conn = tg.dial(t, tg.fake(t, "api.test", netpolicy.Port(port)))
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return tg.testGateway, conn, conn, decisionlog.KindTransparent
}

// TestFaultTunnelUpstreamReset: an upstream that resets a tunnel resets
// the client's side too, and the close record says so.
func TestFaultTunnelUpstreamReset(t *testing.T) {
	for _, path := range tunnelPaths {
		t.Run(path, func(t *testing.T) {
			g, conn, r, kind := faultTunnel(t, path, func(c net.Conn) {
				io.WriteString(c, "hello")
				time.Sleep(200 * time.Millisecond) // past the transparent path's wait for first bytes
				resetTCP(t, c)
			})
			got, err := readToError(r)
			if string(got) != "hello" || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the client read %q, then %v; want hello, then a reset", got, err)
			}
			conn.Close()
			if rec := lastClose(t, g, kind); !strings.Contains(rec["error"].(string), "upstream reset the connection") {
				t.Errorf("close record error %q, want upstream reset the connection", rec["error"])
			}
		})
	}
}

// TestFaultTunnelHalfClose: an upstream that closes its sending side
// half-closes the client's: the client reads EOF, and can still send,
// and the upstream gets what it sent and then its EOF.
func TestFaultTunnelHalfClose(t *testing.T) {
	for _, path := range tunnelPaths {
		t.Run(path, func(t *testing.T) {
			got := make(chan string, 1)
			g, conn, r, kind := faultTunnel(t, path, func(c net.Conn) {
				defer c.Close()
				io.WriteString(c, "hello")
				time.Sleep(200 * time.Millisecond) // past the transparent path's wait for first bytes
				c.(*net.TCPConn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(c)
				got <- fmt.Sprintf("%s (%v)", b, err)
			})
			b, err := readToError(r)
			if string(b) != "hello" || err != io.EOF {
				t.Fatalf("the client read %q, then %v; want hello, then EOF", b, err)
			}
			if _, err := io.WriteString(conn, "after the upstream's EOF"); err != nil {
				t.Fatalf("writing after the upstream's half-close: %v", err)
			}
			conn.(*net.TCPConn).CloseWrite()
			if g, want := <-got, "after the upstream's EOF (<nil>)"; g != want {
				t.Errorf("the upstream read %q, want %q", g, want)
			}
			if rec := lastClose(t, g, kind); rec["error"] != "" {
				t.Errorf("close record error %q, want none", rec["error"])
			}
		})
	}
}

// sseEvents is how many events the streaming upstreams send, one per
// sseInterval.
const (
	sseEvents   = 10
	sseInterval = 50 * time.Millisecond
)

// sseHandler sends sseEvents server-sent events, one per sseInterval, each
// carrying the time it was sent; close-delimited when closeDelimited (an
// HTTP/1.0-style answer), else chunked.
func sseHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for range sseEvents {
		time.Sleep(sseInterval)
		fmt.Fprintf(w, "data: %d\n\n", time.Now().UnixNano())
		w.(http.Flusher).Flush()
	}
}

// sseLags reads the events of body and returns how long after its sending
// each arrived, sorted.
func sseLags(t *testing.T, body io.Reader) []time.Duration {
	t.Helper()
	var lags []time.Duration
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		sent, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("event %q: %v", v, err)
		}
		lags = append(lags, time.Since(time.Unix(0, sent)))
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the events: %v", err)
	}
	if len(lags) != sseEvents {
		t.Fatalf("got %d events, want %d", len(lags), sseEvents)
	}
	slices.Sort(lags)
	return lags
}

// checkStreamed fails the test unless the events' median lag through the
// gateway is within maxExtraLag of the direct path's.
func checkStreamed(t *testing.T, direct, via []time.Duration) {
	t.Helper()
	const maxExtraLag = 25 * time.Millisecond
	if d, v := direct[len(direct)/2], via[len(via)/2]; v > d+maxExtraLag {
		t.Errorf("events arrived %v after they were sent (median; direct %v), want at most %v more than direct; all lags %v", v, d, maxExtraLag, via)
	}
}

// TestFaultStreamedAnswers: server-sent events reach the client as the
// upstream sends them, through the proxy, the transparent path, and an
// inspected tunnel (HTTP/1.1 and HTTP/2 to the client), chunked and
// close-delimited.
func TestFaultStreamedAnswers(t *testing.T) {
	chunked := httptest.NewServer(http.HandlerFunc(sseHandler))
	t.Cleanup(chunked.Close)
	// A close-delimited stream, as an HTTP/1.0 server sends it.
	closeDelimited := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
		for range sseEvents {
			time.Sleep(sseInterval)
			fmt.Fprintf(c, "data: %d\n\n", time.Now().UnixNano())
		}
	})
	get := func(t *testing.T, c *http.Client, url string) []time.Duration {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return sseLags(t, resp.Body)
	}
	for _, up := range []struct {
		name string
		addr string
	}{
		{"chunked", chunked.Listener.Addr().String()},
		{"close-delimited", closeDelimited.Addr().String()},
	} {
		ap := netip.MustParseAddrPort(up.addr)
		port := netpolicy.Port(ap.Port())
		url := "http://api.test:" + strconv.Itoa(int(port)) + "/events"
		direct := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+up.addr+"/events")
		t.Run(up.name+"/proxy", func(t *testing.T) {
			g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
			checkStreamed(t, direct, get(t, g.client(t, nil), url))
		})
		t.Run(up.name+"/transparent", func(t *testing.T) {
			g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"})
			checkStreamed(t, direct, get(t, g.httpClient(t, g.fake(t, "api.test", port), nil), url))
		})
	}

	up := httptest.NewUnstartedServer(http.HandlerFunc(sseHandler))
	up.EnableHTTP2 = true
	g, port, clientRoots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow}, nil)
	direct := get(t, up.Client(), up.URL+"/events")
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("inspected/h2=%v", h2), func(t *testing.T) {
			c := inspectedClient(t, g, clientRoots, h2)
			checkStreamed(t, direct, get(t, c, "https://example.com:"+strconv.Itoa(int(port))+"/events"))
		})
	}
}

// inspectedClient is a client of g's proxy that trusts roots, speaking
// HTTP/2 in its tunnels when h2.
func inspectedClient(t *testing.T, g *testGateway, roots *x509.CertPool, h2 bool) *http.Client {
	t.Helper()
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
