package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// serve returns a client of an httptest server that answers with h.
func serve(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestDecisionStreamEnds: a stream passes records through, a record with
// an error field among others included; the error line of a stream that
// fell behind is a *StreamError; the end of the body is io.EOF.
func TestDecisionStreamEnds(t *testing.T) {
	const rec1 = `{"v":1,"seq":1,"event":"decision","error":"dial tcp: refused"}`
	const rec2 = `{"v":1,"seq":2,"event":"decision"}`
	for _, tc := range []struct {
		name, body string
		wantErr    func(error) bool
	}{
		{"ended", rec1 + "\n\n" + rec2 + "\n", func(err error) bool { return err == io.EOF }},
		{"fell behind", rec1 + "\n" + rec2 + "\n" + `{"error":"decision log subscriber fell behind; reconnect with since= the last seq you received"}` + "\n",
			func(err error) bool {
				var se *StreamError
				return errors.As(err, &se) && strings.Contains(se.Message, "fell behind")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/decisions" || r.URL.Query().Get("follow") != "1" || r.URL.Query().Get("since") != "7" || r.Header.Get("Authorization") != "Bearer tok" {
					t.Errorf("got %s %s, want GET /v1/decisions?follow=1&since=7 with the token", r.Method, r.URL)
				}
				io.WriteString(w, tc.body)
			})
			s, err := c.FollowDecisions(context.Background(), 7)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, want := range []string{rec1, rec2} {
				if got, err := s.Next(); err != nil || string(got) != want {
					t.Fatalf("Next: got %s, %v; want %s", got, err, want)
				}
			}
			if _, err := s.Next(); !tc.wantErr(err) {
				t.Errorf("Next at the end: got %v (%T)", err, err)
			}
		})
	}
}

// TestClientErrors: an error answer is an *Error with the API's message,
// or the status when its body holds none; a 2xx answer that is not the
// API's JSON says so.
func TestClientErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		body      string
		wantAPI   *Error
		wantInErr string
	}{
		{"api error", 412, `{"error":"policy version 1 was expected"}` + "\n", &Error{Method: "GET", Path: "/v1/status", Status: 412, Message: "policy version 1 was expected"}, "policy version 1 was expected"},
		{"bare error", 502, "bad gateway", &Error{Method: "GET", Path: "/v1/status", Status: 502}, "GET /v1/status: 502 Bad Gateway"},
		{"garbage", 200, "HTTP/1.0 garbage", nil, "the answer of GET /v1/status from "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			_, err := c.Status(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("got %v, want an error holding %q", err, tc.wantInErr)
			}
			var ae *Error
			if got := errors.As(err, &ae); got != (tc.wantAPI != nil) {
				t.Fatalf("errors.As(%v, *Error): got %t, want %t", err, got, tc.wantAPI != nil)
			}
			if tc.wantAPI != nil && *ae != *tc.wantAPI {
				t.Errorf("got %+v, want %+v", *ae, *tc.wantAPI)
			}
		})
	}
}

// TestAPIClientUnreachable: an API that does not answer is an error that
// names its address, not an *Error; an answer that is not the API's
// JSON says so.
func TestAPIClientUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "gone.sock")
	c, err := NewClient("unix:"+sock, "token")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(context.Background())
	var ae *Error
	if err == nil || errors.As(err, &ae) || !strings.Contains(err.Error(), sock) {
		t.Errorf("Status of a socket nobody serves: got %v, want an error naming %s", err, sock)
	}
	for _, addr := range []string{"unix:", "no-port", ""} {
		if _, err := NewClient(addr, "token"); err == nil {
			t.Errorf("NewClient(%q): got no error, want one", addr)
		}
	}
}
