package gateway

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// echoingAPI is a stand-in for an API host a secret is bound to that
// gives back what it is sent, as real services do: an error quoting a
// header, a debugging endpoint, a reflected request id, a key stored
// and shown on a later request, a stream. Each shape echoes the key the
// request carried (x-api-key, or Authorization's bearer token), or, for a
// request that carried none (plain HTTP, which never gets the value), the
// key it stored last: a host can show a key it was given over HTTPS on
// any request.
type echoingAPI struct {
	mu      sync.Mutex
	stored  string
	proceed chan struct{} // /sse waits on it mid-value
}

func requestKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func (e *echoingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	given := requestKey(r)
	key := given
	if key == "" {
		e.mu.Lock()
		key = e.stored
		e.mu.Unlock()
	}
	h := w.Header()
	switch r.URL.Path {
	case "/v1/messages": // Anthropic's 400 quoting a header value, here the key's (the gateway refuses a placeholder in anthropic-beta itself)
		h.Set("Content-Type", "application/json")
		h.Set("Request-Id", key)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":"Unexpected value(s) `+"`%s`"+` for the `+"`anthropic-beta`"+` header. Please consult our documentation at docs.anthropic.com or try again without the header."}}`, key)
	case "/v1/models": // an OpenAI-style 401 quoting the key whole
		h.Set("Content-Type", "application/json")
		h.Set("Www-Authenticate", `Bearer realm="api", error="invalid_token", error_description="`+key+`"`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s.","type":"invalid_request_error","code":"invalid_api_key"}}`, key)
	case "/headers": // a debugging endpoint: every request header back, and Origin and the request id reflected
		h.Set("Access-Control-Allow-Origin", key)
		h.Set("X-Request-Id", key)
		h.Set("X-Echo-Key", key)
		json.NewEncoder(w).Encode(map[string]any{"headers": r.Header})
	case "/trailer":
		h.Set("Trailer", "X-Echo-Key")
		io.WriteString(w, "body first\n")
		w.(http.Flusher).Flush()
		h.Set("X-Echo-Key", key)
	case "/gzip", "/deflate", "/zstd", "/br", "/compress":
		body := bytes.Repeat([]byte(`{"echo":"`+key+`"}`+"\n"), 50)
		var b bytes.Buffer
		var zw io.WriteCloser
		switch r.URL.Path {
		case "/gzip":
			zw = gzip.NewWriter(&b)
		case "/deflate":
			zw = zlib.NewWriter(&b)
		case "/zstd":
			zw, _ = zstd.NewWriter(&b)
		default: // a coding sbx cannot decode: sent as plain text, which a client taking the coding on trust would show
			zw = nopWriteCloser{&b}
		}
		zw.Write(body)
		zw.Close()
		h.Set("Content-Encoding", strings.TrimPrefix(r.URL.Path, "/"))
		w.Write(b.Bytes())
	case "/sse": // a stream, the key split across two writes with a wait between
		h.Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: ping\ndata: {}\n\ndata: {\"echo\":\""+key[:9])
		w.(http.Flusher).Flush()
		select {
		case <-e.proceed:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, key[9:]+"\"}\n\n")
	case "/store":
		if given != "" {
			e.mu.Lock()
			e.stored = given
			e.mu.Unlock()
		}
		w.WriteHeader(http.StatusCreated)
	case "/later": // asked with no key at all
		e.mu.Lock()
		defer e.mu.Unlock()
		fmt.Fprintf(w, `{"stored":"%s"}`, e.stored)
	case "/malformed": // a header line a parser quotes in its error
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "no hijacking here", http.StatusInternalServerError)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nBad Line " + key + "\r\n\r\n")
		brw.Flush()
	case "/ws", "/ws-ext":
		serveEchoWebSocket(w, r, key)
	default:
		http.NotFound(w, r)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// wsFrame is a frame as a server writes it; deflated sets RSV1
// (permessage-deflate).
func wsFrame(fin bool, op byte, p []byte, deflated bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if deflated {
		b0 |= 0x40
	}
	b := []byte{b0}
	switch n := len(p); {
	case n <= 125:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = append(b, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

// deflateMessage is p compressed as permessage-deflate sends it.
func deflateMessage(p []byte) []byte {
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, flate.BestSpeed)
	fw.Write(p)
	fw.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
}

// serveEchoWebSocket answers a WebSocket upgrade and sends key back: in a
// text message, split across three fragments with a ping between, in a
// ping and in the close's reason; compressed (permessage-deflate) when the
// client offered it, and always at /ws-ext.
func serveEchoWebSocket(w http.ResponseWriter, r *http.Request, key string) {
	deflate := strings.Contains(r.Header.Get("Sec-Websocket-Extensions"), "permessage-deflate") || r.URL.Path == "/ws-ext"
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	sum := sha1.Sum([]byte(r.Header.Get("Sec-Websocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	if deflate {
		brw.WriteString("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n")
	}
	brw.WriteString("X-Echo-Key: " + key + "\r\n\r\n")
	msg := []byte(`{"type":"session.created","key":"` + key + `"}`)
	if deflate {
		brw.Write(wsFrame(true, 1, deflateMessage(msg), true))
	} else {
		brw.Write(wsFrame(true, 1, msg, false))
		brw.Write(wsFrame(false, 1, []byte("split "+key[:4]), false))
		brw.Flush()
		brw.Write(wsFrame(false, 0, []byte(key[4:11]), false))
		brw.Write(wsFrame(true, 9, []byte(key), false))
		brw.Flush()
		brw.Write(wsFrame(true, 0, []byte(key[11:]+" end"), false))
	}
	brw.Write(wsFrame(true, 8, append([]byte{0x03, 0xe8}, "bye "+key...), false))
	brw.Flush() // and the connection closes: the client reads to its end
}

// readWSMessages is what a client makes of a server's frames: messages
// joined from their fragments and inflated when compressed, control
// frames as they are.
func readWSMessages(t *testing.T, b []byte) []string {
	t.Helper()
	var msgs []string
	var cur []byte
	var compressed bool
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			t.Fatalf("a frame cut short: %v", err)
		}
		fin, op, n := h[0]&0x80 != 0, h[0]&0x0f, uint64(h[1]&0x7f)
		switch n {
		case 126:
			var e [2]byte
			io.ReadFull(r, e[:])
			n = uint64(binary.BigEndian.Uint16(e[:]))
		case 127:
			var e [8]byte
			io.ReadFull(r, e[:])
			n = binary.BigEndian.Uint64(e[:])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatalf("a frame shorter than its length: %v", err)
		}
		if op >= 8 {
			msgs = append(msgs, string(p))
			continue
		}
		if op != 0 {
			compressed = h[0]&0x40 != 0
		}
		cur = append(cur, p...)
		if fin {
			if compressed {
				cur, _ = io.ReadAll(flate.NewReader(io.MultiReader(bytes.NewReader(cur), bytes.NewReader([]byte{0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff}))))
			}
			msgs = append(msgs, string(cur))
			cur = nil
		}
	}
	return msgs
}

// scrubSetup is a gateway, proxy and transparent, with API_KEY (valueA)
// bound to example.com on an echoing API's TLS and plain ports.
type scrubSetup struct {
	g         *transparentGateway
	api       *echoingAPI
	tlsPort   netpolicy.Port
	plainPort netpolicy.Port
	a         *secrets.Secret
	ca        *CA
}

func newScrubSetup(t *testing.T) *scrubSetup {
	t.Helper()
	s := &scrubSetup{api: &echoingAPI{proceed: make(chan struct{}, 1)}}
	up := httptest.NewUnstartedServer(s.api)
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := httptest.NewServer(s.api)
	t.Cleanup(plain.Close)
	s.tlsPort, s.plainPort = portOf(t, up), portOf(t, plain)
	var err error
	if s.a, err = secrets.New("API_KEY", valueA, []string{"example.com:" + s.tlsPort.String(), "example.com:" + s.plainPort.String()}); err != nil {
		t.Fatal(err)
	}
	if s.ca, err = NewCA("test", time.Hour); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	s.g = startTransparent(t, loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "api", Host: "example.com", Ports: []netpolicy.Port{s.tlsPort, s.plainPort}, Action: netpolicy.Allow},
	), map[string]string{"example.com": "127.0.0.1"}, func(c *serverConfig) {
		c.CA, c.UpstreamRoots = s.ca, pool
		c.Secrets = []*secrets.Secret{s.a}
	})
	// The host is given the key once over HTTPS, as a sandbox's agent
	// gives it; it shows it again on any request, plain HTTP too.
	proxy, _ := url.Parse("http://" + s.g.testGateway.addr)
	roots := x509.NewCertPool()
	roots.AddCert(s.ca.Certificate())
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "https://example.com:"+s.tlsPort.String()+"/store", nil)
	req.Header.Set("X-Api-Key", s.a.Placeholder())
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("storing the key over HTTPS: %s", resp.Status)
	}
	return s
}

// withKey puts the placeholder in the credential header of a request to
// base when base is HTTPS: only there does the gateway send the value.
func withKey(req *http.Request, ph string) {
	if req.URL.Scheme == "https" {
		req.Header.Set("X-Api-Key", ph)
	}
}

// rawConn keeps every byte a client reads from its connection.
type rawConn struct {
	net.Conn
	mu  *sync.Mutex
	got *bytes.Buffer
}

func (c rawConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// door is a way a sandboxed client reaches the bound host.
type door struct {
	name   string
	client *http.Client
	base   string
	raw    func() string // every byte read off the wire, when it is plain text
}

func (s *scrubSetup) doors(t *testing.T) []door {
	var mu sync.Mutex
	var raw bytes.Buffer
	rawText := func() string { mu.Lock(); defer mu.Unlock(); return raw.String() }
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Certificate())
	proxy, _ := url.Parse("http://" + s.g.testGateway.addr)
	proxied := func(h2 bool) *http.Client {
		tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2, DisableCompression: true}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return rawConn{c, &mu, &raw}, nil
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	transparent := func(port netpolicy.Port, conf *tls.Config) *http.Client {
		dst := s.g.fake(t, "example.com", port)
		tr := &http.Transport{TLSClientConfig: conf, DisableCompression: true, ForceAttemptHTTP2: conf != nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return rawConn{s.g.dial(t, dst), &mu, &raw}, nil
			}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	tlsBase := "https://example.com:" + s.tlsPort.String()
	plainBase := "http://example.com:" + s.plainPort.String()
	return []door{
		{"proxy http", proxied(false), plainBase, rawText},
		{"connect inspected http/1.1", proxied(false), tlsBase, nil},
		{"connect inspected h2", proxied(true), tlsBase, nil},
		{"captured http", transparent(s.plainPort, nil), plainBase, rawText},
		{"captured tls h2", transparent(s.tlsPort, &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}}), tlsBase, nil},
	}
}

// seen is all a client makes of a response: status line, header fields,
// the body decoded from the content codings a client decodes, trailers.
func seen(t *testing.T, resp *http.Response) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", resp.Proto, resp.Status)
	resp.Header.Write(&b)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Errorf("reading the body: %v", err)
	}
	switch resp.Header.Get("Content-Encoding") {
	case "gzip":
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			body, _ = io.ReadAll(zr)
		}
	case "deflate":
		if zr, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
			body, _ = io.ReadAll(zr)
		}
	case "zstd":
		if zr, err := zstd.NewReader(bytes.NewReader(body)); err == nil {
			body, _ = io.ReadAll(zr)
			zr.Close()
		}
	}
	b.Write(body)
	resp.Trailer.Write(&b)
	return b.String()
}

// closeRecordFor waits for the close record of a request to path.
func (s *scrubSetup) closeRecordFor(t *testing.T, path string, mark uint64) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range ringRecords(t, s.g.ring) {
			if seq, _ := r["seq"].(float64); uint64(seq) > mark && r["event"] == decisionlog.EventClose && r["path"] == path {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no close record for %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSecretEchoedIsScrubbed: whatever a bound host echoes of the key,
// in its header fields, an error body, a debugging dump, trailers, a
// compressed body, or later on a request that carried no key, the
// sandbox's client gets the placeholder, through every door; the close
// record names the secret, and the log holds no value.
func TestSecretEchoedIsScrubbed(t *testing.T) {
	s := newScrubSetup(t)
	ph := s.a.Placeholder()
	for _, d := range s.doors(t) {
		t.Run(d.name, func(t *testing.T) {
			for _, tc := range []struct {
				method, path string
				status       int
			}{
				{"POST", "/v1/messages", http.StatusBadRequest},
				{"GET", "/v1/models", http.StatusUnauthorized},
				{"GET", "/headers", http.StatusOK},
				{"GET", "/trailer", http.StatusOK},
				{"GET", "/gzip", http.StatusOK},
				{"GET", "/deflate", http.StatusOK},
				{"GET", "/zstd", http.StatusOK},
				{"GET", "/malformed", 0},
				{"POST", "/store", http.StatusCreated},
				{"GET", "/later", http.StatusOK},
			} {
				mark := ringMark(s.g.ring)
				req, _ := http.NewRequest(tc.method, d.base+tc.path, strings.NewReader(`{"model":"claude"}`))
				if tc.path != "/later" {
					withKey(req, ph)
				}
				req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
				resp, err := d.client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", tc.method, tc.path, err)
				}
				got := seen(t, resp)
				if tc.status == 0 { // an error of the gateway's
					noValues(t, tc.path+": what the client got", got)
					if rec := s.closeRecordFor(t, tc.path, mark); rec["status"] != float64(http.StatusBadGateway) {
						t.Errorf("%s: got close record %v, want status 502", tc.path, rec)
					}
					continue
				}
				if resp.StatusCode != tc.status {
					t.Errorf("%s %s: got %d, want %d: %q", tc.method, tc.path, resp.StatusCode, tc.status, got)
				}
				noValues(t, tc.path+": what the client got", got)
				if tc.path != "/store" && !strings.Contains(got, ph) {
					t.Errorf("%s: got %q, want the placeholder where the key was", tc.path, got)
				}
				want := "API_KEY"
				if tc.path == "/store" { // nothing echoed, on a connection whose last answer was scrubbed
					want = ""
				}
				if rec := s.closeRecordFor(t, tc.path, mark); fmt.Sprint(rec["secret"]) != want && !(want == "" && rec["secret"] == nil) {
					t.Errorf("%s: got close record %v, want secret %q", tc.path, rec, want)
				}
			}
			if d.raw != nil {
				noValues(t, "the bytes off the wire", d.raw())
			}
			lines, _ := s.g.ring.Since(0, 10000)
			noValues(t, "the decision log", string(bytes.Join(lines, []byte("\n"))))
		})
	}
}

// TestSecretEchoUndecodableIsRefused: an answer in a content coding the
// gateway cannot decode (br, compress) is refused with 502 and a logged
// reason, whatever the client asked for; nothing of its body gets
// through.
func TestSecretEchoUndecodableIsRefused(t *testing.T) {
	s := newScrubSetup(t)
	for _, d := range s.doors(t) {
		t.Run(d.name, func(t *testing.T) {
			for _, path := range []string{"/br", "/compress"} {
				mark := ringMark(s.g.ring)
				req, _ := http.NewRequest("GET", d.base+path, nil)
				withKey(req, s.a.Placeholder())
				req.Header.Set("Accept-Encoding", "br")
				resp, err := d.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got := seen(t, resp)
				noValues(t, path, got)
				if resp.StatusCode != http.StatusBadGateway || !strings.Contains(got, "cannot decode") {
					t.Errorf("%s: got %d %q, want 502 saying the coding cannot be decoded", path, resp.StatusCode, got)
				}
				if rec := s.closeRecordFor(t, path, mark); !strings.Contains(fmt.Sprint(rec["error"]), "cannot decode") {
					t.Errorf("%s: got close record %v, want its error to say why", path, rec)
				}
			}
		})
	}
}

// TestSecretEchoStreams: an event stream that echoes the key still
// streams: the client reads the first event while the upstream holds the
// rest back (the gateway holds only the bytes that could start the
// key), and the key split across the upstream's writes comes out as the
// placeholder.
func TestSecretEchoStreams(t *testing.T) {
	s := newScrubSetup(t)
	for _, d := range s.doors(t) {
		t.Run(d.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", d.base+"/sse", nil)
			withKey(req, s.a.Placeholder())
			resp, err := d.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := "event: ping\ndata: {}\n\n"
			var got bytes.Buffer
			buf := make([]byte, 1024)
			for !strings.HasPrefix(got.String(), first) {
				n, err := resp.Body.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					t.Fatalf("got %q before %v, want the first event while the upstream waits", got.String(), err)
				}
			}
			s.api.proceed <- struct{}{}
			rest, _ := io.ReadAll(resp.Body)
			got.Write(rest)
			noValues(t, "the stream", got.String())
			if want := first + `data: {"echo":"` + s.a.Placeholder() + "\"}\n\n"; got.String() != want {
				t.Errorf("got %q, want %q", got.String(), want)
			}
		})
	}
}

// TestSecretEchoWebSocket: a WebSocket through the proxy to a bound host
// that echoes the key in a message, across fragments with a ping
// between, in a ping and in the close reason gives the client the
// placeholder, re-framed; a permessage-deflate offer does not reach the
// host, and a host that compresses unasked is refused.
func TestSecretEchoWebSocket(t *testing.T) {
	s := newScrubSetup(t)
	ph := s.a.Placeholder()
	upgrade := func(path string) (int, []byte) {
		c, err := net.Dial("tcp", s.g.testGateway.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		host := "example.com:" + s.plainPort.String()
		fmt.Fprintf(c, "GET http://%s%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n", host, path, host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		var head bytes.Buffer
		resp.Header.Write(&head)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, append(head.Bytes(), body...)
		}
		frames, _ := io.ReadAll(br) // the server closes after its close frame
		noValues(t, "the 101's header", head.String())
		return resp.StatusCode, frames
	}

	mark := ringMark(s.g.ring)
	status, frames := upgrade("/ws")
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("got %d %q, want 101", status, frames)
	}
	noValues(t, "the frames", string(frames))
	msgs := readWSMessages(t, frames)
	for _, m := range msgs {
		noValues(t, "a message", m)
	}
	want := []string{`{"type":"session.created","key":"` + ph + `"}`, ph, "split " + ph + " end", "\x03\xe8bye " + ph}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("got messages %q, want %q", msgs, want)
	}
	if rec := s.closeRecordFor(t, "/ws", mark); rec["secret"] != "API_KEY" {
		t.Errorf("got close record %v, want secret API_KEY", rec)
	}

	mark = ringMark(s.g.ring)
	status, frames = upgrade("/ws-ext")
	noValues(t, "a compressing host's answer", string(frames))
	for _, m := range func() []string {
		if status == http.StatusSwitchingProtocols {
			return readWSMessages(t, frames)
		}
		return nil
	}() {
		noValues(t, "a compressed message", m)
	}
	if status != http.StatusBadGateway {
		t.Errorf("a host that compresses unasked: got %d, want 502", status)
	}
	if rec := s.closeRecordFor(t, "/ws-ext", mark); !strings.Contains(fmt.Sprint(rec["error"]), "extension") {
		t.Errorf("got close record %v, want its error to name the extension", rec)
	}
	lines, _ := s.g.ring.Since(0, 10000)
	noValues(t, "the decision log", string(bytes.Join(lines, []byte("\n"))))
}

// TestSecretEchoIsNotRecorded: a recorded host (--record-llm) that echoes
// the key in the model's answer is recorded with the placeholder, as its
// answer reaches the client: a recording replayed to a sandbox later must
// not hand it the value.
func TestSecretEchoIsNotRecorded(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Key", r.Header.Get("X-Api-Key"))
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"your key is `+r.Header.Get("X-Api-Key")+`"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	rec := mockllm.NewRecorder(nil)
	var a *secrets.Secret
	g, port, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Action: netpolicy.Allow}, func(c *serverConfig) {
		var err error
		if a, err = secrets.New("API_KEY", valueA, []string{"example.com:" + strconv.Itoa(int(portOf(t, up)))}); err != nil {
			t.Fatal(err)
		}
		c.Secrets = []*secrets.Secret{a}
		c.RecordLLM = map[string]*mockllm.Recorder{"example.com": rec}
	})
	proxy, _ := url.Parse("http://" + g.addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest("POST", "https://example.com:"+strconv.Itoa(int(port))+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("X-Api-Key", a.Placeholder())
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := seen(t, resp)
	noValues(t, "the answer", got)
	if !strings.Contains(got, "your key is "+a.Placeholder()) {
		t.Errorf("got %q, want the placeholder in the answer", got)
	}
	script, err := json.Marshal(rec.Script())
	if err != nil {
		t.Fatal(err)
	}
	noValues(t, "the recording", string(script))
	if !strings.Contains(string(script), a.Placeholder()) {
		t.Errorf("got recording %s, want the answer with the placeholder", script)
	}
}

// TestSecretEchoHTTP10: an HTTP/1.0 client through the proxy, which
// cannot take a chunked body, gets the scrubbed body until the
// connection closes, and the HEAD of an echoing answer its fields
// scrubbed.
func TestSecretEchoHTTP10(t *testing.T) {
	s := newScrubSetup(t)
	for _, method := range []string{"GET", "HEAD"} {
		c, err := net.Dial("tcp", s.g.testGateway.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "%s http://example.com:%s/v1/models HTTP/1.0\r\n\r\n", method, s.plainPort)
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		noValues(t, method, string(got))
		want := "Incorrect API key provided: " + s.a.Placeholder()
		if method == "HEAD" {
			want = `error_description="` + s.a.Placeholder()
		}
		if !strings.HasPrefix(string(got), "HTTP/1.0 401") || !strings.Contains(string(got), want) || strings.Contains(string(got), "chunked") {
			t.Errorf("%s: got %q, want a 401 with %q, not chunked", method, got, want)
		}
	}
}
