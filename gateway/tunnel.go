package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// reasonSNIMismatch is the reason logged when a tunnel's TLS server name
// is not its CONNECT host (docs/gateway.md).
const reasonSNIMismatch = "sni mismatch"

// serveConnect decides a CONNECT and, when it is allowed, relays the
// tunnel until either side closes or it idles out. The decision record is
// written at decision time (a client at Limits.MaxTunnelsPerClient gets a
// block by rule guard, status 429); the close record says how the tunnel
// ended, with action block and reason "sni mismatch" when the client's
// first bytes are a ClientHello for another host.
func (s *Server) serveConnect(ctx context.Context, c *conn, head *requestHead) {
	start := time.Now()
	rawHost, port, err := parseConnectTarget(head.Target)
	if err != nil {
		status, reason := http.StatusBadRequest, err.Error()
		var se *statusError
		if errors.As(err, &se) {
			status, reason = se.Status, se.Reason
		}
		rec := s.newRecord(c, decisionlog.KindConnect, http.MethodConnect, 0)
		rec.Host = redactTarget(head.Target)
		s.pipe.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: reason}, status, start)
		writeSimple(c, status, "", reason+"\n", true, nil)
		return
	}
	in := entry{door: doorConnect, kind: decisionlog.KindConnect, c: c, target: netpolicy.Target{Host: rawHost, Port: port, Method: http.MethodConnect}, start: start}
	o := s.pipe.run(ctx, &in)
	// The tunnel's first bytes are those of either side (capture's
	// awaitFirst): the upstream's (a protocol where the server speaks
	// first) are relayed, and the client's later ones checked for a
	// ClientHello's name (checkSNI); the client's, a ClientHello, relayed
	// and checked; the client's, an HTTP request line, which would go
	// upstream with its Host and path unchecked (to another host behind
	// the same address), end the tunnel, and its requests are decided one
	// by one as the proxy's, their Host the CONNECT's host; anything else
	// is watched as a captured connection's (tokenWatch), so that a
	// request line sent slowly is refused, not relayed.
	named := true
	if _, err := netip.ParseAddr(o.t.Host); err == nil {
		named = false
	}
	k := &capture{s: s, c: c, dst: netip.AddrPortFrom(netip.IPv4Unspecified(), port), host: o.t.Host, named: named, start: start, connect: true}
	if k.openAwaiting(ctx, &o, true) {
		k.serveHTTP(ctx)
	}
}

// openTunnel writes o, the outcome of a tunnel (a CONNECT, proxied, or a
// captured connection): the answer to a refusal, the inspected tunnel, or
// the tunnel to o's guarded addresses: dial, then relay, first reading the
// client's first bytes (see relay). A CONNECT client (proxied) is answered
// in HTTP at each step: 403, 429, 502 or 504, 200. A transparent client,
// which does not know the gateway is there, gets its connection closed.
// first are client bytes already read (a captured connection's
// ClientHello), which an inspected tunnel reads first. await, when not
// nil, is called once the upstream is dialed and before the relay, which
// happens only when it returns true (a late captured connection: see
// capture.awaitFirst).
func (s *Server) openTunnel(ctx context.Context, c *conn, o *outcome, start time.Time, proxied bool, first []byte, check func(src io.Reader) ([]byte, error), await func(up net.Conn, closeRec *decisionlog.Record) bool) {
	if o.slot {
		defer s.tunnels.release(c.client.Addr())
	}
	switch o.next {
	case nextInspect:
		s.inspectTunnel(ctx, c, o.closeRec, o.t, start, proxied, first)
		return
	case nextAnswer:
		if o.closeRec != nil {
			defer s.pipe.end(o.closeRec, start)
		}
		if a := o.answer; a.status != 0 {
			writeAnswer(c, http.MethodConnect, a.status, a.contentType, a.body, true, a.extra)
		}
		return
	}
	// The close record says how the tunnel ended, including a block by
	// the SNI check.
	closeRec := o.closeRec
	defer s.pipe.end(closeRec, start)
	up, err := s.dialFirst(ctx, o.addrs, o.t.Port)
	if err != nil {
		closeRec.Status, closeRec.Error = upstreamStatus(err, false), err.Error()
		if proxied {
			writeSimple(c, closeRec.Status, "", "sbx: cannot connect to "+joinHostPort(o.rec.Host, o.t.Port)+"\n", true, nil)
		}
		return
	}
	defer up.Close()
	if !s.trackUpstream(up) { // Close closes tunnels' upstream ends too
		return
	}
	defer s.untrackUpstream(up)
	// Open from here, while its first bytes are waited for too.
	s.metrics.tunnelOpened()
	defer s.metrics.tunnelClosed()
	closeRec.Upstream = up.RemoteAddr().String()
	if proxied {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			closeRec.Error = "writing to the client: " + err.Error()
			return
		}
		closeRec.Status = http.StatusOK // what the client was sent, relayed or not
	}
	if await != nil && !await(up, closeRec) {
		return
	}
	closeRec.Status = http.StatusOK
	relayerOf(s).relay(c, up, closeRec, check)
}

// relayer relays tunnels and upgraded connections with what it takes of
// its Server: the idle timeout, the metrics and the logger.
type relayer struct {
	idle    time.Duration // Limits.IdleTunnelTimeout
	metrics *Metrics
	logger  *slog.Logger
}

// relayerOf returns the relayer of s's tunnels.
func relayerOf(s *Server) relayer {
	return relayer{idle: s.limits.IdleTunnelTimeout, metrics: s.metrics, logger: s.logger}
}

// relay relays an open tunnel between c and up until both sides have
// ended, either fails, or it idles out, counting the bytes in closeRec.
// A side's end is passed on as what it was: a half-close (FIN) as a
// half-close of the other side, whose other direction goes on; a reset as
// a reset (tunnelEnd), which the close record's error names when the
// upstream reset. first reads and checks the client's first bytes from
// src (its buffered reader, or the connection itself once the buffer is
// given back) and returns what it consumed, which goes upstream first;
// its error ends the tunnel, logged in the close record as a block of
// rule invalid.
func (r relayer) relay(c *conn, up net.Conn, closeRec *decisionlog.Record, first func(src io.Reader) ([]byte, error)) {
	act := newTunnelActivity()
	end := &tunnelEnd{client: c.Conn, up: up}
	inDone := make(chan int64, 1)
	// Upstream to client: starts at once, for protocols where the server
	// speaks first. It ends when the upstream ends its side (then the
	// client's is half-closed), either side fails, or the tunnel idles
	// out (then both are closed, which ends the other direction too).
	// A panic there ends this tunnel alone (recoverCopy), and its close
	// record says so.
	var panicked string // set before inDone is sent
	go func() {
		var n int64
		defer func() { inDone <- n }()
		defer r.recoverCopy(c, end, &panicked)
		if tunnelCopyHook != nil {
			tunnelCopyHook()
		}
		var err error
		n, err = r.copyIdle(c.Conn, up, act, toClient)
		end.direction(toClient, err, act)
	}()
	// Client to upstream, below, ends in the same ways; when it ended
	// with the client's half-close, the tunnel waits for the upstream's
	// side to end too (its idle timeout still holds).
	halfClosed := false
	defer func() {
		if !halfClosed {
			end.closeBoth()
		}
		closeRec.BytesIn += <-inDone // after what the caller passed on before
		end.closeBoth()
		if panicked != "" {
			closeRec.Error = panicked
		}
		if end.err != "" && closeRec.Error == "" {
			closeRec.Error = end.err
		}
	}()

	// Client to upstream: the first bytes are checked, then the rest flows.
	// A client that sent nothing after its CONNECT yet gives its read
	// buffer back: an idle tunnel holds none.
	var src io.Reader = c.br
	if c.br.Buffered() == 0 {
		c.releaseReader()
		src = c.Conn
	}
	firstBytes, sniErr := first(src)
	// No first byte within the idle timeout: while the upstream is
	// sending, the tunnel is not idle, and the first bytes are still
	// waited for, never let through unchecked.
	for errors.Is(sniErr, errFirstIdle) && act.goOn(toUpstream, 0, r.idle) {
		firstBytes, sniErr = first(src)
	}
	if errors.Is(sniErr, errFirstIdle) {
		return // idled out
	}
	if sniErr != nil {
		closeRec.Action, closeRec.Rule, closeRec.Reason, closeRec.Enforced = string(netpolicy.Block), netpolicy.RuleInvalid, sniErr.Error(), true
		closeRec.Error = sniErr.Error()
		return
	}
	out := int64(0)
	if len(firstBytes) > 0 {
		n, err := up.Write(firstBytes)
		out += int64(n)
		if err != nil {
			closeRec.BytesOut += out
			return
		}
	}
	if c.br != nil && c.br.Buffered() > 0 {
		n := c.br.Buffered()
		buffered, _ := c.br.Peek(n)
		m, _ := up.Write(buffered)
		c.br.Discard(n)
		out += int64(m)
	}
	c.releaseReader() // the rest is copied from the connection itself
	n, err := r.copyIdle(up, c.Conn, act, toUpstream)
	closeRec.BytesOut += out + n // after what first sent on itself
	halfClosed = end.direction(toUpstream, err, act)
}

// tunnelCopyHook, when not nil, is called in the goroutine that copies a
// tunnel's upstream to its client, before it copies. It is nil in
// production; tests set it to make that goroutine panic.
var tunnelCopyHook func()

// recoverCopy, deferred in the goroutine that copies a tunnel's upstream
// to its client (relay's second one, which serveListener's recoverConn
// does not cover), turns a panic there into the end of that tunnel alone:
// it sets *msg to the close record's error, "gateway error: panic: ...",
// logs the panic with its stack, counts it, and closes both sides.
func (r relayer) recoverCopy(c *conn, end *tunnelEnd, msg *string) {
	p := recover()
	if p == nil {
		return
	}
	*msg = "gateway error: panic: " + truncate(fmt.Sprint(p), 200)
	r.logger.Error("panic relaying a tunnel's upstream to its client: the tunnel is closed, the gateway goes on", "client", c.clientText, "panic", p, "stack", string(debug.Stack()))
	r.metrics.panicked("tunnel")
	// Closed last, so that whoever sees the tunnel end finds the panic
	// logged and counted.
	end.closeBoth()
}

// tunnelEnd passes the end of one direction of a tunnel on to the other
// side: a clean end (EOF) as a half-close, a reset as a reset; anything
// else (an idle timeout, a failed write, a close) closes both sides. The
// first failure decides; what the closes cause afterwards is not news.
type tunnelEnd struct {
	client, up net.Conn
	once       sync.Once
	err        string // the close record's error, set in once; read after both directions ended
}

// direction ends direction dir, whose copy returned err, and reports
// whether it ended cleanly, with a half-close passed on.
func (e *tunnelEnd) direction(dir int, err error, act *tunnelActivity) bool {
	act.ended(dir)
	dst := e.client
	if dir == toUpstream {
		dst = e.up
	}
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return true
		}
		e.closeBoth()
		return false
	}
	e.once.Do(func() {
		switch {
		case tcpReset(e.up, err):
			e.err = "upstream reset the connection"
			abortConn(e.client)
			e.up.Close()
		case tcpReset(e.client, err):
			abortConn(e.up)
			e.client.Close()
		default:
			e.client.Close()
			e.up.Close()
		}
	})
	e.closeBoth() // a failure that came second
	return false
}

// closeBoth closes both sides.
func (e *tunnelEnd) closeBoth() {
	e.client.Close()
	e.up.Close()
}

// isResetError reports whether err is a reset by the peer, or a write to
// a peer that reset (or closed and then refused what came).
func isResetError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

var errSNIMismatch = errors.New(reasonSNIMismatch)

// errFirstIdle is checkSNI's error when the client sent nothing within
// Limits.IdleTunnelTimeout: relay waits again while the upstream sends.
var errFirstIdle = errors.New("the client sent no byte within the idle timeout")

// checkSNI waits for the client's first bytes, read from src (the
// client's buffered reader, or the connection itself). When they start a
// TLS handshake, it reads the whole ClientHello (however it is fragmented)
// and compares its server name, normalized, with host: a different name is
// errSNIMismatch; a ClientHello that cannot be parsed, or that does not
// come whole within Limits.HeaderReadTimeout of its first byte, is refused
// too, so that no name slips by unseen and no trickle holds the tunnel. It returns the bytes it consumed, which
// the caller sends on. A client that closes before sending anything
// returns no bytes and no error; one that sends nothing within
// Limits.IdleTunnelTimeout, errFirstIdle (the check is called again while
// the tunnel is not idle).
func checkSNI(c *conn, src io.Reader, host string, limits *Limits) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(limits.IdleTunnelTimeout))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := io.ReadFull(src, b[:]); err != nil {
		if isTimeout(err) {
			return nil, errFirstIdle
		}
		return nil, nil
	}
	if b[0] != 0x16 { // 0x16: a TLS handshake record
		return b[:], nil
	}
	return checkHello(c, b[0], src, host, limits)
}

// checkHello is checkSNI once the first byte, first, has been read and
// starts a TLS handshake record: the rest of the ClientHello comes from
// src.
func checkHello(c *conn, first byte, src io.Reader, host string, limits *Limits) ([]byte, error) {
	b := [1]byte{first}
	// The tunnel may idle before its first byte, but once a ClientHello
	// has begun it is a head like a request's: the whole of it must come
	// within HeaderReadTimeout of its first byte, whatever the pace.
	c.SetReadDeadline(time.Now().Add(limits.HeaderReadTimeout))
	consumed, sni, err := readClientHello(io.MultiReader(bytes.NewReader(b[:]), src))
	if err != nil || sni == "" {
		return consumed, err // no name to compare, as for IP targets
	}
	if name, err := netpolicy.NormalizeHost(sni); err != nil || name != host {
		return consumed, errSNIMismatch
	}
	return consumed, nil
}

// readClientHello reads a TLS ClientHello from src, however it is
// fragmented, and returns the bytes it consumed and the server name it
// asks for ("" for none). A ClientHello that cannot be parsed is an error.
func readClientHello(src io.Reader) (consumed []byte, sni string, err error) {
	rc := &recordingConn{r: src}
	var sawHello bool
	stop := errors.New("client hello read")
	srv := tls.Server(rc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, sawHello = h.ServerName, true
			return nil, stop
		},
	})
	srv.Handshake()
	if !sawHello {
		if errors.Is(rc.err, os.ErrDeadlineExceeded) {
			return rc.buf.Bytes(), "", errors.New("the TLS ClientHello did not come whole in time")
		}
		return rc.buf.Bytes(), "", errors.New("malformed TLS ClientHello")
	}
	return rc.buf.Bytes(), sni, nil
}

// recordingConn feeds crypto/tls the client's bytes and keeps them; what
// tls writes (its alert) goes nowhere.
type recordingConn struct {
	r   io.Reader
	buf bytes.Buffer
	err error // the last read's error
}

func (rc *recordingConn) Read(p []byte) (int, error) {
	n, err := rc.r.Read(p)
	rc.buf.Write(p[:n])
	rc.err = err
	return n, err
}
func (rc *recordingConn) Write(p []byte) (int, error)        { return len(p), nil }
func (rc *recordingConn) Close() error                       { return nil }
func (rc *recordingConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (rc *recordingConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (rc *recordingConn) SetDeadline(t time.Time) error      { return nil }
func (rc *recordingConn) SetReadDeadline(t time.Time) error  { return nil }
func (rc *recordingConn) SetWriteDeadline(t time.Time) error { return nil }

// tunnelChunk is how much one copy step moves before the idle deadline is
// renewed. io.CopyN keeps the splice fast path: *net.TCPConn's ReadFrom
// splices from an *io.LimitedReader over a *net.TCPConn.
const tunnelChunk = 4 << 20

// The two directions of a tunnel.
const (
	toUpstream = iota
	toClient
)

// tunnelActivity is what the two directions of a tunnel or an upgraded
// connection know of each other, so that it idles out only when neither
// has moved a byte for the idle timeout. A direction learns of its own
// bytes only when a copy step ends (at its deadline, for a trickle), so
// besides the time of the last byte each direction says whether its last
// step moved nothing: one side silent while the other trickles goes on.
type tunnelActivity struct {
	last  atomic.Int64   // unix nanoseconds of the last byte either way, as the steps report them
	quiet [2]atomic.Bool // a direction's last step ended at its deadline having moved nothing
}

func newTunnelActivity() *tunnelActivity {
	a := &tunnelActivity{}
	a.last.Store(time.Now().UnixNano())
	return a
}

// ended notes that direction dir is over, so that the other one idles
// out alone.
func (a *tunnelActivity) ended(dir int) { a.quiet[dir].Store(true) }

// moved notes that direction dir moved bytes.
func (a *tunnelActivity) moved(dir int) {
	a.last.Store(time.Now().UnixNano())
	a.quiet[dir].Store(false)
}

// goOn reports whether direction dir, whose step ended at its deadline
// having moved n bytes, goes on: it moved bytes, or the other direction
// has not yet ended a step having moved nothing, or a byte moved either
// way within idle. A tunnel both of whose sides are silent ends between
// one and two idle timeouts after its last byte.
func (a *tunnelActivity) goOn(dir int, n int64, idle time.Duration) bool {
	if n > 0 {
		return true
	}
	a.quiet[dir].Store(true)
	return !a.quiet[1-dir].Load() || time.Since(time.Unix(0, a.last.Load())) < idle
}

// copyIdle copies src to dst, direction dir of a tunnel, until src ends,
// an error, or neither direction has moved a byte for IdleTunnelTimeout
// (see tunnelActivity). A peer that does not take what is written for half
// as long again ends the tunnel: a write cut off by its deadline may lose
// what it was writing, so it is never gone on from. The write deadline
// comes after the read deadline so that a step's timeout can be told to
// be its read's by when it came.
func (r relayer) copyIdle(dst, src net.Conn, act *tunnelActivity, dir int) (int64, error) {
	idle := r.idle
	var total int64
	for {
		readBy := time.Now().Add(idle)
		writeBy := readBy.Add(idle / 2)
		src.SetReadDeadline(readBy)
		dst.SetWriteDeadline(writeBy)
		n, err := io.CopyN(dst, src, tunnelChunk)
		total += n
		if n > 0 {
			act.moved(dir)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			return total, nil
		}
		if isTimeout(err) && time.Now().Before(writeBy) && act.goOn(dir, n, idle) {
			continue // the read's timeout: nothing was lost
		}
		return total, err
	}
}

// tunnelCount counts the open tunnels of each client, against
// Limits.MaxTunnelsPerClient.
type tunnelCount struct {
	mu   sync.Mutex
	open map[netip.Addr]int
}

// acquire counts a tunnel of client, or reports false at max.
func (n *tunnelCount) acquire(client netip.Addr, max int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.open[client] >= max {
		return false
	}
	if n.open == nil {
		n.open = map[netip.Addr]int{}
	}
	n.open[client]++
	return true
}

// release gives back a tunnel of client that acquire counted.
func (n *tunnelCount) release(client netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.open[client]--; n.open[client] <= 0 {
		delete(n.open, client)
	}
}
