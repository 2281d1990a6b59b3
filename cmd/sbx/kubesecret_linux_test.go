package main

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbx-dev/sbx/sandbox/kube"
)

// kubeNodeIP is the test node's address in the cluster's network, where
// the cluster tests run (scripts/kube/kube.sh's kube_node_ip): a pod
// reaches a server of the test's there.
const kubeNodeIP = "10.250.0.1"

// TestKubeClusterSecret: sbx kube run --secret on a cluster, from the
// agent's side. Two HTTPS servers of the test's own on the node's
// address stand in for the network: the secret's host, which echoes the
// key it got in its answer (as real services quote headers back), and
// another host the policy allows and inspects. The agent's variable holds
// the placeholder only (its environment, /proc, the files it can read);
// the placeholder sent to the bound host arrives there as the value, and
// the echo comes back to the agent as the placeholder; sent to the other
// host it is blocked and logged with the secret's name, and that host
// gets nothing. A second secret, the policy's, is bound to the same host
// for POST alone: a POST gets its value, a GET is blocked. The agent then
// tries the placeholder where docs/secrets.md says it goes nowhere: in
// the query, as the method, in a header the secret is not bound to, with
// a method outside the binding (to the bound host and to the other):
// each is the gateway's 403 and reaches no host; in a body, which is
// never rewritten, it reaches either host as the placeholder. No host
// sees a value but in the requests made to be given one.
// The value is in the sandbox's Secret and in no other
// object as the API server keeps them: not the agent pod's spec, not the
// gateway pod's, not the ConfigMap.
func TestKubeClusterSecret(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	var rnd [12]byte
	rand.Read(rnd[:])
	value := "sk-kube-" + hex.EncodeToString(rnd[:])
	t.Setenv("SBX_KUBE_API_KEY", value)
	// A second secret, of the policy's, bound to the same host for POST
	// alone.
	var rnd2 [12]byte
	rand.Read(rnd2[:])
	scopedValue := "sk-scoped-" + hex.EncodeToString(rnd2[:])
	t.Setenv("SBX_KUBE_SCOPED_KEY", scopedValue)

	caPEM, cert := testCertificate(t, kubeNodeIP)
	var mu sync.Mutex
	seen := map[string][]string{} // server -> "path x-api-key", one a request
	var reqs []standInRequest     // every request, whole
	serve := func(name string) string {
		ln, err := net.Listen("tcp", kubeNodeIP+":0")
		if err != nil {
			t.Fatalf("listening on the node's address %s (the test runs in the cluster's network): %v", kubeNodeIP, err)
		}
		hs := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("X-Api-Key")
			body, _ := io.ReadAll(r.Body)
			var whole strings.Builder
			fmt.Fprintf(&whole, "%s %s %s\n", r.Method, r.RequestURI, r.Proto)
			r.Header.Write(&whole)
			fmt.Fprintf(&whole, "\n%s", body)
			mu.Lock()
			seen[name] = append(seen[name], r.URL.Path+" "+key)
			reqs = append(reqs, standInRequest{server: name, method: r.Method, path: r.URL.Path, key: key, body: string(body), whole: whole.String()})
			mu.Unlock()
			io.WriteString(rw, "hello-from-"+name+" key="+key+"\n")
		})}
		go hs.ServeTLS(ln, "", "")
		t.Cleanup(func() { hs.Close() })
		return ln.Addr().String()
	}
	bound, other := serve("bound"), serve("other")
	upCA := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(upCA, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	policy := writeFile(t, "policy.yaml", "secrets:\n  - name: SBX_KUBE_SCOPED_KEY\n    from_env: SBX_KUBE_SCOPED_KEY\n    hosts: ['"+bound+"']\n    header: x-api-key\n    methods: [POST]\n")
	id := w.runSandbox("--secret", "SBX_KUBE_API_KEY@"+bound, "--policy", policy, "--upstream-ca", upCA,
		"--allow", bound, "--allow", other, "--inspect", other, "--allow-private", kubeNodeIP+"/32")
	agent := kube.ObjectName(id)

	// What the agent holds: the placeholder, in its environment and in
	// its first process's; no file it can read has the value.
	out, errOut, err := w.exec(agent, "agent", "", "sh", "-c", `echo "env=$SBX_KUBE_API_KEY"; echo "proc1=$(tr '\0' '\n' </proc/1/environ | sed -n 's/^SBX_KUBE_API_KEY=//p')"; echo "files=$(grep -rsl -- "$1" /etc /var /run /tmp /home 2>/dev/null | head -3 | tr '\n' ' ')"`, "sh", hex.EncodeToString(rnd[:]))
	if err != nil {
		t.Fatalf("reading the agent's environment: %v\n%s%s", err, out, errOut)
	}
	placeholder := regexp.MustCompile(`(?m)^env=(sbx-secret-SBX_KUBE_API_KEY-[0-9a-f]{32})$`).FindStringSubmatch(out)
	if placeholder == nil {
		t.Fatalf("the agent's SBX_KUBE_API_KEY: %q, want sbx-secret-SBX_KUBE_API_KEY- and 32 hex digits", out)
	}
	ph := placeholder[1]
	if !strings.Contains(out, "proc1="+ph+"\n") || !strings.Contains(out, "files= \n") && !strings.Contains(out, "files=\n") {
		t.Errorf("the agent's process environment or files: %q, want the placeholder %s and no file with the value", out, ph)
	}
	if strings.Contains(out, value) {
		t.Errorf("the agent sees the value: %q", out)
	}
	out, errOut, err = w.exec(agent, "agent", "", "sh", "-c", `echo "env=$SBX_KUBE_SCOPED_KEY"; echo "files=$(grep -rsl -- "$1" /etc /var /run /tmp /home 2>/dev/null | head -3 | tr '\n' ' ')"`, "sh", hex.EncodeToString(rnd2[:]))
	if err != nil {
		t.Fatalf("reading the agent's environment: %v\n%s%s", err, out, errOut)
	}
	scoped := regexp.MustCompile(`(?m)^env=(sbx-secret-SBX_KUBE_SCOPED_KEY-[0-9a-f]{32})$`).FindStringSubmatch(out)
	if scoped == nil || strings.Contains(out, scopedValue) || !strings.Contains(out, "files= \n") && !strings.Contains(out, "files=\n") {
		t.Fatalf("the agent's SBX_KUBE_SCOPED_KEY (the policy's secret): %q, want its placeholder and no file with the value", out)
	}
	scopedPH := scoped[1]

	// The agent uses its key as an agent would, with a client whose TLS is
	// an agent's: Go's (testdata/httpsget, copied in), which trusts the
	// sandbox's CA through SSL_CERT_FILE. Busybox's wget cannot be it: its
	// TLS 1.2 ClientHello has no signature_algorithms, which leaves only
	// SHA-1 signatures, and Go refuses those (RFC 9155) with a handshake
	// failure, as current servers do. With no proxy the request goes
	// straight to the host, which the pod's rules capture.
	w.copyHTTPSGet(agent)
	wget := func(addr, path string) (string, string, error) {
		return w.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget "$1" "x-api-key: $SBX_KUBE_API_KEY"`, "sh", "https://"+addr+path)
	}
	out, errOut, err = wget(bound, "/v1/messages")
	if err != nil || !strings.Contains(out, "hello-from-bound") {
		t.Fatalf("the agent's request to the secret's host: %v\n%s%s", err, out, errOut)
	}
	// The bound host quotes the key back: the agent gets the placeholder.
	if strings.Contains(out, value) || !strings.Contains(out, "key="+ph) {
		t.Errorf("the bound host's echo reached the agent as %q, want the placeholder %s in place of the value", out, ph)
	}
	out, errOut, err = wget(other, "/steal")
	if refused := err != nil || regexp.MustCompile(`^[45][0-9][0-9] `).MatchString(out); !refused || strings.Contains(out, "hello-from-other") {
		t.Errorf("the placeholder sent to another host: %v, want the gateway's refusal\n%s%s", err, out, errOut)
	}
	mu.Lock()
	got := strings.Join(seen["bound"], "\n")
	if len(seen["bound"]) != 1 || got != "/v1/messages "+value {
		t.Errorf("the secret's host got %q, want one request with the value", seen["bound"])
	}
	if len(seen["other"]) > 0 {
		t.Errorf("the other host got %q", seen["other"])
	}
	mu.Unlock()
	otherAP := netip.MustParseAddrPort(other)
	r := w.waitDecision(id, map[string]any{"event": "decision", "host": kubeNodeIP, "port": otherAP.Port(), "secret": "SBX_KUBE_API_KEY"})
	if r["action"] != "block" || r["rule"] != "secret" || !strings.HasPrefix(r["reason"].(string), "secret SBX_KUBE_API_KEY's placeholder sent to ") {
		t.Errorf("the placeholder sent elsewhere is logged as %v, want a block by rule secret naming SBX_KUBE_API_KEY", r)
	}

	// The policy's secret, bound for POST alone, goes with a POST.
	out, errOut, err = w.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget -X POST -d '{}' "$1" "x-api-key: $SBX_KUBE_SCOPED_KEY"`, "sh", "https://"+bound+"/v1/scoped")
	if err != nil || !strings.Contains(out, "hello-from-bound") || !strings.Contains(out, "key="+scopedPH) || strings.Contains(out, scopedValue) {
		t.Errorf("the agent's POST with the policy's secret to its host: %v, want the host's answer with the placeholder\n%s%s", err, out, errOut)
	}

	// What an agent would try to get a value out some other way: the
	// placeholder in the query, the body, as the method, in a header the
	// secret is not bound to, with a method the binding does not allow;
	// to the bound host and to another the policy allows and inspects.
	// Each is refused by the gateway (403, logged as a block by rule
	// secret with why) and reaches no host, but the body: bodies are not
	// rewritten (docs/secrets.md), so the host gets the placeholder. No
	// host ever sees a value but in the two requests above.
	hosts := map[string]string{"bound": bound, "other": other}
	attempts := []struct {
		name, host, method, query, body, header string
		refused                                 bool
		reason                                  string // in the block's reason, for the bound host (the other's say "sent to")
	}{
		{name: "query", host: "bound", query: "?key=" + ph, refused: true, reason: "placeholder in the path or query"},
		{name: "query", host: "other", query: "?key=" + ph, refused: true},
		{name: "body", host: "bound", method: "POST", body: `{"api_key":"` + ph + `"}`},
		{name: "body", host: "other", method: "POST", body: `{"api_key":"` + ph + `"}`},
		{name: "method", host: "bound", method: ph, refused: true, reason: "placeholder in the method"},
		{name: "method", host: "other", method: ph, refused: true},
		{name: "header", host: "bound", header: "X-Request-Id: " + ph, refused: true, reason: "placeholder in the header X-Request-Id"},
		{name: "header", host: "other", header: "X-Request-Id: " + ph, refused: true},
		{name: "scoped-get", host: "bound", method: "GET", header: "x-api-key: " + scopedPH, refused: true, reason: "SBX_KUBE_SCOPED_KEY is sent to "},
		{name: "scoped-key", host: "other", method: "POST", header: "x-api-key: " + scopedPH, refused: true},
	}
	for _, a := range attempts {
		path := "/try/" + a.name + "-" + a.host
		args := []string{"-X", cmp.Or(a.method, "GET")}
		if a.body != "" {
			args = append(args, "-d", a.body)
		}
		args = append(args, "https://"+hosts[a.host]+path+a.query)
		if a.header != "" {
			args = append(args, a.header)
		}
		out, errOut, err := w.exec(agent, "agent", "", append([]string{"sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget "$@"`, "sh"}, args...)...)
		mu.Lock()
		var arrived []standInRequest
		for _, q := range reqs {
			if q.path == path {
				arrived = append(arrived, q)
			}
		}
		mu.Unlock()
		what := fmt.Sprintf("the placeholder in the %s of a request to the %s host", a.name, a.host)
		if a.refused {
			if err != nil || !strings.HasPrefix(out, "403 ") || strings.Contains(out, "hello-from-") || len(arrived) > 0 {
				t.Errorf("%s: %v, %d requests arrived; want the gateway's 403 and nothing sent\n%s%s", what, err, len(arrived), out, errOut)
			}
			continue
		}
		if err != nil || !strings.Contains(out, "hello-from-"+a.host) || len(arrived) != 1 || !strings.Contains(arrived[0].body, ph) {
			t.Errorf("%s: %v, %d requests arrived; want it through with the placeholder in the body as the agent sent it\n%s%s", what, err, len(arrived), out, errOut)
		}
	}
	// The refusals' records, for the bound host: why each was blocked.
	boundAP := netip.MustParseAddrPort(bound)
	var reasons []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		reasons = reasons[:0]
		for _, r := range w.decisions(id) {
			if r["event"] == "decision" && r["action"] == "block" && r["rule"] == "secret" && fmt.Sprint(r["port"]) == fmt.Sprint(boundAP.Port()) {
				reasons = append(reasons, fmt.Sprint(r["reason"]))
			}
		}
		var missing []string
		for _, a := range attempts {
			if a.reason != "" && !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(strings.ToLower(r), strings.ToLower(a.reason)) }) {
				missing = append(missing, a.reason)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the blocks of the bound host's misuses are logged as %q, want one saying %q each", reasons, missing)
			break
		}
	}
	// No host saw a value but in the two requests made to be given one.
	mu.Lock()
	for _, q := range reqs {
		if q.path == "/v1/messages" || q.path == "/v1/scoped" {
			continue
		}
		if strings.Contains(q.whole, value) || strings.Contains(q.whole, scopedValue) {
			t.Errorf("the %s host got a value in:\n%s", q.server, q.whole)
		}
	}
	for _, q := range reqs {
		switch {
		case q.path == "/v1/scoped" && (q.method != "POST" || q.key != scopedValue || strings.Contains(q.whole, value)):
			t.Errorf("the policy's secret's POST arrived as:\n%s", q.whole)
		case q.path == "/v1/messages" && strings.Contains(q.whole, scopedValue):
			t.Errorf("the --secret request carried the policy's secret:\n%s", q.whole)
		}
	}
	mu.Unlock()

	// The objects as the API server keeps them: the value in the Secret
	// alone, which only the gateway pod mounts.
	ctx := t.Context()
	sec, err := w.cs.CoreV1().Secrets(w.ns).Get(ctx, kube.ObjectName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[kube.KeySecretPrefix+"SBX_KUBE_API_KEY"]) != value {
		t.Errorf("the sandbox's Secret lacks the value: keys %v", keysOf(sec.Data))
	}
	agentPod, err := w.cs.CoreV1().Pods(w.ns).Get(ctx, agent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gwPod, err := w.cs.CoreV1().Pods(w.ns).Get(ctx, kube.GatewayPodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := w.cs.CoreV1().ConfigMaps(w.ns).Get(ctx, kube.ObjectName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, obj := range map[string]any{"the agent pod": agentPod, "the gateway pod": gwPod, "the ConfigMap": cm} {
		b, _ := json.Marshal(obj)
		if strings.Contains(string(b), value) {
			t.Errorf("%s holds the value", what)
		}
	}
	for _, v := range agentPod.Spec.Volumes {
		if v.Secret != nil || v.Projected != nil {
			t.Errorf("the agent pod mounts %s: %+v", v.Name, v.VolumeSource)
		}
	}
	var agentEnv string
	for _, e := range agentPod.Spec.Containers[0].Env {
		if e.Name == "SBX_KUBE_API_KEY" {
			agentEnv = e.Value
		}
	}
	if agentEnv != ph {
		t.Errorf("the agent pod's spec sets SBX_KUBE_API_KEY to %q, want the placeholder %s", agentEnv, ph)
	}
	// Nothing the gateway logged holds the value.
	logs, errOut, code := w.sbx("decisions", "--sandbox", id, "--json")
	if code != 0 || strings.Contains(logs, value) {
		t.Errorf("sbx kube decisions: exit %d, holds the value: %v\n%s", code, strings.Contains(logs, value), errOut)
	}
}

// copyHTTPSGet builds testdata/httpsget (static) and copies it into the
// agent pod's agent container as /tmp/httpsget.
func (k *kubeTest) copyHTTPSGet(agent string) {
	k.t.Helper()
	getter := filepath.Join(k.t.TempDir(), "httpsget")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", getter, "./testdata/httpsget")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		k.t.Fatalf("building httpsget: %v\n%s", err, b)
	}
	bin, err := os.ReadFile(getter)
	if err != nil {
		k.t.Fatal(err)
	}
	if out, errOut, err := k.exec(agent, "agent", string(bin), "sh", "-c", "cat >/tmp/httpsget && chmod 755 /tmp/httpsget"); err != nil {
		k.t.Fatalf("copying httpsget into the agent: %v\n%s%s", err, out, errOut)
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// standInRequest is one request a stand-in host got, as it got it.
type standInRequest struct {
	server, method, path, key, body string
	// whole is the request line, the header fields and the body.
	whole string
}
