package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/gateway/secretscrub"
	"github.com/sbx-dev/sbx/netpolicy"
)

// hopByHop are the headers that concern one connection only and are never
// forwarded (docs/gateway.md), besides those a Connection header names.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
	"Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers from h, keeping Upgrade
// and Connection: Upgrade when keepUpgrade is set (a relayed WebSocket).
func removeHopByHop(h http.Header, keepUpgrade bool) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" && !(keepUpgrade && strings.EqualFold(name, "upgrade")) {
				h.Del(name)
			}
		}
	}
	upgrade := h.Get("Upgrade")
	for _, name := range hopByHop {
		delete(h, name) // canonical already, as the keys of h are: Del would canonicalize again
	}
	if keepUpgrade {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	}
}

// isWebSocket reports whether a request asks to upgrade to WebSocket.
func isWebSocket(h http.Header) bool {
	if !strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket") {
		return false
	}
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// serveHTTP decides and answers one absolute-form request. It reports
// whether the connection may carry another request.
func (s *Server) serveHTTP(ctx context.Context, c *conn, head *requestHead) bool {
	start := time.Now()
	u, serr := parseProxyTarget(head.Target)
	if serr != nil {
		s.pipe.refuseTarget(c, decisionlog.KindHTTP, head, serr, start)
		return false
	}
	port := uint16(80)
	if p := u.Port(); p != "" {
		n, _ := strconv.ParseUint(p, 10, 16) // parseProxyTarget checked it
		port = uint16(n)
	}
	return s.forwardHTTP(ctx, c, head, decisionlog.KindHTTP, u, port, start)
}

// refuseTarget answers and logs a request whose target cannot be used,
// and closes the connection.
func (p *pipeline) refuseTarget(c *conn, kind string, head *requestHead, serr *statusError, start time.Time) {
	s := p.s
	rec := s.newRecord(c, kind, head.Method, 0)
	rec.Host = redactTarget(head.Target)
	p.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: serr.Reason}, serr.Status, start)
	writeSimple(c, serr.Status, "", serr.Reason+"\n", true, nil)
}

// forwardHTTP decides and answers one request of kind (decisionlog.KindHTTP, or
// decisionlog.KindTransparent for a request the sandbox sent without the proxy) for
// the http URL u, whose port is port. It reports whether the connection
// may carry another request.
func (s *Server) forwardHTTP(ctx context.Context, c *conn, head *requestHead, kind string, u *url.URL, port uint16, start time.Time) bool {
	hasBody := head.Chunked || head.ContentLength > 0
	// A request whose body the gateway does not read ends the connection.
	keepAlive := !head.Close && !hasBody
	// What the gateway answers itself is written with the deadline an
	// earlier answer left; make sure it is not about to pass.
	c.extendWriteDeadline(s.limits.IdleConnTimeout)

	fs := c.forward()
	in := entry{door: doorProxy, kind: kind, c: c, target: netpolicy.Target{Host: u.Hostname(), Port: port, Method: head.Method, Path: u.EscapedPath()},
		raw: head.Target, header: head.Header, start: start, rec: &fs.rec, closeRec: &fs.closeRec}
	o := s.pipe.run(ctx, &in)
	switch o.next {
	case nextMock:
		return s.mocks.serveHTTP(ctx, c, head, u, o.mock, o.rec, start)
	case nextAnswer:
		if o.closeRec != nil {
			defer s.pipe.end(o.closeRec, start)
		}
		writeAnswer(c, head.Method, o.answer.status, o.answer.contentType, o.answer.body, !keepAlive, o.answer.extra)
		return keepAlive
	}
	closeRec, t := o.closeRec, o.t
	defer s.pipe.end(closeRec, start)
	upstream := netip.AddrPortFrom(o.addrs[0], port)
	closeRec.Upstream = fs.upstreamText(upstream)

	ws := isWebSocket(head.Header)
	out := &fs.out
	out.init(head, u, ws)                     // plain HTTP: no secret's value goes in it (docs/secrets.md)
	sc := s.secrets.ScrubberFor(t.Host, port) // a bound host's answer comes back without the values (scrub.go)
	if sc != nil {
		askIdentity(out.Header)
		delete(out.Header, "Sec-Websocket-Extensions")
	}
	// Reading the body and writing the answer renew an idle deadline on
	// every call, so a client that stalls cannot hold the request forever
	// while a slow, steady one is never cut off.
	idle := s.limits.IdleConnTimeout
	body := &fs.body
	body.reset()
	switch {
	case head.Chunked:
		// The chunked reader must read c.br itself: given another reader
		// it would buffer past the body into the next request.
		body.r = &deadlineReader{r: httputil.NewChunkedReader(c.br), c: c, idle: idle}
		body.atEOF = func() error { return skipTrailers(c.br, s.limits.MaxHeaderBytes) }
		out.ContentLength = -1
		out.Body = body
	case head.ContentLength > 0:
		body.r = &deadlineReader{r: io.LimitReader(c.br, head.ContentLength), c: c, idle: idle}
		out.ContentLength = head.ContentLength
		out.Body = body
	default:
		body.eof.Store(true)
	}
	// Answer Expect: 100-continue here, and let the upstream see no Expect:
	// the body comes at once.
	if hasBody && head.ProtoMinor == 1 && strings.EqualFold(head.Header.Get("Expect"), "100-continue") {
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		delete(out.Header, "Expect")
	}
	rh, uc, err := s.roundTrip(ctx, &fs.watch, &fs.up, out, upstream)
	closeRec.BytesOut = body.n.Load()
	if err != nil {
		closeRec.Status, closeRec.Error = upstreamStatus(err, false), sc.String(err.Error(), nil)
		c.extendWriteDeadline(idle) // the wait may have outlasted the last answer's deadline
		writeSimple(c, closeRec.Status, "", "sbx: upstream "+upstream.String()+" failed: "+closeRec.Error+"\n", true, nil)
		return false
	}
	closeRec.Status = rh.Status
	if rh.Status == http.StatusSwitchingProtocols {
		if !ws {
			uc.Close()
			closeRec.Error = "upstream switched protocols unasked"
			writeSimple(c, http.StatusBadGateway, "", "sbx: the upstream switched protocols unasked\n", true, nil)
			return false
		}
		if sc != nil && webSocketExtensions(rh) {
			uc.Close()
			closeRec.Status, closeRec.Error = http.StatusBadGateway, "the upstream agreed to a WebSocket extension the gateway did not offer"
			writeSimple(c, http.StatusBadGateway, "", "sbx: "+closeRec.Error+"\n", true, nil)
			return false
		}
		defer uc.Close()
		uc.conn.SetWriteDeadline(time.Time{})   // the relay's writes have none, as the tunnels'
		uc.rd.idle = s.limits.IdleTunnelTimeout // reads idle out as a tunnel's, not a request's
		if !s.tunnels.acquire(c.client.Addr(), s.limits.MaxTunnelsPerClient) {
			closeRec.Status, closeRec.Error = http.StatusTooManyRequests, "too many open tunnels from this client"
			writeSimple(c, http.StatusTooManyRequests, "", "sbx: too many open tunnels from this client\n", true, nil)
			return false
		}
		defer s.tunnels.release(c.client.Addr())
		in, out, uerr := relayerOf(s).relayUpgrade(c, rh, upgradeStream{uc}, sc, secrets.NoteFound(closeRec))
		closeRec.BytesIn, closeRec.BytesOut = in, closeRec.BytesOut+out
		if uerr != "" {
			closeRec.Error = uerr
		}
		return false
	}
	var codings []string
	if sc != nil {
		var refusal string
		if codings, refusal = secrets.ContentCodings(rh.values("Content-Encoding")); refusal != "" {
			uc.Close()
			closeRec.Status, closeRec.Error = http.StatusBadGateway, refusal
			writeSimple(c, http.StatusBadGateway, "", "sbx: "+refusal+"\n", true, nil)
			return false
		}
	}
	// Keep-alive needs the whole request body read, and a framing the
	// client understands.
	keepAlive = keepAlive || (!head.Close && body.eof.Load())
	bodyLen := rh.bodyLength(head.Method)
	chunkOut := bodyLen < 0 && rh.Chunked && head.ProtoMinor == 1
	if bodyLen < 0 && !chunkOut {
		keepAlive = false // the body ends when the connection does
	}
	// One buffered write per response, not one syscall (and, with
	// TCP_NODELAY, one packet) per header line.
	fs.dw = deadlineWriter{c: c, idle: idle}
	fs.cw = countingWriter{w: &fs.dw}
	cw := &fs.cw
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(cw)
	// What was relayed goes to the client before the gateway waits for
	// the upstream's next bytes: a stream (server-sent events) is not held
	// back, and a response that came whole is still written at once.
	uc.rd.flush = bw
	var reusable bool
	var werr error
	if sc != nil {
		reusable, keepAlive, werr = writeScrubbedResponse(bw, uc.br, rh, head.Method, head.ProtoMinor, keepAlive, codings, sc, secrets.NoteFound(closeRec))
	} else {
		reusable, werr = writeResponse(bw, uc.br, rh, head.Method, head.ProtoMinor, bodyLen, chunkOut, keepAlive)
	}
	uc.rd.flush = nil
	if werr == nil {
		werr = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	closeRec.BytesIn = cw.n
	closeRec.BytesOut = body.n.Load()
	s.pool.done(&fs.up, uc, reusable && werr == nil && body.eof.Load())
	switch {
	case werr == nil:
		return keepAlive
	case fs.dw.err != nil:
		closeRec.Error = "writing to the client: " + fs.dw.err.Error()
	default:
		// The upstream failed after the head was sent: the client must
		// not take what it got for the whole answer, so its connection is
		// reset, never ended cleanly (nor a chunked body given its last
		// chunk).
		closeRec.Error = upstreamBodyError(werr)
		abortConn(c.Conn)
	}
	return false
}

// upstreamBodyError is the close record's error for err, the failure of
// reading a response body from the upstream.
func upstreamBodyError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "reading the response body: upstream reset the connection"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "reading the response body: the upstream closed the connection before the body's end"
	case isTimeout(err):
		return "reading the response body: the upstream stalled: " + err.Error()
	}
	return "reading the response body: " + err.Error()
}

// abortConn closes nc with a reset (RST) when it is a TCP connection,
// rather than a FIN, so that its peer sees a failure and not an end.
func abortConn(nc net.Conn) {
	if tc, ok := nc.(interface{ SetLinger(int) error }); ok {
		tc.SetLinger(0)
	}
	nc.Close()
}

// writeResponse writes the response whose head is rh, an answer to a
// request of method, to a client that speaks HTTP/1.minor: the status
// line, the end-to-end fields, the framing fields and, unless keepAlive,
// Connection: close; then the body read from br, bodyLen bytes or (when
// bodyLen is -1) chunked or until br ends, chunked again when chunkOut.
// It reports whether br's connection may carry another exchange: the body
// was framed by its length or chunks, and read to its end.
func writeResponse(bw *bufio.Writer, br *bufio.Reader, rh *responseHead, method string, minor int, bodyLen int64, chunkOut, keepAlive bool) (reusable bool, err error) {
	rh.writeStatusLine(bw, minor)
	for i, f := range rh.Fields {
		if rh.endToEnd(i) {
			writeField(bw, f.Name, f.Value)
		}
	}
	switch {
	case method == http.MethodHead:
		// The fields describe the body a GET would have had.
		if rh.ContentLength >= 0 {
			writeContentLength(bw, rh.ContentLength)
		} else if rh.Chunked && minor == 1 {
			bw.WriteString("Transfer-Encoding: chunked\r\n")
		}
	case !bodyAllowedForStatus(rh.Status):
	case bodyLen >= 0:
		writeContentLength(bw, bodyLen)
	case chunkOut:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !keepAlive {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")

	switch {
	case bodyLen >= 0:
		if err := copyN(bw, br, bodyLen); err != nil {
			return false, err
		}
		return true, nil
	case !rh.Chunked:
		_, err := copyToEOF(bw, br)
		return false, err
	}
	cr := httputil.NewChunkedReader(br)
	if !chunkOut {
		if err := copyChunks(bw, cr); err != nil {
			return false, err
		}
		return true, readTrailers(br, maxResponseHeadBytes, func(headerField) {})
	}
	cwr := httputil.NewChunkedWriter(bw)
	if err := copyChunks(cwr, cr); err != nil {
		return false, err
	}
	cwr.Close() // the last chunk, "0\r\n"; the trailers follow
	if err := readTrailers(br, maxResponseHeadBytes, func(f headerField) { writeField(bw, f.Name, f.Value) }); err != nil {
		return false, err
	}
	_, err = bw.WriteString("\r\n")
	return true, err
}

// copyN copies exactly n bytes from br to bw through br's buffer, with no
// allocation; it returns io.ErrUnexpectedEOF when br ends before.
func copyN(bw *bufio.Writer, br *bufio.Reader, n int64) error {
	for n > 0 {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		p, _ := br.Peek(int(min(int64(br.Buffered()), n)))
		m, err := bw.Write(p)
		br.Discard(m)
		n -= int64(m)
		if err != nil {
			return err
		}
	}
	return nil
}

// copyChunks copies the chunked body cr reads to w until it ends. It is
// not io.Copy, which would use bw's ReadFrom: that reads into bw's own
// buffer, which the flush before each upstream read (deadlineReader)
// would move under it.
func copyChunks(w io.Writer, cr io.Reader) error {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for {
		n, err := cr.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// copyBufPool holds the buffers copyChunks copies through.
var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyToEOF copies br to bw until br ends.
func copyToEOF(bw *bufio.Writer, br *bufio.Reader) (int64, error) {
	var n int64
	for {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				if err == io.EOF {
					err = nil
				}
				return n, err
			}
		}
		p, _ := br.Peek(br.Buffered())
		m, err := bw.Write(p)
		br.Discard(m)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
}

// forwardState is what forwardHTTP needs for each request of a client
// connection, made on the connection's first forwarded request and reused
// for the next ones: a connection's requests are served one after the
// other, and nothing of one outlives it.
type forwardState struct {
	rec      decisionlog.Record // the request's decision record
	closeRec decisionlog.Record // and its close record
	body     countingReader
	dw       deadlineWriter
	cw       countingWriter
	out      upstreamRequest
	watch    upstreamWatch
	up       *upConn // the upstream connection of the last request, kept for the next

	// The last request's upstream address and its text, which the next
	// request to it (most of a connection's requests) reuses.
	lastUp     netip.AddrPort
	lastUpText string
}

// upstreamText returns ap as text (for the close record) without making
// the string again when the connection's last request went to ap too.
func (fs *forwardState) upstreamText(ap netip.AddrPort) string {
	if ap != fs.lastUp || fs.lastUpText == "" {
		fs.lastUp, fs.lastUpText = ap, ap.String()
	}
	return fs.lastUpText
}

// forward returns c's forwardState, made on first use.
func (c *conn) forward() *forwardState {
	if c.fwd == nil {
		c.fwd = &forwardState{}
	}
	return c.fwd
}

// endForward releases what c's forwarded requests hold beyond the
// connection's life: the AfterFunc of its upstreamWatch, and the upstream
// connection it kept, which goes to the pool. The connection's server
// calls it when the connection ends.
func (s *Server) endForward(c *conn) {
	if c.fwd != nil {
		c.fwd.watch.stop()
		s.pool.release(&c.fwd.up)
	}
}

// writerPool holds the buffers responses are written through.
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// finishRefusal logs a request the gateway answers itself: blocked,
// refused by the guard, invalid or intercepted.
func (p *pipeline) finishRefusal(rec *decisionlog.Record, d netpolicy.Decision, status int, start time.Time) {
	s := p.s
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = true
	rec.Status = status
	s.metrics.request(rec.Kind, d.Action)
	s.metrics.decided(start)
	s.emit(rec)
}

// admit logs d, which lets rec's request or tunnel through (allowed, or a
// block that audit mode does not enforce), and returns its close record,
// which end logs when the request or tunnel is over.
func (p *pipeline) admit(rec *decisionlog.Record, d netpolicy.Decision, start time.Time) *decisionlog.Record {
	s := p.s
	closeRec := new(decisionlog.Record)
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = d.Action != netpolicy.Block
	s.metrics.request(rec.Kind, d.Action)
	s.metrics.decided(start)
	*closeRec = *rec // before emit stamps rec's time: the close gets its own
	closeRec.Event = decisionlog.EventClose
	s.emit(rec)
	return closeRec
}

// admitCommitted is admit (making the close record in closeRec, when
// it is not nil) for a decision that
// sends something upstream: it returns only once the decision log's file
// holds rec. When the file cannot take it (full, failing, removed), the
// request must not go on: rec is logged as a block by rule guard, its
// reason the log's error, with status, and admitCommitted returns nil and
// that decision, which the caller answers as a block.
func (p *pipeline) admitCommitted(rec *decisionlog.Record, d netpolicy.Decision, start time.Time, closeRec *decisionlog.Record, status int) (*decisionlog.Record, *netpolicy.Decision) {
	s := p.s
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = d.Action != netpolicy.Block
	if closeRec == nil {
		closeRec = new(decisionlog.Record)
	}
	*closeRec = *rec // before commit stamps rec's time: the close gets its own
	if err := s.commit(rec); err != nil {
		refusal := netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleGuard, Reason: err.Error()}
		p.finishRefusal(rec, refusal, status, start)
		return nil, &refusal
	}
	closeRec.Event = decisionlog.EventClose
	s.metrics.request(rec.Kind, d.Action)
	s.metrics.decided(start)
	return closeRec, nil
}

// end logs a close record that admit made.
func (p *pipeline) end(closeRec *decisionlog.Record, start time.Time) {
	s := p.s
	closeRec.Duration = time.Since(start)
	s.metrics.relayed(closeRec.BytesOut, closeRec.BytesIn)
	s.post(closeRec)
}

// interceptStatus is the status of an intercept rule's response.
func interceptStatus(d netpolicy.Decision) int {
	if d.Response != nil && d.Response.Status != 0 {
		return d.Response.Status
	}
	return http.StatusOK
}

// relayUpgrade writes a 101 response's head and relays bytes both ways
// until both sides have ended, either fails, or the relay idles out,
// passing a side's end on as a tunnel does (tunnelEnd): a half-close as a
// half-close, a reset as a reset. It returns the bytes sent to the client
// and to the upstream, and the close record's error ("" for none). With
// sc, the answer of a host a secret is bound to, the head's fields and
// the frames to the client have every value replaced (found is called
// with each name), and a frame sc cannot look into ends the relay.
func (r relayer) relayUpgrade(c *conn, rh *responseHead, up upgradeStream, sc *secretscrub.Scrubber, found func(string)) (in, out int64, errText string) {
	defer up.Close()
	cw := &countingWriter{w: c}
	bw := bufio.NewWriter(cw)
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	for _, f := range rh.Fields {
		if !asciiEqualFold(f.Name, "Transfer-Encoding") && !asciiEqualFold(f.Name, "Content-Length") {
			if sc != nil {
				writeField(bw, []byte(sc.String(string(f.Name), found)), []byte(sc.String(string(f.Value), found)))
				continue
			}
			writeField(bw, f.Name, f.Value)
		}
	}
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return cw.n, 0, ""
	}
	r.metrics.tunnelOpened()
	defer r.metrics.tunnelClosed()
	act := newTunnelActivity()
	end := &tunnelEnd{client: c.Conn, up: up.uc.conn}
	idle := r.idle
	done := make(chan int64, 1)
	// Client to upstream ends when the client ends its side, either side
	// fails, or the relay idles out (read deadlines on the client); a
	// failure or an idle end closes both sides, which ends the other
	// direction too.
	go func() {
		var n int64
		var err error
		for {
			c.SetReadDeadline(time.Now().Add(idle))
			m, cerr := io.CopyN(up, c.br, tunnelChunk)
			n += m
			if m > 0 {
				act.moved(toUpstream)
			}
			if cerr == nil || isTimeout(cerr) && act.goOn(toUpstream, m, idle) {
				continue
			}
			if cerr != io.EOF {
				err = cerr
			}
			break
		}
		end.direction(toUpstream, err, act)
		done <- n
	}()
	// Upstream to client: writes carry the idle deadline, so a client
	// that never reads cannot hold the relay; the upstream's reads idle
	// out as the tunnel's (uc.rd), and a silent upstream waits while the
	// client sends.
	var err error
	if sc != nil {
		_, err = sc.CopyFrames(&clientFrameWriter{c: c, w: cw, act: act, idle: idle}, &idleReader{r: up, act: act, idle: idle}, found)
		end.direction(toClient, err, act)
		out = <-done
		end.closeBoth()
		if err != nil && end.err == "" {
			return cw.n, out, "relaying a WebSocket: " + err.Error()
		}
		return cw.n, out, end.err
	}
	buf := make([]byte, 32<<10)
	for {
		m, rerr := up.Read(buf)
		if m > 0 {
			act.moved(toClient)
			c.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := cw.Write(buf[:m]); werr != nil {
				err = werr
				break
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil && !(isTimeout(rerr) && act.goOn(toClient, int64(m), idle)) {
			err = rerr
			break
		}
	}
	end.direction(toClient, err, act)
	out = <-done
	end.closeBoth()
	return cw.n, out, end.err
}

// countingReader counts what is read through it and notes EOF. atEOF,
// when set, runs once at EOF and may turn it into an error. Its state is
// atomic so that what reads the body and what logs it need not be the
// same goroutine.
type countingReader struct {
	r     io.Reader
	n     atomic.Int64
	eof   atomic.Bool
	atEOF func() error
}

// reset makes cr as new, reading nothing.
func (cr *countingReader) reset() {
	cr.r, cr.atEOF = nil, nil
	cr.n.Store(0)
	cr.eof.Store(false)
}

func (cr *countingReader) Read(p []byte) (int, error) {
	if cr.eof.Load() {
		return 0, io.EOF
	}
	n, err := cr.r.Read(p)
	cr.n.Add(int64(n))
	if err == io.EOF {
		if cr.atEOF != nil {
			if terr := cr.atEOF(); terr != nil {
				return n, terr
			}
		}
		cr.eof.Store(true)
	}
	return n, err
}

// deadlineReader reads r, keeping c's read deadline idle ahead: it sets
// the deadline before a read unless the one it set last is still fresh
// (see staleDeadline), so that a steady stream of reads does not reset a
// timer on every one. Nothing else may set c's read deadline while it is
// in use.
type deadlineReader struct {
	r    io.Reader
	c    net.Conn
	idle time.Duration
	at   time.Time // the deadline set last, zero before the first read

	// flush, when not nil, is flushed before every read, so that what
	// was relayed through it reaches its reader before the wait for more:
	// an upstream's answer is relayed as it comes. Its error is the read's.
	flush *bufio.Writer
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	if d.flush != nil && d.flush.Buffered() > 0 {
		if err := d.flush.Flush(); err != nil {
			return 0, err
		}
	}
	if now := time.Now(); staleDeadline(d.at, now, d.idle) {
		d.at = now.Add(d.idle)
		d.c.SetReadDeadline(d.at)
	}
	return d.r.Read(p)
}

// deadlineWriter writes to c, keeping its write deadline idle ahead. When
// c is a client's *conn, the deadline is set only when the one the conn
// has is stale (see staleDeadline), across requests; otherwise before
// every write. err is the first write's error, which tells a relay's
// failed write from its failed read.
type deadlineWriter struct {
	c    net.Conn
	idle time.Duration
	err  error
}

func (d *deadlineWriter) Write(p []byte) (n int, err error) {
	if tc, ok := d.c.(*conn); ok {
		tc.extendWriteDeadline(d.idle)
		n, err = tc.Conn.Write(p)
	} else {
		d.c.SetWriteDeadline(time.Now().Add(d.idle))
		n, err = d.c.Write(p)
	}
	if err != nil && d.err == nil {
		d.err = err
	}
	return n, err
}

// deadlineSlack is the part of an idle timeout by which a deadline may lag
// behind now plus the timeout before it is set again: setting a deadline
// updates a runtime timer under a lock, which showed in the profile of
// every request. An idle timeout is then kept within 1/16 of its length
// (two minutes: between 1 min 52.5 s and 2 min), never longer.
const deadlineSlack = 16

// staleDeadline reports whether a deadline at, set for an idle timeout,
// must be set again at now: it is unset, later than now+idle (it was set
// for a longer timeout), or earlier than now+idle by more than
// idle/deadlineSlack.
func staleDeadline(at, now time.Time, idle time.Duration) bool {
	want := now.Add(idle)
	return at.IsZero() || at.After(want) || want.Sub(at) > idle/deadlineSlack
}

// skipTrailers reads the trailer section after a chunked body's last
// chunk and drops it, so the next request on the connection starts where
// it should. It reads at most max bytes.
func skipTrailers(br *bufio.Reader, max int) error {
	read := 0
	for {
		line, err := br.ReadSlice('\n')
		read += len(line)
		if err != nil {
			return err
		}
		if read > max {
			return errors.New("chunked trailers too large")
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// maxLoggedPath bounds the path in a record, so that one client cannot
// fill the log and the ring with long paths.
const maxLoggedPath = 1024

// redactTarget returns what of a target that could not be used may be
// logged: no scheme, no userinfo, no query or fragment, at most 200 bytes.
func redactTarget(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	authority := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		authority = s[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		s = s[i+1:]
	}
	return truncate(s, 200)
}

// truncate cuts s to at most n bytes for a log record.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
