package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbx-dev/sbx/netpolicy"
)

// crlf joins lines with CRLF and ends the head with an empty line.
func crlf(lines ...string) string { return strings.Join(lines, "\r\n") + "\r\n\r\n" }

const (
	sizedHeadStart = "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Pad: "
	sizedHeadEnd   = "\r\n\r\n"
)

// sizedHeadPad is the X-Pad value that makes sizedHead n bytes long.
func sizedHeadPad(n int) string {
	return strings.Repeat("p", n-len(sizedHeadStart)-len(sizedHeadEnd))
}

// sizedHead returns a GET head of exactly n bytes (n ≥ 64), padded in an
// X-Pad header.
func sizedHead(n int) string { return sizedHeadStart + sizedHeadPad(n) + sizedHeadEnd }

func TestReadRequestHead(t *testing.T) {
	const limit = 64 << 10
	get := func(hdr http.Header) *requestHead {
		return &requestHead{Method: "GET", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: hdr, ContentLength: -1}
	}
	host := http.Header{"Host": {"example.com"}}
	tests := []struct {
		name   string
		in     string
		status int          // 0: success
		err    error        // io.EOF or io.ErrUnexpectedEOF, when status is 0
		want   *requestHead // when status and err are unset
	}{
		// Accepted heads and their fields.
		{name: "simple GET", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com"), want: get(host)},
		{name: "bare LF line endings", in: "GET http://example.com/ HTTP/1.1\nHost: example.com\n\n", want: get(host)},
		{name: "leading empty lines skipped", in: "\r\n\n\r\n" + crlf("GET http://example.com/ HTTP/1.1", "Host: example.com"), want: get(host)},
		{name: "too many leading empty lines", in: strings.Repeat("\r\n", 5) + crlf("GET http://example.com/ HTTP/1.1", "Host: example.com"), status: 400},
		{name: "keys canonical, values in order, OWS trimmed",
			in:   crlf("GET http://example.com/ HTTP/1.1", "host: example.com", "x-a: 1", "X-A:\t 2 \t", "accept-ENCODING:gzip", "X-Empty:", "X-Inner: a  b\tc"),
			want: get(http.Header{"Host": {"example.com"}, "X-A": {"1", "2"}, "Accept-Encoding": {"gzip"}, "X-Empty": {""}, "X-Inner": {"a  b\tc"}})},
		{name: "obs-text in a value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: caf\xc3\xa9\x80"),
			want: get(http.Header{"Host": {"example.com"}, "X-A": {"caf\xc3\xa9\x80"}})},
		{name: "HTTP/1.0 without Host closes", in: crlf("GET http://example.com/ HTTP/1.0"),
			want: &requestHead{Method: "GET", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 0, Header: http.Header{}, ContentLength: -1, Close: true}},
		{name: "HTTP/1.0 keep-alive", in: crlf("GET http://example.com/ HTTP/1.0", "Connection: Keep-Alive"),
			want: &requestHead{Method: "GET", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 0, Header: http.Header{"Connection": {"Keep-Alive"}}, ContentLength: -1}},
		{name: "HTTP/1.0 Proxy-Connection keep-alive", in: crlf("GET http://example.com/ HTTP/1.0", "Proxy-Connection: keep-alive"),
			want: &requestHead{Method: "GET", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 0, Header: http.Header{"Proxy-Connection": {"keep-alive"}}, ContentLength: -1}},
		{name: "Connection close", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "Connection: upgrade, CLOSE"),
			want: func() *requestHead {
				h := get(http.Header{"Host": {"example.com"}, "Connection": {"upgrade, CLOSE"}})
				h.Close = true
				return h
			}()},
		{name: "Proxy-Connection close", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "Proxy-Connection: close"),
			want: func() *requestHead {
				h := get(http.Header{"Host": {"example.com"}, "Proxy-Connection": {"close"}})
				h.Close = true
				return h
			}()},
		{name: "CONNECT", in: crlf("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443"),
			want: &requestHead{Method: "CONNECT", Target: "example.com:443", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com:443"}}, ContentLength: -1}},
		{name: "extension method", in: crlf("PROPFIND http://example.com/ HTTP/1.1", "Host: example.com"),
			want: &requestHead{Method: "PROPFIND", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: host, ContentLength: -1}},
		{name: "origin-form is the target parser's business", in: crlf("GET /x HTTP/1.1", "Host: example.com"),
			want: &requestHead{Method: "GET", Target: "/x", ProtoMajor: 1, ProtoMinor: 1, Header: host, ContentLength: -1}},
		{name: "empty Host value", in: crlf("GET http://example.com/ HTTP/1.1", "Host:"), want: get(http.Header{"Host": {""}})},

		// Request line.
		{name: "empty input", in: "", err: io.EOF},
		{name: "only empty lines", in: "\r\n\r\n", err: io.EOF},
		{name: "EOF in request line", in: "GET http://exa", err: io.ErrUnexpectedEOF},
		{name: "EOF in headers", in: "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n", err: io.ErrUnexpectedEOF},
		{name: "EOF before the last LF", in: "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r", err: io.ErrUnexpectedEOF},
		{name: "HTTP/0.9", in: "GET /\r\n\r\n", status: 400},
		{name: "two spaces", in: crlf("GET  http://example.com/ HTTP/1.1", "Host: example.com"), status: 400},
		{name: "trailing space", in: crlf("GET http://example.com/ HTTP/1.1 ", "Host: example.com"), status: 400},
		{name: "tab separator", in: crlf("GET\thttp://example.com/ HTTP/1.1", "Host: example.com"), status: 400},
		{name: "leading space", in: crlf(" GET http://example.com/ HTTP/1.1", "Host: example.com"), status: 400},
		{name: "space in target", in: crlf("GET http://example.com/a b HTTP/1.1", "Host: example.com"), status: 400},
		{name: "method not a token", in: crlf("G(T http://example.com/ HTTP/1.1", "Host: example.com"), status: 400},
		{name: "NUL in target", in: crlf("GET http://example.com/\x00 HTTP/1.1", "Host: example.com"), status: 400},
		{name: "non-ASCII target", in: crlf("GET http://example.com/\xc3\xa9 HTTP/1.1", "Host: example.com"), status: 400},
		{name: "HTTP/2.0", in: crlf("GET http://example.com/ HTTP/2.0", "Host: example.com"), status: 505},
		{name: "HTTP/1.2", in: crlf("GET http://example.com/ HTTP/1.2", "Host: example.com"), status: 505},
		{name: "HTTP/0.9 version", in: crlf("GET http://example.com/ HTTP/0.9", "Host: example.com"), status: 505},
		{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: 505},
		{name: "lower-case version", in: crlf("GET http://example.com/ http/1.1", "Host: example.com"), status: 400},
		{name: "version HTTP/1.10", in: crlf("GET http://example.com/ HTTP/1.10", "Host: example.com"), status: 400},
		{name: "version HTTP/1", in: crlf("GET http://example.com/ HTTP/1", "Host: example.com"), status: 400},
		{name: "bare CR in request line", in: crlf("GET http://example.com/\r HTTP/1.1", "Host: example.com"), status: 400},
		{name: "bare CR ending a line", in: "GET http://example.com/ HTTP/1.1\rHost: example.com\r\n\r\n", status: 400},
		{name: "CR CR LF", in: "GET http://example.com/ HTTP/1.1\r\r\nHost: example.com\r\n\r\n", status: 400},

		// Header lines.
		{name: "obs-fold", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: 1", " 2"), status: 400},
		{name: "obs-fold with tab", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: 1", "\t2"), status: 400},
		{name: "whitespace before the first header", in: crlf("GET http://example.com/ HTTP/1.1", " Host: example.com"), status: 400},
		{name: "space before colon", in: crlf("GET http://example.com/ HTTP/1.1", "Host : example.com"), status: 400},
		{name: "tab before colon", in: crlf("GET http://example.com/ HTTP/1.1", "Host\t: example.com"), status: 400},
		{name: "no colon", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A"), status: 400},
		{name: "empty name", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", ": x"), status: 400},
		{name: "name not a token", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X(A): x"), status: 400},
		{name: "non-ASCII name", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-\xc3\xa9: x"), status: 400},
		{name: "NUL in value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: a\x00b"), status: 400},
		{name: "bare CR in value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: a\rb"), status: 400},
		{name: "control in value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: a\x01b"), status: 400},
		{name: "DEL in value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "X-A: a\x7fb"), status: 400},

		// Host.
		{name: "missing Host", in: crlf("GET http://example.com/ HTTP/1.1"), status: 400},
		{name: "two Host lines", in: crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "host: example.com"), status: 400},
		{name: "two Host lines in HTTP/1.0", in: crlf("GET http://example.com/ HTTP/1.0", "Host: a", "Host: b"), status: 400},
		{name: "invalid Host value", in: crlf("GET http://example.com/ HTTP/1.1", "Host: exa mple.com"), status: 400},
		{name: "Host with userinfo", in: crlf("GET http://example.com/ HTTP/1.1", "Host: u@example.com"), status: 400},

		// Content-Length.
		{name: "Content-Length", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"5"}}, ContentLength: 5}},
		{name: "Content-Length 0", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 0"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"0"}}, ContentLength: 0}},
		{name: "Content-Length with extra OWS", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length:  \t5 "),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"5"}}, ContentLength: 5}},
		{name: "identical duplicate Content-Length", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5", "content-length: 5"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"5", "5"}}, ContentLength: 5}},
		{name: "identical Content-Length list", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5, 5,5"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"5, 5,5"}}, ContentLength: 5}},
		{name: "Content-Length max int64", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 9223372036854775807"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Content-Length": {"9223372036854775807"}}, ContentLength: 1<<63 - 1}},
		{name: "Content-Length in HTTP/1.0", in: crlf("POST http://example.com/ HTTP/1.0", "Content-Length: 3"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 0, Header: http.Header{"Content-Length": {"3"}}, ContentLength: 3, Close: true}},
		{name: "differing duplicate Content-Length", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5", "Content-Length: 6"), status: 400},
		{name: "differing Content-Length list", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5, 6"), status: 400},
		{name: "Content-Length +5", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: +5"), status: 400},
		{name: "Content-Length -5", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: -5"), status: 400},
		{name: "Content-Length 5 5", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5 5"), status: 400},
		{name: "Content-Length hex", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 0x5"), status: 400},
		{name: "Content-Length empty", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length:"), status: 400},
		{name: "Content-Length empty list element", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5,"), status: 400},
		{name: "Content-Length int64 overflow", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 9223372036854775808"), status: 400},
		{name: "Content-Length huge", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 99999999999999999999999999999"), status: 400},
		{name: "Content-Length list wraps around", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5, 18446744073709551621"), status: 400},

		// Transfer-Encoding.
		{name: "chunked", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Transfer-Encoding": {"chunked"}}, ContentLength: -1, Chunked: true}},
		{name: "lower-case transfer-encoding: CHUNKED", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "transfer-encoding: CHUNKED"),
			want: &requestHead{Method: "POST", Target: "http://example.com/", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Host": {"example.com"}, "Transfer-Encoding": {"CHUNKED"}}, ContentLength: -1, Chunked: true}},
		{name: "CL and TE", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Content-Length: 5", "Transfer-Encoding: chunked"), status: 400},
		{name: "TE and CL", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked", "Content-Length: 5"), status: 400},
		{name: "CL 0 and TE", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked", "Content-Length: 0"), status: 400},
		{name: "CL and unsupported TE", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: gzip", "Content-Length: 5"), status: 400},
		{name: "TE in HTTP/1.0", in: crlf("POST http://example.com/ HTTP/1.0", "Transfer-Encoding: chunked"), status: 400},
		{name: "gzip, chunked", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: gzip, chunked"), status: 501},
		{name: "gzip then chunked fields", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: gzip", "Transfer-Encoding: chunked"), status: 501},
		{name: "gzip", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: gzip"), status: 501},
		{name: "identity", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: identity"), status: 501},
		{name: "chunked, gzip", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked, gzip"), status: 400},
		{name: "chunked twice", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked, chunked"), status: 400},
		{name: "chunked in two fields", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), status: 400},
		{name: "empty TE", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding:"), status: 400},
		{name: "TE with empty element", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: , chunked"), status: 400},
		{name: "TE with parameter", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked;x=1"), status: 400},
		{name: "TE chunked with junk", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: xchunked"), status: 501},
		{name: "TE with vertical tab", in: crlf("POST http://example.com/ HTTP/1.1", "Host: example.com", "Transfer-Encoding: \x0bchunked"), status: 400},

		// Size.
		{name: "head exactly at the limit", in: sizedHead(limit),
			want: get(http.Header{"Host": {"example.com"}, "X-Pad": {sizedHeadPad(limit)}})},
		{name: "head one byte over the limit", in: sizedHead(limit + 1), status: 431},
		{name: "one endless line", in: strings.Repeat("G", 1<<20), status: 431},
		{name: "many small headers", in: "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + strings.Repeat("A: b\r\n", limit/6) + "\r\n", status: 431},
	}
	for _, tt := range tests {
		for _, size := range []int{16, 4096} {
			t.Run(fmt.Sprintf("%s/buf%d", tt.name, size), func(t *testing.T) {
				br := bufio.NewReaderSize(strings.NewReader(tt.in), size)
				got, err := readRequestHead(br, limit)
				switch {
				case tt.status != 0:
					var se *statusError
					if !errors.As(err, &se) {
						t.Fatalf("got %+v, %v; want status %d", got, err, tt.status)
					}
					if se.Status != tt.status {
						t.Errorf("got status %d (%s), want %d", se.Status, se.Reason, tt.status)
					}
					checkReason(t, se)
				case tt.err != nil:
					if err != tt.err {
						t.Errorf("got %+v, %v; want error %v", got, err, tt.err)
					}
				default:
					if err != nil {
						t.Fatalf("got error %v, want success", err)
					}
					if diff := cmp.Diff(tt.want, got); diff != "" {
						t.Errorf("head mismatch (-want +got):\n%s", diff)
					}
					if rest, _ := io.ReadAll(br); len(rest) != 0 {
						t.Errorf("got %q left after the head, want nothing", rest)
					}
				}
			})
		}
	}
}

// checkReason checks that a refusal's reason can go into a response header
// and the log.
func checkReason(t *testing.T, se *statusError) {
	t.Helper()
	if se.Reason == "" || strings.IndexFunc(se.Reason, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		t.Errorf("got reason %q, want a non-empty printable ASCII sentence", se.Reason)
	}
	if !strings.Contains(se.Error(), se.Reason) || !strings.Contains(se.Error(), strconv.Itoa(se.Status)) {
		t.Errorf("got Error() %q, want the status and the reason", se.Error())
	}
}

// countingSource counts the bytes read from it.
type countingSource struct {
	r io.Reader
	n int
}

func (c *countingSource) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestReadRequestHeadStopsAtLimit checks that an over-long head is refused
// once the limit is passed, not after reading all of it.
func TestReadRequestHeadStopsAtLimit(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("G", 10<<20),
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-A: " + strings.Repeat("a", 10<<20),
		"GET http://example.com/ HTTP/1.1\r\n" + strings.Repeat("X-A: a\r\n", 1<<20),
	} {
		const limit, bufSize = 1 << 10, 4096
		src := &countingSource{r: strings.NewReader(in)}
		_, err := readRequestHead(bufio.NewReaderSize(src, bufSize), limit)
		var se *statusError
		if !errors.As(err, &se) || se.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("got %v, want status 431", err)
		}
		if src.n > limit+bufSize {
			t.Errorf("got %d bytes read, want at most %d", src.n, limit+bufSize)
		}
	}
}

// TestReadRequestHeadPipelined reads requests sent back to back, bodies
// included, from one reader.
func TestReadRequestHeadPipelined(t *testing.T) {
	in := crlf("POST http://example.com/a HTTP/1.1", "Host: example.com", "Content-Length: 5") + "hello" +
		crlf("POST http://example.com/b HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked") + "5\r\nworld\r\n0\r\n\r\n" +
		"\r\n" + // a stray CRLF after a body, which RFC 9112 §2.2 asks servers to skip
		crlf("GET http://example.com/c HTTP/1.1", "Host: example.com", "Connection: close")
	br := bufio.NewReaderSize(strings.NewReader(in), 16)

	h, err := readRequestHead(br, 1<<10)
	if err != nil || h.Target != "http://example.com/a" || h.ContentLength != 5 {
		t.Fatalf("first request: got %+v, %v; want /a with Content-Length 5", h, err)
	}
	body := make([]byte, h.ContentLength)
	if _, err := io.ReadFull(br, body); err != nil || string(body) != "hello" {
		t.Fatalf("first body: got %q, %v; want hello", body, err)
	}

	h, err = readRequestHead(br, 1<<10)
	if err != nil || h.Target != "http://example.com/b" || !h.Chunked {
		t.Fatalf("second request: got %+v, %v; want /b chunked", h, err)
	}
	// Read the chunked body as the forwarding code would (net/http/httputil's
	// chunked reader is not imported to keep this test self-contained).
	if line, _ := br.ReadString('\n'); line != "5\r\n" {
		t.Fatalf("got chunk size line %q, want %q", line, "5\r\n")
	}
	if _, err := br.Discard(len("world\r\n0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}

	h, err = readRequestHead(br, 1<<10)
	if err != nil || h.Target != "http://example.com/c" || !h.Close {
		t.Fatalf("third request: got %+v, %v; want /c with Close", h, err)
	}
	if h, err := readRequestHead(br, 1<<10); err != io.EOF {
		t.Fatalf("after the last request: got %+v, %v; want io.EOF", h, err)
	}
}

// TestReadRequestHeadReadError checks that a read error other than EOF is
// passed on, wrapped.
func TestReadRequestHeadReadError(t *testing.T) {
	errRead := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("GET http://example.com/ HTTP/1.1\r\nHo"), &failingReader{errRead})
	_, err := readRequestHead(bufio.NewReader(r), 1<<10)
	if !errors.Is(err, errRead) {
		t.Fatalf("got %v, want an error wrapping %v", err, errRead)
	}
	var se *statusError
	if errors.As(err, &se) {
		t.Fatalf("got %v, a *statusError; want a plain read error", err)
	}
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

// writeHead serializes h as a client would send it: the request line, then
// the header fields sorted by name, each value on its own line.
func writeHead(h *requestHead) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/%d.%d\r\n", h.Method, h.Target, h.ProtoMajor, h.ProtoMinor)
	for _, k := range slices.Sorted(maps.Keys(h.Header)) {
		for _, v := range h.Header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

func FuzzReadRequestHead(f *testing.F) {
	for _, s := range []string{
		crlf("GET http://example.com/ HTTP/1.1", "Host: example.com"),
		crlf("GET http://example.com/ HTTP/1.0"),
		"GET http://example.com/ HTTP/1.1\nHost: example.com\n\n",
		"\r\n" + crlf("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443", "Proxy-Connection: keep-alive"),
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "Content-Length: 5", "Content-Length: 5, 5") + "hello",
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "Content-Length: 5", "Transfer-Encoding: chunked"),
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "transfer-encoding: gzip, CHUNKED") + "0\r\n\r\n",
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "X: 1", " folded"),
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "Content-Length: +5"),
		crlf("GET /x HTTP/2.0", "Host: a"),
		crlf("GET * HTTP/1.1", "Host: a", "Connection: close", "X-A: \x00"),
		crlf("GET http://example.com/ HTTP/1.1", "Host: a") + crlf("GET http://example.com/b HTTP/1.1", "Host: b"),
		"GET http://example.com/ HTTP/1.1\rHost: a\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 10
		br := bufio.NewReaderSize(bytes.NewReader(data), 64)
		for range 4 { // pipelined requests, or what follows a head
			h, err := readRequestHead(br, limit)
			if err != nil {
				var se *statusError
				switch {
				case err == io.EOF, err == io.ErrUnexpectedEOF:
				case errors.As(err, &se):
					if se.Status < 400 || se.Status > 599 {
						t.Fatalf("got status %d, want 4xx or 5xx", se.Status)
					}
					checkReason(t, se)
				default:
					t.Fatalf("got error %v (%T), want io.EOF, io.ErrUnexpectedEOF or *statusError", err, err)
				}
				return
			}
			checkHead(t, h)

			again, err := readRequestHead(bufio.NewReader(bytes.NewReader(writeHead(h))), 1<<20)
			if err != nil {
				t.Fatalf("parsing %q again: %v", writeHead(h), err)
			}
			if diff := cmp.Diff(h, again); diff != "" {
				t.Fatalf("head changed when written and parsed again (-first +again):\n%s", diff)
			}

			if h.Method == http.MethodConnect {
				if host, port, err := parseConnectTarget(h.Target); err == nil && (host == "" || port == 0) {
					t.Fatalf("parseConnectTarget(%q) = %q, %d", h.Target, host, port)
				}
			} else if u, se := parseProxyTarget(h.Target); se == nil && (u.Scheme != "http" || u.Hostname() == "") {
				t.Fatalf("parseProxyTarget(%q) = %v", h.Target, u)
			}
		}
	})
}

// checkHead checks what readRequestHead promises about a head it accepts.
func checkHead(t *testing.T, h *requestHead) {
	t.Helper()
	if !netpolicy.ValidMethod(h.Method) {
		t.Fatalf("got method %q, want a token", h.Method)
	}
	if h.Target == "" || strings.IndexFunc(h.Target, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		t.Fatalf("got target %q, want printable ASCII", h.Target)
	}
	if h.ProtoMajor != 1 || h.ProtoMinor > 1 {
		t.Fatalf("got HTTP/%d.%d, want 1.0 or 1.1", h.ProtoMajor, h.ProtoMinor)
	}
	if h.ContentLength < -1 || h.Chunked && (h.ContentLength != -1 || h.ProtoMinor == 0) {
		t.Fatalf("got ContentLength %d, Chunked %t in HTTP/1.%d", h.ContentLength, h.Chunked, h.ProtoMinor)
	}
	if _, hasCL := h.Header["Content-Length"]; hasCL != (h.ContentLength >= 0) {
		t.Fatalf("got ContentLength %d with Content-Length fields %q", h.ContentLength, h.Header["Content-Length"])
	}
	if _, hasTE := h.Header["Transfer-Encoding"]; hasTE != h.Chunked {
		t.Fatalf("got Chunked %t with Transfer-Encoding fields %q", h.Chunked, h.Header["Transfer-Encoding"])
	}
	if n := len(h.Header["Host"]); n > 1 || n == 0 && h.ProtoMinor == 1 {
		t.Fatalf("got %d Host fields in HTTP/1.%d", n, h.ProtoMinor)
	}
	for k, vs := range h.Header {
		if k != http.CanonicalHeaderKey(k) || !netpolicy.IsToken(k) {
			t.Fatalf("got header key %q, want a canonical token", k)
		}
		for _, v := range vs {
			if strings.Trim(v, " \t") != v || strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) >= 0 {
				t.Fatalf("got %s value %q, want trimmed and free of controls", k, v)
			}
		}
	}
}

// TestHeadBufReuse reads three heads through one headBuf, as a client
// connection's requests are read: each head has its own fields and no
// field of the one before, and a name repeated after another name's field
// (A, B, A) keeps both values of each, the second A appended without
// writing over B's value, which follows A's first in the memory they
// share.
func TestHeadBufReuse(t *testing.T) {
	in := crlf("GET http://example.com/1 HTTP/1.1", "Host: example.com", "A: 1", "B: 2", "A: 3", "C: 4") +
		crlf("GET http://example.com/2 HTTP/1.1", "Host: example.org", "D: 5") +
		crlf("GET http://example.com/3 HTTP/1.1", "Host: example.net", "B: 6", "B: 7", "E: 8")
	br := bufio.NewReader(strings.NewReader(in))
	var b headBuf
	for i, want := range []http.Header{
		{"Host": {"example.com"}, "A": {"1", "3"}, "B": {"2"}, "C": {"4"}},
		{"Host": {"example.org"}, "D": {"5"}},
		{"Host": {"example.net"}, "B": {"6", "7"}, "E": {"8"}},
	} {
		h, err := b.read(br, 1<<10)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if diff := cmp.Diff(want, h.Header); diff != "" {
			t.Errorf("request %d: fields (-want +got):\n%s", i+1, diff)
		}
		if wantTarget := "http://example.com/" + strconv.Itoa(i+1); h.Target != wantTarget {
			t.Errorf("request %d: got target %q, want %q", i+1, h.Target, wantTarget)
		}
	}
}

// TestHeadBufDropsALargeHead: after a head with more field names than
// headKeepFields, the next head is read into new memory, so that the
// connection does not keep the large one's map and array; after a
// typical head, the next one reuses its map.
func TestHeadBufDropsALargeHead(t *testing.T) {
	fields := []string{"GET http://example.com/1 HTTP/1.1", "Host: example.com"}
	for i := range 1000 {
		fields = append(fields, fmt.Sprintf("X-F%d: %d", i, i))
	}
	small := crlf("GET http://example.com/2 HTTP/1.1", "Host: example.com", "A: 1")
	br := bufio.NewReader(strings.NewReader(crlf(fields...) + small + small))
	var b headBuf
	mapOf := func() uintptr { return reflect.ValueOf(b.head.Header).Pointer() }
	read := func() {
		t.Helper()
		if _, err := b.read(br, 64<<10); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if n := len(b.head.Header); n != 1001 {
		t.Fatalf("the large head has %d fields, want 1001", n)
	}
	large := mapOf()
	read()
	if c := cap(b.vals); c > headKeepFields || mapOf() == large {
		t.Errorf("after a head of 1001 fields, the next is read into its memory (values' capacity %d, same map %t); want new memory", c, mapOf() == large)
	}
	if diff := cmp.Diff(http.Header{"Host": {"example.com"}, "A": {"1"}}, b.head.Header); diff != "" {
		t.Errorf("the small head's fields (-want +got):\n%s", diff)
	}
	typical := mapOf()
	read()
	if mapOf() != typical {
		t.Errorf("a head after a typical one was read into a new map, want the last one's")
	}
}

// BenchmarkReadRequestHead reads a typical proxied request head, into
// new memory (new) and over the last head's (reused), as a client
// connection's requests are read.
func BenchmarkReadRequestHead(b *testing.B) {
	head := []byte(crlf("GET http://example.com/api/v1/items?page=2 HTTP/1.1", "Host: example.com",
		"User-Agent: curl/8.5.0", "Accept: */*", "Accept-Encoding: gzip", "Proxy-Connection: Keep-Alive"))
	for _, mode := range []string{"new", "reused"} {
		b.Run(mode, func(b *testing.B) {
			r := bytes.NewReader(head)
			br := bufio.NewReader(r)
			var hb headBuf
			read := func() (*requestHead, error) { return readRequestHead(br, 64<<10) }
			if mode == "reused" {
				read = func() (*requestHead, error) { return hb.read(br, 64<<10) }
			}
			b.SetBytes(int64(len(head)))
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(head)
				br.Reset(r)
				if _, err := read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
