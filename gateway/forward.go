package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// hopByHop are the headers that concern one connection only and are never
// forwarded (DESIGN.md §4.3), besides those a Connection header names.
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
		h.Del(name)
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
	hasBody := head.Chunked || head.ContentLength > 0
	// A request whose body the gateway does not read ends the connection.
	keepAlive := !head.Close && !hasBody

	u, serr := parseProxyTarget(head.Target)
	if serr != nil {
		rec := s.newRecord(c, KindHTTP, head.Method, 0)
		rec.Host = truncate(head.Target, 200)
		s.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: serr.Reason}, serr.Status, start)
		writeSimple(c, serr.Status, "", serr.Reason+"\n", true, nil)
		return false
	}
	port := uint16(80)
	if p := u.Port(); p != "" {
		n, _ := strconv.ParseUint(p, 10, 16) // parseProxyTarget checked it
		port = uint16(n)
	}
	t := netpolicy.Target{Host: u.Hostname(), Port: port, Method: head.Method, Path: u.EscapedPath()}
	rec := s.newRecord(c, KindHTTP, head.Method, port)
	rec.Path = t.Path
	snap := s.cfg.Store.Load()
	rec.PolicyVersion = snap.Version()
	d := snap.Policy().Decide(t)
	host, err := netpolicy.NormalizeHost(t.Host)
	if err != nil {
		rec.Host = truncate(t.Host, 200)
	} else {
		rec.Host, t.Host = host, host
	}
	hostport := joinHostPort(rec.Host, port)
	what := describe(head.Method, hostport, t.Path)

	switch {
	case d.Action == netpolicy.Intercept:
		s.finishRefusal(rec, d, interceptStatus(d), start)
		writeIntercept(c, d, !keepAlive)
		return keepAlive
	case d.Action == netpolicy.Block && enforced(snap, d):
		s.finishRefusal(rec, d, http.StatusForbidden, start)
		s.writeBlock(c, what, hostport, d, !keepAlive)
		return keepAlive
	}

	// Allowed, or blocked in audit mode: resolve and guard, then forward.
	addrs, guard, err := s.resolveChecked(ctx, snap.Policy(), t)
	if guard != nil {
		s.finishRefusal(rec, *guard, http.StatusForbidden, start)
		s.writeBlock(c, what, hostport, *guard, !keepAlive)
		return keepAlive
	}
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = d.Action != netpolicy.Block
	s.metrics.request(KindHTTP, d.Action)
	s.metrics.decided(start)
	s.emit(rec)

	closeRec := *rec
	closeRec.Event, closeRec.Time = EventClose, time.Time{}
	defer func() {
		closeRec.Duration = time.Since(start)
		s.metrics.relayed(closeRec.BytesOut, closeRec.BytesIn)
		s.emit(&closeRec)
	}()
	if err != nil {
		closeRec.Status, closeRec.Error = upstreamStatus(err), "resolving "+t.Host+": "+err.Error()
		writeSimple(c, closeRec.Status, "", "sbx: cannot resolve "+t.Host+"\n", !keepAlive, nil)
		return keepAlive
	}
	upstream := netip.AddrPortFrom(addrs[0], port)
	closeRec.Upstream = upstream.String()

	ws := isWebSocket(head.Header)
	out := &http.Request{
		Method:     head.Method,
		URL:        &url.URL{Scheme: "http", Host: upstream.String(), Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery},
		Host:       u.Host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     head.Header.Clone(),
	}
	out.Header.Del("Host")
	removeHopByHop(out.Header, ws)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // Go would add its own
	}
	body := &countingReader{}
	switch {
	case head.Chunked:
		body.r = httputil.NewChunkedReader(c.br)
		out.ContentLength = -1
		out.Body = io.NopCloser(body)
	case head.ContentLength > 0:
		body.r = io.LimitReader(c.br, head.ContentLength)
		out.ContentLength = head.ContentLength
		out.Body = io.NopCloser(body)
	default:
		body.eof = true
	}
	resp, err := s.transport.RoundTrip(out.WithContext(ctx))
	closeRec.BytesOut = body.n
	if err != nil {
		closeRec.Status, closeRec.Error = upstreamStatus(err), err.Error()
		writeSimple(c, closeRec.Status, "", "sbx: upstream "+upstream.String()+" failed: "+err.Error()+"\n", true, nil)
		return false
	}
	defer resp.Body.Close()
	closeRec.Status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols && ws {
		closeRec.BytesIn, closeRec.BytesOut = s.relayUpgrade(c, resp)
		return false
	}
	removeHopByHop(resp.Header, false)
	// Keep-alive needs the whole request body read, and a framing the
	// client understands.
	keepAlive = keepAlive || (!head.Close && body.eof)
	resp.Close = !keepAlive
	resp.Request = out
	if head.ProtoMinor == 0 {
		resp.ProtoMajor, resp.ProtoMinor = 1, 0
		if resp.ContentLength < 0 {
			resp.Close, keepAlive = true, false
		}
	} else {
		resp.ProtoMajor, resp.ProtoMinor = 1, 1
	}
	// One buffered write per response, not one syscall (and, with
	// TCP_NODELAY, one packet) per header line.
	cw := &countingWriter{w: c}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(cw)
	werr := resp.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	closeRec.BytesIn = cw.n
	closeRec.BytesOut = body.n
	if werr != nil {
		closeRec.Error = "writing to the client: " + werr.Error()
		return false
	}
	return keepAlive
}

// writerPool holds the buffers responses are written through.
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// finishRefusal logs a request the gateway answers itself: blocked,
// refused by the guard, invalid or intercepted.
func (s *Server) finishRefusal(rec *Record, d netpolicy.Decision, status int, start time.Time) {
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = true
	rec.Status = status
	s.metrics.request(rec.Kind, d.Action)
	s.metrics.decided(start)
	s.emit(rec)
}

func interceptStatus(d netpolicy.Decision) int {
	if d.Response != nil && d.Response.Status != 0 {
		return d.Response.Status
	}
	return http.StatusOK
}

// relayUpgrade writes a 101 response's head and relays bytes both ways
// until either side closes. It returns the bytes sent to the client and to
// the upstream.
func (s *Server) relayUpgrade(c *conn, resp *http.Response) (in, out int64) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		writeSimple(c, http.StatusBadGateway, "", "sbx: upstream upgrade failed\n", true, nil)
		return 0, 0
	}
	defer up.Close()
	cw := &countingWriter{w: c}
	var b strings.Builder
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(&b)
	b.WriteString("\r\n")
	if _, err := io.WriteString(cw, b.String()); err != nil {
		return cw.n, 0
	}
	done := make(chan int64, 1)
	// This goroutine ends when the client stops sending or up is closed.
	go func() {
		n, _ := io.Copy(up, c.br)
		up.Close()
		done <- n
	}()
	io.Copy(cw, up)
	c.Close()
	return cw.n, <-done
}

// countingReader counts what is read through it and notes EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	eof bool
}

func (cr *countingReader) Read(p []byte) (int, error) {
	if cr.eof {
		return 0, io.EOF
	}
	n, err := cr.r.Read(p)
	cr.n += int64(n)
	if err == io.EOF {
		cr.eof = true
	}
	return n, err
}

// truncate cuts s to at most n bytes for a log record.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
