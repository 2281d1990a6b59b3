package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/netpolicy"
)

// syncBuffer is a strings.Builder safe to write from the command's
// goroutine while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gatewayCmd is sbx gateway running in this process.
type gatewayCmd struct {
	out, errOut syncBuffer
	cancel      context.CancelFunc
	done        chan int // its exit code
}

// startGatewayCmd runs sbx gateway with args in this process, and waits up
// to 10 s for its output (standard output or error) to hold ready. The
// test's end cancels it.
func startGatewayCmd(t *testing.T, ready string, args ...string) *gatewayCmd {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := &gatewayCmd{cancel: cancel, done: make(chan int, 1)}
	root := newRootCmd()
	root.SetArgs(append([]string{"gateway"}, args...))
	root.SetOut(&g.out)
	root.SetErr(&g.errOut)
	go func() { g.done <- execute(ctx, root) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(g.out.String()+g.errOut.String(), ready) {
		if time.Now().After(deadline) {
			t.Fatalf("sbx gateway did not start: %q %q", g.out.String(), g.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return g
}

// stop cancels the command, as SIGINT and SIGTERM do through
// signal.NotifyContext, and returns its exit code; it fails the test if
// the command does not end within 10 s.
func (g *gatewayCmd) stop(t *testing.T) int {
	t.Helper()
	g.cancel()
	select {
	case code := <-g.done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("sbx gateway did not stop")
		return 0
	}
}

// TestGatewayCommand runs sbx gateway in-process: it prints where it
// listens, decides requests by its flags, and on cancellation (what
// SIGINT and SIGTERM do through signal.NotifyContext) stops cleanly with
// its decision log flushed and its socket removed.
func TestGatewayCommand(t *testing.T) {
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up\n") })}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(uln)
	defer upstream.Close()
	_, upPort, _ := net.SplitHostPort(uln.Addr().String())

	dir := t.TempDir()
	logFile := filepath.Join(dir, "decisions.jsonl")
	sock := filepath.Join(dir, "run", "api.sock")
	// A free port for the proxy.
	pln, _ := net.Listen("tcp", "127.0.0.1:0")
	proxyAddr := pln.Addr().String()
	pln.Close()

	g := startGatewayCmd(t, "decision log in", "--listen", proxyAddr,
		"--allow", "api.test:"+upPort, "--resolve", "api.test=127.0.0.1", "--allow-private", "127.0.0.0/8",
		"--api", "unix:"+sock, "--token-file", filepath.Join(dir, "token"), "--log", logFile)
	for _, want := range []string{"proxy on " + proxyAddr, "management API on unix:" + sock, "decision log in " + logFile} {
		if !strings.Contains(g.out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, g.out.String())
		}
	}

	pu, _ := url.Parse("http://" + proxyAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for target, want := range map[string]int{"http://api.test:" + upPort + "/": 200, "http://other.test/": 403} {
		resp, err := c.Get(target)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", target, resp.StatusCode, want)
		}
	}
	tr.CloseIdleConnections()

	if code := g.stop(t); code != 0 {
		t.Errorf("exit %d, stderr %q", code, g.errOut.String())
	}
	if !strings.Contains(g.out.String(), "stopping") {
		t.Errorf("no stop message: %q", g.out.String())
	}
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, ev := range []string{"policy", "decision", "close"} {
			if strings.Contains(line, fmt.Sprintf(`"event":%q`, ev)) {
				events = append(events, ev)
			}
		}
	}
	slices.Sort(events)
	if got := strings.Join(events, ","); got != "close,decision,decision,policy" {
		t.Errorf("decision log events %s, want a policy, two decisions and a close record", got)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the API socket is left after stopping: %v", err)
	}
	if _, err := net.Dial("tcp", proxyAddr); err == nil {
		t.Errorf("the proxy still listens after stopping")
	}
}

func TestGatewayCommandErrors(t *testing.T) {
	dir := t.TempDir()
	ca, err := gateway.NewCA("t", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	openCA, notCA := filepath.Join(dir, "open-ca.pem"), filepath.Join(dir, "cert-only.pem")
	os.WriteFile(openCA, caPEM, 0o644)
	os.Chmod(openCA, 0o644)
	os.WriteFile(notCA, ca.CertPEM(), 0o600)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gateway", "--resolve", "nonsense"}, exitUsage, "want HOST=IP"},
		{[]string{"gateway", "--allow", "*."}, exitUsage, "--allow"},
		{[]string{"gateway", "--api", "unix:" + filepath.Join(dir, "s")}, exitUsage, "--token-file"},
		{[]string{"gateway", "--listen", "256.0.0.1:1"}, exitFailure, "listening for proxy clients"},
		{[]string{"gateway", "--capture", "nonsense"}, exitUsage, "--capture \"nonsense\": want host:port"},
		{[]string{"gateway", "--dns", "127.0.0.1"}, exitUsage, "--dns \"127.0.0.1\": want host:port"},
		{[]string{"gateway", "--capture", "256.0.0.1:1"}, exitFailure, "--capture: listening for handed-over connections on 256.0.0.1:1"},
		{[]string{"gateway", "--ca", filepath.Join(dir, "missing.pem")}, exitFailure, "--ca: reading the CA"},
		{[]string{"gateway", "--ca", openCA}, exitFailure, "run chmod 600 " + openCA},
		{[]string{"gateway", "--ca", notCA}, exitFailure, "not a CA certificate and its private key"},
	}
	for _, tt := range tests {
		_, stderr, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
}

// TestPolicyCheckRunningPolicy: sbx policy check --api decides with the
// gateway's running policy (flag rules first), sees a change made over
// the API, and refuses --policy with it.
// startAPIGateway starts a gateway in this process with spec and its
// management API on loopback, and returns the flags that reach the API and
// a func that stops the gateway (also called when the test ends).
func startAPIGateway(t *testing.T, spec netpolicy.Spec) ([]string, func()) {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	g, err := gateway.Start(t.Context(), gateway.Config{Listen: "127.0.0.1:0", API: []string{"127.0.0.1:0"}, TokenFile: tokenFile, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { g.Close() }) }
	t.Cleanup(stop)
	return []string{"--api", g.APIAddrs[0], "--token-file", tokenFile}, stop
}

func TestPolicyCheckRunningPolicy(t *testing.T) {
	api, _ := startAPIGateway(t, netpolicy.Spec{Rules: []netpolicy.Rule{{ID: "a", Host: "a.test", Action: netpolicy.Allow}}})
	check := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append(append([]string{"policy", "check", "--json"}, api...), args...)...)
		if code != 0 {
			t.Fatalf("sbx policy check %v: exit %d, %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	if got := check("a.test"); !strings.Contains(got, `"action":"allow","rule":"a"`) {
		t.Errorf("a.test: %s", got)
	}
	if got := check("b.test"); !strings.Contains(got, `"action":"block","rule":"default"`) {
		t.Errorf("b.test: %s", got)
	}
	if got := check("--block", "a.test", "a.test"); !strings.Contains(got, `"action":"block"`) {
		t.Errorf("a.test with --block a.test: %s", got)
	}
	if _, stderr, code := runCLI(t, append(append([]string{"policy", "allow", "--id", "b"}, api...), "b.test")...); code != 0 {
		t.Fatalf("policy allow: %s", stderr)
	}
	if got := check("b.test"); !strings.Contains(got, `"action":"allow","rule":"b"`) {
		t.Errorf("b.test after policy allow: %s", got)
	}
	policy := writeFile(t, "p.yaml", "version: 1\n")
	if _, stderr, code := runCLI(t, append(append([]string{"policy", "check", "--policy", policy}, api...), "a.test")...); code != exitUsage || !strings.Contains(stderr, "not both") {
		t.Errorf("--policy with --api: exit %d, %q; want a usage error", code, stderr)
	}
}

// TestDecisionsFollowEndsWithTheGateway: sbx decisions --follow ends, exit
// 0, saying so, when the gateway stops.
func TestDecisionsFollowEndsWithTheGateway(t *testing.T) {
	api, stop := startAPIGateway(t, netpolicy.Spec{})
	type result struct {
		stdout, stderr string
		code           int
	}
	done := make(chan result, 1)
	var out, errOut syncBuffer
	go func() {
		root := newRootCmd()
		root.SetArgs(append([]string{"decisions", "--follow"}, api...))
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := execute(context.Background(), root)
		done <- result{out.String(), errOut.String(), code}
	}()
	// The stream is open once it shows the policy record.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "policy loaded"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("sbx decisions --follow showed nothing: %q", errOut.String())
		}
	}
	stop()
	select {
	case r := <-done:
		if r.code != 0 || !strings.Contains(r.stdout, "policy loaded") || !strings.Contains(r.stderr, "the gateway stopped") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 0, the policy record, and that the gateway stopped", r.code, r.stdout, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sbx decisions --follow did not end with the gateway")
	}
}
