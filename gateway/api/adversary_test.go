package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAPIRefusesEveryRouteWithoutTheToken plays another local process
// that can reach the API's TCP port but has no token: every route but
// /healthz answers 401, whatever it sends in place of the token, and
// nothing changes (the policy, the pending question, the mocks).
func TestAPIRefusesEveryRouteWithoutTheToken(t *testing.T) {
	a := startServer(t, netpolicy.Spec{Default: netpolicy.Block}, func(g *fakeGateway, _ *ServerConfig) {
		g.pending = []Approval{{ID: "q1", Host: "evil.test", Port: 443}}
	})
	before := a.gw.store.Load().Version()
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/status", ""},
		{"GET", "/v1/policy", ""},
		{"PUT", "/v1/policy", `{"default":"allow"}`},
		{"POST", "/v1/policy/rules", `{"action":"allow","host":"*"}`},
		{"DELETE", "/v1/policy/rules/r1", ""},
		{"GET", "/v1/decisions", ""},
		{"GET", "/v1/decisions?follow=1", ""},
		{"GET", "/v1/approvals", ""},
		{"POST", "/v1/approvals/q1", `{"answer":"allow","scope":"session"}`},
		{"POST", "/v1/mock/expect", `{}`},
		{"GET", "/v1/mock/requests", ""},
		{"DELETE", "/v1/mock", ""},
		{"GET", "/v1/mock/recording", ""},
		{"GET", "/metrics", ""},
	}
	forged := []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer wrong",
		"Bearer " + a.token[:len(a.token)-1],
		"Bearer " + a.token + "x",
		"Bearer " + strings.ToUpper(a.token),
		"Basic " + a.token,
		"Bearer" + a.token,
		"Token " + a.token,
	}
	// A route that let the attacker in may stream (follow=1): the client
	// gives up rather than wait for the end of it.
	client := &http.Client{Timeout: 5 * time.Second}
	for _, r := range routes {
		for _, auth := range forged {
			req, err := http.NewRequest(r.method, a.base+r.path, strings.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", r.method, r.path, err)
			}
			if resp.StatusCode != http.StatusUnauthorized {
				// Not read: a stream that let the attacker in does not end.
				resp.Body.Close()
				t.Errorf("%s %s with Authorization %q: got %d, want 401", r.method, r.path, auth, resp.StatusCode)
				continue
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if strings.Contains(string(body), a.token) {
				t.Errorf("%s %s: the answer quotes the token", r.method, r.path)
			}
		}
	}
	if got := a.gw.store.Load().Version(); got != before {
		t.Errorf("policy version: got %d, want %d (a request without the token changed the policy)", got, before)
	}
	if got := len(a.gw.Approvals()); got != 1 {
		t.Errorf("pending questions: got %d, want 1 (a request without the token answered one)", got)
	}
	if len(a.gw.answers) != 0 {
		t.Errorf("answers: got %v, want none", a.gw.answers)
	}
}
