package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// userGateway is an sbx gateway a test started as a normal user
// (asUser), on a free port of 127.0.0.1, as an operator runs one.
type userGateway struct {
	cmd            *exec.Cmd
	stdout, stderr *lineWatcher
	exited         chan error // its Wait's, once
	client         *http.Client
}

// startUserGateway starts sbx gateway with args as the user, and waits
// until it says where its decision log is; it is killed at the test's
// end.
func startUserGateway(t *testing.T, bin string, args ...string) *userGateway {
	t.Helper()
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr := pln.Addr().String()
	pln.Close()
	cmd := exec.Command(bin, append([]string{"gateway", "--listen", proxyAddr}, args...)...)
	stdout, stderr := startAsUser(t, cmd)
	gw := &userGateway{cmd: cmd, stdout: stdout, stderr: stderr, exited: make(chan error, 1)}
	go func() { gw.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-gw.exited
		gw.exited <- err
	})
	gw.stdout.waitFor(t, "decision log in ")
	pu, _ := url.Parse("http://" + proxyAddr)
	gw.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	return gw
}

// status is the status of a GET of target through the gateway.
func (gw *userGateway) status(t *testing.T, target string) int {
	t.Helper()
	resp, err := gw.client.Get(target)
	if err != nil {
		t.Fatalf("GET %s through the gateway: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestGatewayReloadsPolicyOnSIGHUP runs sbx gateway as a process, as an
// operator does (as a normal user): SIGHUP after the --policy file is
// rewritten makes the new rules decide (a blocked host becomes allowed),
// a policy record in the decision log and a line on stdout say so; a bad
// file then keeps the rules that run (the host stays allowed), and stderr
// and a policy record say why. SIGINT still stops it with exit 0.
func TestGatewayReloadsPolicyOnSIGHUP(t *testing.T) {
	bin := buildSbx(t)
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up\n") })}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(uln)
	defer upstream.Close()
	_, upPort, _ := net.SplitHostPort(uln.Addr().String())

	dir := userDir(t)
	policy := filepath.Join(dir, "policy.yaml")
	logFile := filepath.Join(dir, "decisions.jsonl")
	writePolicy := func(content string) {
		t.Helper()
		if err := os.WriteFile(policy, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			// The user's own file.
			if err := os.Chown(policy, userUID, userUID); err != nil {
				t.Fatal(err)
			}
		}
	}
	writePolicy("version: 1\ndefault: block\nrules: []\n")

	gw := startUserGateway(t, bin, "--policy", policy, "--log", logFile,
		"--resolve", "api.test=127.0.0.1", "--allow-private", "127.0.0.0/8")
	cmd, stdout, stderr, exited := gw.cmd, gw.stdout, gw.stderr, gw.exited
	target := "http://api.test:" + upPort + "/"
	status := func() int {
		t.Helper()
		return gw.status(t, target)
	}
	if got := status(); got != http.StatusForbidden {
		t.Fatalf("GET %s under the first policy: got %d, want 403", target, got)
	}

	writePolicy("version: 1\ndefault: block\nrules:\n  - host: api.test\n    ports: [" + upPort + "]\n    action: allow\n")
	cmd.Process.Signal(syscall.SIGHUP)
	stdout.waitFor(t, "policy reloaded from "+policy+" on SIGHUP (policy version 2: 1 rule")
	if got := status(); got != http.StatusOK {
		t.Errorf("GET %s after the reload: got %d, want 200", target, got)
	}

	writePolicy("version: 1\ndefault: block\nrules:\n  - host: api.test\n    action: alow\n")
	cmd.Process.Signal(syscall.SIGHUP)
	stderr.waitFor(t, "reloading the policy from "+policy+" on SIGHUP failed, so the running policy (version 2) stays")
	stderr.waitFor(t, policy+":5:")
	if got := status(); got != http.StatusOK {
		t.Errorf("GET %s after a bad file's reload: got %d, want 200 (the old rules kept)", target, got)
	}

	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err // for the cleanup's wait
		if err != nil {
			t.Errorf("sbx gateway after SIGINT: %v, want exit 0; stderr:\n%s", err, stderr.text())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sbx gateway did not stop within 10s of SIGINT")
	}

	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var changes []string
	rd := decisionlog.NewReader(f, logFile)
	var r decisionlog.Record
	for rd.Next(&r) == nil {
		if r.Event == decisionlog.EventPolicy {
			changes = append(changes, r.Change)
		}
	}
	want := []string{
		"policy loaded",
		"policy reloaded from " + policy + " on SIGHUP (1 rules)",
		"policy reload from " + policy + " on SIGHUP failed, so version 2 stays: " + policy + ":5:",
	}
	if len(changes) != len(want) {
		t.Fatalf("policy records: got %q, want %d like %q", changes, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(changes[i], want[i]) {
			t.Errorf("policy record %d: got %q, want it to start %q", i+1, changes[i], want[i])
		}
	}
}
