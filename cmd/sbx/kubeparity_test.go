package main

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// anthropicRequest is an Anthropic Messages request whose last user
// message is user.
func anthropicRequest(user string) string {
	return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + user + `"}]}`
}

// askLLM sends an Anthropic request for user through tr to url and
// returns the status and body.
func askLLM(t *testing.T, tr http.RoundTripper, url, user string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(anthropicRequest(user)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestKubeRecordLLM: sbx kube run --record-llm on a cluster, without the
// cluster. The gateway pod runs sbx gateway with --record-llm-api HOST
// (what the objects give it): a request to HOST goes through, inspected,
// to its API (a stand-in on loopback); sbx kube run reads the recording
// through the management API (writeRecorded, after the port-forward) and
// writes the script on the user's machine, which --mock-llm replays with
// the API gone.
func TestKubeRecordLLM(t *testing.T) {
	upstream := mockllm.New(mustParseScript(t, "turns:\n  - reply: {text: answered by the api}\n"))
	var hits atomic.Int64
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); upstream.ServeHTTP(w, r) }))
	t.Cleanup(up.Close)
	_, port, _ := strings.Cut(up.Listener.Addr().String(), ":")

	dir := t.TempDir()
	ca, err := gateway.NewCA("pod", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	caFile, caCert := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.crt")
	upCA := filepath.Join(dir, "upstream.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	proxy, apiAddr, tokenFile := startGatewayWithAPI(t, "--ca", caFile, "--ca-cert", caCert, "--record-llm-api", "example.com", "--record-llm-api", "api.openai.com",
		"--allow", "example.com:"+port, "--resolve", "example.com=127.0.0.1", "--allow-private", "127.0.0.0/8", "--upstream-ca", upCA)

	url := "https://example.com:" + port + "/v1/messages"
	if status, body := askLLM(t, proxyTransport(proxy, caCert), url, "the word is quince"); status != http.StatusOK || !strings.Contains(body, "answered by the api") {
		t.Fatalf("through the gateway: %d %s, want the API's answer", status, body)
	}
	cl := gatewayAPIClient(t, apiAddr, tokenFile)
	script := filepath.Join(t.TempDir(), "recorded.yaml")
	var stderr strings.Builder
	if err := writeRecorded(context.Background(), &stderr, cl, []string{"example.com=" + script}); err != nil {
		t.Fatalf("writing the recording: %v", err)
	}
	if want := "recorded 1 exchanges with example.com in " + script; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
	// The recording replays with the API gone.
	up.Close()
	replay := mockllm.New(mustParseScriptFile(t, script))
	req := httptest.NewRequest("POST", url, strings.NewReader(anthropicRequest("the word is quince")))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	replay.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "answered by the api") || hits.Load() != 1 {
		t.Errorf("replaying the written script: %d %s (the API asked %d times); want the recorded answer, the API asked once", w.Code, w.Body.String(), hits.Load())
	}
	// A host the gateway does not record is an error naming the flag.
	if err := writeRecorded(context.Background(), io.Discard, cl, []string{"api.mistral.ai=" + script}); err == nil || !strings.Contains(err.Error(), "--record-llm api.mistral.ai=") || !strings.Contains(err.Error(), "not recorded") {
		t.Errorf("a host not recorded: got %v, want an error naming it", err)
	}

	// What sbx kube stop does with a detached sandbox's recordings: a
	// host with exchanges that no --record-llm names is not kept, so the
	// sandbox is not removed (api.openai.com recorded nothing: nothing
	// to lose); named, it is written; --discard-recordings reads none.
	hosts := []string{"example.com", "api.openai.com"}
	unkept, err := writeRecordings(context.Background(), io.Discard, cl, hosts, nil, false)
	if err != nil || len(unkept) != 1 || unkept[0] != "example.com" {
		t.Errorf("writeRecordings with no --record-llm: unkept %q, %v; want example.com, whose exchange would be lost", unkept, err)
	}
	if unkept, err := writeRecordings(context.Background(), io.Discard, cl, hosts, nil, true); err != nil || len(unkept) != 0 {
		t.Errorf("writeRecordings with --discard-recordings: unkept %q, %v; want none", unkept, err)
	}
	kept := filepath.Join(t.TempDir(), "kept.yaml")
	stderr.Reset()
	unkept, err = writeRecordings(context.Background(), &stderr, cl, hosts, []run.Recording{{Host: "example.com", Path: kept}}, false)
	if err != nil || len(unkept) != 0 || !strings.Contains(stderr.String(), "recorded 1 exchanges with example.com in "+kept) {
		t.Errorf("writeRecordings with --record-llm example.com=%s: unkept %q, %v, stderr %q; want it written", kept, unkept, err, stderr.String())
	}
	if got, want := readFile(t, kept), readFile(t, script); got != want {
		t.Errorf("the script sbx kube stop wrote:\n%s\nwant sbx kube run's:\n%s", got, want)
	}

	// sbx mock recording reads it through the same API: to standard
	// output, or to a file with -o (sbx kube mock recording is the same
	// command, its API reached through a port-forward).
	target := []string{"mock", "recording", "--api", apiAddr, "--token-file", tokenFile}
	if out, errOut, code := runCLI(t, append(target, "--host", "example.com")...); code != 0 || out != readFile(t, script) {
		t.Errorf("sbx mock recording --host example.com: exit %d, printed\n%s\nwant the script sbx kube run writes\n%s%s", code, out, readFile(t, script), errOut)
	}
	written := filepath.Join(t.TempDir(), "written.yaml")
	if out, errOut, code := runCLI(t, append(target, "--host", "example.com", "-o", written)...); code != 0 || !strings.Contains(errOut, "recorded 1 exchanges with example.com in "+written+" (replay with --mock-llm example.com="+written+")") || readFile(t, written) != readFile(t, script) {
		t.Errorf("sbx mock recording -o %s: exit %d, want the script written and said\n%s%s", written, code, out, errOut)
	}
	if _, errOut, code := runCLI(t, target...); code == 0 || !strings.Contains(errOut, "several hosts are recorded (api.openai.com, example.com)") {
		t.Errorf("sbx mock recording of a gateway recording two hosts, no --host: exit %d, %q; want the hosts named", code, errOut)
	}
}

// readFile is the file at path, which must be there.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustParseScript(t *testing.T, y string) *mockllm.Script {
	t.Helper()
	s, err := mockllm.ParseScript("script.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustParseScriptFile(t *testing.T, path string) *mockllm.Script {
	t.Helper()
	s, err := mockllm.ParseScriptFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKubePolicyLLMScripts: a policy whose intercept rule answers with an
// LLM script (response: {llm: SCRIPT}) goes to a cluster. The sandbox's
// ConfigMap keeps the policy as written and holds the script; the gateway
// pod, run as its objects say (its --policy and --llm-script, the
// ConfigMap's files), answers the rule's host from the script; sbx kube
// policy replace with the same file keeps working, and one whose script
// is new is refused with the reason and changes nothing.
func TestKubePolicyLLMScripts(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "scripts"), 0o755)
	policy := filepath.Join(dir, "policy.yaml")
	const policyText = `default: block
rules:
  - id: llm
    host: api.anthropic.com
    action: intercept
    response: {llm: scripts/agent.yaml}
`
	for name, content := range map[string]string{
		"policy.yaml":        policyText,
		"scripts/agent.yaml": "turns:\n  - reply: {text: answered from the policy's script}\n",
		"scripts/new.yaml":   "turns:\n  - reply: {text: a script the gateway never read}\n",
		"new-policy.yaml":    strings.Replace(policyText, "scripts/agent.yaml", "scripts/new.yaml", 1),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := runCLI(t, "kube", "manifest", "-n", "agents", "--image", "busybox", "--gateway-image", "sbx:1", "--policy", policy, "--", "true")
	if code != 0 {
		t.Fatalf("sbx kube manifest with an llm response: exit %d\n%s", code, errOut)
	}
	var cm corev1.ConfigMap
	var gw corev1.Pod
	for _, d := range strings.Split(out, "\n---\n") {
		switch manifestMeta(t, d).Kind {
		case "ConfigMap":
			yaml.Unmarshal([]byte(d), &cm)
		case "Pod":
			yaml.Unmarshal([]byte(d), &gw)
		}
	}
	p, err := netpolicy.Parse("policy.yaml", []byte(cm.Data["policy.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LLMScripts(); len(got) != 1 || got[0] != "scripts/agent.yaml" {
		t.Errorf("the ConfigMap's policy names the scripts %q, want the policy file's name scripts/agent.yaml", got)
	}
	// The pod's files: the ConfigMap's data where its volume puts it.
	const configDir = "/var/run/sbx/config"
	podDir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(podDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var args []string
	cmd := gw.Spec.Containers[0].Command
	for i, a := range cmd {
		switch {
		case a == "--policy":
			args = append(args, a, strings.Replace(cmd[i+1], configDir, podDir, 1))
		case strings.HasPrefix(a, "--llm-script="):
			args = append(args, strings.Replace(a, configDir, podDir, 1))
		case a == "--mock-command":
			args = append(args, a, cmd[i+1])
		}
	}
	if len(args) != 5 {
		t.Fatalf("the gateway pod's command %q: want --policy, one --llm-script and --mock-command", cmd)
	}
	proxy, apiAddr, tokenFile := startGatewayWithAPI(t, args...)
	status, body := askLLM(t, proxyTransport(proxy, ""), "http://api.anthropic.com/v1/messages", "hello")

	if status != http.StatusOK || !strings.Contains(body, "answered from the policy's script") {
		t.Fatalf("the rule's host through the gateway pod: %d %s, want the script's answer", status, body)
	}
	// The script's one turn is used up: the answer to the next request
	// says how to queue one, with sbx kube's command for this sandbox.
	id := gw.Labels[kube.LabelSandbox]
	if _, body := askLLM(t, proxyTransport(proxy, ""), "http://api.anthropic.com/v1/messages", "again"); !strings.Contains(body, "(sbx kube mock expect -n agents --sandbox "+id+" --script scripts/agent.yaml)") {
		t.Errorf("a request no turn fits got %q, want it to name sbx kube mock expect -n agents --sandbox %s --script scripts/agent.yaml", body, id)
	}

	// --mock-journal keeps the policy script's journal: read through the
	// API (after the port-forward), written, and read back by name.
	cl := gatewayAPIClient(t, apiAddr, tokenFile)
	journals, err := mockJournals(context.Background(), cl, kube.Spec{LLMScripts: []kube.LLMScript{{Name: "scripts/agent.yaml"}}})
	if err != nil {
		t.Fatalf("reading the journal of the policy's script: %v", err)
	}
	journal := filepath.Join(t.TempDir(), "journal.jsonl")
	f, err := os.OpenFile(journal, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMockJournal(mockllm.NewJournalFile(f), journals); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "mock", "requests", "--journal", journal, "--script", "scripts/agent.yaml", "--json"); code != 0 || !strings.Contains(out, `"content":"hello"`) {
		t.Errorf("the kept journal of the policy's script: exit %d, want the request\n%s%s", code, out, errOut)
	}

	// sbx kube policy replace sends the file as sbx policy replace does
	// (only the way to the API differs).
	target := []string{"--api", apiAddr, "--token-file", tokenFile}
	if out, errOut, code := runCLI(t, append([]string{"policy", "replace", policy}, target...)...); code != 0 {
		t.Errorf("replacing the policy with the same file: exit %d\n%s%s", code, out, errOut)
	}
	before, _, _ := runCLI(t, append([]string{"policy", "show", "--json"}, target...)...)
	out, errOut, code = runCLI(t, append([]string{"policy", "replace", filepath.Join(dir, "new-policy.yaml")}, target...)...)
	if code == 0 || !strings.Contains(errOut, `"scripts/new.yaml" was not read when this gateway started`) || !strings.Contains(errOut, "sbx kube run --policy FILE") {
		t.Errorf("a policy with a new script: exit %d, want the refusal naming the script and when scripts are read\n%s%s", code, out, errOut)
	}
	if after, _, _ := runCLI(t, append([]string{"policy", "show", "--json"}, target...)...); after != before {
		t.Errorf("the refused policy changed the running one:\n%s\nwant\n%s", after, before)
	}
}

// TestKubeRunListsNoRefusedFlag: every flag sbx kube run lists is one it
// takes: --pids-limit, of which only 0 is taken (Kubernetes has no
// process limit for a pod), is not listed, and a value other than 0 is
// still refused with the reason.
func TestKubeRunListsNoRefusedFlag(t *testing.T) {
	out, _, code := runCLI(t, "kube", "run", "--help")
	if code != 0 || !strings.Contains(out, "--memory") {
		t.Fatalf("sbx kube run --help: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "--pids-limit") {
		t.Errorf("sbx kube run --help lists --pids-limit, which takes only 0:\n%s", out)
	}
	_, errOut, code := runCLI(t, "kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--pids-limit", "100", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "podPidsLimit") {
		t.Errorf("--pids-limit 100: exit %d, %q; want a usage error naming podPidsLimit", code, errOut)
	}
}

// startGatewayWithAPI runs sbx gateway with args until the test ends, its
// proxy and management API on free loopback addresses, and returns those
// and the API's token file.
func startGatewayWithAPI(t *testing.T, args ...string) (proxy, apiAddr, tokenFile string) {
	t.Helper()
	proxy, apiAddr, tokenFile = freeAddr(t), freeAddr(t), filepath.Join(t.TempDir(), "token")
	g := startGatewayCmd(t, "management API on", append(args, "--listen", proxy, "--api", apiAddr, "--token-file", tokenFile)...)
	t.Cleanup(func() { g.stop(t) })
	return proxy, apiAddr, tokenFile
}

// gatewayAPIClient is a client of the management API at apiAddr of a
// gateway that wrote its token to tokenFile, closed when the test ends.
func gatewayAPIClient(t *testing.T, apiAddr, tokenFile string) *api.Client {
	t.Helper()
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(apiAddr, strings.TrimSpace(string(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
