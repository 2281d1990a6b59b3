package secrets

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// TestContentCodings: the codings the gateway can decode are named in
// the order applied; any other, or more than two, is refused with the
// reason.
func TestContentCodings(t *testing.T) {
	for _, tt := range []struct {
		values  []string
		want    []string
		refusal string
	}{
		{nil, nil, ""},
		{[]string{"identity"}, nil, ""},
		{[]string{"GZIP"}, []string{"gzip"}, ""},
		{[]string{"deflate, zstd"}, []string{"deflate", "zstd"}, ""},
		{[]string{"x-gzip", "identity"}, []string{"x-gzip"}, ""},
		{[]string{"br"}, nil, `the upstream answered in Content-Encoding "br", which the gateway cannot decode to replace a secret's value in it`},
		{[]string{"gzip", "compress"}, nil, `the upstream answered in Content-Encoding "compress", which the gateway cannot decode to replace a secret's value in it`},
		{[]string{"x\x01y"}, nil, `the upstream answered in Content-Encoding "x?y", which the gateway cannot decode to replace a secret's value in it`},
		{[]string{"gzip, gzip, gzip"}, nil, "the upstream answered in 3 content codings; the gateway decodes at most 2"},
	} {
		got, refusal := ContentCodings(tt.values)
		if !cmp.Equal(got, tt.want) || refusal != tt.refusal {
			t.Errorf("ContentCodings(%q): got %q, %q; want %q, %q", tt.values, got, refusal, tt.want, tt.refusal)
		}
	}
}

// TestScrubResponse: an answer of a bound host reaches the client with
// every value replaced in its header fields, trailers and body, decoded
// from gzip (Content-Encoding and Content-Length dropped), and the close
// record names the secrets once each; an undecodable coding and an
// unasked protocol switch are refused.
func TestScrubResponse(t *testing.T) {
	set, k, other := scopedSet(t)
	sc := set.ScrubberFor("api.test", 443)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, `{"error":"bad key `+valueA+`", "other":"`+valueB+`"}`)
	zw.Close()
	resp := &http.Response{
		StatusCode:    http.StatusUnauthorized,
		Header:        http.Header{"Content-Encoding": {"gzip"}, "Content-Length": {"99"}, "X-Echo": {valueA}},
		Trailer:       http.Header{"X-" + valueA: nil},
		Body:          io.NopCloser(&gz),
		ContentLength: int64(gz.Len()),
	}
	var rec decisionlog.Record
	found := NoteFound(&rec)
	body, closeBody, refusal := ScrubResponse(resp, sc, found)
	if refusal != "" {
		t.Fatalf("got refusal %q, want none", refusal)
	}
	defer closeBody()
	var out bytes.Buffer
	w := sc.NewWriter(&out, found)
	if _, err := io.Copy(w, body); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := `{"error":"bad key ` + k.Placeholder() + `", "other":"` + other.Placeholder() + `"}`
	if out.String() != want {
		t.Errorf("got body %q, want %q", out.String(), want)
	}
	wantHeader := http.Header{"X-Echo": {k.Placeholder()}}
	if diff := cmp.Diff(wantHeader, resp.Header); diff != "" || resp.ContentLength != -1 {
		t.Errorf("header (-want +got):\n%s\nContentLength %d, want -1", diff, resp.ContentLength)
	}
	if _, ok := resp.Trailer["X-"+k.Placeholder()]; !ok || len(resp.Trailer) != 1 {
		t.Errorf("got trailers %q, want the declared name scrubbed", resp.Trailer)
	}
	if rec.Secret != "K,OTHER" {
		t.Errorf("got the record's secret %q, want K,OTHER", rec.Secret)
	}
	for _, tt := range []struct {
		status   int
		encoding string
		refusal  string
	}{
		{http.StatusOK, "br", "which the gateway cannot decode"},
		{http.StatusSwitchingProtocols, "", "switched protocols unasked"},
	} {
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{"Content-Encoding": {tt.encoding}}, Body: http.NoBody}
		if _, _, refusal := ScrubResponse(resp, sc, nil); !strings.Contains(refusal, tt.refusal) {
			t.Errorf("%d %s: got refusal %q, want %q", tt.status, tt.encoding, refusal, tt.refusal)
		}
	}
}

// TestScrubbing: a round tripper above Scrubbing (the recorder of
// --record-llm) gets the answer with the values replaced, however the
// body is read; an undecodable answer is an error.
func TestScrubbing(t *testing.T) {
	set, k, _ := scopedSet(t)
	sc := set.ScrubberFor("api.test", 443)
	answer := strings.Repeat("x", 20000) + valueA + " done"
	var names []string
	rt := Scrubbing(sc, func(n string) { names = append(names, n) }, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(answer))}, nil
	}))
	resp, err := rt.RoundTrip(&http.Request{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if want := strings.Repeat("x", 20000) + k.Placeholder() + " done"; err != nil || string(got) != want {
		t.Errorf("got %d bytes ending %q, %v; want the placeholder", len(got), got[max(0, len(got)-60):], err)
	}
	if !cmp.Equal(names, []string{"K"}) {
		t.Errorf("got found %q, want K", names)
	}
	rt = Scrubbing(sc, nil, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {"br"}}, Body: http.NoBody}, nil
	}))
	if _, err := rt.RoundTrip(&http.Request{}); err == nil || !strings.Contains(err.Error(), "cannot decode") {
		t.Errorf("br: got %v, want it refused", err)
	}
	boom := errors.New("boom")
	rt = Scrubbing(sc, nil, roundTripFunc(func(r *http.Request) (*http.Response, error) { return nil, boom }))
	if _, err := rt.RoundTrip(&http.Request{}); !errors.Is(err, boom) {
		t.Errorf("got %v, want the transport's error", err)
	}
}
