package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// TestPrivilegedApprovalAnswered runs a sandbox whose default is ask: its
// command asks for unlisted hosts on an upstream in a network namespace of
// the test's own, and each request is held until the test answers it,
// with sbx approve --always (it completes), then through the management
// API with a deny (it is refused); the approved host is not asked again.
// A second run with the same approvals file is not asked about it either;
// there an unanswered question blocks at --ask-timeout, and a loopback
// address, which the guard refuses, is never asked about.
func TestPrivilegedApprovalAnswered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	approvals := filepath.Join(dir, "approvals.yaml")
	common := []string{"run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.248.0/24",
		"--resolve", "later.test=" + up.Addr, "--resolve", "other.test=" + up.Addr, "--allow-private", up.Net,
		"--default", "ask", "--approvals", approvals}
	ask := `GW=${HTTP_PROXY#http://}
ask() { printf 'GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" "$1" | nc ${GW%:*} ${GW##*:} | head -n 1; }
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logA := filepath.Join(dir, "a.jsonl")
	first := runInBackground(ctx, append(append([]string{}, common...), "--ask-timeout", "45s", "--log", logA, "--",
		"sh", "-c", ask+`echo "first $(ask later.test:8080)"; echo "second $(ask other.test:8080)"; echo "third $(ask later.test:8080)"`)...)
	id := waitForSandbox(t, state, "")
	target := []string{"--sandbox", id, "--state-dir", state}

	// Held: sbx approve lists it; --always answers it.
	waitQuestion := func(host string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, errOut, code := runCLI(t, append([]string{"approve"}, target...)...)
			if code != 0 {
				t.Fatalf("sbx approve (list): exit %d %s", code, errOut)
			}
			if strings.Contains(out, host+":8080") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no question about %s: %q", host, out)
			}
		}
	}
	waitQuestion("later.test")
	if out, errOut, code := runCLI(t, append([]string{"approve", "--always", "later.test:8080"}, target...)...); code != 0 || !strings.HasPrefix(out, "allowed always: a1") {
		t.Fatalf("sbx approve --always: exit %d, %q %q", code, out, errOut)
	}

	// The second is answered through the API, with a deny.
	waitQuestion("other.test")
	tok, err := os.ReadFile(filepath.Join(state, id, "token"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(state, id, "api.sock"))
	}}}
	req, _ := http.NewRequest("POST", "http://sbx/v1/approvals/a2", strings.NewReader(`{"answer": "deny", "scope": "once"}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answered api.ApprovalAnswered
	json.NewDecoder(resp.Body).Decode(&answered)
	resp.Body.Close()
	if resp.StatusCode != 200 || answered.Approval.Host != "other.test" || answered.By != "api" {
		t.Fatalf("POST /v1/approvals/a2: %d %+v", resp.StatusCode, answered)
	}

	r := <-first
	t.Logf("first run:\n%s\n%s", r[0], r[1])
	for _, want := range []string{"first HTTP/1.1 200", "second HTTP/1.1 403", "third HTTP/1.1 200"} {
		if !strings.Contains(r[0], want) {
			t.Errorf("the first run's output lacks %q", want)
		}
	}
	if !strings.Contains(r[1], "sbx approve --sandbox "+id+" a1") {
		t.Errorf("sbx run's stderr does not name the command that answers question a1")
	}
	recs := readApprovalRecords(t, logA)
	if len(recs) != 4 || recs[1].Answer != "allow" || recs[1].Scope != "always" || recs[1].By != "cli" || recs[3].Answer != "deny" || recs[3].By != "api" {
		t.Errorf("the first run's approval records: got %+v, want two questions, an allow always by cli and a deny by api", recs)
	}
	data, _ := os.ReadFile(approvals)
	if !strings.Contains(string(data), "host: later.test") || !strings.Contains(string(data), "# allowed always by cli at ") {
		t.Errorf("the approvals file:\n%s", data)
	}

	// A second run with the same file: later.test is not asked; other.test
	// is, and times out; 127.0.0.1 is refused by the guard, not asked.
	logB := filepath.Join(dir, "b.jsonl")
	start := time.Now()
	second := <-runInBackground(ctx, append(append([]string{}, common...), "--ask-timeout", "2s", "--quiet", "--log", logB, "--",
		"sh", "-c", ask+`echo "first $(ask later.test:8080)"; echo "guard $(ask 127.0.0.1:8080)"; echo "timeout $(ask other.test:8080)"`)...)
	t.Logf("second run (%v):\n%s\n%s", time.Since(start), second[0], second[1])
	for _, want := range []string{"first HTTP/1.1 200", "guard HTTP/1.1 403", "timeout HTTP/1.1 403"} {
		if !strings.Contains(second[0], want) {
			t.Errorf("the second run's output lacks %q", want)
		}
	}
	recs = readApprovalRecords(t, logB)
	if len(recs) != 2 || recs[0].Host != "other.test" || recs[1].By != "timeout" {
		t.Errorf("the second run's approval records: got %+v, want one question about other.test, ended by timeout", recs)
	}
	if n := up.requestsFromElsewhere(); n != 0 {
		t.Errorf("the upstream had %d requests from elsewhere than the gateway", n)
	}
}

// readApprovalRecords returns the approval records of the log at path.
func readApprovalRecords(t *testing.T, path string) []decisionlog.Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []decisionlog.Record
	for _, line := range bytes.Split(data, []byte("\n")) {
		var r decisionlog.Record
		if len(line) > 0 && decisionlog.Decode(line, &r) == nil && r.Event == decisionlog.EventApproval {
			out = append(out, r)
		}
	}
	return out
}
