package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The transparent path (docs/capture.md): the sandbox's rules redirect
// every TCP connection that is not for the proxy or the DNS stub to a
// listener of the gateway, which learns where the connection was going
// (its original destination), decides it, and relays it exactly as it
// relays a CONNECT tunnel or a proxied request.
//
// The target is the name behind a fake address of the DNS stub
// (FakeIPRange), or the IP that was dialed. Before deciding, the gateway
// waits for the client's first bytes, at most Limits.FirstBytesTimeout:
//   - a TLS ClientHello must name the target (else "sni mismatch"); one
//     sent to an IP target names the target instead, which is then decided
//     and dialed as that name;
//   - plain HTTP/1.x is served like the forward proxy, request by request,
//     so methods and path rules apply and a block is the proxy's 403; a
//     Host header that names another host than the target is blocked;
//   - anything else is decided by the target and port alone;
//   - nothing: the connection is decided by the target and port and
//     dialed, and the first bytes of either side are waited for
//     (awaitFirst). A protocol where the server speaks first is relayed;
//     a late ClientHello or HTTP request closes the upstream connection
//     and is decided as if it had come in time, so that a client gains
//     nothing by waiting.

// reasonHostMismatch starts the reason of a transparent request whose
// Host header names another host than the connection's target.
const reasonHostMismatch = "host mismatch"

// ServeTransparent serves, until ctx is done or Close is called, the TCP
// connections that the sandbox's rules redirected to ln; origDst returns a
// connection's original destination (OriginalDst does, for a listener in
// the network namespace whose rules redirected it). Each connection is
// decided and logged with kind decisionlog.KindTransparent; see the comment above.
// Clients are fenced as in Serve.
func (s *Server) ServeTransparent(ctx context.Context, ln net.Listener, origDst func(net.Conn) (netip.AddrPort, error)) error {
	return s.serveListener(ctx, ln, "transparent", 0, "", func(ctx context.Context, nc net.Conn) {
		s.serveTransparent(ctx, nc, origDst)
	})
}

// serveTransparent decides and serves one redirected connection.
func (s *Server) serveTransparent(ctx context.Context, nc net.Conn, origDst func(net.Conn) (netip.AddrPort, error)) {
	start := time.Now()
	dst, dstErr := origDst(nc)
	dst = unmapAddrPort(dst)
	c := s.newConn(nc, dst)
	defer c.releaseReader()
	defer s.endForward(c)
	refuse := func(rule, reason string) {
		rec := s.newRecord(c, decisionlog.KindTransparent, "", dst.Port())
		if dst.IsValid() {
			rec.Host = dst.Addr().String()
		}
		s.pipe.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: rule, Reason: reason}, 0, start)
	}
	if dstErr != nil || !dst.IsValid() {
		refuse(netpolicy.RuleInvalid, fmt.Sprintf("the connection's original destination is unknown: %v", dstErr))
		return
	}
	if local := addrPortOf(nc.LocalAddr()); local.IsValid() && local == dst {
		refuse(netpolicy.RuleInvalid, "a connection to the transparent listener itself was not redirected")
		return
	}
	host, named := dst.Addr().String(), false
	if dnsstub.FakeIPRange().Contains(dst.Addr()) {
		name, ok := s.fakeIPs.Name(dst.Addr())
		if !ok {
			refuse(netpolicy.RuleInvalid, fmt.Sprintf("%s is not an address the DNS stub gave out", dst.Addr()))
			return
		}
		host, named = name, true
	}

	k := &capture{s: s, c: c, dst: dst, host: host, named: named, start: start}
	// The client's first bytes, if it sends any soon.
	nc.SetReadDeadline(time.Now().Add(s.limits.FirstBytesTimeout))
	_, peekErr := c.br.Peek(1)
	nc.SetReadDeadline(time.Time{})
	if peekErr != nil {
		// Nothing yet: the server speaks first, the client is late, or
		// it left.
		if !k.tunnelLate(ctx) {
			return
		}
	}
	k.serveFirstBytes(ctx)
}

// serveFirstBytes decides and serves a captured connection by the
// client's first bytes, buffered: a TLS ClientHello, an HTTP/1.x request,
// or anything else, relayed as decided by the target and port.
func (k *capture) serveFirstBytes(ctx context.Context) {
	s, c := k.s, k.c
	switch {
	case peekTLS(c.br):
		// The whole ClientHello within HeaderReadTimeout of the accept
		// (or of the late bytes' coming), as a request's head.
		c.SetReadDeadline(k.start.Add(s.limits.HeaderReadTimeout))
		hello, sni, err := readClientHello(c.br)
		c.SetReadDeadline(time.Time{})
		k.serveTLS(ctx, hello, sni, err)
		return
	case k.peekHTTP():
		k.serveHTTP(ctx)
		return
	}
	k.tunnel(ctx, netpolicy.Target{Host: k.host, Port: k.dst.Port(), Method: http.MethodConnect}, nil)
}

// tunnelLate serves a captured connection whose client sent nothing within
// Limits.FirstBytesTimeout: it is decided by its target and port alone
// and, when allowed, dialed; then the gateway waits for the first bytes of
// either side (awaitFirst). It reports whether the client's bytes came
// first and are to be decided as if they had come on time (the upstream
// connection, which was sent nothing, is then closed), so that a program
// that waits before it sends gets the checks of one that does not.
func (k *capture) tunnelLate(ctx context.Context) (redo bool) {
	s, c, start := k.s, k.c, k.start
	t := netpolicy.Target{Host: k.host, Port: k.dst.Port(), Method: http.MethodConnect}
	in := entry{door: doorCaptured, kind: decisionlog.KindTransparent, c: c, target: t, start: start}
	o := s.pipe.run(ctx, &in)
	return k.openAwaiting(ctx, &o, false)
}

// openAwaiting writes o, the outcome of k's tunnel (openTunnel; proxied
// for a CONNECT), waiting once it is dialed for the first bytes of
// either side (awaitFirst). Relayed, the client's first bytes are checked
// however late they come: after the server's, a ClientHello must still
// name the target (checkSNI); before, they are watched as on time
// (tokenWatch). It reports whether the client's bytes are to be decided
// again, request by request or as on time (the upstream connection, sent
// nothing, is then closed); a tunnel whose ask was answered allow then
// answers its requests' asks by the same rule (conn.answered).
func (k *capture) openAwaiting(ctx context.Context, o *outcome, proxied bool) (redo bool) {
	s, c := k.s, k.c
	w := &tokenWatch{k: k}
	serverFirst := false
	check := func(src io.Reader) ([]byte, error) {
		if serverFirst {
			return checkSNI(c, src, k.host, &s.limits)
		}
		return w.check(src)
	}
	s.openTunnel(ctx, c, o, k.start, proxied, nil, check, func(up net.Conn, closeRec *decisionlog.Record) bool {
		w.up, w.rec = up, closeRec
		relay, again := k.awaitFirst(up, closeRec)
		redo, serverFirst = again, relay && closeRec.BytesIn > 0
		return relay
	})
	if redo && o.asked && o.d.Action == netpolicy.Allow {
		c.answered = &o.d
	}
	return redo
}

// Why a late captured connection, or a CONNECT tunnel, was not relayed
// (its close record's error).
const (
	connectPlainHTTP = "the tunnel carries plain HTTP: the upstream connection, which had been sent nothing, was closed, and the tunnel's requests are decided one by one, their Host the CONNECT's host"
	lateRedecided    = "the client's first bytes came after the first-bytes wait and are %s: the upstream connection, which had sent nothing, was closed, and they are decided as if on time"
	lateNoBytes      = "neither side sent a byte: %s"
)

// awaitFirst waits, once a late connection's upstream is dialed (up), for
// the first bytes of either side, at most Limits.IdleTunnelTimeout, and
// reports whether to relay the connection, and whether to decide it again
// by the client's bytes (redo):
//   - the upstream's first (a protocol where the server speaks first):
//     they are passed to the client, and the connection is relayed as
//     decided by target and port, as when they come on time;
//   - the client's, a TLS ClientHello or an HTTP request line: the
//     upstream, which has been sent nothing, is closed and the bytes are
//     decided as if on time (redo), so that the server name, the Host and
//     each request's method and path are checked as on time;
//   - the client's, anything else: relayed, as on time;
//   - neither, a side having ended or the wait idled out: closed.
//
// closeRec's error says why when it is not relayed.
func (k *capture) awaitFirst(up net.Conn, closeRec *decisionlog.Record) (relay, redo bool) {
	c := k.c
	deadline := time.Now().Add(k.s.limits.IdleTunnelTimeout)
	c.SetReadDeadline(deadline)
	up.SetReadDeadline(deadline)
	ub := bufio.NewReaderSize(up, 16)
	upDone := make(chan error, 1)
	// Ends when the upstream sends, ends or fails, or at its deadline,
	// which is moved to now once the client's wait below is over; it
	// ends that wait too.
	go func() {
		_, err := ub.Peek(1)
		// The socket's own deadline: c remembers the deadlines its
		// serving goroutine sets, and this one is not.
		c.Conn.SetReadDeadline(time.Now())
		upDone <- err
	}()
	clientErr := c.awaitByte()
	if clientErr == nil {
		// Late bytes are served as if they had come now, on time.
		k.start = time.Now()
	}
	up.SetReadDeadline(time.Now())
	upErr := <-upDone
	c.SetReadDeadline(time.Time{})
	up.SetReadDeadline(time.Time{})
	switch {
	case ub.Buffered() > 0:
		b, _ := ub.Peek(ub.Buffered())
		if _, err := c.Conn.Write(b); err != nil {
			closeRec.Error = "writing to the client: " + err.Error()
			return false, false
		}
		closeRec.BytesIn = int64(len(b))
		return true, false
	case c.br.Buffered() > 0 && peekTLS(c.br) && k.connect:
		return true, false // the relay checks the server name
	case c.br.Buffered() > 0 && peekTLS(c.br):
		closeRec.Error = fmt.Sprintf(lateRedecided, "a TLS ClientHello")
		return false, true
	case c.br.Buffered() > 0 && k.peekHTTP():
		if closeRec.Error = connectPlainHTTP; !k.connect {
			closeRec.Error = fmt.Sprintf(lateRedecided, "an HTTP request")
		}
		return false, true
	case c.br.Buffered() > 0:
		return true, false
	case clientErr != nil && !isTimeout(clientErr):
		closeRec.Error = fmt.Sprintf(lateNoBytes, "the client ended first")
	case upErr != nil && !isTimeout(upErr):
		closeRec.Error = fmt.Sprintf(lateNoBytes, "the upstream ended first")
	default:
		closeRec.Error = fmt.Sprintf(lateNoBytes, "the connection idled out")
	}
	return false, false
}

// capture is one captured connection: its client, where it was going
// (dst), and the target that stands for it, host: the name behind a fake
// address of the DNS stub (named), or the IP that was dialed.
type capture struct {
	s     *Server
	c     *conn
	dst   netip.AddrPort
	host  string
	named bool
	start time.Time // when it was accepted

	// connect: the connection is a CONNECT tunnel's (serveConnect), not a
	// captured one: a ClientHello in it is relayed as the CONNECT decided
	// it (the relay checks its name), and only plain HTTP is decided
	// again, request by request.
	connect bool
}

// kind is the kind of the records of k's HTTP requests: transparent, or
// http for the requests in a CONNECT tunnel, which came through the
// proxy.
func (k *capture) kind() string {
	if k.connect {
		return decisionlog.KindHTTP
	}
	return decisionlog.KindTransparent
}

// peekTLS reports whether the buffered bytes start a TLS handshake
// record.
func peekTLS(br *bufio.Reader) bool {
	b, _ := br.Peek(1)
	return len(b) == 1 && b[0] == 0x16
}

// peekHTTP reports whether the client's first bytes are an HTTP/1.x
// request line's start, as a lenient server would read one
// (sniffRequestLine). A client sends its request line in one write, so
// what is buffered nearly always tells; a line still unfinished there is
// waited for at most Limits.FirstBytesTimeout, so that a protocol whose
// first bytes merely look like one is held up no longer than one that
// sends nothing (the relay then watches the rest of the line:
// tokenWatch). A line that fills the read buffer undecided is taken for
// HTTP, whose parser refuses it.
func (k *capture) peekHTTP() bool {
	c := k.c
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(k.s.limits.FirstBytesTimeout))
	for n := max(1, c.br.Buffered()); ; n = c.br.Buffered() + 1 {
		b, err := c.br.Peek(min(n, maxSniffedLine))
		switch sniffRequestLine(b) {
		case lineHTTP:
			return true
		case lineOther:
			return false
		}
		if len(b) == maxSniffedLine {
			return true // as tokenWatch takes a line that long
		}
		if err != nil {
			return false
		}
	}
}

// maxSniffedLine is the most of a first line the gateway reads before it
// tells whether it is a request line: one still undecided past it (a
// word, a space, and 4 KiB of a second word) is taken for one and
// refused, so that telling costs little.
const maxSniffedLine = 4 << 10

// reasonTrickledRequest is the reason of a relayed captured connection
// cut off by tokenWatch.
const reasonTrickledRequest = "an HTTP request line came a byte at a time, past the wait for the first bytes: it cannot be decided request by request, so the connection is closed"

var errTrickledRequest = errors.New(reasonTrickledRequest)

// tokenWatch checks the first bytes of a captured connection relayed as
// neither TLS nor HTTP, however late they come: a ClientHello must name
// the target (checkSNI), and an HTTP request line (sniffRequestLine: one
// sent slowly enough that peekHTTP did not see it whole) ends the
// connection, errTrickledRequest, before anything but its method has gone
// upstream. A method token's bytes go upstream one by one as they come,
// so that a protocol whose first message is a bare word is answered;
// from the first byte after the token (or a first byte that is a space)
// on, the line is held until it is told apart, and relayed once it is
// not a request line. up is set once the upstream is dialed.
type tokenWatch struct {
	k    *capture
	up   net.Conn
	rec  *decisionlog.Record // the close record, which counts what is sent
	line []byte              // the client's first line so far
	sent int                 // its bytes sent upstream: the method token's
}

// check is the relay's first-bytes check (see relay); it is called again
// after errFirstIdle while the tunnel is not idle.
func (w *tokenWatch) check(src io.Reader) ([]byte, error) {
	c, limits := w.k.c, &w.k.s.limits
	defer c.SetReadDeadline(time.Time{})
	for {
		c.SetReadDeadline(time.Now().Add(limits.IdleTunnelTimeout))
		var b [1]byte
		if _, err := io.ReadFull(src, b[:]); err != nil {
			if isTimeout(err) {
				return nil, errFirstIdle
			}
			return w.line[w.sent:], nil // the client ended: no request can follow
		}
		if len(w.line) == 0 && b[0] == 0x16 {
			return checkHello(c, b[0], src, w.k.host, limits)
		}
		w.line = append(w.line, b[0])
		switch sniffRequestLine(w.line) {
		case lineHTTP:
			return nil, errTrickledRequest
		case lineOther:
			return w.line[w.sent:], nil
		}
		if len(w.line) >= maxSniffedLine {
			return nil, errTrickledRequest // as peekHTTP takes a line that long
		}
		if w.sent < len(w.line)-1 || !isTokenChar(b[0]) || w.sent >= netpolicy.MaxMethodLen {
			continue // held: a longer word waits for its line's end
		}
		if _, err := w.up.Write(b[:]); err != nil {
			return nil, nil // the relay finds the upstream gone
		}
		w.sent++
		w.rec.BytesOut++
	}
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// §5.6.2).
func isTokenChar(c byte) bool {
	if 'a' <= c|0x20 && c|0x20 <= 'z' || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// serveTLS decides a connection that began with a TLS ClientHello for
// sni (read as hello; helloErr when it could not be parsed), and relays
// it when allowed.
func (k *capture) serveTLS(ctx context.Context, hello []byte, sni string, helloErr error) {
	s, c, dst, host, named, start := k.s, k.c, k.dst, k.host, k.named, k.start
	t := netpolicy.Target{Host: host, Port: dst.Port(), Method: http.MethodConnect}
	refuse := func(reason string) {
		rec := s.newRecord(c, decisionlog.KindTransparent, "", dst.Port())
		rec.Host = host
		s.pipe.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: reason}, 0, start)
	}
	if helloErr != nil {
		refuse(helloErr.Error())
		return
	}
	if sec := s.secrets.PlaceholderIn(sni); sec != nil {
		rec := s.newRecord(c, decisionlog.KindTransparent, "", dst.Port())
		rec.Host, rec.Secret = host, sec.Name()
		s.pipe.finishRefusal(rec, sec.Block(host), 0, start)
		return
	}
	if sni != "" {
		name, err := netpolicy.NormalizeHost(sni)
		switch {
		case err != nil:
			refuse(fmt.Sprintf("%s: the TLS server name is not a valid host name", reasonSNIMismatch))
			return
		case named && name != host:
			refuse(fmt.Sprintf("%s: the TLS server name is %s, but the address was given for %s", reasonSNIMismatch, truncate(name, 80), host))
			return
		case !named:
			// An IP dialed with a name: the name decides and is dialed,
			// so that the policy's names keep their meaning.
			t.Host = name
		}
	}
	k.tunnel(ctx, t, hello)
}

// tunnel takes t, the target of a redirected connection,
// through the pipeline as a tunnel, and writes the outcome as CONNECT's
// is written (openTunnel), but that nothing is answered; first are bytes
// already read from the client, which go upstream before the rest (or,
// a ClientHello, start the inspected tunnel).
func (k *capture) tunnel(ctx context.Context, t netpolicy.Target, first []byte) {
	s, c, start := k.s, k.c, k.start
	in := entry{door: doorCaptured, kind: decisionlog.KindTransparent, c: c, target: t, hello: len(first) > 0 && first[0] == 0x16, start: start}
	o := s.pipe.run(ctx, &in)
	if len(first) > 0 {
		s.openTunnel(ctx, c, &o, start, false, first, func(io.Reader) ([]byte, error) { return first, nil }, nil)
		return
	}
	w := &tokenWatch{k: k}
	s.openTunnel(ctx, c, &o, start, false, nil, w.check, func(up net.Conn, closeRec *decisionlog.Record) bool {
		w.up, w.rec = up, closeRec
		return true
	})
}

// serveHTTP serves a redirected connection that speaks plain
// HTTP/1.x, request by request, as the forward proxy serves its clients:
// each request is decided for the target with its method and path. The
// request's host (its Host header, or an absolute URL's) must name the
// target; the port is the connection's. The first request's whole head
// must come within Limits.HeaderReadTimeout of accepted, a later one's
// within that of its first byte.
func (k *capture) serveHTTP(ctx context.Context) {
	s, c, dst, host, named, accepted := k.s, k.c, k.dst, k.host, k.named, k.start
	for first := true; ; first = false {
		headBy := accepted.Add(s.limits.HeaderReadTimeout)
		if !first {
			c.SetReadDeadline(time.Now().Add(s.limits.IdleConnTimeout))
			if _, err := c.br.Peek(1); err != nil {
				return
			}
			headBy = time.Now().Add(s.limits.HeaderReadTimeout)
		}
		start := time.Now()
		c.SetReadDeadline(headBy)
		head, err := c.heads.read(c.br, s.limits.MaxHeaderBytes)
		c.SetReadDeadline(time.Time{})
		if err != nil {
			var se *statusError
			if errors.As(err, &se) {
				k.refuse(&requestHead{Method: se.Method}, se, start)
			}
			return
		}
		target := head.Target
		if len(target) > 0 && target[0] == '/' {
			h := head.Header.Values("Host")
			if len(h) != 1 || h[0] == "" {
				k.refuse(head, statusErrorf(http.StatusBadRequest, "a request without a proxy needs exactly one Host header"), start)
				return
			}
			target = "http://" + h[0] + target
		}
		u, serr := parseProxyTarget(target)
		if serr != nil {
			k.refuse(head, serr, start)
			return
		}
		if name, err := netpolicy.NormalizeHost(u.Hostname()); err != nil || name != host {
			rec := s.newRecord(c, k.kind(), head.Method, dst.Port())
			rec.Host, rec.Path = host, truncate(u.EscapedPath(), maxLoggedPath)
			reason := fmt.Sprintf("%s: the request names %s, but the connection is to %s", reasonHostMismatch, truncate(redactTarget(u.Hostname()), 80), host)
			if !named {
				reason = fmt.Sprintf("%s: the request names %s, but the connection is to the address %s", reasonHostMismatch, truncate(redactTarget(u.Hostname()), 80), host)
			}
			d := netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: reason}
			s.pipe.finishRefusal(rec, d, http.StatusForbidden, start)
			hostport := joinHostPort(host, dst.Port())
			writeAnswer(c, head.Method, http.StatusForbidden, "", s.pipe.blockText(describe(head.Method, hostport, u.EscapedPath()), hostport, d), true, blockHeaders(d))
			return
		}
		if !s.forwardHTTP(ctx, c, head, k.kind(), u, dst.Port(), start) {
			return
		}
	}
}

// refuse answers a captured request the gateway cannot read or place
// with serr, and records it under the connection's original destination:
// what the request says is not trusted and may name nothing (a request
// without a Host header), but where the connection was going is known.
func (k *capture) refuse(head *requestHead, serr *statusError, start time.Time) {
	s := k.s
	rec := s.newRecord(k.c, k.kind(), head.Method, k.dst.Port())
	rec.Host = k.host
	if path, _, _ := strings.Cut(head.Target, "?"); strings.HasPrefix(path, "/") {
		rec.Path = truncate(path, maxLoggedPath)
	}
	s.pipe.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: serr.Reason}, serr.Status, start)
	writeSimple(k.c, serr.Status, "", serr.Reason+"\n", true, nil)
}
