package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// upstreamBytes returns what the gateway writes upstream for the request
// head in, with body, and what http.Request.Write wrote for it before
// writeHead and writeBody replaced it; ok is false when in is refused
// before it would be forwarded.
func upstreamBytes(t *testing.T, in string, body []byte) (got, want string, ok bool) {
	t.Helper()
	head, err := readRequestHead(bufio.NewReader(strings.NewReader(in)), 1<<20)
	if err != nil || head.Method == http.MethodConnect {
		return "", "", false
	}
	u, se := parseProxyTarget(head.Target)
	if se != nil {
		return "", "", false
	}
	ws := isWebSocket(head.Header)
	out := &upstreamRequest{}
	out.init(head, u, ws)
	switch {
	case head.Chunked:
		out.ContentLength = -1
	case head.ContentLength > 0:
		if head.ContentLength > 1<<16 {
			return "", "", false
		}
		out.ContentLength = head.ContentLength
		body = bytes.Repeat([]byte{'b'}, int(head.ContentLength))
	default:
		body = nil
	}

	// As forwardHTTP built it before.
	old := &http.Request{
		Method:     head.Method,
		URL:        &url.URL{Scheme: "http", Host: "192.0.2.1:80", Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery},
		Host:       u.Host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     out.Header.Clone(),
	}
	if _, ok := old.Header["User-Agent"]; !ok {
		old.Header["User-Agent"] = nil // Go would add its own
	}
	if body != nil {
		old.ContentLength = out.ContentLength
		old.Body = io.NopCloser(bytes.NewReader(body))
		out.Body = bytes.NewReader(body)
	}
	var w bytes.Buffer
	if err := old.Write(&w); err != nil {
		return "", "", false // net/http would not have sent it either
	}
	var g bytes.Buffer
	bw := bufio.NewWriter(&g)
	out.writeHead(bw)
	if out.hasBody() {
		if err := out.writeBody(bw); err != nil {
			t.Fatalf("writeBody: %v", err)
		}
	}
	bw.Flush()
	return g.String(), w.String(), true
}

func TestUpstreamHeadMatchesRequestWrite(t *testing.T) {
	for _, in := range []string{
		crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "User-Agent: curl/8", "Accept: */*"),
		crlf("GET http://example.com HTTP/1.1", "Host: example.com"),
		crlf("GET http://Example.com:8080/a%2Fb;c?q=1&r=%20 HTTP/1.0", "Accept: a", "accept: b", "X-Empty:"),
		crlf("POST http://example.com/p HTTP/1.1", "Host: example.com", "Content-Length: 0"),
		crlf("PUT http://example.com/p HTTP/1.1", "Host: example.com", "Content-Length: 5"),
		crlf("POST http://example.com/p HTTP/1.1", "Host: example.com", "Transfer-Encoding: chunked", "Trailer: X-Sum"),
		crlf("DELETE http://[::1]:81/x HTTP/1.1", "Host: x", "User-Agent: a", "User-Agent: b", "Connection: X-A, keep-alive",
			"X-A: 1", "Proxy-Authorization: Basic x", "TE: trailers", "Keep-Alive: 5", "Upgrade: h2c"),
		crlf("GET http://example.com/chat HTTP/1.1", "Host: example.com", "Upgrade: websocket", "Connection: Upgrade",
			"Sec-WebSocket-Key: k"),
		crlf("GET http://example.com/ HTTP/1.1", "Host: example.com", "User-Agent:"),
	} {
		got, want, ok := upstreamBytes(t, in, []byte("hello"))
		if !ok {
			t.Fatalf("%q was refused", in)
		}
		if got != want {
			t.Errorf("for %q got\n%q\nwant (http.Request.Write)\n%q", in, got, want)
		}
	}
}

func FuzzUpstreamHead(f *testing.F) {
	for _, s := range []string{
		crlf("GET http://example.com/a?b HTTP/1.1", "Host: example.com", "User-Agent: x", "Accept: */*", "Cookie: a", "Cookie: b"),
		crlf("POST http://example.com/ HTTP/1.1", "Host: a", "Content-Length: 5"),
		crlf("PATCH http://example.com/ HTTP/1.1", "Host: a", "Transfer-Encoding: chunked", "Connection: x-y", "X-Y: z"),
		crlf("OPTIONS http://example.com HTTP/1.0", "Expect: 100-continue", "Proxy-Connection: keep-alive"),
	} {
		f.Add(s, []byte("hello"))
	}
	f.Fuzz(func(t *testing.T, in string, body []byte) {
		got, want, ok := upstreamBytes(t, in, body)
		if ok && got != want {
			t.Fatalf("for %q got\n%q\nwant (http.Request.Write)\n%q", in, got, want)
		}
	})
}
