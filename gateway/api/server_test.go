package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// fakeGateway is the tests' Gateway: a policy store, the counts a test
// sets, a metrics handler of its own and the mocks a test gives.
type fakeGateway struct {
	store          *netpolicy.Store
	counts         Counts
	hosts, scripts map[string]*mockllm.Responder
	recorders      map[string]*mockllm.Recorder
	// The pending questions a test sets, and the answers given.
	mu      sync.Mutex
	pending []Approval
	answers []ApprovalAnswer
	// answering names who is answering a pending question, by its id:
	// another answer to it is refused, as the gateway refuses it.
	answering map[string]string
}

func (g *fakeGateway) Store() *netpolicy.Store { return g.store }
func (g *fakeGateway) Counts() Counts          { return g.counts }

func (g *fakeGateway) Metrics() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "sbx_test_metric 1\n") })
}

func (g *fakeGateway) Mocks() (hosts, scripts map[string]*mockllm.Responder) {
	return g.hosts, g.scripts
}

func (g *fakeGateway) Recorders() map[string]*mockllm.Recorder { return g.recorders }

func (g *fakeGateway) Approvals() []Approval {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Approval(nil), g.pending...)
}

// AnswerApproval answers a pending question of the fake: always answers
// are refused (it has no file), as a gateway without one refuses them.
func (g *fakeGateway) AnswerApproval(id string, a ApprovalAnswer) (Approval, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.pending {
		if q.ID != id {
			continue
		}
		if a.Scope == "always" {
			return Approval{}, fmt.Errorf("%w: answer with scope session", ErrNoApprovalsFile)
		}
		if by := g.answering[id]; by != "" {
			return Approval{}, fmt.Errorf("question %q is %w (by %s)", id, ErrApprovalAnswered, by)
		}
		g.pending = append(g.pending[:i], g.pending[i+1:]...)
		g.answers = append(g.answers, a)
		return q, nil
	}
	return Approval{}, fmt.Errorf("%w %q", ErrApprovalNotFound, id)
}

// testServer is a Server over a fakeGateway, serving on loopback TCP.
type testServer struct {
	gw    *fakeGateway
	log   *decisionlog.Log // writes to the ring the server serves
	base  string           // http://127.0.0.1:port
	token string
}

// startServer serves the API over a fakeGateway with spec's policy, its
// proxy at 127.0.0.1:3128. As the gateway does, the decision log over the
// server's ring has the policy's record first and one for each change;
// set changes the gateway and the configuration before the server starts.
func startServer(t *testing.T, spec netpolicy.Spec, set func(*fakeGateway, *ServerConfig)) *testServer {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	gw := &fakeGateway{store: netpolicy.NewStore(p)}
	cfg := ServerConfig{Gateway: gw, Token: "the-token-of-the-tests", Ring: decisionlog.NewRing(0), ProxyAddrs: []string{"127.0.0.1:3128"}}
	if set != nil {
		set(gw, &cfg)
	}
	log := decisionlog.NewLog(cfg.Sandbox, cfg.Ring)
	gw.store.OnChange(func(next *netpolicy.Snapshot) {
		log.Emit(&decisionlog.Record{Event: decisionlog.EventPolicy, PolicyVersion: next.Version(), Change: next.Change()})
	})
	snap := gw.store.Load()
	log.Emit(&decisionlog.Record{Event: decisionlog.EventPolicy, PolicyVersion: snap.Version(), Change: snap.Change()})
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		log.Close()
	})
	return &testServer{gw: gw, log: log, base: "http://" + ln.Addr().String(), token: cfg.Token}
}

// decide logs a decision that blocks a request to host, as the gateway
// logs one.
func (a *testServer) decide(host string) {
	a.log.Emit(&decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindHTTP, Method: "GET", Host: host, Port: 80,
		Action: string(netpolicy.Block), Enforced: true, Rule: "default"})
}

// call makes an API request and decodes the JSON answer into out.
func (a *testServer) call(t *testing.T, method, path, body string, hdr map[string]string, out any) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: answer %q: %v", method, path, data, err)
		}
	}
	return resp
}

func TestAPIAuth(t *testing.T) {
	a := startServer(t, netpolicy.Spec{}, nil)
	for _, auth := range []string{"", "Bearer wrong", "Basic " + a.token, "Bearer" + a.token, "Bearer " + a.token + "x"} {
		req, _ := http.NewRequest("GET", a.base+"/v1/policy", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]string
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 401 || e["error"] == "" {
			t.Errorf("Authorization %q: %d %v, want 401 with a JSON error", auth, resp.StatusCode, e)
		}
	}
	resp, err := http.Get(a.base + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz without a token: %v %v", resp, err)
	}
	// A name other than localhost in Host is refused (DNS rebinding).
	req, _ := http.NewRequest("GET", a.base+"/v1/status", nil)
	req.Host = "evil.example"
	req.Header.Set("Authorization", "Bearer "+a.token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("Host evil.example: %v %v, want 403", resp, err)
	}
}

func TestAPIDecisions(t *testing.T) {
	a := startServer(t, netpolicy.Spec{}, nil)
	for i := range 5 {
		a.decide(fmt.Sprintf("blocked%d.test", i))
	}
	var page struct {
		Decisions []map[string]any
		Next      uint64
	}
	a.call(t, "GET", "/v1/decisions?since=0&limit=3", "", nil, &page)
	if len(page.Decisions) != 3 || page.Next != 3 {
		t.Fatalf("first page: %d records, next %d", len(page.Decisions), page.Next)
	}
	a.call(t, "GET", fmt.Sprintf("/v1/decisions?since=%d&limit=100", page.Next), "", nil, &page)
	if len(page.Decisions) != 3 || page.Decisions[len(page.Decisions)-1]["host"] != "blocked4.test" {
		t.Fatalf("second page: %v", page.Decisions)
	}

	// follow=1 streams the backlog, then what happens after.
	req, _ := http.NewRequest("GET", a.base+"/v1/decisions?follow=1&since=5", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() map[string]any {
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		return r
	}
	if r := next(); r["host"] != "blocked4.test" {
		t.Errorf("backlog: %v", r)
	}
	a.decide("live.test")
	if r := next(); r["host"] != "live.test" {
		t.Errorf("live: %v", r)
	}
}

func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token %q, %v; want 64 hex characters", tok, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("new token file mode %v, want 0600", fi.Mode().Perm())
	}
	if again, err := LoadOrCreateToken(path); err != nil || again != tok {
		t.Errorf("reading it back: %q, %v", again, err)
	}
	// A host's file readable by its group is refused too (the Secret
	// mount's shape is TestOpenToOthersSecretMount's).
	for _, mode := range []os.FileMode{0o644, 0o604, 0o660, 0o602, 0o640, 0o440} {
		os.Chmod(path, mode)
		if _, err := LoadOrCreateToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a token file of mode %#o: %v, want an error saying chmod 600", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o400, 0o600} {
		os.Chmod(path, mode)
		if again, err := LoadOrCreateToken(path); err != nil || again != tok {
			t.Errorf("a token file of mode %#o: %q, %v; want the token", mode, again, err)
		}
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := LoadOrCreateToken(short); err == nil {
		t.Errorf("a 3-character token was accepted")
	}
}
