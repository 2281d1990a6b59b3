package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDecisionsFollowEnds: sbx decisions --follow prints the records a
// stream sends; a stream the gateway ends says the gateway stopped, and
// a stream that fell behind fails with the stream's own message (it
// failed with "not a decision record" on the error line).
func TestDecisionsFollowEnds(t *testing.T) {
	const rec = `{"v":1,"seq":4,"event":"decision","time":"2026-11-21T12:00:00Z","kind":"http","method":"GET","host":"x.test","port":80,"path":"/","action":"block","enforced":true,"rule":"default","reason":"no rule matched"}`
	token := writeFile(t, "token", "0123456789abcdef0123\n")
	for _, tc := range []struct {
		name       string
		stream     string
		wantCode   int
		wantStderr string
	}{
		{"stopped", rec + "\n", 0, "sbx: the gateway stopped; no more decisions"},
		{"fell behind", rec + "\n" + `{"error":"decision log subscriber fell behind; reconnect with since= the last seq you received"}` + "\n", exitFailure,
			"sbx: the decision stream ended: decision log subscriber fell behind; reconnect with since="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/decisions" || r.URL.Query().Get("follow") != "1" || r.Header.Get("Authorization") != "Bearer 0123456789abcdef0123" {
					t.Errorf("got %s %s, want GET /v1/decisions?follow=1 with the token", r.Method, r.URL)
				}
				w.Header().Set("Content-Type", "application/x-ndjson")
				io.WriteString(w, tc.stream)
			}))
			defer srv.Close()
			stdout, stderr, code := runCLI(t, "decisions", "--follow", "--api", strings.TrimPrefix(srv.URL, "http://"), "--token-file", token)
			if code != tc.wantCode || !strings.Contains(stdout, "GET x.test:80/") || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("sbx decisions --follow: got exit %d, stdout %q, stderr %q; want exit %d, the record, and %q", code, stdout, stderr, tc.wantCode, tc.wantStderr)
			}
		})
	}
}
