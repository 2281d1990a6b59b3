package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/gateway/secretscrub"
	"github.com/sbx-dev/sbx/netpolicy"
)

// reasonCARejected is the close record's error when the client ends the
// TLS handshake of an inspected tunnel (docs/inspection.md): it does not trust
// the sandbox's CA, most likely because it pins its server's certificate.
const reasonCARejected = "client rejected the sbx CA"

// inspectProtos are the protocols an inspected tunnel offers its client.
var inspectProtos = []string{"h2", "http/1.1"}

// inspects reports whether the gateway terminates TLS for t under pol:
// the policy asks for it (netpolicy's Inspects) or a mock LLM answers for
// t.Host, or a secret is sent to t (docs/secrets.md), or t is a login's
// token endpoint (docs/login.md), and the gateway has a CA.
func (p *pipeline) inspects(pol *netpolicy.Policy, t netpolicy.Target) bool {
	s := p.s
	return s.cfg.CA != nil && (pol.Inspects(t.Host, t.Port) || s.mocks.forHost(t.Host) != nil || s.cfg.RecordLLM[t.Host] != nil || s.secrets.Bound(t.Host, t.Port) || s.tokenEndpoint(t.Host, t.Port) != nil)
}

// tokenEndpoint is the login whose token endpoint is host (normalized)
// on port; nil for none.
func (s *Server) tokenEndpoint(host string, port uint16) *login.Login {
	for _, l := range s.cfg.Logins {
		if l.TokenEndpoint(host, port) {
			return l
		}
	}
	return nil
}

// tunnelDecision is how a tunnel to t that the gateway inspects is
// decided: netpolicy's DecideTunnel, or, for a mocked host, allowed.
func (p *pipeline) tunnelDecision(pol *netpolicy.Policy, t netpolicy.Target) netpolicy.Decision {
	s := p.s
	if s.mocks.forHost(t.Host) != nil {
		return s.mocks.tunnelDecision(t.Host)
	}
	return pol.DecideTunnel(t)
}

// inspectTunnel serves a tunnel to t that the pipeline opened for
// inspection (its inspect step): the client's TLS is terminated with a
// certificate for t.Host from the sandbox's CA, and every HTTP/1.1 or
// HTTP/2 request in it goes through the pipeline on its own, decided and
// logged as kind https with its method and path, then answered by an
// intercept, a 403, or the upstream over TLS verified against the host's
// roots. closeRec is the tunnel's close record (kind connect or
// transparent), which inspectTunnel logs: it counts the tunnel's bytes and
// says how it ended (reasonCARejected when the client would not trust the
// CA). first are client bytes already read (a transparent connection's
// ClientHello); proxied says a CONNECT client waits for a 200 first.
func (s *Server) inspectTunnel(ctx context.Context, c *conn, closeRec *decisionlog.Record, t netpolicy.Target, start time.Time, proxied bool, first []byte) {
	// Not s.end: the tunnel's bytes are its requests' bytes, which their
	// own close records count in the metrics.
	defer func() {
		closeRec.Duration = time.Since(start)
		s.emit(closeRec)
	}()
	if proxied {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			closeRec.Error = "writing to the client: " + err.Error()
			return
		}
	}
	closeRec.Status = http.StatusOK
	s.metrics.tunnelOpened()
	defer s.metrics.tunnelClosed()

	// The client's side: what was read already, then its buffer, then
	// the socket; counted for the close record. The buffer is this
	// tunnel's from here on, never given back to readerPool: net/http may
	// go on reading through it after it reported the connection closed
	// (the background read it starts when it drains a request body its
	// handler left, TestFaultInspectedExpectContinueTeardown), and the
	// pool would hand it to another client while that read runs. It is
	// garbage once nothing reads it.
	br := c.br
	c.br = nil
	cc := &inspectedConn{Conn: c.Conn, r: io.MultiReader(strings.NewReader(string(first)), br)}
	defer func() { closeRec.BytesOut, closeRec.BytesIn = cc.in.Load(), cc.out.Load() }()
	// A CONNECT may carry plain HTTP (to port 80, say): the client's
	// first byte tells, and then its requests are served as they are.
	isTLS := true
	if len(first) == 0 {
		c.SetReadDeadline(time.Now().Add(s.limits.HeaderReadTimeout))
		b, err := br.Peek(1)
		c.SetReadDeadline(time.Time{})
		if err != nil {
			closeRec.Error = "the client sent nothing: " + err.Error()
			return
		}
		isTLS = b[0] == 0x16
	}
	var served net.Conn = cc
	if isTLS {
		cfg := s.ca.Load().ServerConfig(t.Host, inspectProtos)
		var certSent atomic.Bool // the client has seen the CA's certificate
		getCert := cfg.GetCertificate
		cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			certSent.Store(true)
			return getCert(hello)
		}
		scan := &alertScan{Conn: cc}
		tc := tls.Server(scan, cfg)
		hctx, cancel := context.WithTimeout(ctx, s.limits.HeaderReadTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			closeRec.Error = handshakeError(err, certSent.Load(), scan.alert, t.Host)
			tc.Close()
			return
		}
		// The handshake's reads are done: Serve's start orders this
		// before the next one.
		scan.done = true
		if sni := tc.ConnectionState().ServerName; sni != "" && !strings.EqualFold(strings.TrimSuffix(sni, "."), t.Host) {
			closeRec.Action, closeRec.Rule, closeRec.Enforced = string(netpolicy.Block), netpolicy.RuleInvalid, true
			closeRec.Reason = fmt.Sprintf("%s: the TLS server name is %s, not %s", reasonSNIMismatch, truncate(sni, 80), t.Host)
			tc.Close()
			return
		}
		served = tc
	}

	// net/http serves the decrypted connection, HTTP/2 when the client
	// chose it by ALPN; Serve returns at once (the listener has one
	// connection), and the connection's end is awaited through
	// ConnState.
	done := make(chan struct{})
	var once sync.Once
	h := &inspectHandler{s: s, c: c, t: t, tls: isTLS}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.limits.HeaderReadTimeout,
		IdleTimeout:       s.limits.IdleConnTimeout,
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	srv.Serve(&oneConnListener{c: served})
	select {
	case <-done:
	case <-ctx.Done(): // the gateway is closing
		served.Close()
		<-done
	}
	// An HTTP/2 connection ends before its streams' handlers return:
	// their close records come before the tunnel's.
	h.running.Wait()
	h.closeUpstream()
	if f := h.fault.Load(); f != nil {
		closeRec.Error = *f
		return
	}
	if h.served.Load() == 0 && isTLS && closeRec.Error == "" {
		closeRec.Error = "the client closed the connection after the TLS handshake without a request (it may pin certificates: " + reasonCARejected + ")"
	}
}

// certificateAlerts are the TLS alerts a client sends when it refuses
// the server's certificate (RFC 8446 §6.2), by description, with the
// messages Go gives them ("remote error: tls: " and the message).
var certificateAlerts = map[byte]string{
	42: "bad certificate",
	43: "unsupported certificate",
	44: "certificate revoked",
	45: "certificate expired",
	46: "certificate unknown",
	48: "unknown certificate authority",
}

// handshakeError says why an inspected tunnel's TLS handshake with the
// client failed, and when the client refused the sandbox's CA, how to fix
// that for host. The client refused it when it answered the certificate
// with a certificate alert, one Go read (err is its remote error) or one
// Go could not read, plaintext (the alertScan's alert, certificateAlerts'
// description or 0); or when it hung up (no alert, as some pinning
// clients do) after certSent, once it had the certificate.
func handshakeError(err error, certSent bool, alert byte, host string) string {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return "the client does not speak TLS: " + err.Error()
	}
	fix := "; to fix, have the client trust the sandbox's CA through SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE or the other trust variables, or stop inspecting " + host
	msg := err.Error()
	if isCertificateAlert(err) {
		return reasonCARejected + ": " + msg + fix
	}
	if a, ok := certificateAlerts[alert]; ok && certSent {
		return reasonCARejected + ": remote error: tls: " + a + " (an unencrypted alert; the server read " + msg + ")" + fix
	}
	if certSent && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		return reasonCARejected + " (it closed the connection on the certificate): " + msg + fix
	}
	return "TLS handshake with the client: " + msg
}

// isCertificateAlert reports whether err is a certificate alert of the
// client's that Go read: a *net.OpError "remote error" whose error is the
// alert. Go keeps the alert's type unexported, so its description is
// told by its message, which is tls.AlertError's for the same value.
func isCertificateAlert(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	for d := range certificateAlerts {
		if op.Err.Error() == tls.AlertError(d).Error() {
			return true
		}
	}
	return false
}

// alertScan follows the TLS records a client sends in an inspected
// tunnel's handshake, to find the certificate alert Go's server cannot
// read: over TLS 1.3 a client such as curl or Python (OpenSSL) that
// refuses the certificate sends its alert unencrypted (it has not yet
// switched to its handshake keys), while the server expects encrypted
// records from then on and reports only a bad record MAC. A record of type
// alert with a two-byte body is such an alert whatever the version: an
// encrypted record is longer (its AEAD tag alone is 16 bytes), and TLS 1.3
// carries encrypted alerts as application data. The scan only reads what
// passes; the handshake goes on or fails as it would without it.
type alertScan struct {
	net.Conn
	off   int     // bytes of the current record read, its 5-byte header included
	rec   [7]byte // the current record's header and the first two bytes of its body
	alert byte    // the description of the last fatal alert seen unencrypted; 0 none
	done  bool    // the handshake is over: reads pass through unscanned
}

func (a *alertScan) Read(p []byte) (int, error) {
	n, err := a.Conn.Read(p)
	if !a.done {
		a.scan(p[:n])
	}
	return n, err
}

// scan follows the record stream through b, the next bytes the client sent.
func (a *alertScan) scan(b []byte) {
	const header = 5
	for len(b) > 0 {
		var k int
		if a.off < header {
			k = copy(a.rec[a.off:header], b)
		} else {
			k = min(len(b), a.size()-a.off)
			if a.off < len(a.rec) {
				copy(a.rec[a.off:], b[:k])
			}
		}
		a.off += k
		b = b[k:]
		if a.off >= header && a.off == a.size() {
			// An alert (21) of TLS (major version 3), two bytes long:
			// level fatal (2), then the description.
			if a.rec[0] == 21 && a.rec[1] == 3 && a.size() == header+2 && a.rec[5] == 2 {
				a.alert = a.rec[6]
			}
			a.off = 0
		}
	}
}

// size is the length of the current record, header included; a.off is at
// least the header's.
func (a *alertScan) size() int { return 5 + (int(a.rec[3])<<8 | int(a.rec[4])) }

// inspectedConn is the client's side of an inspected tunnel: reads come
// from r (bytes already read, then the connection's buffer), and both
// directions are counted.
type inspectedConn struct {
	net.Conn
	r       io.Reader
	in, out atomic.Int64 // from and to the client
}

func (c *inspectedConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *inspectedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// oneConnListener hands out one connection, then says it is closed.
type oneConnListener struct {
	mu sync.Mutex
	c  net.Conn
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		return nil, net.ErrClosed
	}
	c := l.c
	l.c = nil
	return c, nil
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "inspected" }

// inspectHandler decides and answers the requests of one inspected
// tunnel to t: HTTPS (kind https) when the client spoke TLS in it, else
// plain HTTP (kind http), which goes upstream as it came.
type inspectHandler struct {
	s   *Server
	c   *conn
	t   netpolicy.Target
	tls bool

	running sync.WaitGroup         // the requests being served
	served  atomic.Int64           // requests seen
	fault   atomic.Pointer[string] // the error of the first request that panicked

	// upMu guards up, this tunnel's own upstream connection, which its
	// requests use one at a time (HTTP/1.1 clients send them so); a
	// request that finds it busy (HTTP/2 streams at once) goes through
	// the shared transport instead.
	upMu sync.Mutex
	up   *inlineUpstream
}

// recoverRequest, deferred in ServeHTTP, turns a panic while serving a
// request into the end of its tunnel, as recoverConn does for a
// connection (net/http would recover it unseen): it logs the panic with
// its stack, sets the error "gateway error: panic: ..." on closeRec (the
// request's close record, nil before there is one) and on the tunnel's
// close record, closes the client's connection, and aborts the handler.
// http.ErrAbortHandler (an answer cut short on purpose) passes through.
func (h *inspectHandler) recoverRequest(closeRec *decisionlog.Record) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler {
		panic(p)
	}
	msg := "gateway error: panic: " + truncate(fmt.Sprint(p), 200)
	if closeRec != nil {
		closeRec.Error = msg
	}
	h.fault.CompareAndSwap(nil, &msg)
	h.c.Conn.Close()
	h.s.logger.Error("panic serving an inspected request: its tunnel is closed, the gateway goes on", "client", h.c.clientText, "host", h.t.Host, "panic", p, "stack", string(debug.Stack()))
	h.s.metrics.panicked("inspected")
	panic(http.ErrAbortHandler)
}

// inlineUpstream is an HTTP/1.1 connection over TLS to one guarded
// address of the tunnel's host, made under one policy version.
type inlineUpstream struct {
	conn    *tls.Conn
	raw     net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	version uint64
	addr    netip.Addr
}

func (u *inlineUpstream) close(s *Server) {
	s.untrackUpstream(u.raw)
	u.conn.Close()
}

// inlineRoundTrip sends out on the tunnel's own upstream connection,
// dialing it (to the first of addrs that answers) when there is none, or
// when the one there was made under another policy version or to an
// address addrs no longer holds. It returns false when the connection is
// busy, and release, which must be called once the answer's body is done
// with: it keeps the connection for the next request when the answer was
// read to its end, else closes it.
func (h *inspectHandler) inlineRoundTrip(ctx context.Context, out *http.Request, addrs []netip.Addr, version uint64) (resp *http.Response, release func(), upstream string, ok bool, err error) {
	if !h.upMu.TryLock() {
		// Busy: the caller goes through the shared transport, and defers
		// release all the same (TestInspectUpstreamVerificationH2Streams).
		return nil, func() {}, "", false, nil
	}
	// The lock goes to done, or to release; a panic (in a dial, say)
	// gives it back here, so the tunnel's end (closeUpstream) does not
	// wait for it forever (TestFaultPanicServingOneConnection).
	held := true
	defer func() {
		if held {
			h.upMu.Unlock()
		}
	}()
	s := h.s
	u := h.up
	h.up = nil
	if u != nil && (u.version != version || !slices.Contains(addrs, u.addr)) {
		u.close(s)
		u = nil
	}
	done := func(u *inlineUpstream, keep bool) {
		held = false
		if keep {
			h.up = u
		} else if u != nil {
			u.close(s)
		}
		h.upMu.Unlock()
	}
	dial := func() (*inlineUpstream, error) {
		raw, err := s.dialFirst(ctx, addrs, h.t.Port)
		if err != nil {
			return nil, err
		}
		if !s.trackUpstream(raw) {
			raw.Close()
			return nil, net.ErrClosed
		}
		tc := tls.Client(raw, upstreamTLSConfig(h.t.Host, s.cfg.UpstreamRoots, "http/1.1"))
		ip, _ := netip.ParseAddrPort(raw.RemoteAddr().String())
		nu := &inlineUpstream{conn: tc, raw: raw, br: bufio.NewReaderSize(tc, 16<<10), bw: bufio.NewWriterSize(tc, 16<<10), version: version, addr: ip.Addr().Unmap()}
		hctx, cancel := context.WithTimeout(ctx, s.limits.HeaderReadTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			nu.close(s)
			return nil, err
		}
		return nu, nil
	}
	// exchange writes out and reads its answer's head on u.
	exchange := func(u *inlineUpstream) (*http.Response, error) {
		u.conn.SetDeadline(time.Now().Add(s.limits.ResponseTimeout))
		if err := out.Write(u.bw); err != nil {
			return nil, err
		}
		if err := u.bw.Flush(); err != nil {
			return nil, err
		}
		for {
			resp, err := http.ReadResponse(u.br, out)
			if err != nil {
				return nil, err
			}
			if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
				return resp, nil
			}
			io.Copy(io.Discard, resp.Body) // 1xx: informational, the answer follows
		}
	}
	reused := u != nil
	if u == nil {
		if u, err = dial(); err != nil {
			done(nil, false)
			return nil, nil, "", true, err
		}
	}
	resp, err = exchange(u)
	if err != nil && reused && out.Body == nil {
		// A kept connection the upstream closed while it was idle: once
		// more on a new one, as http.Transport retries a request that has
		// no body.
		u.close(s)
		if u, err = dial(); err == nil {
			resp, err = exchange(u)
		} // u is nil when the dial failed
	}
	if err != nil {
		done(u, false)
		return nil, nil, "", true, err
	}
	u.conn.SetWriteDeadline(time.Time{})
	body := &eofBody{rc: resp.Body, conn: u.conn, idle: s.limits.IdleConnTimeout}
	resp.Body = body
	var once sync.Once
	release = func() {
		once.Do(func() {
			done(u, body.eof && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols)
		})
	}
	held = false // release's now
	return resp, release, u.raw.RemoteAddr().String(), true, nil
}

// closeUpstream closes the tunnel's own upstream connection, when the
// tunnel ends.
func (h *inspectHandler) closeUpstream() {
	h.upMu.Lock()
	defer h.upMu.Unlock()
	if h.up != nil {
		h.up.close(h.s)
		h.up = nil
	}
}

// eofBody is an inline answer's body: each read renews the connection's
// read deadline idle ahead, so a stalled upstream cannot hold the
// request, and it notes whether the body was read to its end (only then
// may the connection carry another request).
type eofBody struct {
	rc   io.ReadCloser
	conn net.Conn
	idle time.Duration
	eof  bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *eofBody) Close() error { return b.rc.Close() }

// inspectAddrsKey carries the guarded addresses of a request's upstream to
// the transport's dial, which dials nothing else.
type inspectAddrsKey struct{}

func (h *inspectHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.running.Add(1)
	defer h.running.Done()
	defer h.recoverRequest(nil)
	h.served.Add(1)
	s, t := h.s, h.t
	start := time.Now()
	kind, scheme := decisionlog.KindHTTPS, "https"
	if !h.tls {
		kind, scheme = decisionlog.KindHTTP, "http"
	}
	path := r.URL.EscapedPath()
	hostport := joinHostPort(t.Host, t.Port)
	in := entry{door: doorInspected, kind: kind, c: h.c, target: netpolicy.Target{Host: t.Host, Port: t.Port, Method: r.Method, Path: path},
		raw: r.RequestURI, header: r.Header, tls: h.tls, start: start}
	in.invalid, in.invalidStatus = innerInvalid(r, path, t, h.tls)
	o := s.pipe.run(r.Context(), &in)
	switch o.next {
	case nextMock:
		s.mocks.serve(o.mock, w, r, o.rec, start)
		return
	case nextAnswer:
		if o.closeRec != nil {
			defer s.pipe.end(o.closeRec, start)
			defer h.recoverRequest(o.closeRec)
		}
		respond(w, o.answer.status, o.answer.contentType, o.answer.body, o.answer.extra)
		return
	}
	closeRec, addrs, snap := o.closeRec, o.addrs, o.snap
	what := r.Method + " " + scheme + "://" + hostport + path
	ctx := r.Context()
	defer s.pipe.end(closeRec, start)
	defer h.recoverRequest(closeRec)

	out := r.Clone(context.WithValue(ctx, inspectAddrsKey{}, addrs))
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = scheme, hostport
	out.Host = hostport
	if t.Port == 443 && h.tls || t.Port == 80 && !h.tls {
		out.Host = t.Host
	}
	te := r.Header.Get("Te")
	removeHopByHop(out.Header, false)
	if strings.Contains(strings.ToLower(te), "trailers") {
		out.Header.Set("Te", "trailers") // gRPC needs it, as httputil.ReverseProxy keeps it
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // Go would add its own, as forwardHTTP keeps it out
	}
	sc := s.secrets.ScrubberFor(t.Host, t.Port) // a bound host's answer comes back without the values (scrub.go)
	if sc != nil {
		askIdentity(out.Header)
	}
	rc := http.NewResponseController(w)
	idle := s.limits.IdleConnTimeout
	tg := s.secrets.GuardTrailers(r, &controlledReader{r: r.Body, rc: rc, idle: idle})
	body := &countingReader{r: tg}
	if r.Body == nil || r.Body == http.NoBody {
		body.r = http.NoBody
	}
	out.Body = io.NopCloser(body)
	if r.ContentLength == 0 && (r.Body == nil || r.Body == http.NoBody) {
		out.Body = nil
	}
	// The tunnel's own upstream connection when it is free (no extra
	// goroutines, no pool: BenchmarkInspectedRequests), else the shared
	// transport; a recorded host always goes through its recorder.
	var resp *http.Response
	var err error
	var upstreamAddr string
	release := func() {}
	inlined := false
	recorder := s.cfg.RecordLLM[t.Host]
	inject := o.inject
	refresher := s.tokenEndpoint(t.Host, t.Port) // a login's refresh is performed by the gateway (docs/login.md)
	if !h.tls {
		refresher = nil
	}
	if recorder == nil && refresher == nil && h.tls && out.Header.Get("Expect") == "" {
		in := out
		if inject { // the values on a copy: out keeps the placeholders
			in = s.secrets.WithValues(out, t.Host, t.Port)
		}
		resp, release, upstreamAddr, inlined, err = h.inlineRoundTrip(ctx, in, addrs, snap.Version())
	}
	if !inlined {
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { upstreamAddr = ci.Conn.RemoteAddr().String() },
		}))
		var rt http.RoundTripper = s.inspect.get(s, snap.Version())
		if inject {
			rt = s.secrets.Injector(t.Host, t.Port, rt)
		}
		if refresher != nil {
			rt = refresher.Refresher(rt, closeRec)
		}
		if recorder != nil {
			if sc != nil { // the recording gets the answer as the client does
				rt = secrets.Scrubbing(sc, secrets.NoteFound(closeRec), rt)
			}
			rt = recorder.Through(rt) // --record-llm: what the API answers becomes a script
		}
		resp, err = rt.RoundTrip(out)
	}
	closeRec.Upstream = upstreamAddr
	closeRec.BytesOut = body.n.Load()
	if sec := tg.Found(); sec != nil && err != nil { // a placeholder in a trailer
		d := sec.BlockTrailer(closeRec, t.Host)
		respond(w, http.StatusForbidden, "", s.pipe.blockText(what, hostport, d), blockHeaders(d))
		return
	}
	if err != nil {
		closeRec.Status, closeRec.Error = inspectUpstreamError(err)
		// An upstream may echo the credential in a broken answer.
		closeRec.Error = withoutHeaderValues(s.secrets.Redact(sc.String(closeRec.Error, nil)), out.Header)
		respond(w, closeRec.Status, "", "sbx: upstream "+hostport+" failed: "+closeRec.Error+"\n", nil)
		return
	}
	defer resp.Body.Close()
	defer release() // before the body is closed: an unread body then closes the connection instead of draining it
	closeRec.Status = resp.StatusCode
	removeHopByHop(resp.Header, false)
	var respBody io.Reader = resp.Body
	var found func(string)
	if sc != nil {
		found = secrets.NoteFound(closeRec)
		b, closeBody, refusal := secrets.ScrubResponse(resp, sc, found)
		if refusal != "" {
			closeRec.Status, closeRec.Error = http.StatusBadGateway, refusal
			respond(w, http.StatusBadGateway, "", "sbx: "+refusal+"\n", nil)
			return
		}
		defer closeBody()
		respBody = b
	}
	dst := w.Header()
	for k, vs := range resp.Header {
		dst[k] = vs
	}
	for k := range resp.Trailer {
		dst.Add("Trailer", k)
	}
	w.WriteHeader(resp.StatusCode)
	if resp.ContentLength < 0 {
		rc.Flush() // the head now: a stream (server-sent events, a watch) may wait for its first event
	}
	cw := &countingWriter{w: w}
	var bodyW io.Writer = flushWriter{w: cw, rc: rc, idle: idle}
	var sw *secretscrub.Writer
	if sc != nil {
		sw = sc.NewWriter(bodyW, found)
		bodyW = sw
	}
	rerr, werr := relayBody(bodyW, respBody)
	if werr == nil && rerr == nil && sw != nil {
		werr = sw.Flush() // the bytes held as a value's possible start: the body ended, they are none
	}
	closeRec.BytesIn = cw.n
	switch {
	case werr != nil:
		closeRec.Error = "relaying the response: writing to the client: " + werr.Error()
	case rerr != nil:
		// The upstream failed mid-answer: the client must not take what
		// it got for the whole of it. Aborting the handler makes net/http
		// end the response as failed: HTTP/1.1 closes the connection
		// without the last chunk, HTTP/2 resets the stream. The deferred
		// close record and releases run as the panic unwinds.
		closeRec.Error = "relaying the response: " + withoutHeaderValues(s.secrets.Redact(upstreamBodyError(rerr)), out.Header)
		panic(http.ErrAbortHandler)
	}
	if sc != nil {
		secrets.ScrubHeader(resp.Trailer, sc, found)
	}
	for k, vs := range resp.Trailer {
		dst[k] = vs
	}
}

// relayBody copies body to w, each read's bytes as they come, until body
// ends; it returns the error of the read or of the write that ended it.
func relayBody(w io.Writer, body io.Reader) (rerr, werr error) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		switch {
		case err == io.EOF:
			return nil, nil
		case err != nil:
			return err, nil
		}
	}
}

// innerRefusal says why a request inside an inspected tunnel cannot be
// forwarded as it was decided, or "" when it can.
func innerRefusal(r *http.Request, path string) string {
	switch {
	case r.Method == http.MethodConnect:
		return "a CONNECT inside an inspected tunnel is not forwarded"
	case r.Header.Get(":protocol") != "" || r.Proto == "HTTP/2.0" && isWebSocket(r.Header):
		return "an extended CONNECT (WebSocket) inside an inspected tunnel is not forwarded yet"
	case r.URL.Opaque != "" || !strings.HasPrefix(path, "/"):
		return fmt.Sprintf("the request target %q is not an absolute path", truncate(r.RequestURI, 80))
	}
	return ""
}

// innerInvalid is the refusal of r, a request inside an inspected tunnel
// to t, and its status, when the gateway would decide it one way and send
// it another: a target that is not an absolute path (the decided path
// would not be the one sent), a CONNECT or an extended CONNECT (HTTP/2's
// :protocol, WebSocket) inside the tunnel, which would open a stream with
// no tunnel's limits, or a Host that is not the tunnel's (it would be
// decided as one host and sent to another). It is nil when there is none.
func innerInvalid(r *http.Request, path string, t netpolicy.Target, tls bool) (*netpolicy.Decision, int) {
	if refusal := innerRefusal(r, path); refusal != "" {
		return &netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid, Reason: refusal}, http.StatusBadRequest
	}
	defaultPort := uint16(443)
	if !tls {
		defaultPort = 80
	}
	if !sameAuthority(r.Host, t, defaultPort) {
		return &netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid,
			Reason: fmt.Sprintf("host mismatch: the request is for %s in a tunnel to %s", truncate(redactTarget(r.Host), 80), joinHostPort(t.Host, t.Port))}, http.StatusForbidden
	}
	return nil, 0
}

// sameAuthority reports whether a request's Host names t: its host (IDN
// and case as netpolicy normalizes them) and its port, or none for the
// scheme's default port.
func sameAuthority(authority string, t netpolicy.Target, defaultPort uint16) bool {
	host, port := authority, ""
	if h, p, err := net.SplitHostPort(authority); err == nil {
		host, port = h, p
	}
	n, err := netpolicy.NormalizeHost(host)
	if err != nil || n != t.Host {
		return false
	}
	if port == "" {
		return t.Port == defaultPort
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && uint16(p) == t.Port
}

// respond writes a response the gateway makes itself.
func respond(w http.ResponseWriter, status int, contentType, body string, extra [][2]string) {
	h := w.Header()
	if contentType == "" {
		contentType = "text/plain; charset=utf-8"
	}
	h.Set("Content-Type", contentType)
	for _, kv := range extra {
		h.Add(kv[0], headerSafe(kv[1]))
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// inspectUpstreamError is the status and logged error of a failed round
// trip to an inspected upstream: 502 for a certificate that does not
// verify (the request never reached anyone the policy named), as for any
// other failure, 504 for a timeout.
func inspectUpstreamError(err error) (int, string) {
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	var tve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &tve), errors.As(err, &uae), errors.As(err, &hne), errors.As(err, &cie):
		return http.StatusBadGateway, "upstream certificate: " + err.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, err.Error()
	}
	return http.StatusBadGateway, err.Error()
}

// withheld stands in a logged error for text an upstream quoted back.
const withheld = "(withheld)"

// withoutHeaderValues returns an upstream error's text fit for the log,
// where header values never go: net/http quotes the line of an answer it
// could not read ("malformed MIME header: missing colon: %q", "bad
// Content-Length %q"), and an upstream may put the request's own header
// fields there, as real services quote request headers back. Every
// quoted string is withheld, and so is any value of h (and any word of
// one) of 8 bytes or more that is left.
func withoutHeaderValues(msg string, h http.Header) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			b.WriteString(msg)
			break
		}
		b.WriteString(msg[:i])
		q, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			b.WriteString(withheld) // an unterminated quote: withhold the rest
			msg = ""
			break
		}
		b.WriteString(withheld)
		msg = msg[i+len(q):]
	}
	msg = b.String()
	for _, vs := range h {
		for _, v := range vs {
			for _, w := range append(strings.Fields(v), v) {
				if len(w) >= 8 {
					msg = strings.ReplaceAll(msg, w, withheld)
				}
			}
		}
	}
	return msg
}

// flushWriter flushes after every write, so a streamed response (server
// sent events, a long poll) reaches the client as it comes, and renews the
// write deadline idle ahead first, so a client that stops reading cannot
// hold the request, its tunnel and its upstream connection forever.
type flushWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
}

func (fw flushWriter) Write(p []byte) (int, error) {
	fw.rc.SetWriteDeadline(time.Now().Add(fw.idle))
	n, err := fw.w.Write(p)
	if err == nil {
		err = fw.rc.Flush()
	}
	return n, err
}

// controlledReader reads a request body, renewing the read deadline idle
// ahead first, so a client that stalls mid-body cannot hold the request.
type controlledReader struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
}

func (c *controlledReader) Read(p []byte) (int, error) {
	c.rc.SetReadDeadline(time.Now().Add(c.idle))
	return c.r.Read(p)
}

// inspectTransports hands out the transport of the current policy
// version. A transport pools its upstream connections by host and port,
// and a pooled connection is not dialed again: each policy version gets a
// transport of its own, so that a connection the guard passed under one
// policy never carries a request decided under the next (whose guard may
// refuse that address), and the old one's idle connections are closed.
type inspectTransports struct {
	mu      sync.Mutex
	version uint64
	tr      *http.Transport
}

// get returns the transport for policy version v, making it the first
// time v is seen.
func (t *inspectTransports) get(s *Server, v uint64) *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tr == nil || t.version != v {
		if t.tr != nil {
			t.tr.CloseIdleConnections() // requests under way finish on it
		}
		t.tr, t.version = newInspectTransport(s, s.cfg.UpstreamRoots), v
	}
	return t.tr
}

// closeIdle closes the idle upstream connections (Server.Close).
func (t *inspectTransports) closeIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tr != nil {
		t.tr.CloseIdleConnections()
	}
}

// upstreamTLSConfig is the TLS configuration of every connection to the
// upstream of an inspected request, the tunnel's own (inlineRoundTrip)
// and the shared transport's: the upstream's certificate verified against
// roots (the host's when nil) for the name host, TLS 1.2 at least, and
// nextProtos offered by ALPN, as the path can speak them. host is empty
// for the shared transport only, which names each connection's host
// itself, the request's (the tunnel's): a ServerName set here would be
// used for every host the transport dials. Nothing else makes a
// tls.Config for an upstream (TestInspectUpstreamVerification*).
func upstreamTLSConfig(host string, roots *x509.CertPool, nextProtos ...string) *tls.Config {
	return &tls.Config{ServerName: host, RootCAs: roots, NextProtos: nextProtos, MinVersion: tls.VersionTLS12}
}

// newInspectTransport returns a transport s's inspected requests go
// upstream through: TLS verified against roots (the host's when nil), the
// SNI the request's host, HTTP/2 when the upstream offers it, and a dial
// that connects only to the guarded addresses the request carries.
func newInspectTransport(s *Server, roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			addrs, _ := ctx.Value(inspectAddrsKey{}).([]netip.Addr)
			_, p, err := net.SplitHostPort(addr)
			if len(addrs) == 0 || err != nil {
				return nil, fmt.Errorf("no guarded address to dial for %s", addr)
			}
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, err
			}
			up, err := s.dialFirst(ctx, addrs, uint16(port))
			if err != nil {
				return nil, err
			}
			if !s.trackUpstream(up) {
				up.Close()
				return nil, net.ErrClosed
			}
			return &untrackOnClose{Conn: up, s: s}, nil
		},
		TLSClientConfig:        upstreamTLSConfig("", roots, "h2", "http/1.1"),
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    s.limits.HeaderReadTimeout,
		ResponseHeaderTimeout:  s.limits.ResponseTimeout,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConnsPerHost:    64,
		DisableCompression:     true,
		MaxResponseHeaderBytes: int64(s.limits.MaxHeaderBytes),
	}
}

// untrackOnClose stops tracking an upstream connection when the transport
// closes it.
type untrackOnClose struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (u *untrackOnClose) Close() error {
	u.once.Do(func() { u.s.untrackUpstream(u.Conn) })
	return u.Conn.Close()
}
