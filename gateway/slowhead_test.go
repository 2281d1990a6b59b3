package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// The slow-head tests play a sandbox that holds the gateway's connections
// open by sending a request's head (or a TLS ClientHello) one byte at a
// time, slower than any deadline set per read would notice. Every such
// client must be cut off once the head's deadline, set once on the whole
// head, passes. These are tests of deadlines, not of speed: the slack is
// generous, and the attack they stand for is one that is never cut off.
const (
	slowHeadTimeout = 1500 * time.Millisecond // Limits.HeaderReadTimeout in these tests
	slowHeadSlack   = 1100 * time.Millisecond // how late a cut may come on a loaded machine
	slowHeadPace    = 50 * time.Millisecond   // one byte this often
)

// slowClient is one hostile client of a slow-head test: open connects it
// (and, for a tunnel, opens it), lead is how long it stays silent after
// that, first is sent at once after the lead, and then trickle is sent a
// byte every slowHeadPace, over again, until the gateway ends the
// connection.
type slowClient struct {
	open    func() (net.Conn, error)
	lead    time.Duration
	first   string
	trickle string
}

// run runs n copies of sc at once and returns how long the gateway served
// each, from the end of its open to the end of its connection; a client
// still served slowHeadTimeout+3s after its open counts as that long.
func (sc slowClient) run(t *testing.T, n int) []time.Duration {
	t.Helper()
	giveUp := slowHeadTimeout + 3*time.Second
	served := make([]time.Duration, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := sc.open()
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			start := time.Now()
			c.SetReadDeadline(start.Add(giveUp))
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				io.Copy(io.Discard, c) // until the gateway closes, or giveUp
			}()
			select {
			case <-time.After(sc.lead):
			case <-ended:
			}
			c.Write([]byte(sc.first))
			for j := 0; ; j++ {
				select {
				case <-ended:
					served[i] = time.Since(start)
					return
				case <-time.After(slowHeadPace):
					c.Write([]byte{sc.trickle[j%len(sc.trickle)]})
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return served
}

// checkCutOff fails the test unless every client was cut off within
// slowHeadTimeout and slowHeadSlack of from, and none well before
// slowHeadTimeout (the gateway's clock starts a little before the
// client's).
func checkCutOff(t *testing.T, served []time.Duration, from time.Duration) {
	t.Helper()
	late, early := 0, 0
	for _, d := range served {
		switch {
		case d > from+slowHeadTimeout+slowHeadSlack:
			late++
		case d < from+slowHeadTimeout*3/4:
			early++
		}
	}
	sorted := append([]time.Duration(nil), served...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("%d slow clients served from %v to %v", len(served), sorted[0], sorted[len(sorted)-1])
	if late > 0 {
		t.Errorf("%d of %d slow clients were still served %v after their head began (fastest cut %v, slowest %v), want every one cut off %v after it",
			late, len(served), from+slowHeadTimeout+slowHeadSlack, sorted[0], sorted[len(sorted)-1], from+slowHeadTimeout)
	}
	if early > 0 {
		t.Errorf("%d of %d slow clients were cut off before the head's deadline (fastest %v), want none before %v", early, len(served), sorted[0], from+slowHeadTimeout*3/4)
	}
}

// slowHeadLimits sets the head's deadline of the slow-head tests.
func slowHeadLimits(c *serverConfig) { c.Limits.HeaderReadTimeout = slowHeadTimeout }

// A request's head padded so that it never ends at the pace of the test.
const slowHeadPad = "X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"

// TestSlowHeadsAreCutOffAtTheProxy: 400 clients of the proxy port each
// stay silent for most of the head's timeout and then send a request
// head a byte every 50 ms. Each must be cut off once the timeout has
// passed since its accept: the deadline is on the whole head, measured
// from the accept. Red before: the deadline was set again at the first
// byte, so each was served for nearly two timeouts.
func TestSlowHeadsAreCutOffAtTheProxy(t *testing.T) {
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, slowHeadLimits)
	lead := slowHeadTimeout * 7 / 8
	served := slowClient{
		open:    func() (net.Conn, error) { return net.Dial("tcp", g.addr) },
		lead:    lead,
		first:   "G",
		trickle: "ET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n" + slowHeadPad,
	}.run(t, 400)
	checkCutOff(t, served, 0)
}

// TestSlowHeadOnAKeptConnection: a kept connection's next head is cut off
// once the timeout has passed since its first byte, however long the
// connection idled before it and whatever the pace.
func TestSlowHeadOnAKeptConnection(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"}, slowHeadLimits)
	head := fmt.Sprintf("GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n", port)
	served := slowClient{
		open: func() (net.Conn, error) {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				return nil, err
			}
			io.WriteString(c, head+"\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				return nil, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				c.Close()
				return nil, fmt.Errorf("first request: status %d, want 200", resp.StatusCode)
			}
			return c, nil
		},
		lead:    slowHeadTimeout + 200*time.Millisecond, // idle longer than a head may take
		first:   "G",
		trickle: head[1:] + slowHeadPad,
	}.run(t, 50)
	checkCutOff(t, served, slowHeadTimeout+200*time.Millisecond)
}

// TestSlowClientHelloInATunnelIsCutOff: 200 CONNECT tunnels whose clients
// send a TLS ClientHello a byte every 50 ms, which the gateway reads to
// compare its name with the CONNECT's: each is cut off once the timeout
// has passed since the hello's first byte. Red before: the hello was read
// under the tunnel's idle timeout (10 min), which every byte renewed the
// need for, and none was cut off.
func TestSlowClientHelloInATunnelIsCutOff(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { defer c.Close(); io.Copy(io.Discard, c) })
	g := startGatewayWith(t, loopbackPolicy(netpolicy.Allow), nil, slowHeadLimits)
	target := sink.Addr().String()
	served := slowClient{
		open: func() (net.Conn, error) {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				c.Close()
				return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
			}
			return c, nil
		},
		first:   "\x16",
		trickle: slowHello,
	}.run(t, 200)
	checkCutOff(t, served, 0)
}

// slowHello is the start of a TLS ClientHello that announces more bytes
// than the test ever sends: a record header of 512 bytes, a handshake
// header, the version and random bytes.
const slowHello = "\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" +
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// TestSlowHeadsAreCutOffWhenCaptured: on the captured path, 200 clients
// that send a plain HTTP head, and 200 that send a TLS ClientHello, a
// byte every 50 ms, are cut off once the timeout has passed since their
// accept.
func TestSlowHeadsAreCutOffWhenCaptured(t *testing.T) {
	g := startTransparent(t, loopbackPolicy(netpolicy.Allow), map[string]string{"api.test": "127.0.0.1"}, slowHeadLimits)
	dst := g.fake(t, "api.test", 80)
	open := func() (net.Conn, error) {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.dsts[c.LocalAddr().String()] = dst
		g.mu.Unlock()
		return c, nil
	}
	for _, tc := range []struct {
		name           string
		first, trickle string
	}{
		// The request line's method and space come at once, or the
		// gateway rightly takes the connection for another protocol.
		{"http", "GET ", "/ HTTP/1.1\r\nHost: api.test\r\n" + slowHeadPad},
		{"tls", "\x16", slowHello},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := slowClient{open: open, first: tc.first, trickle: tc.trickle}.run(t, 200)
			checkCutOff(t, served, 0)
		})
	}
}
