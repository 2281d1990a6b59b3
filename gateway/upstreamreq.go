package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
)

// upstreamRequest is a request as the gateway sends it upstream. It is
// written by writeHead and writeBody, byte for byte as http.Request.Write
// wrote it before (TestUpstreamHeadMatchesRequestWrite and
// FuzzUpstreamHead hold them to that), without its allocations: the
// header fields sorted by name, each value on its own line.
type upstreamRequest struct {
	Method     string
	RequestURI string // the path and query as the client sent them: see requestURI
	Host       string // the value of the Host field
	// Header holds the fields to forward. Host, Content-Length,
	// Transfer-Encoding and Trailer in it are not written (the fields
	// above say what to write for them), and of User-Agent only the
	// first value.
	Header http.Header
	// ContentLength is the body's length, -1 for a chunked body.
	ContentLength int64
	// Body is the body, nil when there is none.
	Body io.Reader
}

// init makes r the request to send upstream for head, whose target is u,
// without a body: head's fields but Host and the hop-by-hop ones (Upgrade
// kept when ws, a relayed WebSocket), Host the target's authority. It
// takes head.Header over without copying it: that map is the
// connection's (headBuf), cleared by the next request's read, so r must
// not outlive the request it is sent for.
func (r *upstreamRequest) init(head *requestHead, u *url.URL, ws bool) {
	delete(head.Header, "Host")
	removeHopByHop(head.Header, ws)
	*r = upstreamRequest{Method: head.Method, RequestURI: requestURI(u), Host: u.Host, Header: head.Header}
}

// requestURI is the origin-form target for u: its path as sent ("/" when
// empty) and its query, as url.URL.RequestURI writes it.
func requestURI(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" {
		return p + "?" + u.RawQuery
	}
	return p
}

// hasBody reports whether r has a body to send.
func (r *upstreamRequest) hasBody() bool { return r.Body != nil }

// writeHead writes r's request line and header block to bw.
func (r *upstreamRequest) writeHead(bw *bufio.Writer) {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(r.RequestURI)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.Host)
	bw.WriteString("\r\n")
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(ua[0])
		bw.WriteString("\r\n")
	}
	switch {
	case r.Body != nil && r.ContentLength < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case r.Body != nil && r.ContentLength > 0:
		writeContentLength(bw, r.ContentLength)
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		// As net/http does: many servers want a length for these.
		bw.WriteString("Content-Length: 0\r\n")
	}
	var arr [32]string
	keys := arr[:0]
	for k := range r.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
}

// writeBody writes r's body to bw, as net/http wrote it: ContentLength
// bytes, then a read of what follows them, which must be nothing (it lets
// the body's reader see its end); or chunked, each chunk flushed as soon
// as it is written, so that a body the client streams reaches the upstream
// as it comes.
func (r *upstreamRequest) writeBody(bw *bufio.Writer) error {
	if r.ContentLength < 0 {
		cw := httputil.NewChunkedWriter(bw)
		if _, err := io.Copy(flushAfterChunk{cw, bw}, r.Body); err != nil {
			return err
		}
		cw.Close() // the last chunk, "0\r\n"
		_, err := bw.WriteString("\r\n")
		return err
	}
	n, err := io.Copy(bw, io.LimitReader(r.Body, r.ContentLength))
	if err != nil {
		return err
	}
	extra, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		return err
	}
	if n += extra; n != r.ContentLength {
		return fmt.Errorf("the request body has %d bytes, not the %d of its Content-Length", n, r.ContentLength)
	}
	return nil
}

// flushAfterChunk writes each chunk through cw and flushes bw after it.
type flushAfterChunk struct {
	cw io.Writer
	bw *bufio.Writer
}

func (f flushAfterChunk) Write(p []byte) (int, error) {
	n, err := f.cw.Write(p)
	if err == nil {
		err = f.bw.Flush()
	}
	return n, err
}
