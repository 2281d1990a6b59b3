package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// readHead parses s as a response head with a small buffer, so that long
// lines take the path of lines longer than the buffer.
func readHead(s string) (*responseHead, *bufio.Reader, error) {
	br := bufio.NewReaderSize(strings.NewReader(s), 16)
	h := &responseHead{}
	err := readResponseHead(br, h, 1<<10)
	return h, br, err
}

// fieldsOf returns h's fields as "Name: value" lines.
func fieldsOf(h *responseHead) []string {
	var out []string
	for _, f := range h.Fields {
		out = append(out, string(f.Name)+": "+string(f.Value))
	}
	return out
}

func TestReadResponseHead(t *testing.T) {
	for _, tc := range []struct {
		name, in   string
		status     int
		minor      int
		reason     string
		fields     []string
		cl         int64
		chunked    bool
		close      bool
		wantReason string // for a refused head, part of its reason; "" means accepted
	}{
		{name: "plain", in: crlf("HTTP/1.1 200 OK", "Content-Length: 5", "X-A:  b "), status: 200, minor: 1, reason: "OK",
			fields: []string{"Content-Length: 5", "X-A: b"}, cl: 5},
		{name: "bare LF", in: "HTTP/1.1 404 Not Found\nContent-Length: 0\n\n", status: 404, minor: 1, reason: "Not Found",
			fields: []string{"Content-Length: 0"}, cl: 0},
		{name: "no reason", in: crlf("HTTP/1.1 204"), status: 204, minor: 1, cl: -1},
		{name: "empty reason", in: crlf("HTTP/1.1 200 ", "Content-Length: 1"), status: 200, minor: 1, fields: []string{"Content-Length: 1"}, cl: 1},
		{name: "chunked", in: crlf("HTTP/1.1 200 OK", "transfer-encoding: Chunked"), status: 200, minor: 1, reason: "OK",
			fields: []string{"transfer-encoding: Chunked"}, cl: -1, chunked: true},
		{name: "close", in: crlf("HTTP/1.1 200 OK", "Connection: keep-alive, Close"), status: 200, minor: 1, reason: "OK",
			fields: []string{"Connection: keep-alive, Close"}, cl: -1, close: true},
		{name: "1.0 closes", in: crlf("HTTP/1.0 200 OK"), status: 200, reason: "OK", cl: -1, close: true},
		{name: "1.0 keep-alive", in: crlf("HTTP/1.0 200 OK", "Connection: keep-alive", "Content-Length: 2"), status: 200, reason: "OK",
			fields: []string{"Connection: keep-alive", "Content-Length: 2"}, cl: 2},
		{name: "same Content-Length twice", in: crlf("HTTP/1.1 200 OK", "Content-Length: 3", "Content-Length: 3"), status: 200, minor: 1, reason: "OK",
			fields: []string{"Content-Length: 3", "Content-Length: 3"}, cl: 3},
		{name: "obs-text reason", in: crlf("HTTP/1.1 200 \xe2\x9c\x93\tfine"), status: 200, minor: 1, reason: "\xe2\x9c\x93\tfine", cl: -1},
		{name: "long line", in: crlf("HTTP/1.1 200 OK", "X-Long: "+strings.Repeat("a", 100)), status: 200, minor: 1, reason: "OK",
			fields: []string{"X-Long: " + strings.Repeat("a", 100)}, cl: -1},

		{name: "CL and TE", in: crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Transfer-Encoding: chunked"), wantReason: "both Content-Length and Transfer-Encoding"},
		{name: "TE and CL", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Length: 5"), wantReason: "both Content-Length and Transfer-Encoding"},
		{name: "differing CL", in: crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Content-Length: 6"), wantReason: "differing Content-Length"},
		{name: "CL list", in: crlf("HTTP/1.1 200 OK", "Content-Length: 5, 5"), wantReason: "not a decimal number"},
		{name: "CL sign", in: crlf("HTTP/1.1 200 OK", "Content-Length: +5"), wantReason: "not a decimal number"},
		{name: "CL empty", in: crlf("HTTP/1.1 200 OK", "Content-Length:"), wantReason: "empty Content-Length"},
		{name: "CL overflow", in: crlf("HTTP/1.1 200 OK", "Content-Length: 99999999999999999999"), wantReason: "too large"},
		{name: "gzip coding", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: gzip, chunked"), wantReason: "other than a single chunked"},
		{name: "two TE fields", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), wantReason: "other than a single chunked"},
		{name: "TE in 1.0", in: crlf("HTTP/1.0 200 OK", "Transfer-Encoding: chunked"), wantReason: "HTTP/1.0"},
		{name: "obs-fold", in: crlf("HTTP/1.1 200 OK", "X-A: b", " c"), wantReason: "obsolete line folding"},
		{name: "leading whitespace", in: crlf("HTTP/1.1 200 OK", "\tX-A: b"), wantReason: "obsolete line folding"},
		{name: "bare CR in a field", in: "HTTP/1.1 200 OK\r\nX-A: b\rX-B: c\r\n\r\n", wantReason: "bare CR"},
		{name: "bare CR ending a line", in: "HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n", wantReason: "bare CR"},
		{name: "NUL", in: crlf("HTTP/1.1 200 OK", "X-A: b\x00"), wantReason: "control character"},
		{name: "DEL", in: crlf("HTTP/1.1 200 OK", "X-A: \x7f"), wantReason: "control character"},
		{name: "space before colon", in: crlf("HTTP/1.1 200 OK", "Content-Length : 5"), wantReason: "not a token"},
		{name: "no colon", in: crlf("HTTP/1.1 200 OK", "Content-Length"), wantReason: "no colon"},
		{name: "empty name", in: crlf("HTTP/1.1 200 OK", ": x"), wantReason: "not a token"},
		{name: "HTTP/2", in: crlf("HTTP/2.0 200 OK"), wantReason: "malformed status line"},
		{name: "HTTP/1.2", in: crlf("HTTP/1.2 200 OK"), wantReason: "not supported"},
		{name: "lower-case version", in: crlf("http/1.1 200 OK"), wantReason: "malformed status line"},
		{name: "two digits", in: crlf("HTTP/1.1 20 OK"), wantReason: "malformed status"},
		{name: "four digits", in: crlf("HTTP/1.1 2000 OK"), wantReason: "malformed status code"},
		{name: "signed status", in: crlf("HTTP/1.1 +20 OK"), wantReason: "malformed status code"},
		{name: "status 099", in: crlf("HTTP/1.1 099 OK"), wantReason: "malformed status code"},
		{name: "two spaces", in: crlf("HTTP/1.1  200 OK"), wantReason: "malformed status code"},
		{name: "control in reason", in: crlf("HTTP/1.1 200 O\x01K"), wantReason: "control character"},
		{name: "empty line first", in: crlf("", "HTTP/1.1 200 OK"), wantReason: "empty line"},
		{name: "too large", in: crlf("HTTP/1.1 200 OK", "X-A: "+strings.Repeat("a", 1<<10)), wantReason: "larger than 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, err := readHead(tc.in)
			if tc.wantReason != "" {
				var he *upstreamHeadError
				if !errors.As(err, &he) || !strings.Contains(he.Reason, tc.wantReason) {
					t.Fatalf("got error %v, want an *upstreamHeadError saying %q", err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want the head accepted", err)
			}
			got := []any{h.Status, h.ProtoMinor, string(h.Reason), fieldsOf(h), h.ContentLength, h.Chunked, h.Close}
			want := []any{tc.status, tc.minor, tc.reason, tc.fields, tc.cl, tc.chunked, tc.close}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("got (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadResponseHeadEOF(t *testing.T) {
	for _, in := range []string{"", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK\r\nX-A: b\r\n"} {
		if _, _, err := readHead(in); err != io.ErrUnexpectedEOF {
			t.Errorf("readResponseHead(%q): got %v, want io.ErrUnexpectedEOF", in, err)
		}
	}
}

func TestResponseBodyLength(t *testing.T) {
	for _, tc := range []struct {
		in     string
		method string
		want   int64
	}{
		{crlf("HTTP/1.1 200 OK", "Content-Length: 7"), "GET", 7},
		{crlf("HTTP/1.1 200 OK", "Content-Length: 7"), "HEAD", 0},
		{crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"), "GET", -1},
		{crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"), "HEAD", 0},
		{crlf("HTTP/1.1 200 OK"), "GET", -1},
		{crlf("HTTP/1.1 204 No Content", "Content-Length: 7"), "GET", 0},
		{crlf("HTTP/1.1 304 Not Modified", "Transfer-Encoding: chunked"), "GET", 0},
		{crlf("HTTP/1.1 103 Early Hints"), "GET", 0},
	} {
		h, _, err := readHead(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.bodyLength(tc.method); got != tc.want {
			t.Errorf("bodyLength(%s) of %q = %d, want %d", tc.method, tc.in, got, tc.want)
		}
	}
}

func TestWriteResponse(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		method    string
		minor     int
		keepAlive bool
		want      string
		reusable  bool
	}{
		{name: "length", in: crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Connection: x-hop", "X-Hop: 1", "Keep-Alive: t=1", "X-Kept: 1") + "hello",
			method: "GET", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "X-Kept: 1", "Content-Length: 5") + "hello"},
		{name: "zero length", in: crlf("HTTP/1.1 200 OK", "Content-Length: 0"), method: "GET", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "Content-Length: 0")},
		{name: "close to the client", in: crlf("HTTP/1.1 200 OK", "Content-Length: 1") + "x", method: "POST", minor: 1, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "Content-Length: 1", "Connection: close") + "x"},
		{name: "chunked again", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Trailer: X-Sum") + "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\nConnection: x\r\n\r\n",
			method: "GET", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n"},
		{name: "chunked to HTTP/1.0", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "3\r\nabc\r\n0\r\n\r\n",
			method: "GET", minor: 0, reusable: true,
			want: crlf("HTTP/1.0 200 OK", "Connection: close") + "abc"},
		{name: "until close", in: crlf("HTTP/1.1 200 OK") + "all of it", method: "GET", minor: 1,
			want: crlf("HTTP/1.1 200 OK", "Connection: close") + "all of it"},
		{name: "HEAD", in: crlf("HTTP/1.1 200 OK", "Content-Length: 99"), method: "HEAD", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "Content-Length: 99")},
		{name: "HEAD chunked", in: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"), method: "HEAD", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked")},
		{name: "304", in: crlf("HTTP/1.1 304 Not Modified", "Content-Length: 99", "ETag: \"x\""), method: "GET", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 304 Not Modified", "ETag: \"x\"")},
		{name: "no reason", in: crlf("HTTP/1.1 404", "Content-Length: 0"), method: "GET", minor: 1, keepAlive: true, reusable: true,
			want: crlf("HTTP/1.1 404 Not Found", "Content-Length: 0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, br, err := readHead(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			bw := bufio.NewWriter(&out)
			bodyLen := h.bodyLength(tc.method)
			chunkOut := bodyLen < 0 && h.Chunked && tc.minor == 1
			reusable, err := writeResponse(bw, br, h, tc.method, tc.minor, bodyLen, chunkOut, tc.keepAlive)
			bw.Flush()
			if err != nil || reusable != tc.reusable {
				t.Fatalf("writeResponse: got %t, %v; want %t, nil", reusable, err, tc.reusable)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", out.String(), tc.want)
			}
		})
	}
}

func TestWriteResponseRefusesBadBodies(t *testing.T) {
	for _, in := range []string{
		crlf("HTTP/1.1 200 OK", "Content-Length: 10") + "short",
		crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "zz\r\nabc\r\n0\r\n\r\n",
		crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "3\r\nabc\r\n0\r\nX-A: b\rc\r\n\r\n",
		crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "3\r\nabc\r\n0\r\n folded\r\n\r\n",
		crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "3\r\nabc\r\n",
	} {
		h, br, err := readHead(in)
		if err != nil {
			t.Fatal(err)
		}
		bodyLen := h.bodyLength("GET")
		if reusable, err := writeResponse(bufio.NewWriter(io.Discard), br, h, "GET", 1, bodyLen, bodyLen < 0, true); err == nil || reusable {
			t.Errorf("writeResponse of %q: got %t, %v; want an error", in, reusable, err)
		}
	}
}

func FuzzReadResponseHead(f *testing.F) {
	for _, s := range []string{
		crlf("HTTP/1.1 200 OK", "Content-Length: 5") + "hello",
		crlf("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + "5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Transfer-Encoding: chunked") + "5\r\nhello\r\n0\r\n\r\n",
		crlf("HTTP/1.0 200 OK", "Connection: keep-alive", "Content-Length: 1") + "x",
		crlf("HTTP/1.1 204 No Content", "Content-Length: 5"),
		crlf("HTTP/1.1 304 Not Modified", "Transfer-Encoding: chunked"),
		crlf("HTTP/1.1 200 OK", "Connection: close, X-A", "X-A: 1", "Pragma: no-cache") + "until close",
		crlf("HTTP/1.1 200 OK", "X-A: b", " folded"),
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nab",
		"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
		crlf("HTTP/1.1 200", "Content-Length: 05", "Content-Length: 5") + "hello",
		crlf("HTTP/1.1 101 Switching Protocols", "Upgrade: websocket"),
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		h := &responseHead{}
		br := bufio.NewReaderSize(bytes.NewReader(data), 16)
		err := readResponseHead(br, h, 1<<10)
		if err != nil {
			var he *upstreamHeadError
			if err != io.ErrUnexpectedEOF && !errors.As(err, &he) {
				t.Fatalf("got error %v (%T), want io.ErrUnexpectedEOF or *upstreamHeadError", err, err)
			}
			return
		}
		// What the gateway accepts, net/http accepts too, and reads the
		// same way.
		nbr := bufio.NewReader(bytes.NewReader(data))
		resp, err := http.ReadResponse(nbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("net/http refuses a head the gateway accepts: %v", err)
		}
		if resp.StatusCode != h.Status || resp.ProtoMinor != h.ProtoMinor {
			t.Fatalf("got status %d HTTP/1.%d, net/http %d HTTP/1.%d", h.Status, h.ProtoMinor, resp.StatusCode, resp.ProtoMinor)
		}
		bodyLen := h.bodyLength(method)
		wantLen := resp.ContentLength
		if method == "HEAD" {
			wantLen = h.ContentLength // net/http reports what the head says; neither reads a body
		}
		if method != "HEAD" && bodyLen != wantLen || h.Chunked != (len(resp.TransferEncoding) > 0) {
			t.Fatalf("got length %d, chunked %t; net/http %d, %q", bodyLen, h.Chunked, resp.ContentLength, resp.TransferEncoding)
		}
		if close := h.Close || bodyLen < 0 && !h.Chunked; close != resp.Close {
			t.Fatalf("got close %t, net/http %t", close, resp.Close)
		}
		got := http.Header{}
		for _, fld := range h.Fields {
			got.Add(string(fld.Name), string(fld.Value))
		}
		for _, k := range []string{"Transfer-Encoding", "Content-Length", "Connection", "Cache-Control"} {
			if k != "Cache-Control" || got.Get("Pragma") != "" {
				delete(got, k)
				delete(resp.Header, k)
			}
		}
		if diff := cmp.Diff(resp.Header, got); diff != "" {
			t.Fatalf("fields differ from net/http's (-net/http +gateway):\n%s", diff)
		}

		// What the gateway relays, a client reads as net/http reads the
		// upstream's response: the same status and body.
		wantBody, wantErr := io.ReadAll(resp.Body)
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		chunkOut := bodyLen < 0 && h.Chunked
		reusable, werr := writeResponse(bw, br, h, method, 1, bodyLen, chunkOut, true)
		bw.Flush()
		if wantErr != nil || werr != nil {
			return // net/http may read leniently what the gateway refuses (chunk trailers)
		}
		if reusable != (bodyLen >= 0 || h.Chunked) {
			t.Fatalf("got reusable %t for length %d, chunked %t", reusable, bodyLen, h.Chunked)
		}
		if reusable {
			rest, _ := io.ReadAll(br)
			nrest, _ := io.ReadAll(nbr)
			if !bytes.Equal(rest, nrest) {
				t.Fatalf("after the response the gateway leaves %q, net/http %q", rest, nrest)
			}
		}
		cbr := bufio.NewReader(&out)
		relayed, err := http.ReadResponse(cbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the relayed response %q does not parse: %v", out.String(), err)
		}
		body, err := io.ReadAll(relayed.Body)
		if err != nil || !bytes.Equal(body, wantBody) || relayed.StatusCode != h.Status {
			t.Fatalf("relayed %d %q (%v), want %d %q", relayed.StatusCode, body, err, h.Status, wantBody)
		}
		if cbr.Buffered() > 0 {
			t.Fatalf("the relayed response %q has bytes after its end", out.String())
		}
	})
}

// BenchmarkReadResponseHead reads a typical response head.
func BenchmarkReadResponseHead(b *testing.B) {
	head := []byte(crlf("HTTP/1.1 200 OK", "Server: nginx/1.26.3", "Date: Tue, 25 Nov 2026 03:57:22 GMT",
		"Content-Type: text/html", "Content-Length: 20", "Last-Modified: Tue, 25 Nov 2026 03:50:00 GMT",
		"Connection: keep-alive", `ETag: "6925290c-14"`, "Accept-Ranges: bytes"))
	r := bytes.NewReader(head)
	br := bufio.NewReader(r)
	h := &responseHead{}
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(head)
		br.Reset(r)
		if err := readResponseHead(br, h, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUpstreamAmbiguousFramingIs502 sends through the gateway to an
// upstream that answers with framing two parsers could read differently:
// the client gets 502 and nothing of the answer, and the close record
// says why.
func TestUpstreamAmbiguousFramingIs502(t *testing.T) {
	for name, answer := range map[string]string{
		"CL and TE":    crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Transfer-Encoding: chunked") + "0\r\n\r\nHTTP/1.1 200 OK\r\n",
		"differing CL": crlf("HTTP/1.1 200 OK", "Content-Length: 5", "Content-Length: 50") + "hello",
		"obs-fold":     crlf("HTTP/1.1 200 OK", "X-A: b", " Content-Length: 0", "Content-Length: 5") + "hello",
		"bare CR":      "HTTP/1.1 200 OK\r\nX-A: b\rContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
		"gzip TE":      crlf("HTTP/1.1 200 OK", "Transfer-Encoding: gzip") + "hello",
	} {
		t.Run(name, func(t *testing.T) {
			up := tcpServer(t, func(c net.Conn) {
				defer c.Close()
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, answer)
			})
			g := startGateway(t, loopbackPolicy(netpolicy.Allow), map[string]string{"up.test": "127.0.0.1"})
			resp, err := g.client(t, nil).Get("http://up.test:" + strconv.Itoa(up.Addr().(*net.TCPAddr).Port) + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(body), "hello") {
				t.Fatalf("got %d %q, want 502 without the upstream's body", resp.StatusCode, body)
			}
			var rec map[string]any
			for deadline := time.Now().Add(5 * time.Second); rec == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, r := range g.records(t) {
					if r["event"] == decisionlog.EventClose {
						rec = r
					}
				}
			}
			if rec["status"] != float64(502) || !strings.Contains(fmt.Sprint(rec["error"]), "malformed response from the upstream") {
				t.Errorf("got close record %v, want status 502 and the reason", rec)
			}
		})
	}
}

func TestTrimOWS(t *testing.T) {
	for _, s := range []string{"", " ", "\t \t", "a", " a", "a\t", " \ta b\t ", "\ta\r", "\u00a0a"} {
		if got, want := trimOWS(s), strings.Trim(s, " \t"); got != want {
			t.Errorf("trimOWS(%q) = %q, want %q", s, got, want)
		}
		if got, want := trimOWS([]byte(s)), bytes.Trim([]byte(s), " \t"); !bytes.Equal(got, want) {
			t.Errorf("trimOWS([]byte(%q)) = %q, want %q", s, got, want)
		}
	}
}
