package gateway

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/gateway/secretscrub"
)

// This file keeps a secret's value from coming back (docs/secrets.md):
// whatever a host that is sent a value answers (the status line, header
// fields and trailers, the body in any transfer or content coding the
// gateway can decode, server-sent events as they stream, WebSocket
// frames) reaches the sandbox with every secret's value replaced with its
// placeholder. A replacement is logged in the request's close record,
// field secret: the names, never the values.

// askIdentity has a request to a bound host ask for its answer without a
// content coding: the gateway must read the body to scrub it.
func askIdentity(h http.Header) {
	h["Accept-Encoding"] = []string{"identity"}
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
	body, closeBody := secrets.DecodedBody(raw, codings)
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
