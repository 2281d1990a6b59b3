package main

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// standInLLM is an HTTPS server of the test's own on the node's address,
// standing in for an LLM's API: it answers from a one-turn script, whose
// text is standInAnswer, and counts the requests.
type standInLLM struct {
	server *http.Server
	// addr is where it listens (the node's address), caFile the PEM file
	// of the CA its certificate is of.
	addr, caFile string
	hits         atomic.Int64
}

const standInAnswer = "answered by the stand-in api"

// newStandInLLM starts a standInLLM, closed when the test ends.
func newStandInLLM(t *testing.T) *standInLLM {
	t.Helper()
	caPEM, cert := testCertificate(t, kubeNodeIP)
	upstream := mockllm.New(mustParseScript(t, "turns:\n  - reply: {text: "+standInAnswer+"}\n"))
	ln, err := net.Listen("tcp", kubeNodeIP+":0")
	if err != nil {
		t.Fatalf("listening on the node's address %s (the test runs in the cluster's network): %v", kubeNodeIP, err)
	}
	s := &standInLLM{addr: ln.Addr().String(), caFile: filepath.Join(t.TempDir(), "upstream-ca.pem")}
	s.server = &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		upstream.ServeHTTP(w, r)
	})}
	go s.server.ServeTLS(ln, "", "")
	t.Cleanup(func() { s.server.Close() })
	if err := os.WriteFile(s.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKubeClusterRecordLLM: sbx kube run --record-llm HOST=SCRIPT on the
// cluster. The agent (a Go client, copied in once its pod runs) sends an Anthropic request to HOST, an HTTPS server of the
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
	llm := newStandInLLM(t)
	hs, apiAddr, upCA, hits := llm.server, llm.addr, llm.caFile, &llm.hits
	_, apiPort, _ := net.SplitHostPort(apiAddr)
	dir := t.TempDir()

	// The agent: wait for the client, which the test copies in once the
	// agent pod runs (as TestKubeClusterSecret does), then ask the API as
	// an agent would, straight to the host (the pod's rules capture it).
	agent := `while [ ! -x /tmp/httpsget ]; do sleep 0.2; done
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget -d "$1" "$2"`
	run := func(name string, flags ...string) (string, string) {
		t.Helper()
		args := []string{"run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never", "--allow-private", kubeNodeIP + "/32"}
		args = append(append(args, flags...), "--", "sh", "-c", agent, "sh", anthropicRequest("the word is quince"), "https://"+apiAddr+"/v1/messages")
		type result struct {
			out, errOut string
			code        int
		}
		done := make(chan result, 1)
		go func() {
			out, errOut, code := k.sbx(args...)
			done <- result{out, errOut, code}
		}()
		copied, finished := false, false
		var r result
		for !finished {
			select {
			case r = <-done:
				finished = true
				continue
			case <-time.After(500 * time.Millisecond):
			}
			if copied {
				continue
			}
			pods, err := k.cs.CoreV1().Pods(k.ns).List(t.Context(), metav1.ListOptions{LabelSelector: kube.LabelRole + "=" + kube.RoleAgent})
			if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
				continue
			}
			if out, errOut, err := k.exec(pods.Items[0].Name, "agent", string(bin), "sh", "-c", "cat >/tmp/httpsget.part && chmod 755 /tmp/httpsget.part && mv /tmp/httpsget.part /tmp/httpsget"); err == nil {
				copied = true
			} else {
				t.Logf("%s: copying httpsget into the agent: %v\n%s%s", name, err, out, errOut)
			}
		}
		if r.code != 0 || !strings.HasPrefix(r.out, "200 ") || !strings.Contains(r.out, standInAnswer) {
			t.Fatalf("%s: exit %d, want 0 and the API's answer\n%s%s", name, r.code, r.out, r.errOut)
		}
		if left := k.objectsLeft(""); len(left) > 0 {
			t.Errorf("%s: left after the run: %v", name, left)
		}
		return r.out, r.errOut
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

// TestKubeClusterRecordLLMDetached: sbx kube run -d --record-llm
// HOST=SCRIPT on the cluster. The gateway pod records the agent's
// exchange with the stand-in API; sbx kube mock recording reads it while
// the sandbox runs; sbx kube stop refuses to remove the sandbox, and so
// drop the recording, unless told where to write it (--record-llm) or to
// drop it; with --record-llm it writes SCRIPT and removes the sandbox.
// sbx kube runs as the documented user throughout.
func TestKubeClusterRecordLLMDetached(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	llm := newStandInLLM(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "recorded.yaml")
	id, said := w.runSandboxStderr("--allow", llm.addr, "--allow-private", kubeNodeIP+"/32", "--upstream-ca", llm.caFile, "--record-llm", kubeNodeIP+"="+script)
	if want := "sbx kube stop -n " + k.ns + " --record-llm " + kubeNodeIP + "=" + script + " " + id + " writes the recording there"; !strings.Contains(said, want) {
		t.Errorf("sbx kube run -d --record-llm said %q, want %q", said, want)
	}
	agent := kube.ObjectName(id)
	k.copyHTTPSGet(agent)
	out, errOut, err := k.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget -d "$1" "$2"`,
		"sh", anthropicRequest("the word is quince"), "https://"+llm.addr+"/v1/messages")
	if err != nil || !strings.HasPrefix(out, "200 ") || !strings.Contains(out, standInAnswer) {
		t.Fatalf("the agent's request to the stand-in API: %v, want 200 and its answer\n%s%s", err, out, errOut)
	}

	early := filepath.Join(dir, "early.yaml")
	if out, errOut, code := k.sbx("mock", "recording", "--sandbox", id, "-o", early); code != 0 || !strings.Contains(errOut, "recorded 1 exchanges with "+kubeNodeIP+" in "+early) {
		t.Fatalf("sbx kube mock recording: exit %d, want the recording written\n%s%s", code, out, errOut)
	}
	if got := readFile(t, early); !strings.Contains(got, standInAnswer) {
		t.Errorf("sbx kube mock recording wrote\n%s\nwant the API's answer", got)
	}

	// Stopped plainly, the sandbox stays, with the recording.
	out, errOut, code := k.sbx("stop", id)
	if code == 0 || !strings.Contains(errOut, "recorded exchanges with "+kubeNodeIP) || !strings.Contains(errOut, "--discard-recordings") {
		t.Errorf("sbx kube stop of a sandbox holding a recording: exit %d, want a refusal naming the host and the ways on\n%s%s", code, out, errOut)
	}
	if left := k.objectsLeft(id); len(left) != 6 {
		t.Fatalf("after the refused stop: %v, want the sandbox's 6 objects", left)
	}
	out, errOut, code = k.sbx("stop", "--record-llm", kubeNodeIP+"="+script, id)
	if code != 0 || !strings.Contains(errOut, "recorded 1 exchanges with "+kubeNodeIP+" in "+script) || !strings.Contains(out, "sandbox "+id+" removed") {
		t.Fatalf("sbx kube stop --record-llm: exit %d, want the recording written and the sandbox removed\n%s%s", code, out, errOut)
	}
	if got, want := readFile(t, script), readFile(t, early); got != want {
		t.Errorf("sbx kube stop wrote\n%s\nwant what sbx kube mock recording read\n%s", got, want)
	}
	mustParseScriptFile(t, script)
	if llm.hits.Load() != 1 {
		t.Errorf("the stand-in API was asked %d times, want once", llm.hits.Load())
	}
	if left := k.objectsLeft(id); len(left) > 0 {
		t.Errorf("left after sbx kube stop: %v", left)
	}
}

// TestKubeClusterRecordLLMInterrupted: sbx kube run --record-llm
// HOST=SCRIPT interrupted (SIGINT, as Ctrl-C sends) while its agent runs
// still writes what the gateway pod recorded until then, before it
// removes the sandbox, and exits 130.
func TestKubeClusterRecordLLMInterrupted(t *testing.T) {
	k := newKubeTest(t)
	llm := newStandInLLM(t)
	bin := buildSbx(t)
	script := filepath.Join(t.TempDir(), "recorded.yaml")
	cmd := exec.Command(bin, "kube", "--kubeconfig", k.kubeconfig, "-n", k.ns, "run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never",
		"--allow", llm.addr, "--allow-private", kubeNodeIP+"/32", "--upstream-ca", llm.caFile, "--record-llm", kubeNodeIP+"="+script, "--", "sleep", "3600")
	var out, errOut syncBuffer // read while sbx runs, should it hang
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	var agent string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
		pods, err := k.cs.CoreV1().Pods(k.ns).List(t.Context(), metav1.ListOptions{LabelSelector: kube.LabelRole + "=" + kube.RoleAgent})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
			agent = pods.Items[0].Name
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running agent pod after 2 minutes\n%s%s", out.String(), errOut.String())
		}
	}
	k.copyHTTPSGet(agent)
	if got, errs, err := k.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget -d "$1" "$2"`,
		"sh", anthropicRequest("the word is quince"), "https://"+llm.addr+"/v1/messages"); err != nil || !strings.Contains(got, standInAnswer) {
		t.Fatalf("the agent's request to the stand-in API: %v, want its answer\n%s%s", err, got, errs)
	}
	cmd.Process.Signal(os.Interrupt)
	var err error
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("sbx kube run still runs 2 minutes after SIGINT\n%s%s", out.String(), errOut.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || !strings.Contains(errOut.String(), "recorded 1 exchanges with "+kubeNodeIP+" in "+script) {
		t.Errorf("sbx kube run interrupted: %v, want exit 130 and the recording written\n%s%s", err, out.String(), errOut.String())
	}
	if got := readFile(t, script); !strings.Contains(got, standInAnswer) {
		t.Errorf("the recording written on SIGINT:\n%s\nwant the API's answer", got)
	}
	if left := k.objectsLeft(""); len(left) > 0 {
		t.Errorf("left after the interrupted run: %v", left)
	}
}
