package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/netpolicy"
)

// This file reads what a client sends before the body: the request line and
// the header block (RFC 9112 §2–§6), strictly. net/http's server is not
// used for this because it resolves ambiguous framing silently (it drops
// Content-Length when Transfer-Encoding is present, unfolds obsolete line
// folding); a proxy that resolves ambiguity one way while the upstream
// resolves it another lets a client smuggle a second request past the
// policy. Everything ambiguous is refused instead.

// statusError is a request the gateway refuses before deciding it: the
// status to answer with and the reason, a short sentence for the client and
// the decision log. Reasons never quote header values or query strings and
// hold only printable ASCII, so they are safe in a response header.
type statusError struct {
	Status int
	Reason string
	// Method is the request's method when the request line got that far
	// and it is a token of at most 32 bytes, for the log; else empty.
	Method string
}

func (e *statusError) Error() string {
	return strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Reason
}

// statusErrorf returns a *statusError with a formatted reason.
func statusErrorf(status int, format string, args ...any) *statusError {
	return &statusError{Status: status, Reason: fmt.Sprintf(format, args...)}
}

// requestHead is a request line and header block that readRequestHead
// accepted.
type requestHead struct {
	// Method is a token, as sent: methods are case-sensitive, so
	// "connect" is not CONNECT.
	Method string
	// Target is the request-target as sent: printable ASCII, no spaces.
	// parseConnectTarget and parseProxyTarget take it apart.
	Target string
	// ProtoMajor and ProtoMinor are the HTTP version, 1.0 or 1.1.
	ProtoMajor, ProtoMinor int
	// Header holds the header fields under canonical keys, the values of
	// each key in the order received, with the whitespace around them
	// trimmed. Content-Length and Transfer-Encoding are kept as received
	// (possibly repeated); the fields below, not these, say how the body
	// is framed. Hop-by-hop fields are still here.
	Header http.Header
	// ContentLength is the body length from Content-Length, or -1 when
	// the request has none. A request with neither Content-Length nor
	// chunked framing has no body (RFC 9112 §6.3).
	ContentLength int64
	// Chunked reports that the body is chunked (Transfer-Encoding:
	// chunked, the only coding accepted); ContentLength is -1 then.
	Chunked bool
	// Close reports that the client wants the connection closed after
	// this request: "close" in Connection (or Proxy-Connection, which
	// some clients send to proxies instead), or HTTP/1.0 without
	// "keep-alive" there.
	Close bool
}

// headMaxEmptyLines is how many empty lines readRequestHead skips before a
// request line (RFC 9112 §2.2 asks servers to skip at least one, as some
// clients send a CRLF after a body).
const headMaxEmptyLines = 4

// readRequestHead reads one request line and header block from br and
// checks them strictly; the body, if any, is left in br.
//
// maxHeaderBytes bounds the bytes of the whole head: empty lines skipped
// before the request line, the request line, the header lines and the
// empty line that ends them, line endings included. A head over the limit
// is refused with 431 as soon as the limit is passed, so at most
// maxHeaderBytes plus one buffer of br is ever held. A limit of 0 or less
// means 64 KiB (docs/gateway.md).
//
// Errors:
//   - io.EOF when br ended before a request began (only empty lines, or
//     nothing, were read): the client closed an idle connection;
//   - io.ErrUnexpectedEOF when br ended inside the head;
//   - a *statusError for a head that must be refused (400 malformed or
//     ambiguous, 431 too large, 501 unsupported transfer coding, 505
//     unsupported version); the connection must be closed after answering,
//     as the rest of the stream cannot be framed;
//   - any other read error of br, wrapped.
func readRequestHead(br *bufio.Reader, maxHeaderBytes int) (*requestHead, error) {
	var b headBuf
	return b.read(br, maxHeaderBytes)
}

// headBuf is the memory a connection's request heads are read into, one
// after the other: the head, its header map and the array its fields'
// values are sliced from, which the next read reuses. Nothing may keep a
// head, its Header or a value slice of it once its request is served; a
// request's strings are its own. The memory of a head with more than
// headKeepFields field names is not reused.
type headBuf struct {
	head requestHead
	vals []string
}

// headKeepFields is how many field names' memory a connection's headBuf
// keeps for the next request. A head may have thousands (up to
// MaxHeaderBytes); the next read after one makes a new map and array, so
// that an idle connection does not hold the largest head its client ever
// sent (a map does not shrink), nor every later read clear it.
const headKeepFields = 64

// read is readRequestHead into b: the head it returns is b's, valid until
// the next read.
func (b *headBuf) read(br *bufio.Reader, maxHeaderBytes int) (*requestHead, error) {
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = 64 << 10
	}
	r := headReader{br: br, limit: maxHeaderBytes}

	var line []byte
	for empty := 0; ; empty++ {
		var err error
		line, err = r.readLine()
		if err != nil {
			return nil, err // io.EOF here means no request began
		}
		if len(line) > 0 {
			break
		}
		if empty == headMaxEmptyLines {
			return nil, statusErrorf(http.StatusBadRequest, "more than %d empty lines before the request line", headMaxEmptyLines)
		}
	}
	hdr := b.head.Header
	if hdr == nil || cap(b.vals) > headKeepFields {
		hdr, b.vals = make(http.Header, 8), nil
	}
	clear(hdr)
	clear(b.vals) // the strings of the last request go with it
	b.head = requestHead{ContentLength: -1, Header: hdr}
	b.vals = b.vals[:0]
	h := &b.head
	refuse := func(se *statusError) (*requestHead, error) {
		if netpolicy.ValidMethod(h.Method) {
			se.Method = h.Method
		}
		return nil, se
	}
	if se := h.parseRequestLine(line); se != nil {
		return refuse(se)
	}

	var f headFraming
	for {
		line, err := r.readLine()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if se, ok := err.(*statusError); ok {
			return refuse(se) // the head is too large
		}
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		if se := f.addField(h, &b.vals, line); se != nil {
			return refuse(se)
		}
	}
	if se := f.finish(h); se != nil {
		return refuse(se)
	}
	return h, nil
}

// headReader reads the lines of a head from br, counting its bytes against
// limit.
type headReader struct {
	br    *bufio.Reader
	limit int
	n     int    // bytes consumed so far
	long  []byte // reused for lines longer than br's buffer
}

// readLine returns the next line without its line ending, CRLF or a bare
// LF (RFC 9112 §2.2). The slice is valid until the next call. It returns
// io.EOF when br ends before the first byte of the line and
// io.ErrUnexpectedEOF when it ends inside the line.
func (r *headReader) readLine() ([]byte, error) {
	var long []byte // nil until the line outgrows br's buffer
	for {
		frag, err := r.br.ReadSlice('\n')
		r.n += len(frag)
		if r.n > r.limit {
			return nil, statusErrorf(http.StatusRequestHeaderFieldsTooLarge,
				"request line and header fields are larger than %d bytes", r.limit)
		}
		switch {
		case err == nil:
			if long != nil {
				long = append(long, frag...)
				r.long, frag = long, long
			}
			return trimLineEnding(frag)
		case errors.Is(err, bufio.ErrBufferFull):
			if long == nil {
				long = r.long[:0]
			}
			long = append(long, frag...)
		case err == io.EOF:
			if len(frag) == 0 && long == nil {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, fmt.Errorf("reading request head: %w", err)
		}
	}
}

// trimLineEnding cuts the LF or CRLF that ends line and refuses a CR
// anywhere else: a bare CR ends a line for some parsers and not for others.
func trimLineEnding(line []byte) ([]byte, error) {
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, statusErrorf(http.StatusBadRequest, "bare CR in the request head; lines must end in CRLF")
	}
	return line, nil
}

// parseRequestLine fills h's method, target and version from
// "METHOD SP request-target SP HTTP/1.x" (RFC 9112 §3).
func (h *requestHead) parseRequestLine(line []byte) *statusError {
	method, rest, ok1 := bytes.Cut(line, []byte{' '})
	target, proto, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || bytes.IndexByte(proto, ' ') >= 0 {
		return statusErrorf(http.StatusBadRequest, "malformed request line; want METHOD SP request-target SP HTTP/1.1, separated by single spaces")
	}
	// A token of any length: one longer than netpolicy.MaxMethodLen is
	// refused by the decision (after the secrets step, which blocks a
	// secret's placeholder sent as the method), and logged cut.
	h.Method = internMethod(method)
	if !netpolicy.IsToken(h.Method) {
		return statusErrorf(http.StatusBadRequest, "the method is not a token")
	}
	if len(target) == 0 {
		return statusErrorf(http.StatusBadRequest, "empty request-target")
	}
	for _, c := range target {
		if !isVisibleASCII(c) {
			return statusErrorf(http.StatusBadRequest, "the request-target holds a control or non-ASCII byte; percent-encode it")
		}
	}
	// HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3).
	if len(proto) != len("HTTP/1.1") || string(proto[:5]) != "HTTP/" || !isDigit(proto[5]) || proto[6] != '.' || !isDigit(proto[7]) {
		return statusErrorf(http.StatusBadRequest, "malformed HTTP version; want HTTP/1.1")
	}
	h.ProtoMajor, h.ProtoMinor = int(proto[5]-'0'), int(proto[7]-'0')
	if h.ProtoMajor != 1 || h.ProtoMinor > 1 {
		return statusErrorf(http.StatusHTTPVersionNotSupported, "HTTP version %s is not supported; use HTTP/1.1", proto)
	}
	h.Target = string(target)
	return nil
}

// internMethod returns m as a string, without allocating for the common
// methods.
func internMethod(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "CONNECT":
		return "CONNECT"
	case "OPTIONS":
		return "OPTIONS"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	}
	return string(m)
}

// headFraming collects, while the header lines are read, what decides
// framing and connection handling.
type headFraming struct {
	hosts     int      // Host field lines
	badHost   bool     // a Host value that is not a host[:port]
	hasCL     bool     // a Content-Length field was seen
	cl        int64    // its value, the same in every field
	te        []string // the codings of every Transfer-Encoding field, in order
	hasTE     bool     // a Transfer-Encoding field was seen
	close     bool     // "close" in Connection or Proxy-Connection
	keepAlive bool     // "keep-alive" there
}

// headCommonKeys maps the canonical spelling of common header names to
// itself, so that looking them up costs no allocation.
var headCommonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Type", "Cookie", "Expect", "Host",
		"If-Modified-Since", "If-None-Match", "Keep-Alive", "Origin", "Proxy-Authorization",
		"Proxy-Connection", "Range", "Referer", "Te", "Transfer-Encoding", "Upgrade", "User-Agent",
	} {
		m[k] = k
	}
	return m
}()

// addField checks one header line (RFC 9112 §5, RFC 9110 §5.5) and adds
// it to h.Header: the value of a name's first field is appended to vals
// and sliced from it, its capacity cut so that appending a second field
// of the name copies.
func (f *headFraming) addField(h *requestHead, vals *[]string, line []byte) *statusError {
	if line[0] == ' ' || line[0] == '\t' {
		return statusErrorf(http.StatusBadRequest, "obsolete line folding (a header line starting with whitespace) is not allowed")
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	switch {
	case !ok:
		return statusErrorf(http.StatusBadRequest, "a header line has no colon")
	case len(name) == 0:
		return statusErrorf(http.StatusBadRequest, "empty header name")
	case name[len(name)-1] == ' ' || name[len(name)-1] == '\t':
		return statusErrorf(http.StatusBadRequest, "whitespace between a header name and its colon")
	case !netpolicy.IsToken(name):
		return statusErrorf(http.StatusBadRequest, "a header name is not a token")
	}
	value = trimOWS(value)
	for _, c := range value {
		switch {
		case c == 0:
			return statusErrorf(http.StatusBadRequest, "NUL in a header value")
		case c < ' ' && c != '\t' || c == 0x7f:
			return statusErrorf(http.StatusBadRequest, "control character in a header value")
		}
	}
	key, ok := headCommonKeys[string(name)]
	if !ok {
		key = http.CanonicalHeaderKey(string(name))
	}
	v := string(value)
	if have := h.Header[key]; have != nil {
		h.Header[key] = append(have, v)
	} else {
		i := len(*vals)
		*vals = append(*vals, v)
		h.Header[key] = (*vals)[i : i+1 : i+1]
	}

	switch key {
	case "Host":
		f.hosts++
		f.badHost = f.badHost || !isHostHeaderValue(v)
	case "Content-Length":
		return f.addContentLength(v)
	case "Transfer-Encoding":
		f.hasTE = true
		for _, c := range strings.Split(v, ",") {
			f.te = append(f.te, trimOWS(c))
		}
	case "Connection", "Proxy-Connection":
		for _, opt := range strings.Split(v, ",") {
			switch opt = trimOWS(opt); {
			case strings.EqualFold(opt, "close"):
				f.close = true
			case strings.EqualFold(opt, "keep-alive"):
				f.keepAlive = true
			}
		}
	}
	return nil
}

// addContentLength checks one Content-Length value: a comma-separated list
// of decimal numbers, all equal to each other and to earlier fields
// (RFC 9110 §8.6).
func (f *headFraming) addContentLength(v string) *statusError {
	for _, s := range strings.Split(v, ",") {
		n, se := parseContentLength(trimOWS(s))
		if se != nil {
			return se
		}
		if f.hasCL && n != f.cl {
			return statusErrorf(http.StatusBadRequest, "differing Content-Length values")
		}
		f.hasCL, f.cl = true, n
	}
	return nil
}

// parseContentLength parses 1*DIGIT into an int64: no sign, no spaces, no
// overflow.
func parseContentLength(s string) (int64, *statusError) {
	if s == "" {
		return 0, statusErrorf(http.StatusBadRequest, "empty Content-Length")
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) {
			return 0, statusErrorf(http.StatusBadRequest, "Content-Length is not a decimal number")
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, statusErrorf(http.StatusBadRequest, "Content-Length is too large")
		}
		n = n*10 + d
	}
	return n, nil
}

// finish checks what needs the whole header block and sets h's framing.
func (f *headFraming) finish(h *requestHead) *statusError {
	// RFC 9112 §3.2: 400 for an HTTP/1.1 request without Host, and for
	// any request with several Host lines or an invalid one.
	switch {
	case f.hosts == 0 && h.ProtoMinor == 1:
		return statusErrorf(http.StatusBadRequest, "missing Host header (required in HTTP/1.1)")
	case f.hosts > 1:
		return statusErrorf(http.StatusBadRequest, "more than one Host header")
	case f.badHost:
		return statusErrorf(http.StatusBadRequest, "the Host header is not a valid host[:port]")
	}
	h.Close = f.close || h.ProtoMinor == 0 && !f.keepAlive

	if f.hasTE {
		// RFC 9112 §6.1 and §6.3: framing that two parsers may read
		// differently is refused, never resolved.
		switch {
		case f.hasCL:
			return statusErrorf(http.StatusBadRequest, "both Content-Length and Transfer-Encoding")
		case h.ProtoMinor == 0:
			return statusErrorf(http.StatusBadRequest, "Transfer-Encoding in an HTTP/1.0 request")
		}
		// chunked must come last, so also at most once (RFC 9112 §6.1).
		for i, c := range f.te {
			switch {
			case c == "":
				return statusErrorf(http.StatusBadRequest, "malformed Transfer-Encoding: an empty coding")
			case !netpolicy.IsToken(c):
				return statusErrorf(http.StatusBadRequest, "malformed Transfer-Encoding: a coding is not a token")
			case strings.EqualFold(c, "chunked") && i != len(f.te)-1:
				return statusErrorf(http.StatusBadRequest, "chunked is not the last transfer coding")
			}
		}
		if len(f.te) > 1 || !strings.EqualFold(f.te[0], "chunked") {
			c := f.te[0]
			if len(c) > 32 {
				c = c[:32] + "..."
			}
			return statusErrorf(http.StatusNotImplemented,
				"transfer coding %q is not supported; send the body with Content-Length or Transfer-Encoding: chunked", c)
		}
		h.Chunked = true
		return nil
	}
	if f.hasCL {
		h.ContentLength = f.cl
	}
	return nil
}

// isHostHeaderValue reports whether v holds only what a Host value can:
// a reg-name, an IP literal in brackets, and a port. It is the byte set
// net/http's server accepts; the gateway never uses the value to route
// (the request-target's authority wins, RFC 9112 §3.2.2), so this only
// refuses junk.
func isHostHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isRegNameChar(c) && c != ':' && c != '[' && c != ']' && c != '%' {
			return false
		}
	}
	return true
}

// isRegNameChar reports whether c may appear in a host name of a URI:
// unreserved or sub-delims (RFC 3986 §3.2.2), without percent-encoding.
func isRegNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
		strings.IndexByte("-._~!$&'()*+,;=", c) >= 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isVisibleASCII reports whether c is printable ASCII other than space.
func isVisibleASCII(c byte) bool { return '!' <= c && c <= '~' }

// parseConnectTarget is netpolicy.ParseConnectTarget, its refusal a
// *statusError 400.
func parseConnectTarget(target string) (host string, port uint16, err error) {
	host, port, err = netpolicy.ParseConnectTarget(target)
	if err != nil {
		return "", 0, badTarget(err)
	}
	return host, port, nil
}

// parseProxyTarget is netpolicy.ParseProxyTarget, its refusal a
// *statusError 400.
func parseProxyTarget(target string) (*url.URL, *statusError) {
	u, err := netpolicy.ParseProxyTarget(target)
	if err != nil {
		return nil, badTarget(err)
	}
	return u, nil
}

// badTarget is the 400 that answers a request-target netpolicy refused.
func badTarget(err error) *statusError {
	return &statusError{Status: http.StatusBadRequest, Reason: err.Error()}
}
