package secrets

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
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secretscrub"
)

// This file scrubs what a host a secret is bound to answers, as an
// http.Response (an inspected request's answer, a recording's): its
// header fields and trailers, and its body decoded from the content
// codings the gateway can decode, through a Writer of the scrubber.

// NoteFound returns a function that adds a secret's name to rec.Secret
// (names joined with ","), once each: the found of a scrubber's calls,
// so that the close record names the secrets whose values an answer
// held.
func NoteFound(rec *decisionlog.Record) func(name string) {
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

// ContentCodings returns the content codings of a response in the order
// they were applied, "identity" left out, lower case; and the reason the
// gateway refuses them ("" when it can decode every one).
func ContentCodings(values []string) (codings []string, refusal string) {
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

// DecodedBody reads r decoded from codings (ContentCodings'), the last
// applied first; close releases the decoders. A decoder starts at the
// first read, so an empty body stays empty.
func DecodedBody(r io.Reader, codings []string) (body io.Reader, close func()) {
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

// ScrubHeader replaces the values in h's field names and values, in
// place (a name that changes is moved).
func ScrubHeader(h http.Header, sc *secretscrub.Scrubber, found func(string)) {
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

// ScrubResponse readies resp, the answer of a host a secret is bound
// to, for the client of an inspected tunnel: its header fields replaced,
// its body decoded (Content-Encoding and Content-Length dropped); it
// returns the body to relay, to be read through a Writer of sc, and the
// reason the answer is refused ("" when it is not): a content coding the
// gateway cannot decode, or a protocol switch (the gateway asked for
// none).
func ScrubResponse(resp *http.Response, sc *secretscrub.Scrubber, found func(string)) (body io.Reader, closeBody func(), refusal string) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil, nil, "the upstream switched protocols unasked"
	}
	codings, refusal := ContentCodings(resp.Header.Values("Content-Encoding"))
	if refusal != "" {
		return nil, nil, refusal
	}
	ScrubHeader(resp.Header, sc, found)
	ScrubHeader(resp.Trailer, sc, found) // the names declared; the values come after the body
	body, closeBody = resp.Body, func() {}
	if len(codings) > 0 {
		body, closeBody = DecodedBody(resp.Body, codings)
		resp.Header.Del("Content-Encoding")
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return body, closeBody, ""
}

// Scrubbing returns the round tripper that has what a bound host answers
// (through next) scrubbed with sc, found told the names of the secrets
// replaced, before anything above it sees it: the recorder of
// --record-llm, which would otherwise write an echoed value into a
// recording (and a mock replaying it would hand it to a sandbox). A
// content coding it cannot decode is an error.
func Scrubbing(sc *secretscrub.Scrubber, found func(string), next http.RoundTripper) http.RoundTripper {
	return scrubTransport{sc: sc, found: found, next: next}
}

// scrubTransport is Scrubbing's round tripper.
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
	body, closeBody, refusal := ScrubResponse(resp, t.sc, t.found)
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

// headerSafe replaces what may not stand in a header value.
func headerSafe(v string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, v)
}
