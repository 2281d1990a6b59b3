package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secretscrub"
)

// This file keeps a secret's value from coming back (docs/secrets.md):
// whatever a host that is sent a value answers (the status line, header
// fields and trailers, the body in any transfer or content coding the
// gateway can decode, server-sent events as they stream, WebSocket
// frames) reaches the sandbox with every secret's value replaced with its
// placeholder. A replacement is logged in the request's close record,
// field secret: the names, never the values.

// noteSecret returns a function that adds a secret's name to rec.Secret
// (names joined with ","), once each.
func noteSecret(rec *decisionlog.Record) func(name string) {
	return func(name string) {
		for n := range strings.SplitSeq(rec.Secret, ",") {
			if n == name {
				return
			}
		}
		if rec.Secret != "" {
			rec.Secret += ","
		}
		rec.Secret += name
	}
}

// askIdentity has a request to a bound host ask for its answer without a
// content coding: the gateway must read the body to scrub it.
func askIdentity(h http.Header) {
	h["Accept-Encoding"] = []string{"identity"}
}

// contentCodings returns the content codings of a response in the order
// they were applied, "identity" left out, lower case; and the reason the
// gateway refuses them ("" when it can decode every one).
func contentCodings(values []string) (codings []string, refusal string) {
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
				continue
			case "gzip", "x-gzip", "deflate", "zstd":
			default:
				return nil, fmt.Sprintf("the upstream answered in Content-Encoding %q, which the gateway cannot decode to replace a secret's value in it", truncate(headerSafe(c), 40))
			}
			codings = append(codings, c)
		}
	}
	if len(codings) > 2 {
		return nil, fmt.Sprintf("the upstream answered in %d content codings; the gateway decodes at most 2", len(codings))
	}
	return codings, ""
}

// decodedBody reads r decoded from codings (contentCodings'), the last
// applied first; close releases the decoders. A decoder starts at the
// first read, so an empty body stays empty.
func decodedBody(r io.Reader, codings []string) (body io.Reader, close func()) {
	var closers []func()
	for i := len(codings) - 1; i >= 0; i-- {
		r = &lazyDecoder{src: r, coding: codings[i], closers: &closers}
	}
	return r, func() {
		for _, c := range closers {
			c()
		}
	}
}

// lazyDecoder decodes src from coding, starting at its first read.
type lazyDecoder struct {
	src     io.Reader
	coding  string
	r       io.Reader
	err     error
	closers *[]func()
}

func (d *lazyDecoder) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open()
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.r.Read(p)
}

func (d *lazyDecoder) open() (io.Reader, error) {
	br := bufio.NewReader(d.src)
	if _, err := br.Peek(1); err == io.EOF {
		return br, nil // an empty body, though said to be coded
	}
	switch d.coding {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("decoding gzip: %w", err)
		}
		*d.closers = append(*d.closers, func() { zr.Close() })
		return zr, nil
	case "deflate":
		// RFC 9110's deflate is zlib's format; some servers send the raw
		// deflate stream instead.
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, fmt.Errorf("decoding deflate: %w", err)
			}
			*d.closers = append(*d.closers, func() { zr.Close() })
			return zr, nil
		}
		fr := flate.NewReader(br)
		*d.closers = append(*d.closers, func() { fr.Close() })
		return fr, nil
	case "zstd":
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return nil, fmt.Errorf("decoding zstd: %w", err)
		}
		*d.closers = append(*d.closers, zr.Close)
		return zr, nil
	}
	return nil, fmt.Errorf("content coding %q", d.coding)
}

// exactReader reads n bytes of r, io.ErrUnexpectedEOF when r ends
// before.
type exactReader struct {
	r io.Reader
	n int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	m, err := e.r.Read(p[:min(int64(len(p)), e.n)])
	e.n -= int64(m)
	if err == io.EOF && e.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return m, err
}

// writeScrubbedResponse is writeResponse for the answer of a host a
// secret is bound to, whose content codings (contentCodings) the gateway
// can decode: the status line, fields and trailers with every value
// replaced; the body decoded (Content-Encoding dropped) and replaced as
// it streams, chunked to an HTTP/1.1 client, else until the connection
// ends (keepAlive then false), so no Content-Length. It returns whether
// br's connection may carry another exchange and whether the client's
// may.
func writeScrubbedResponse(bw *bufio.Writer, br *bufio.Reader, rh *responseHead, method string, minor int, keepAlive bool, codings []string, sc *secretscrub.Scrubber, found func(string)) (reusable, keptAlive bool, err error) {
	hasBody := method != http.MethodHead && bodyAllowedForStatus(rh.Status)
	chunkOut := minor == 1
	if hasBody && !chunkOut {
		keepAlive = false
	}
	rh.Reason = []byte(sc.String(string(rh.Reason), found))
	rh.writeStatusLine(bw, minor)
	for i, f := range rh.Fields {
		if rh.endToEnd(i) && !asciiEqualFold(f.Name, "Content-Encoding") {
			bw.WriteString(sc.String(string(f.Name), found))
			bw.WriteString(": ")
			bw.WriteString(sc.String(string(f.Value), found))
			bw.WriteString("\r\n")
		}
	}
	if hasBody && chunkOut {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !keepAlive {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if !hasBody {
		return true, keepAlive, nil
	}

	bodyLen := rh.bodyLength(method)
	var raw io.Reader
	switch {
	case bodyLen >= 0:
		raw = &exactReader{r: br, n: bodyLen}
	case rh.Chunked:
		raw = httputil.NewChunkedReader(br)
	default:
		raw = br
	}
	body, closeBody := decodedBody(raw, codings)
	defer closeBody()
	var out io.Writer = bw
	var cwr io.WriteCloser
	if chunkOut {
		cwr = httputil.NewChunkedWriter(bw)
		out = cwr
	}
	sw := sc.NewWriter(out, found)
	if err := copyChunks(sw, body); err != nil {
		return false, keepAlive, err
	}
	if err := sw.Flush(); err != nil {
		return false, keepAlive, err
	}
	// What a decoder left of the body (data past the coded stream's end)
	// is read too, so that the connection's next answer starts in place.
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return false, keepAlive, err
	}
	if chunkOut {
		cwr.Close() // the last chunk, "0\r\n"; the trailers follow
	}
	if rh.Chunked {
		err = readTrailers(br, maxResponseHeadBytes, func(f headerField) {
			if chunkOut {
				bw.WriteString(sc.String(string(f.Name), found))
				bw.WriteString(": ")
				bw.WriteString(sc.String(string(f.Value), found))
				bw.WriteString("\r\n")
			}
		})
		if err != nil {
			return false, keepAlive, err
		}
	}
	if chunkOut {
		if _, err := bw.WriteString("\r\n"); err != nil {
			return false, keepAlive, err
		}
	}
	return bodyLen >= 0 || rh.Chunked, keepAlive, nil
}

// scrubHeader replaces the values in h's field names and values, in
// place (a name that changes is moved).
func scrubHeader(h http.Header, sc *secretscrub.Scrubber, found func(string)) {
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = sc.String(v, found)
		}
		if k2 := sc.String(k, found); k2 != k {
			delete(h, k)
			h[k2] = vs
		}
	}
}

// scrubbedResponse readies resp, the answer of a host a secret is bound
// to, for the client of an inspected tunnel: its header fields replaced,
// its body decoded (Content-Encoding and Content-Length dropped); it
// returns the body to relay, to be read through a Writer of sc, and the
// reason the answer is refused ("" when it is not): a content coding the
// gateway cannot decode, or a protocol switch (the gateway asked for
// none).
func scrubbedResponse(resp *http.Response, sc *secretscrub.Scrubber, found func(string)) (body io.Reader, closeBody func(), refusal string) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil, nil, "the upstream switched protocols unasked"
	}
	codings, refusal := contentCodings(resp.Header.Values("Content-Encoding"))
	if refusal != "" {
		return nil, nil, refusal
	}
	scrubHeader(resp.Header, sc, found)
	scrubHeader(resp.Trailer, sc, found) // the names declared; the values come after the body
	body, closeBody = resp.Body, func() {}
	if len(codings) > 0 {
		body, closeBody = decodedBody(resp.Body, codings)
		resp.Header.Del("Content-Encoding")
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return body, closeBody, ""
}

// webSocketExtensions reports whether a 101 answer agreed to an extension
// (permessage-deflate compresses frames the gateway could not look into).
func webSocketExtensions(rh *responseHead) bool {
	for _, f := range rh.Fields {
		if asciiEqualFold(f.Name, "Sec-WebSocket-Extensions") && len(trimOWS(f.Value)) > 0 {
			return true
		}
	}
	return false
}

// clientFrameWriter writes a WebSocket relay's frames to the client, each
// write with the idle deadline ahead, noting that bytes moved.
type clientFrameWriter struct {
	c    *conn
	w    io.Writer
	act  *tunnelActivity
	idle time.Duration
}

func (w *clientFrameWriter) Write(p []byte) (int, error) {
	w.act.moved(toClient)
	w.c.SetWriteDeadline(time.Now().Add(w.idle))
	return w.w.Write(p)
}

// idleReader reads a WebSocket relay's upstream, going on past a read
// deadline while the relay is not idle (tunnelActivity).
type idleReader struct {
	r    io.Reader
	act  *tunnelActivity
	idle time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	for {
		n, err := r.r.Read(p)
		if err != nil && n == 0 && isTimeout(err) && r.act.goOn(toClient, 0, r.idle) {
			continue
		}
		return n, err
	}
}

// values returns the values of h's fields named name, in any case.
func (h *responseHead) values(name string) []string {
	var vs []string
	for _, f := range h.Fields {
		if asciiEqualFold(f.Name, name) {
			vs = append(vs, string(f.Value))
		}
	}
	return vs
}

// scrubTransport has what a bound host answers scrubbed before anything
// above it sees it: the recorder of --record-llm, which would otherwise
// write an echoed value into a recording (and a mock replaying it would
// hand it to a sandbox). A content coding it cannot decode is an error.
type scrubTransport struct {
	sc    *secretscrub.Scrubber
	found func(string)
	next  http.RoundTripper
}

func (t scrubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, closeBody, refusal := scrubbedResponse(resp, t.sc, t.found)
	if refusal != "" {
		resp.Body.Close()
		return nil, errors.New(refusal)
	}
	sr := &scrubReader{src: resp.Body, body: body, closeBody: closeBody, buf: make([]byte, 16<<10)}
	sr.w = t.sc.NewWriter(&sr.out, t.found)
	resp.Body = sr
	return resp, nil
}

// scrubReader reads body (src decoded) with every value replaced; each
// read gives what a read of body brought, but for the bytes held back
// as the possible start of a value.
type scrubReader struct {
	src       io.Closer
	body      io.Reader
	closeBody func()
	w         *secretscrub.Writer
	out       bytes.Buffer
	buf       []byte
	err       error
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for r.out.Len() == 0 {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.body.Read(r.buf)
		r.w.Write(r.buf[:n]) // into out: cannot fail
		if err != nil {
			r.w.Flush()
			r.err = err
		}
	}
	return r.out.Read(p)
}

func (r *scrubReader) Close() error {
	r.closeBody()
	return r.src.Close()
}
