package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// testAPI is a gateway started with Start, with its API on loopback TCP.
type testAPI struct {
	g     *Gateway
	base  string // http://127.0.0.1:port
	token string
	proxy *http.Client
}

func startAPI(t *testing.T, spec netpolicy.Spec, static map[string]string) *testAPI {
	t.Helper()
	return startAPIWith(t, spec, static, nil)
}

// startAPIWith is startAPI with the Config changed by set.
func startAPIWith(t *testing.T, spec netpolicy.Spec, static map[string]string, set func(*Config)) *testAPI {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res := &Resolver{}
	for name, ip := range static {
		res.AddStatic(name, netip.MustParseAddr(ip))
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	opts := Config{
		Listen: "127.0.0.1:0", API: []string{"127.0.0.1:0"}, TokenFile: tokenFile,
		Policy: p, Resolver: res, LogFile: filepath.Join(t.TempDir(), "log.jsonl"),
	}
	if set != nil {
		set(&opts)
	}
	g, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(tokenFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	pu, _ := url.Parse("http://" + g.ProxyAddr.String())
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	t.Cleanup(tr.CloseIdleConnections)
	return &testAPI{g: g, base: "http://" + g.APIAddrs[0], token: strings.TrimSpace(string(tok)), proxy: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// call makes an API request and decodes the JSON answer into out.
func (a *testAPI) call(t *testing.T, method, path, body string, hdr map[string]string, out any) *http.Response {
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

// statusThrough returns the status of a GET through the proxy.
func (a *testAPI) statusThrough(t *testing.T, u string) int {
	t.Helper()
	resp, err := a.proxy.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// askMock sends an Anthropic request for user through the proxy, over
// http://, and returns the status and body.
func askMock(t *testing.T, a *testAPI, host, user string) (int, string) {
	t.Helper()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + user + `"}]}`
	resp, err := a.proxy.Post("http://"+host+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPIChangesApplyToTheNextRequest(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	a := startAPI(t, loopbackPolicy(netpolicy.Block), map[string]string{"api.test": "127.0.0.1"})
	target := fmt.Sprintf("http://api.test:%d/", port)
	if s := a.statusThrough(t, target); s != 403 {
		t.Fatalf("before any change: %d, want 403", s)
	}

	var got struct {
		Version uint64
		Rule    netpolicy.Rule
	}
	resp := a.call(t, "POST", "/v1/policy/rules", fmt.Sprintf(`{"id": "api", "host": "api.test", "ports": [%d], "action": "allow", "position": 0}`, port), nil, &got)
	if resp.StatusCode != 201 || got.Version != 2 || got.Rule.ID != "api" {
		t.Fatalf("POST rule: %d %+v", resp.StatusCode, got)
	}
	if s := a.statusThrough(t, target); s != 200 {
		t.Errorf("after adding an allow rule: %d, want 200", s)
	}

	var pol struct {
		Version uint64
		Policy  netpolicy.Spec
	}
	resp = a.call(t, "GET", "/v1/policy", "", nil, &pol)
	if resp.Header.Get("ETag") != `"2"` || pol.Version != 2 || len(pol.Policy.Rules) != 1 {
		t.Errorf("GET policy: ETag %q, %+v", resp.Header.Get("ETag"), pol)
	}

	// An invalid PUT is refused and changes nothing.
	var e map[string]string
	resp = a.call(t, "PUT", "/v1/policy", "rules:\n  - host: \"*.\"\n    action: allow\n", nil, &e)
	if resp.StatusCode != 400 || !strings.Contains(e["error"], "request body:3") && !strings.Contains(e["error"], "request body:2") {
		t.Errorf("invalid PUT: %d %v", resp.StatusCode, e)
	}
	// A stale If-Match is refused.
	resp = a.call(t, "PUT", "/v1/policy", "default: allow\n", map[string]string{"If-Match": `"1"`}, &e)
	if resp.StatusCode != 412 {
		t.Errorf("stale If-Match: %d %v, want 412", resp.StatusCode, e)
	}
	a.call(t, "GET", "/v1/policy", "", nil, &pol)
	if pol.Version != 2 {
		t.Errorf("after refused changes the version is %d, want 2", pol.Version)
	}

	resp = a.call(t, "DELETE", "/v1/policy/rules/api", "", map[string]string{"If-Match": `"2"`}, &got)
	if resp.StatusCode != 200 || got.Version != 3 {
		t.Errorf("DELETE: %d %+v", resp.StatusCode, got)
	}
	if s := a.statusThrough(t, target); s != 403 {
		t.Errorf("after removing the rule: %d, want 403", s)
	}
	if resp := a.call(t, "DELETE", "/v1/policy/rules/api", "", nil, &e); resp.StatusCode != 404 {
		t.Errorf("DELETE of a missing rule: %d, want 404", resp.StatusCode)
	}

	resp = a.call(t, "PUT", "/v1/policy", `{"default": "allow", "allow_private": ["127.0.0.0/8"]}`, map[string]string{"If-Match": `"3"`}, &got)
	if resp.StatusCode != 200 || got.Version != 4 {
		t.Errorf("PUT: %d %+v", resp.StatusCode, got)
	}
	if s := a.statusThrough(t, target); s != 200 {
		t.Errorf("after PUT default allow: %d, want 200", s)
	}

	// Every change is in the log as a policy record.
	lines, _ := a.g.Ring.Since(0, 1000)
	var changes []string
	for _, l := range lines {
		var r map[string]any
		json.Unmarshal(l, &r)
		if r["event"] == decisionlog.EventPolicy {
			changes = append(changes, fmt.Sprint(r["policy_version"], " ", r["change"]))
		}
	}
	want := []string{"1 policy loaded", "2 rule api added at position 0", "3 rule api removed", "4 policy replaced (0 rules)"}
	if strings.Join(changes, "|") != strings.Join(want, "|") {
		t.Errorf("policy records %q, want %q", changes, want)
	}
}

func TestAPIAddressIsRefusedEvenWithAllowPrivate(t *testing.T) {
	a := startAPI(t, loopbackPolicy(netpolicy.Allow), nil)
	resp, err := a.proxy.Get(a.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderRule) != "guard" {
		t.Errorf("the API through the proxy: %d %s, want 403 by guard", resp.StatusCode, resp.Header.Get(HeaderRule))
	}
	// And through a tunnel.
	status, hdr := rawConnect(t, a.g.ProxyAddr.String(), strings.TrimPrefix(a.base, "http://"))
	if status != 403 || hdr.Get(HeaderRule) != "guard" {
		t.Errorf("CONNECT to the API: %d %v", status, hdr)
	}
}

func TestUnixSocketAPI(t *testing.T) {
	p, _ := netpolicy.Compile(netpolicy.Spec{})
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "api.sock")
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", API: []string{"unix:" + sock}, TokenFile: filepath.Join(dir, "token"), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v, want 0600", fi, err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://sbx/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz over the socket: %v %v", resp, err)
	}
	resp.Body.Close()
	c.CloseIdleConnections()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after Close: %v", err)
	}
}

func TestAPIMetrics(t *testing.T) {
	a := startAPI(t, netpolicy.Spec{}, nil)
	a.statusThrough(t, "http://blocked.test/")
	req, _ := http.NewRequest("GET", a.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`sbx_gateway_requests_total{action="block",kind="http"} 1`,
		`sbx_gateway_open_tunnels 0`,
		`sbx_gateway_bytes_total{direction="in"}`,
		`sbx_gateway_decision_seconds_count 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestShutdownLogsEveryTunnel holds tunnels and requests open, closes the
// gateway, and expects every decision and close record in the log file.
func TestShutdownLogsEveryTunnel(t *testing.T) {
	sink := tcpServer(t, func(c net.Conn) { io.Copy(c, c) }) // echoes, and holds the tunnel open
	p, _ := netpolicy.Compile(loopbackPolicy(netpolicy.Allow))
	logFile := filepath.Join(t.TempDir(), "log.jsonl")
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: p, LogFile: logFile})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var conns []net.Conn
	for range n {
		c, err := connectThrough(g.ProxyAddr.String(), sink.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("data"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
			t.Fatalf("echo through the tunnel: %v", err)
		}
		conns = append(conns, c)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var decisions, closes int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		switch {
		case strings.Contains(line, `"event":"decision"`):
			decisions++
		case strings.Contains(line, `"event":"close"`):
			closes++
			if !strings.Contains(line, `"bytes_out":4,"bytes_in":4`) {
				t.Errorf("close record without the 4 bytes each way: %s", line)
			}
		}
	}
	if decisions != n || closes != n {
		t.Errorf("after Close the log has %d decision and %d close records for %d tunnels", decisions, closes, n)
	}
}

// TestPolicyRecordPrecedesItsDecisions changes the policy over the API
// while clients make requests: in the log, every decision made under a
// policy version comes after that version's policy record, so a reader of
// the log always knows the policy a decision was made under.
func TestPolicyRecordPrecedesItsDecisions(t *testing.T) {
	a := startAPI(t, netpolicy.Spec{}, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := a.proxy.Get("http://x.test/"); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	for i := range 300 {
		a.call(t, "POST", "/v1/policy/rules", fmt.Sprintf(`{"host": "h%d.test", "action": "allow"}`, i), nil, nil)
	}
	close(stop)
	wg.Wait()

	lines, _ := a.g.Ring.Since(0, 100_000)
	seen := uint64(0) // the highest policy version recorded so far
	decisions := 0
	for _, line := range lines {
		var r struct {
			Seq           uint64 `json:"seq"`
			Event         string `json:"event"`
			PolicyVersion uint64 `json:"policy_version"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		switch r.Event {
		case decisionlog.EventPolicy:
			seen = max(seen, r.PolicyVersion)
		case decisionlog.EventDecision:
			decisions++
			if r.PolicyVersion > seen {
				t.Fatalf("record %d: a decision under policy version %d before that version's policy record (last seen %d)", r.Seq, r.PolicyVersion, seen)
			}
		}
	}
	if seen != 301 || decisions < 100 {
		t.Errorf("saw policy version %d and %d decisions; want 301 and at least 100", seen, decisions)
	}
}
