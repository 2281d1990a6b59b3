package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestApproveAndDeny: sbx approve and sbx deny list and answer the
// questions of a gateway in this process whose default is ask, by id and
// by HOST[:PORT], and say what to do when an answer cannot be given.
func TestApproveAndDeny(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "upstream") }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	port := u.Port()
	p, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Ask, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	res := &gateway.Resolver{}
	res.AddStatic("api.test", netip.MustParseAddr("127.0.0.1"))
	tokenFile := filepath.Join(t.TempDir(), "token")
	g, err := gateway.Start(t.Context(), gateway.Config{Listen: "127.0.0.1:0", API: []string{"127.0.0.1:0"}, TokenFile: tokenFile, Policy: p, Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	target := []string{"--api", g.APIAddrs[0], "--token-file", tokenFile}
	proxy, _ := url.Parse("http://" + g.ProxyAddr.String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 10 * time.Second}
	get := func() <-chan int {
		ch := make(chan int, 1)
		go func() {
			resp, err := client.Get("http://api.test:" + port + "/x")
			if err != nil {
				ch <- 0
				return
			}
			resp.Body.Close()
			ch <- resp.StatusCode
		}()
		return ch
	}
	waitListed := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			out, errOut, code := runCLI(t, append([]string{"approve"}, target...)...)
			if code != 0 {
				t.Fatalf("sbx approve (list): exit %d: %s", code, errOut)
			}
			if strings.Contains(out, id+" ") && strings.Contains(out, "GET api.test:"+port+"/x") && strings.Contains(out, "1 waiting") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sbx approve (list): got %q, want question %s", out, id)
			}
		}
	}
	if out, _, code := runCLI(t, append([]string{"deny"}, target...)...); code != 0 || !strings.Contains(out, "no pending questions") {
		t.Errorf("sbx deny (list) with none: exit %d, %q", code, out)
	}

	held := get()
	waitListed("a1")
	out, errOut, code := runCLI(t, append([]string{"approve", "--session", "api.test"}, target...)...)
	if want := fmt.Sprintf("allowed for this session: a1 GET api.test:%s/x (1 waiting)", port); code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("sbx approve --session api.test: exit %d, got %q (%s), want %q", code, out, errOut, want)
	}
	if got := <-held; got != 200 {
		t.Errorf("the approved request: got %d, want 200", got)
	}
	if got := <-get(); got != 200 {
		t.Errorf("after the session answer: got %d, want 200 without a question", got)
	}

	// Deny by id; then an id no longer pending.
	client.Transport.(*http.Transport).CloseIdleConnections()
	res.AddStatic("other.test", netip.MustParseAddr("127.0.0.1"))
	heldOther := make(chan int, 1)
	go func() {
		resp, err := client.Get("http://other.test:" + port + "/")
		if err != nil {
			heldOther <- 0
			return
		}
		resp.Body.Close()
		heldOther <- resp.StatusCode
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out, _, _ := runCLI(t, append([]string{"deny"}, target...)...)
		if strings.Contains(out, "a2 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no question a2: %q", out)
		}
	}
	_, errOut, code = runCLI(t, append([]string{"approve", "--always", "a2"}, target...)...)
	if code != 1 || !strings.Contains(errOut, "answer with --session instead") {
		t.Errorf("sbx approve --always without a file: exit %d, %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, append([]string{"deny", "a2"}, target...)...); code != 0 || !strings.HasPrefix(out, "denied once: a2") {
		t.Errorf("sbx deny a2: exit %d, %q %q", code, out, errOut)
	}
	if got := <-heldOther; got != 403 {
		t.Errorf("the denied request: got %d, want 403", got)
	}
	_, errOut, code = runCLI(t, append([]string{"deny", "a2"}, target...)...)
	if code != 1 || !strings.Contains(errOut, "no pending question") {
		t.Errorf("sbx deny a2 again: exit %d, %q", code, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"approve", "--session", "--always", "a2"}, target...)...)
	if code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("--session --always: exit %d, %q", code, errOut)
	}
}

// A question's line names the command that answers it, on sbx run's
// stderr and in sbx decisions; an answer's line says who gave it.
func TestApprovalLines(t *testing.T) {
	q := decisionlog.Record{Event: decisionlog.EventApproval, Sandbox: "1a2b3c4d", Kind: "connect", Method: "CONNECT", Host: "pypi.org", Port: 443,
		Action: "ask", Rule: "default", Reason: "no rule matched; the default is ask", ApprovalID: "a1", PID: 7, Comm: "pip"}
	var b strings.Builder
	s := &liveSink{w: &b}
	if err := s.WriteRecord(1, q.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sbx: ask       CONNECT pypi.org:443 by pip[7]", "question a1", "sbx approve --sandbox 1a2b3c4d a1", "sbx deny"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("live line %q lacks %q", b.String(), want)
		}
	}
	a := q
	a.Action, a.Answer, a.Scope, a.By, a.Reason = "allow", "allow", "session", "cli", "allowed for this session by cli"
	b.Reset()
	s.WriteRecord(2, a.AppendJSON(nil))
	if want := "sbx: answer    CONNECT pypi.org:443  (question a1: allowed for this session by cli)\n"; b.String() != want {
		t.Errorf("answer's live line: got %q, want %q", b.String(), want)
	}
	if line := formatDecision(&a, false); !strings.Contains(line, "answer    CONNECT pypi.org:443  (question a1: allowed for this session by cli)") {
		t.Errorf("sbx decisions line: got %q", line)
	}
	// An answer that reached more than one held request says its target
	// is the first's.
	for _, tt := range []struct {
		count uint64
		want  string
	}{
		{0, "sbx: answer    GET api.test:80/a  (question a2: allowed once by api)\n"},
		{1, "sbx: answer    GET api.test:80/a  (question a2: allowed once by api)\n"},
		{3, "sbx: answer    GET api.test:80/a (3 requests)  (question a2: allowed once by api)\n"},
	} {
		m := decisionlog.Record{Event: decisionlog.EventApproval, Kind: "http", Method: "GET", Host: "api.test", Port: 80, Path: "/a",
			Action: "allow", Rule: "default", ApprovalID: "a2", Answer: "allow", Scope: "once", By: "api", Reason: "allowed once by api", Count: tt.count}
		b.Reset()
		s.WriteRecord(3, m.AppendJSON(nil))
		if b.String() != tt.want {
			t.Errorf("answer of %d requests: got %q, want %q", tt.count, b.String(), tt.want)
		}
	}
}
