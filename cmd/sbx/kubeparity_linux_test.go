package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestKubeClusterRecordLLM: sbx kube run --record-llm HOST=SCRIPT on the
// cluster. The agent (a Go client, fetched from a file server pod of the
// namespace) sends an Anthropic request to HOST, an HTTPS server of the
// test's own on the node's address standing in for the API; the gateway
// pod lets it through, inspected, and records it; when the agent ends,
// sbx kube run writes SCRIPT here, and no object is left. With the API
// gone, the same request is answered from SCRIPT: by sbx kube run
// --mock-llm HOST=SCRIPT, and by a policy whose intercept rule answers
// with response: {llm: SCRIPT}.
func TestKubeClusterRecordLLM(t *testing.T) {
	k := newKubeTest(t)
	getter := filepath.Join(t.TempDir(), "httpsget")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", getter, "./testdata/httpsget")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building httpsget: %v\n%s", err, b)
	}
	bin, err := os.ReadFile(getter)
	if err != nil {
		t.Fatal(err)
	}
	files := k.pod("files", map[string]string{"app": "files"}, "mkdir -p /tmp/www && exec httpd -f -p 8080 -h /tmp/www")
	if out, errOut, err := k.exec("files", "main", string(bin), "sh", "-c", "cat >/tmp/www/httpsget"); err != nil {
		t.Fatalf("copying httpsget into the file server: %v\n%s%s", err, out, errOut)
	}

	// The stand-in API, on the node's address.
	caPEM, cert := testCertificate(t, kubeNodeIP)
	upstream := mockllm.New(mustParseScript(t, "turns:\n  - reply: {text: answered by the stand-in api}\n"))
	var hits atomic.Int64
	ln, err := net.Listen("tcp", kubeNodeIP+":0")
	if err != nil {
		t.Fatalf("listening on the node's address %s (the test runs in the cluster's network): %v", kubeNodeIP, err)
	}
	hs := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		upstream.ServeHTTP(w, r)
	})}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	apiAddr := ln.Addr().String()
	_, apiPort, _ := net.SplitHostPort(apiAddr)
	dir := t.TempDir()
	upCA := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(upCA, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	// The agent: fetch the client, then ask the API as an agent would.
	agent := `wget -q -O /tmp/httpsget "http://$1/httpsget" && chmod 755 /tmp/httpsget &&
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY && exec /tmp/httpsget -d "$2" "$3"`
	run := func(name string, flags ...string) (string, string) {
		t.Helper()
		args := []string{"run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never",
			"--allow", files + ":8080", "--allow-private", files + "/32", "--allow-private", kubeNodeIP + "/32"}
		args = append(append(args, flags...), "--", "sh", "-c", agent, "sh", files+":8080", anthropicRequest("the word is quince"), "https://"+apiAddr+"/v1/messages")
		out, errOut, code := k.sbx(args...)
		if code != 0 || !strings.HasPrefix(out, "200 ") || !strings.Contains(out, "answered by the stand-in api") {
			t.Fatalf("%s: exit %d, want 0 and the API's answer\n%s%s", name, code, out, errOut)
		}
		if left := k.objectsLeft(""); len(left) > 0 {
			t.Errorf("%s: left after the run: %v", name, left)
		}
		return out, errOut
	}

	script := filepath.Join(dir, "recorded.yaml")
	_, errOut := run("recording", "--allow", apiAddr, "--upstream-ca", upCA, "--record-llm", kubeNodeIP+"="+script)
	if want := "recorded 1 exchanges with " + kubeNodeIP + " in " + script; !strings.Contains(errOut, want) {
		t.Errorf("sbx kube run --record-llm said %q, want %q", errOut, want)
	}
	if hits.Load() != 1 {
		t.Errorf("the stand-in API was asked %d times, want once", hits.Load())
	}
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatalf("the recorded script: %v", err)
	}
	t.Logf("recorded:\n%s", data)

	// With the API gone, the recording answers.
	hs.Close()
	run("replay with --mock-llm", "--mock-llm", kubeNodeIP+"="+script)
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - id: recorded
    host: `+kubeNodeIP+`
    ports: [`+apiPort+`]
    action: intercept
    response: {llm: recorded.yaml}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, "journal.jsonl")
	run("replay by the policy's llm response", "--policy", policy, "--mock-journal", journal)
	out, errOut, code := runCLI(t, "mock", "requests", "--journal", journal, "--script", "recorded.yaml", "--json")
	if code != 0 || !strings.Contains(out, `the word is quince`) {
		t.Errorf("the policy script's journal (--mock-journal): exit %d, want the agent's request\n%s%s", code, out, errOut)
	}
	if hits.Load() != 1 {
		t.Errorf("the stand-in API was asked %d times, want once: the replays asked it", hits.Load())
	}
}
