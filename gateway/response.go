package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sbx-dev/sbx/netpolicy"
)

// This file reads what an upstream answers before the body: the status
// line and the header block (RFC 9112 §4–§6), as strictly as request.go
// reads a client's request. net/http's ReadResponse is not used: it
// resolves ambiguous framing (it drops Content-Length when
// Transfer-Encoding is present and unfolds obsolete line folding), and it
// allocates a map and a string per field on a path that runs for every
// request. A response the gateway would frame one way and its client
// another lets an upstream smuggle a second response to the client, so
// everything ambiguous is refused with 502 instead.

// maxResponseHeadBytes bounds an upstream's status line and header block,
// line endings included (net/http's ReadResponse has no bound at all).
const maxResponseHeadBytes = 1 << 20

// max1xxResponses is how many informational responses (but 101) an
// exchange skips before it gives up, as net/http's Transport does.
const max1xxResponses = 5

// responseHead is a status line and header block that readResponseHead
// accepted. Its byte slices point into its own buffer and are valid until
// the next readResponseHead into the same responseHead.
type responseHead struct {
	// ProtoMinor is the minor version of HTTP/1.x, 0 or 1.
	ProtoMinor int
	// Status is the status code, 100 to 999.
	Status int
	// Reason is the reason phrase as sent, possibly empty.
	Reason []byte
	// Fields are the header fields in the order received, names as sent
	// and values with the whitespace around them trimmed. Framing and
	// hop-by-hop fields are still here; see forEachEndToEnd.
	Fields []headerField
	// ContentLength is the value of the Content-Length fields (all the
	// same), or -1 when there is none. It says how long the body is only
	// when bodyLength says so: a response to HEAD, and a 1xx, 204 or 304,
	// has no body whatever it says.
	ContentLength int64
	// Chunked reports Transfer-Encoding: chunked, the only coding
	// accepted; ContentLength is -1 then.
	Chunked bool
	// Close reports that the upstream closes the connection after this
	// response: "close" in Connection, or HTTP/1.0 without "keep-alive".
	Close bool

	buf   []byte // the head's lines, without their line endings
	lines []int  // where each line of buf ends
}

// keepHeadBytes is the most memory of its last head an upstream
// connection keeps for the next: a head up to maxResponseHeadBytes (an
// upstream's, or one that echoes the sandbox's request back) must not
// stay with every kept connection.
const keepHeadBytes = 16 << 10

// shrink drops h's memory, which the next head read over it would
// reuse, when it is over keepHeadBytes. h must not be read after.
func (h *responseHead) shrink() {
	if cap(h.buf) > keepHeadBytes {
		*h = responseHead{}
	}
}

// headerField is a field of a responseHead.
type headerField struct {
	Name, Value []byte
}

// upstreamHeadError is a response head the gateway refuses: malformed,
// ambiguous or too large. The gateway answers its client 502.
type upstreamHeadError struct {
	Reason string
}

func (e *upstreamHeadError) Error() string {
	return "malformed response from the upstream: " + e.Reason
}

func badResponse(format string, args ...any) *upstreamHeadError {
	return &upstreamHeadError{Reason: fmt.Sprintf(format, args...)}
}

// readResponseHead reads one status line and header block from br into h
// and checks them strictly; the body, if any, is left in br. A head of
// more than limit bytes (maxResponseHeadBytes when limit <= 0) is refused
// as soon as the limit is passed.
//
// Errors: io.ErrUnexpectedEOF when br ends before the head does (also when
// it ends before the first byte: an idle upstream connection that was
// closed), an *upstreamHeadError for a head that must be refused, or the
// read error of br, wrapped.
func readResponseHead(br *bufio.Reader, h *responseHead, limit int) error {
	if limit <= 0 {
		limit = maxResponseHeadBytes
	}
	*h = responseHead{ContentLength: -1, buf: h.buf[:0], lines: h.lines[:0], Fields: h.Fields[:0]}
	n := 0 // bytes of the head read so far
	for {
		start := len(h.buf)
		for {
			frag, err := br.ReadSlice('\n')
			n += len(frag)
			if n > limit {
				return badResponse("status line and header fields are larger than %d bytes", limit)
			}
			h.buf = append(h.buf, frag...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return fmt.Errorf("reading the response head: %w", err)
		}
		// Cut the LF or CRLF; a CR anywhere else is refused: a bare CR
		// ends a line for some parsers and not for others.
		h.buf = h.buf[:len(h.buf)-1]
		if len(h.buf) > start && h.buf[len(h.buf)-1] == '\r' {
			h.buf = h.buf[:len(h.buf)-1]
		}
		if bytes.IndexByte(h.buf[start:], '\r') >= 0 {
			return badResponse("bare CR in the response head")
		}
		if len(h.buf) == start {
			if len(h.lines) == 0 {
				return badResponse("an empty line where the status line should be")
			}
			break
		}
		h.lines = append(h.lines, len(h.buf))
	}
	// h.buf no longer moves: the slices below stay valid.
	if err := h.parseStatusLine(h.buf[:h.lines[0]]); err != nil {
		return err
	}
	var f responseFraming
	for i := 1; i < len(h.lines); i++ {
		if err := f.addField(h, h.buf[h.lines[i-1]:h.lines[i]]); err != nil {
			return err
		}
	}
	return f.finish(h)
}

// parseStatusLine fills h's version, status and reason from
// "HTTP/1.x SP 3DIGIT SP reason-phrase" (RFC 9112 §4). The SP before an
// empty reason phrase may be missing, as many servers leave it out.
func (h *responseHead) parseStatusLine(line []byte) error {
	if len(line) < len("HTTP/1.1 200") || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return badResponse("malformed status line; want HTTP/1.1 SP status SP reason")
	}
	switch line[7] {
	case '0', '1':
		h.ProtoMinor = int(line[7] - '0')
	default:
		return badResponse("HTTP version %q is not supported", line[:8])
	}
	code := line[9:12]
	if !isDigit(code[0]) || !isDigit(code[1]) || !isDigit(code[2]) || code[0] == '0' {
		return badResponse("malformed status code; want three digits, 100 to 999")
	}
	h.Status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	rest := line[12:]
	if len(rest) > 0 {
		if rest[0] != ' ' {
			return badResponse("malformed status code; want three digits, 100 to 999")
		}
		rest = rest[1:]
	}
	for _, c := range rest {
		if c < ' ' && c != '\t' || c == 0x7f {
			return badResponse("control character in the reason phrase")
		}
	}
	h.Reason = rest
	return nil
}

// responseFraming collects what decides a response's framing while its
// fields are read.
type responseFraming struct {
	cl        []byte // the first Content-Length value; every other must equal it
	hasCL     bool
	te        int    // Transfer-Encoding fields
	teValue   []byte // the first one's value
	close     bool   // "close" in Connection
	keepAlive bool   // "keep-alive" there
}

// checkField checks one header line (RFC 9112 §5, RFC 9110 §5.5) and
// splits it into its name and its value, trimmed.
func checkField(line []byte) (headerField, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return headerField{}, badResponse("obsolete line folding (a header line starting with whitespace)")
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	switch {
	case !ok:
		return headerField{}, badResponse("a header line has no colon")
	case !netpolicy.IsToken(name): // empty, or whitespace before the colon
		return headerField{}, badResponse("a header name is not a token")
	}
	value = trimOWS(value)
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return headerField{}, badResponse("control character in a header value")
		}
	}
	return headerField{Name: name, Value: value}, nil
}

// addField checks one header line and adds it to h.Fields.
func (f *responseFraming) addField(h *responseHead, line []byte) error {
	fld, err := checkField(line)
	if err != nil {
		return err
	}
	h.Fields = append(h.Fields, fld)
	name, value := fld.Name, fld.Value
	switch {
	case asciiEqualFold(name, "Content-Length"):
		if !f.hasCL {
			f.hasCL, f.cl = true, value
		} else if !bytes.Equal(value, f.cl) {
			return badResponse("differing Content-Length values")
		}
	case asciiEqualFold(name, "Transfer-Encoding"):
		if f.te++; f.te == 1 {
			f.teValue = value
		}
	case asciiEqualFold(name, "Connection"):
		forEachToken(value, func(opt []byte) {
			switch {
			case asciiEqualFold(opt, "close"):
				f.close = true
			case asciiEqualFold(opt, "keep-alive"):
				f.keepAlive = true
			}
		})
	}
	return nil
}

// finish checks what needs the whole header block and sets h's framing.
func (f *responseFraming) finish(h *responseHead) error {
	h.Close = f.close || h.ProtoMinor == 0 && !f.keepAlive
	if f.te > 0 {
		// RFC 9112 §6.1 and §6.3: framing that two parsers may read
		// differently is refused, never resolved.
		switch {
		case f.hasCL:
			return badResponse("both Content-Length and Transfer-Encoding")
		case h.ProtoMinor == 0:
			return badResponse("Transfer-Encoding in an HTTP/1.0 response")
		case f.te > 1 || !asciiEqualFold(f.teValue, "chunked"):
			return badResponse("a transfer coding other than a single chunked")
		}
		h.Chunked = true
		return nil
	}
	if f.hasCL {
		n, se := parseContentLength(string(f.cl))
		if se != nil {
			return badResponse("%s", se.Reason)
		}
		h.ContentLength = n
	}
	return nil
}

// bodyLength says how the body of h, an answer to a request of method, is
// framed (RFC 9112 §6.3): its length, 0 when it has none; or -1 when it is
// chunked (h.Chunked) or runs until the upstream closes (otherwise).
func (h *responseHead) bodyLength(method string) int64 {
	switch {
	case method == http.MethodHead || !bodyAllowedForStatus(h.Status):
		return 0
	case h.Chunked:
		return -1
	default:
		return h.ContentLength // -1 when none: until the upstream closes
	}
}

// bodyAllowedForStatus reports whether a response with status may have a
// body: not 1xx, 204 or 304 (RFC 9110 §6.4.1).
func bodyAllowedForStatus(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// endToEnd reports whether h.Fields[i] is forwarded to the client: it is
// not a hop-by-hop field (docs/gateway.md), one that a Connection field
// names, or a framing field (Content-Length, Transfer-Encoding), which the
// gateway writes itself.
func (h *responseHead) endToEnd(i int) bool {
	name := h.Fields[i].Name
	if isHopByHopOrFraming(name) {
		return false
	}
	for _, f := range h.Fields {
		if asciiEqualFold(f.Name, "Connection") && listHas(f.Value, name) {
			return false
		}
	}
	return true
}

// listHas reports whether the comma-separated list v has the element
// tok, in any case.
func listHas(v, tok []byte) bool {
	for len(v) > 0 {
		var elem []byte
		elem, v, _ = bytes.Cut(v, []byte{','})
		if bytes.EqualFold(trimOWS(elem), tok) {
			return true
		}
	}
	return false
}

// isHopByHopOrFraming reports whether name is one of hopByHop or
// Content-Length, in any case.
func isHopByHopOrFraming(name []byte) bool {
	if asciiEqualFold(name, "Content-Length") {
		return true
	}
	for _, h := range hopByHop {
		if asciiEqualFold(name, h) {
			return true
		}
	}
	return false
}

// forEachToken calls fn with each non-empty element of a comma-separated
// list, the whitespace around it trimmed.
func forEachToken(v []byte, fn func([]byte)) {
	for len(v) > 0 {
		var elem []byte
		elem, v, _ = bytes.Cut(v, []byte{','})
		if elem = trimOWS(elem); len(elem) > 0 {
			fn(elem)
		}
	}
}

// trimOWS returns b without the optional whitespace (spaces and tabs,
// RFC 9110 §5.6.3) at its ends: bytes.Trim(b, " \t"), which builds its
// cutset's table on every call, in the profile of every request.
func trimOWS[T []byte | string](b T) T {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEqualFold reports whether b equals s ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if asciiLower(b[i]) != asciiLower(s[i]) {
			return false
		}
	}
	return true
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// writeStatusLine writes the status line of h as HTTP/1.minor.
func (h *responseHead) writeStatusLine(bw *bufio.Writer, minor int) {
	bw.WriteString("HTTP/1.")
	bw.WriteByte(byte('0' + minor))
	bw.WriteByte(' ')
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(h.Status), 10))
	bw.WriteByte(' ')
	if len(h.Reason) > 0 {
		bw.Write(h.Reason)
	} else {
		bw.WriteString(http.StatusText(h.Status))
	}
	bw.WriteString("\r\n")
}

// writeContentLength writes a Content-Length line for n.
func writeContentLength(bw *bufio.Writer, n int64) {
	bw.WriteString("Content-Length: ")
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, 10))
	bw.WriteString("\r\n")
}

// writeField writes one header line.
func writeField(bw *bufio.Writer, name, value []byte) {
	bw.Write(name)
	bw.WriteString(": ")
	bw.Write(value)
	bw.WriteString("\r\n")
}

// readTrailers reads the trailer section after a chunked body's last
// chunk (RFC 9112 §7.1.2) from br, checking each field as a header field,
// and calls keep with those that may be forwarded (all but hop-by-hop,
// framing and Host fields), valid only during the call. It reads at most
// limit bytes.
func readTrailers(br *bufio.Reader, limit int, keep func(headerField)) error {
	read := 0
	for {
		line, err := br.ReadSlice('\n')
		read += len(line)
		switch {
		case read > limit:
			return badResponse("chunked trailers are larger than %d bytes", limit)
		case errors.Is(err, bufio.ErrBufferFull):
			return badResponse("a chunked trailer line is longer than %d bytes", br.Size())
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return fmt.Errorf("reading the chunked trailers: %w", err)
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return badResponse("bare CR in the chunked trailers")
		}
		if len(line) == 0 {
			return nil
		}
		fld, err := checkField(line)
		if err != nil {
			return err
		}
		if !isHopByHopOrFraming(fld.Name) && !asciiEqualFold(fld.Name, "Host") {
			keep(fld)
		}
	}
}
