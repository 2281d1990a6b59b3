package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/selftest"
)

// The sbx kube tests (TestKubeCluster*) run on the test cluster that scripts/kube-test.sh
// brings up (a real node: kubelet, containerd, kube-router enforcing
// NetworkPolicy), from inside the cluster's network namespace, where its
// API server answers. It passes the cluster and the images it loaded in
// these variables.
const (
	envKubeconfig   = "SBX_KUBE_TEST_KUBECONFIG"
	envKubectl      = "SBX_KUBE_TEST_KUBECTL"
	envGatewayImage = "SBX_KUBE_TEST_GATEWAY_IMAGE"
	envAgentImage   = "SBX_KUBE_TEST_AGENT_IMAGE"
	envRequireKube  = "SBX_REQUIRE_KUBE"
)

// kubeTest is one test's namespace on the test cluster.
type kubeTest struct {
	t       testing.TB
	c       *kube.Cluster
	cs      *testAPI // the whole API, for what sbx kube does not do
	ns      string
	kubectl string
	// kubeconfig is what k.sbx runs sbx kube with: a ServiceAccount with
	// only the documented rights (asDocumentedUser). adminKubeconfig is
	// the cluster administrator's, for the test's own set-up.
	kubeconfig, adminKubeconfig string
	gwImage, agentImage         string
}

// newKubeTest makes a namespace of the test's own, removed after it with
// everything in it.
func newKubeTest(t testing.TB) *kubeTest {
	t.Helper()
	if os.Getuid() != 0 && os.Getenv(envRequireKube) == "" {
		t.Skip("needs root, as the test cluster does: scripts/kube-test.sh runs it")
	}
	k := &kubeTest{t: t, adminKubeconfig: os.Getenv(envKubeconfig), kubectl: os.Getenv(envKubectl),
		gwImage: os.Getenv(envGatewayImage), agentImage: os.Getenv(envAgentImage)}
	if k.adminKubeconfig == "" || k.kubectl == "" || k.gwImage == "" || k.agentImage == "" {
		msg := "needs the test cluster and its images: scripts/kube-test.sh runs these tests on one"
		if os.Getenv(envRequireKube) != "" {
			t.Fatalf("%s is set, and %s", envRequireKube, msg)
		}
		t.Skip(msg)
	}
	b := make([]byte, 3)
	rand.Read(b)
	k.ns = "sbx-test-" + hex.EncodeToString(b)
	c, err := kube.Connect(k.adminKubeconfig, k.ns)
	if err != nil {
		t.Fatal(err)
	}
	k.c = c
	if k.cs, err = newTestAPI(c.Config); err != nil {
		t.Fatal(err)
	}
	cs := k.cs
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		zero := int64(0)
		cs.CoreV1().Pods(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := cs.CoreV1().Namespaces().Delete(ctx, k.ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing namespace %s: %v", k.ns, err)
			return
		}
		for ctx.Err() == nil {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, k.ns, metav1.GetOptions{}); err != nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Errorf("namespace %s still there after 90 s", k.ns)
	})
	// Pods are refused until the namespace has its default ServiceAccount.
	for i := 0; ; i++ {
		if _, err := cs.CoreV1().ServiceAccounts(k.ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if i > 100 {
			t.Fatalf("namespace %s has no default ServiceAccount after 20 s: %v", k.ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	k.asDocumentedUser()
	return k
}

// sbx runs sbx kube with the test's kubeconfig and namespace.
func (k *kubeTest) sbx(args ...string) (stdout, stderr string, code int) {
	k.t.Helper()
	return runCLI(k.t, append([]string{"kube", "--kubeconfig", k.kubeconfig, "-n", k.ns}, args...)...)
}

// exec runs a command in a pod's container, stdin given.
func (k *kubeTest) exec(pod, container, stdin string, args ...string) (string, string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", k.adminKubeconfig, "-n", k.ns, "exec", "-i", pod, "-c", container, "--"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// pod makes a plain pod of the agent image (no sbx) running script, and
// returns its address once it runs.
func (k *kubeTest) pod(name string, labels map[string]string, script string) string {
	k.t.Helper()
	never := corev1.PullNever
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: k.agentImage, ImagePullPolicy: never, Command: []string{"sh", "-c", script}}},
		},
	}
	if _, err := k.cs.CoreV1().Pods(k.ns).Create(k.t.Context(), p, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	return k.waitRunning(name)
}

func (k *kubeTest) waitRunning(name string) string {
	k.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(k.t.Context(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("pod %s not running after 2 minutes: %v %+v", name, err, p.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// probeResult is what the probe saw of one attempt (sbx selftest's probe).
type probeResult struct {
	Err      string   `json:"err"`
	Data     string   `json:"data"`
	Answered bool     `json:"answered"`
	Addrs    []string `json:"addrs"`
	TimedOut bool     `json:"timed_out"`
}

// probe runs sbx selftest's probe in a pod's container with attempts
// (its plan's JSON objects) and returns what each saw, by id, and how
// long all took.
func (k *kubeTest) probe(pod, container string, attempts []map[string]any) (map[string]probeResult, time.Duration) {
	k.t.Helper()
	plan, _ := json.Marshal(map[string]any{"attempts": attempts})
	start := time.Now()
	out, errOut, err := k.exec(pod, container, string(plan), "/bin/sbx", selftest.ProbeCommand)
	took := time.Since(start)
	if err != nil {
		k.t.Fatalf("probe in %s/%s: %v\n%s%s", pod, container, err, out, errOut)
	}
	var rep struct {
		Results map[string]probeResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		k.t.Fatalf("probe report %q: %v", out, err)
	}
	return rep.Results, took
}

// decisions returns the sandbox's decision records so far, from its
// gateway pod's log.
func (k *kubeTest) decisions(id string) []map[string]any {
	k.t.Helper()
	out, errOut, code := k.sbx("decisions", "--sandbox", id, "--json")
	if code != 0 {
		k.t.Fatalf("sbx kube decisions: exit %d: %s", code, errOut)
	}
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			k.t.Fatalf("decision record %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// waitDecision waits for a record matching want (every key equal).
func (k *kubeTest) waitDecision(id string, want map[string]any) map[string]any {
	k.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs := k.decisions(id)
	next:
		for _, r := range recs {
			for key, v := range want {
				if fmt.Sprint(r[key]) != fmt.Sprint(v) {
					continue next
				}
			}
			return r
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("no decision record with %v in:\n%v", want, recs)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// podSecurity sets the Pod Security level the test's namespace enforces.
func (k *kubeTest) podSecurity(level string) {
	k.t.Helper()
	ns, err := k.cs.CoreV1().Namespaces().Get(k.t.Context(), k.ns, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = level
	if _, err := k.cs.CoreV1().Namespaces().Update(k.t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// objectsLeft lists every object of the sandbox still there, or of any
// sandbox when id is "".
func (k *kubeTest) objectsLeft(id string) []string {
	k.t.Helper()
	left, err := k.c.Objects(context.Background(), id)
	if err != nil {
		k.t.Fatal(err)
	}
	return left
}

// kubeWorld is a namespace with a web pod (HTTP on 8080 and 8081, DNS
// servers on UDP 53 and 9053, which sbx gateway's stub serves, answering
// probe.test with 192.0.2.7) that stands in for the network and the cluster, and a
// control pod, confined by nothing, whose attempts show that each target
// answers.
type kubeWorld struct {
	*kubeTest
	web string // the web pod's address
}

const webScript = `mkdir -p /tmp/www && echo hello-from-web > /tmp/www/index.html &&
httpd -p 8080 -h /tmp/www && httpd -p 8081 -h /tmp/www &&
(sbx gateway --listen 127.0.0.1:3129 --dns 0.0.0.0:53 --allow probe.test --resolve probe.test=192.0.2.7 >/dev/null 2>&1 &) &&
exec sbx gateway --listen 127.0.0.1:3128 --dns 0.0.0.0:9053 --allow probe.test --resolve probe.test=192.0.2.7`

func newKubeWorld(t *testing.T) *kubeWorld {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	w.web = k.pod("web", map[string]string{"app": "web"}, webScript)
	k.pod("control", map[string]string{"app": "control"}, "sleep 3600")
	return w
}

// runSandbox starts a detached sandbox with args (policy flags) and
// returns its id.
func (w *kubeWorld) runSandbox(args ...string) string {
	w.t.Helper()
	id, _ := w.runSandboxStderr(args...)
	return id
}

// runSandboxStderr is runSandbox, which also returns what sbx kube run
// said on stderr.
func (w *kubeWorld) runSandboxStderr(args ...string) (id, stderr string) {
	w.t.Helper()
	full := append([]string{"run", "-d", "--image", w.agentImage, "--gateway-image", w.gwImage, "--pull", "Never"}, args...)
	full = append(full, "--", "sleep", "3600")
	out, errOut, code := w.sbx(full...)
	if code != 0 {
		w.t.Fatalf("sbx kube run: exit %d\n%s%s", code, out, errOut)
	}
	id = strings.TrimSpace(out)
	w.t.Cleanup(func() {
		// t.Context() is done by now: a context of its own.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.c.Delete(ctx, id); err != nil {
			w.t.Errorf("removing sandbox %s: %v", id, err)
		}
	})
	return id, errOut
}

// escapes are the attempts a confined agent must not make: each one
// answers from the control pod. A TCP attempt's "marker" is what only the
// target itself answers (the probe ignores the key).
func (w *kubeWorld) escapes() []map[string]any {
	return []map[string]any{
		{"id": "other-pod-tcp", "kind": "tcp", "addr": w.web + ":8081", "send": "GET / HTTP/1.0\r\nHost: " + w.web + ":8081\r\n\r\n", "marker": "hello-from-web"},
		{"id": "other-pod-udp", "kind": "dns-udp", "addr": w.web + ":9053", "name": "probe.test"},
		{"id": "api-server", "kind": "tcp", "addr": "10.250.0.1:16443", "send": "GET /version HTTP/1.0\r\nHost: 10.250.0.1:16443\r\n\r\n", "marker": "HTTPS server"},
		{"id": "node-kubelet", "kind": "tcp", "addr": "10.250.0.1:10250", "send": "GET /healthz HTTP/1.0\r\nHost: 10.250.0.1:10250\r\n\r\n", "marker": "HTTPS server"},
		{"id": "ping-other-pod", "kind": "ping-raw", "addr": w.web, "token": "sbx"},
		{"id": "dns-other-pod", "kind": "dns-udp", "addr": w.web + ":53", "name": "probe.test"},
	}
}

func TestKubeClusterSandbox(t *testing.T) {
	w := newKubeWorld(t)
	// The control pod reaches every target: a failure below is the
	// sandbox's doing.
	ctl, _ := w.probe("control", "main", w.escapes())
	for _, a := range w.escapes() {
		if m, ok := a["marker"].(string); ok && !strings.Contains(ctl[a["id"].(string)].Data, m) {
			t.Fatalf("control pod: %s: %+v, want %q from the target for the test to mean anything", a["id"], ctl[a["id"].(string)], m)
		}
	}
	for id, r := range ctl {
		if strings.HasPrefix(id, "dns") && len(r.Addrs) == 0 {
			t.Fatalf("control pod: %s: %+v; the web pod's DNS server must answer probe.test (its policy allows it) for the test to mean anything", id, r)
		}
		if r.Err != "" && !strings.Contains(r.Err, "EOF") && !r.Answered || r.TimedOut {
			t.Fatalf("control pod: %s: %+v; the target must answer for the test to mean anything", id, r)
		}
	}

	// The API server's address is allowed by an IP rule, which the
	// address guard takes as the user's choice: only the gateway pod's
	// NetworkPolicy stands in its way (below).
	id := w.runSandbox("--allow", w.web+":8080", "--allow-private", w.web+"/32", "--allow", "10.250.0.1:16443")
	agent := kube.ObjectName(id)

	// allowed through the proxy
	{
		out, errOut, err := w.exec(agent, "agent", "", "wget", "-q", "-O-", "http://"+w.web+":8080/")
		if err != nil || !strings.Contains(out, "hello-from-web") {
			t.Fatalf("wget allowed: %v\n%s%s", err, out, errOut)
		}
		w.waitDecision(id, map[string]any{"action": "allow", "host": w.web, "port": 8080})
	}
	// the agent container: no capability, no privilege escalation, the
	// runtime's seccomp profile, as read from inside
	{
		res, _ := w.probe(agent, "agent", []map[string]any{{"id": "caps", "kind": "caps"}})
		if got, want := res["caps"].Data, "CapEff=0000000000000000 NoNewPrivs=1 Seccomp=2"; got != want {
			t.Errorf("the agent's security status: %q, want %q", got, want)
		}
	}
	// decisions --follow streams what comes next
	follow := &syncBuffer{}
	followCtx, stopFollow := context.WithCancel(t.Context())
	followDone := make(chan int, 1)
	go func() {
		root := newRootCmd()
		root.SetArgs([]string{"kube", "--kubeconfig", w.kubeconfig, "-n", w.ns, "decisions", "--sandbox", id, "--follow"})
		root.SetOut(follow)
		root.SetErr(follow)
		followDone <- execute(followCtx, root)
	}()
	defer func() {
		stopFollow()
		<-followDone
	}()
	// blocked with the fix
	{
		out, errOut, err := w.exec(agent, "agent", "", "wget", "-S", "-O-", "http://"+w.web+":8081/")
		if err == nil || !strings.Contains(errOut, "403") {
			t.Fatalf("wget of a blocked target: err %v, want a 403\n%s%s", err, out, errOut)
		}
		w.waitDecision(id, map[string]any{"action": "block", "host": w.web, "port": 8081})
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(follow.String(), w.web+":8081"); {
			if time.Now().After(deadline) {
				t.Fatalf("sbx kube decisions --follow did not show the blocked request within 15 s:\n%s", follow.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// a cloud metadata address, dialled directly: captured, decided
	// and logged (blocked: no rule allows it)
	{
		res, _ := w.probe(agent, "agent", []map[string]any{{"id": "metadata", "kind": "tcp", "addr": "169.254.169.254:80", "send": "GET /latest/meta-data/ HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n"}})
		if r := res["metadata"]; !strings.Contains(r.Data, "X-Sbx-Decision: block") || r.TimedOut {
			t.Errorf("metadata address: %+v, want the gateway's refusal", r)
		}
		w.waitDecision(id, map[string]any{"action": "block", "kind": "transparent", "host": "169.254.169.254", "port": 80})
		// A request that names no host is logged under where its
		// connection went, which the capture shim's PROXY header says.
		res, _ = w.probe(agent, "agent", []map[string]any{{"id": "nohost", "kind": "tcp", "addr": "169.254.169.254:8080", "send": "GET /computeMetadata/v1/ HTTP/1.0\r\n\r\n"}})
		if r := res["nohost"]; !strings.Contains(r.Data, "400 Bad Request") || r.TimedOut {
			t.Errorf("a request without a Host header: %+v, want the gateway's 400", r)
		}
		w.waitDecision(id, map[string]any{"action": "block", "kind": "transparent", "host": "169.254.169.254", "port": 8080, "path": "/computeMetadata/v1/"})
	}
	// direct TCP captured, decided and logged
	{
		// No proxy: the in-pod rules hand the connection to the
		// gateway, which lets the allowed one through...
		out, errOut, err := w.exec(agent, "agent", "", "env", "-u", "http_proxy", "-u", "HTTP_PROXY", "wget", "-q", "-O-", "http://"+w.web+":8080/")
		if err != nil || !strings.Contains(out, "hello-from-web") {
			t.Fatalf("direct wget of an allowed target: %v\n%s%s", err, out, errOut)
		}
		w.waitDecision(id, map[string]any{"action": "allow", "kind": "transparent", "host": w.web, "port": 8080})
		// ...and not the others.
		res, took := w.probe(agent, "agent", w.escapes())
		for _, a := range w.escapes() {
			r := res[a["id"].(string)]
			// What came back is the gateway's refusal or nothing: never
			// the target's own answer, which the control pod got.
			switch {
			case a["id"] == "dns-other-pod":
				// Port 53 of any address is the sandbox gateway's stub,
				// whose policy does not allow probe.test: no address,
				// where the web pod's server gives one.
				if len(r.Addrs) > 0 || r.TimedOut {
					t.Errorf("%s: the web pod's DNS server answered the agent: %+v", a["id"], r)
				}
			case a["marker"] != nil && strings.Contains(r.Data, a["marker"].(string)) || r.Answered:
				t.Errorf("%s: the agent got through: %+v", a["id"], r)
			case a["kind"] == "tcp" && r.Data != "" && !strings.Contains(r.Data, "X-Sbx-Decision: block") && !strings.Contains(r.Data, "502 Bad Gateway"):
				t.Errorf("%s: an answer that is not the gateway's: %+v", a["id"], r)
			case a["kind"] == "ping-raw" && r.Err == "":
				t.Errorf("%s: the agent pinged: %+v", a["id"], r)
			}
			if r.TimedOut {
				t.Errorf("%s: timed out; a confined agent's attempts fail at once: %+v", a["id"], r)
			}
		}
		if took > 10*time.Second {
			t.Errorf("the probe took %v; its attempts should fail at once", took)
		}
		w.waitDecision(id, map[string]any{"action": "block", "kind": "transparent", "host": w.web, "port": 8081})
		w.waitDecision(id, map[string]any{"action": "block", "kind": "dns", "host": "probe.test"})
	}
	// live policy allow
	{
		out, errOut, code := w.sbx("policy", "allow", "--sandbox", id, w.web+":8081")
		if code != 0 {
			t.Fatalf("sbx kube policy allow: exit %d\n%s%s", code, out, errOut)
		}
		out, errOut, err := w.exec(agent, "agent", "", "wget", "-q", "-O-", "http://"+w.web+":8081/")
		if err != nil || !strings.Contains(out, "hello-from-web") {
			t.Fatalf("wget after the rule was added: %v\n%s%s", err, out, errOut)
		}
		out, _, code = w.sbx("policy", "show", "--sandbox", id)
		if code != 0 || !strings.Contains(out, w.web+":8081") && !strings.Contains(out, "8081") {
			t.Errorf("sbx kube policy show: exit %d\n%s", code, out)
		}
	}
	// decisions and audit read the gateway pod's log
	{
		out, errOut, code := w.sbx("decisions", "--sandbox", id)
		if code != 0 || !strings.Contains(out, w.web+":8081") {
			t.Errorf("sbx kube decisions: exit %d, want the blocked target\n%s%s", code, out, errOut)
		}
		out, errOut, code = runCLI(t, "audit", "--kubeconfig", w.kubeconfig, "-n", w.ns, "--kube", id, "--format", "json")
		if code != 0 || !strings.Contains(out, w.web) {
			t.Errorf("sbx audit --kube: exit %d, want the web pod's targets\n%s%s", code, out, errOut)
		}
	}
	// the gateway pod's egress: the API server's address, allowed by a
	// rule and so passed by the guard, is refused by the gateway pod's
	// NetworkPolicy (10.0.0.0/8 is left out of its egress)...
	{
		apiProbe := []map[string]any{w.escapes()[2]}
		res, _ := w.probe(agent, "agent", apiProbe)
		if r := res["api-server"]; !strings.Contains(r.Data, "502 Bad Gateway") || strings.Contains(r.Data, "HTTPS server") {
			t.Errorf("api server through the gateway: %+v, want the gateway's 502 (its egress refused)", r)
		}
		w.waitDecision(id, map[string]any{"action": "allow", "kind": "transparent", "host": "10.250.0.1", "port": 16443})
		// ...and only that policy: without it the same request reaches
		// the API server, so the check above could fail.
		if err := w.cs.NetworkingV1().NetworkPolicies(w.ns).Delete(t.Context(), kube.ObjectName(id)+"-gateway", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			res, _ := w.probe(agent, "agent", apiProbe)
			if strings.Contains(res["api-server"].Data, "HTTPS server") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("without the gateway's NetworkPolicy the API server is still not reached (%+v): the check above cannot tell its work from something else", res["api-server"])
			}
			time.Sleep(time.Second)
		}
	}
	// stop leaves nothing
	{
		if out, errOut, code := w.sbx("stop", id); code != 0 {
			t.Fatalf("sbx kube stop: exit %d\n%s%s", code, out, errOut)
		}
		if left := w.objectsLeft(id); len(left) > 0 {
			t.Errorf("left after stop: %v", left)
		}
	}
}

// TestKubeClusterNetworkPolicyAlone takes the in-pod rules away: the
// NetworkPolicy alone must still keep the agent to its gateway. Removing
// the NetworkPolicy too shows the same attempts get through, so the test
// can fail.
func TestKubeClusterNetworkPolicyAlone(t *testing.T) {
	w := newKubeWorld(t)
	id := w.runSandbox("--test-no-pod-rules", "--allow", w.web+":8080", "--allow-private", w.web+"/32")
	agent := kube.ObjectName(id)
	// Raw ICMP is left out: without NET_RAW it fails whatever the
	// policy, so it would pass for the wrong reason here.
	escapes := slices.DeleteFunc(w.escapes(), func(a map[string]any) bool { return a["kind"] == "ping-raw" })
	escapes = append(escapes, map[string]any{"id": "direct-allowed-host", "kind": "tcp", "addr": w.web + ":8080", "send": "GET / HTTP/1.0\r\n\r\n"})
	res, _ := w.probe(agent, "agent", escapes)
	for _, a := range escapes {
		r := res[a["id"].(string)]
		if r.Err == "" || strings.Contains(r.Data, "hello-from-web") || len(r.Addrs) > 0 {
			t.Errorf("%s: with the NetworkPolicy alone the agent got through: %+v", a["id"], r)
		}
	}
	// The gateway is still its way out.
	out, errOut, err := w.exec(agent, "agent", "", "wget", "-q", "-O-", "http://"+w.web+":8080/")
	if err != nil || !strings.Contains(out, "hello-from-web") {
		t.Fatalf("wget through the gateway: %v\n%s%s", err, out, errOut)
	}

	// Red check: without the agent's NetworkPolicy nothing confines it.
	if err := w.cs.NetworkingV1().NetworkPolicies(w.ns).Delete(t.Context(), kube.ObjectName(id)+"-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, _ := w.probe(agent, "agent", escapes[len(escapes)-1:])
		if r := res["direct-allowed-host"]; strings.Contains(r.Data, "hello-from-web") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("with neither layer the agent still cannot reach the web pod (%+v): the test could not tell the NetworkPolicy's work from something else", r)
		}
		time.Sleep(time.Second)
	}
}

// TestKubeClusterManifestServerDryRun has the real API server check
// every object of a sandbox, admission included, without keeping them.
func TestKubeClusterManifestServerDryRun(t *testing.T) {
	k := newKubeTest(t)
	out, errOut, code := k.sbx("manifest", "--server-dry-run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--allow", "example.com", "--", "true")
	if code != 0 || !strings.Contains(out, "accepts") {
		t.Fatalf("server dry run: exit %d\n%s%s", code, out, errOut)
	}
	left, err := k.cs.CoreV1().ConfigMaps(k.ns).List(t.Context(), metav1.ListOptions{LabelSelector: kube.LabelSandbox})
	if err != nil || len(left.Items) > 0 {
		t.Errorf("a dry run kept objects: %v %v", err, left)
	}
	// A namespace whose Pod Security level refuses the rules container's
	// NET_ADMIN: sbx kube run fails before it makes anything, naming the
	// fix.
	k.podSecurity("baseline")
	out, errOut, code = k.sbx("run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never", "--", "true")
	if code == 0 || !strings.Contains(errOut, "pod-security.kubernetes.io/enforce=privileged") {
		t.Errorf("a baseline namespace: exit %d, want the refusal with the Pod Security fix\n%s%s", code, out, errOut)
	}
	if left := k.objectsLeft(""); len(left) > 0 {
		t.Errorf("left after a refused run: %v", left)
	}

	// What the server refuses comes back naming the object and the fix.
	// (A user with the documented rights in k.ns only is refused any
	// other namespace, whether it exists or not: the administrator sees
	// that it does not.)
	out, errOut, code = runCLI(t, "kube", "--kubeconfig", k.adminKubeconfig, "manifest", "-n", "sbx-no-such-namespace", "--server-dry-run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--", "true")
	if code == 0 || !strings.Contains(errOut, "sbx-no-such-namespace") || !strings.Contains(errOut, "kubectl create namespace") {
		t.Errorf("a namespace that does not exist: exit %d, want the refusal naming the object and the fix\n%s%s", code, out, errOut)
	}
}

// TestKubeClusterRunForeground: sbx kube run shows the agent's output,
// exits with its status and leaves nothing behind; a pod that cannot
// start ends the run with why, and nothing is left either.
func TestKubeClusterRunForeground(t *testing.T) {
	k := newKubeTest(t)
	logFile := filepath.Join(t.TempDir(), "decisions.jsonl")
	out, errOut, code := k.sbx("run", "--name", "fg", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never", "--log", logFile,
		"--", "sh", "-c", "echo hello from the agent; id -u; wget -q -O- http://blocked.test/; exit 3")
	// The agent's standard output and error come together, as the
	// cluster's log of the container keeps them: a line of one may come
	// before a line the other wrote earlier (wget's error here).
	var agentOut []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if !strings.HasPrefix(l, "wget: ") {
			agentOut = append(agentOut, l)
		}
	}
	if code != 3 || strings.Join(agentOut, "") != "hello from the agent\n1000\n" || !strings.Contains(out, "wget: server returned error: HTTP/1.1 403 Forbidden\n") {
		t.Errorf("sbx kube run: exit %d, want 3; output %q, want the agent's output (uid 1000) and wget's refusal\n%s", code, out, errOut)
	}
	// --log kept the decisions after the gateway pod went.
	rep, errOut, code := runCLI(t, "audit", "--format", "json", logFile)
	if code != 0 || !strings.Contains(rep, "blocked.test") {
		t.Errorf("sbx audit of --log's file: exit %d, want blocked.test in the report\n%s%s", code, rep, errOut)
	}
	if left := k.objectsLeft(""); len(left) > 0 {
		t.Errorf("left after the run: %v", left)
	}

	// An agent image the node does not have: the run fails closed,
	// naming the image, and removes the sandbox.
	out, errOut, code = k.sbx("run", "--image", "localhost/no-such-image:1", "--gateway-image", k.gwImage, "--pull", "Never", "--", "true")
	if code == 0 || !strings.Contains(errOut, "localhost/no-such-image:1") {
		t.Errorf("a missing image: exit %d, want a failure naming it\n%s%s", code, out, errOut)
	}
	if left := k.objectsLeft(""); len(left) > 0 {
		t.Errorf("left after a failed run: %v", left)
	}
}

// TestKubeClusterOwnerDeletes: the sandbox's ConfigMap owns its other
// objects, so deleting it alone has the cluster delete them all.
func TestKubeClusterOwnerDeletes(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	id := w.runSandbox("--allow", "example.com")
	if left := k.objectsLeft(id); len(left) != 6 {
		t.Fatalf("objects of the sandbox: %v, want 6 (configmap, secret, 2 networkpolicies, 2 pods)", left)
	}
	bg := metav1.DeletePropagationBackground
	if err := k.cs.CoreV1().ConfigMaps(k.ns).Delete(t.Context(), kube.ObjectName(id), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		left := k.objectsLeft(id)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after its ConfigMap was deleted, the sandbox still has %v", left)
		}
		time.Sleep(time.Second)
	}
}

// TestKubeClusterPSFlagsGoneGateway: a detached sandbox has no sbx
// process watching it; sbx kube ps shows when its gateway is gone, with
// the command that removes it.
func TestKubeClusterPSFlagsGoneGateway(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	id := w.runSandbox("--allow", "example.com")
	health := func() string {
		t.Helper()
		out, errOut, code := k.sbx("ps")
		if code != 0 {
			t.Fatalf("sbx kube ps: exit %d\n%s%s", code, out, errOut)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, id+" ") {
				return l
			}
		}
		t.Fatalf("sbx kube ps does not list %s:\n%s", id, out)
		return ""
	}
	if l := health(); !strings.Contains(l, " ok ") {
		t.Errorf("a running sandbox: %q, want HEALTH ok", l)
	}
	zero := int64(0)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(t.Context(), kube.GatewayPodName(id), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	want := "gateway gone: sbx kube stop " + id
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		l := health()
		if strings.Contains(l, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after its gateway pod was deleted: %q, want %q", l, want)
		}
	}
}

// TestKubeClusterAsk: --default ask on a cluster holds the agent's
// request until sbx kube approve or deny answers it.
func TestKubeClusterAsk(t *testing.T) {
	w := newKubeWorld(t)
	id := w.runSandbox("--default", "ask", "--ask-timeout", "2m", "--allow-private", w.web+"/32")
	agent := kube.ObjectName(id)
	type result struct {
		out, errOut string
		err         error
	}
	fetch := func(port string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			out, errOut, err := w.exec(agent, "agent", "", "wget", "-S", "-O-", "http://"+w.web+":"+port+"/")
			ch <- result{out, errOut, err}
		}()
		return ch
	}
	// waitQuestion waits until sbx kube approve lists a question for
	// target and returns its id.
	waitQuestion := func(target string) string {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, errOut, code := w.sbx("approve", "--sandbox", id)
			if code != 0 {
				t.Fatalf("sbx kube approve (list): exit %d\n%s%s", code, out, errOut)
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, target) {
					return strings.Fields(l)[0]
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no question for %s within 60 s:\n%s", target, out)
			}
		}
	}

	held := fetch("8080")
	q := waitQuestion(w.web + ":8080")
	select {
	case r := <-held:
		t.Fatalf("the request came back before it was answered: %+v", r)
	default:
	}
	if out, errOut, code := w.sbx("approve", "--sandbox", id, q); code != 0 {
		t.Fatalf("sbx kube approve %s: exit %d\n%s%s", q, code, out, errOut)
	}
	if r := <-held; r.err != nil || !strings.Contains(r.out, "hello-from-web") {
		t.Errorf("the approved request: %+v, want the web pod's page", r)
	}
	w.waitDecision(id, map[string]any{"event": "approval", "host": w.web, "port": 8080, "answer": "allow"})

	held = fetch("8081")
	waitQuestion(w.web + ":8081")
	if out, errOut, code := w.sbx("deny", "--sandbox", id, w.web+":8081"); code != 0 {
		t.Fatalf("sbx kube deny: exit %d\n%s%s", code, out, errOut)
	}
	if r := <-held; r.err == nil || !strings.Contains(r.errOut, "403") {
		t.Errorf("the denied request: %+v, want the gateway's 403", r)
	}
	w.waitDecision(id, map[string]any{"event": "approval", "host": w.web, "port": 8081, "answer": "deny"})

	// No --always on a cluster: nothing could keep its rule.
	if _, errOut, code := w.sbx("approve", "--sandbox", id, "--always", w.web+":8081"); code != exitUsage || !strings.Contains(errOut, "unknown flag: --always") {
		t.Errorf("sbx kube approve --always: exit %d, want %d and unknown flag\n%s", code, exitUsage, errOut)
	}
}

// TestKubeClusterMockLLM: --mock-llm on a cluster answers the agent from
// the script in the gateway pod, and sbx kube mock drives the mock and
// reads its journal; a request no turn fits is told to queue one with sbx
// kube mock expect (not sbx mock expect, which cannot reach the pod).
func TestKubeClusterMockLLM(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	script := writeFile(t, "script.yaml", "turns:\n  - reply: {text: scripted answer}\n")
	id := w.runSandbox("--mock-llm", "api.anthropic.com="+script)
	agent := kube.ObjectName(id)
	ask := func(word string) string {
		t.Helper()
		body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"the word is ` + word + `"}]}`
		// Busybox's wget sends --post-data as a GET through a proxy:
		// it goes straight to the host, which the pod's rules capture.
		out, errOut, err := w.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY; exec wget -q -O- --header "Content-Type: application/json" --post-data "$1" http://api.anthropic.com/v1/messages`, "sh", body)
		if err != nil {
			t.Fatalf("the agent's request: %v\n%s%s", err, out, errOut)
		}
		return out
	}
	if out := ask("marmalade"); !strings.Contains(out, "scripted answer") {
		t.Errorf("the agent got %q, want the script's answer", out)
	}
	out, errOut, code := w.sbx("mock", "requests", "--sandbox", id, "--json")
	if code != 0 || !strings.Contains(out, `"content":"the word is marmalade"`) {
		t.Errorf("sbx kube mock requests: exit %d, want 0 and the request's body\n%s%s", code, out, errOut)
	}
	turns := writeFile(t, "turns.yaml", "reply: {text: queued answer}\n")
	if out, errOut, code := w.sbx("mock", "expect", "--sandbox", id, turns); code != 0 || !strings.Contains(out, "queued 1 turn") {
		t.Fatalf("sbx kube mock expect: exit %d\n%s%s", code, out, errOut)
	}
	if out := ask("jam"); !strings.Contains(out, "queued answer") {
		t.Errorf("after expect the agent got %q, want the queued answer", out)
	}
	// With the turns used up, the answer says how to queue one: with sbx
	// kube's command for this sandbox (httpsget prints an error's body,
	// which busybox's wget does not).
	k.copyHTTPSGet(agent)
	out, errOut, err := w.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY; exec /tmp/httpsget -d "$1" http://api.anthropic.com/v1/messages`, "sh", anthropicRequest("the word is toast"))
	if want := "(sbx kube mock expect -n " + k.ns + " --sandbox " + id + " --host api.anthropic.com)"; err != nil || !strings.Contains(out, want) {
		t.Errorf("a request no turn fits: %v, got\n%s%s\nwant the answer to name %s", err, out, errOut, want)
	}
	// The script is the gateway pod's alone: the agent's view of the
	// sandbox's ConfigMap is the CA and the trust bundle.
	if out, _, err := w.exec(agent, "agent", "", "sh", "-c", "grep -rl 'scripted answer' /etc /var /run /tmp /home 2>/dev/null; true"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("the agent can read the script at %q (%v)", out, err)
	}
}

// kubeUID is the uid of the normal user TestKubeClusterMockJournal runs
// sbx kube as: nobody, whom no file or capability of root's helps.
const kubeUID = 65534

// sbxAsUser runs the sbx binary bin as kubeUID (setpriv: its uid, gid,
// no other groups, no capabilities), with HOME its own directory home and
// kubeconfig, a copy it owns of the test's documented user's.
func (k *kubeTest) sbxAsUser(bin, home string, args ...string) (stdout, stderr string, code int) {
	k.t.Helper()
	// The test cluster's CA certificate is a file of root's: the user's
	// copy holds it.
	cfg, err := clientcmd.LoadFromFile(k.kubeconfig)
	if err == nil {
		err = clientcmdapi.FlattenConfig(cfg)
	}
	if err != nil {
		k.t.Fatal(err)
	}
	kc := filepath.Join(home, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Chown(kc, kubeUID, kubeUID); err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(k.t.Context(), 5*time.Minute)
	defer cancel()
	id := strconv.Itoa(kubeUID)
	cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "--",
		bin, "kube", "--kubeconfig", kc, "-n", k.ns}, args...)...)
	cmd.Dir = home
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "USER=nobody"}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		k.t.Fatalf("running sbx as uid %d: %v", kubeUID, err)
	}
	return out.String(), errOut.String(), code
}

// TestKubeClusterMockJournal: sbx kube run --mock-journal FILE keeps the
// mock's journal, read from the gateway pod when the agent ends, after the
// pods are gone; sbx mock requests --journal reads what the agent sent.
// sbx kube runs as a normal user (uid 65534, no capabilities) with a
// kubeconfig of its own, writing --mock-journal and --log (the decision
// log) in a directory it owns, as a user runs it, not as the test's root.
func TestKubeClusterMockJournal(t *testing.T) {
	k := newKubeTest(t)
	bin := buildSbx(t)
	dir, err := os.MkdirTemp("", "sbx-kube-user-") // t.TempDir's parent is root's, 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, kubeUID, kubeUID); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - reply: {text: scripted answer}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	journal, logFile := filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "decisions.jsonl")
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"the word is quince"}]}`
	out, errOut, code := k.sbxAsUser(bin, dir, "run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never",
		"--mock-llm", "api.anthropic.com="+script, "--mock-journal", journal, "--log", logFile,
		"--", "sh", "-c", `unset http_proxy HTTP_PROXY; wget -q -O- --header "Content-Type: application/json" --post-data "$1" http://api.anthropic.com/v1/messages`, "sh", body)
	if code != 0 || !strings.Contains(out, "scripted answer") {
		t.Fatalf("sbx kube run as uid %d: exit %d, want 0 and the script's answer\n%s%s", kubeUID, code, out, errOut)
	}
	if left := k.objectsLeft(""); len(left) > 0 {
		t.Errorf("left after the run: %v", left)
	}
	for _, f := range []string{journal, logFile} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Errorf("sbx kube run as uid %d: %v", kubeUID, err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != kubeUID || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: owner %d, mode %v; want the user's (%d), readable by it alone", f, st.Uid, fi.Mode(), kubeUID)
		}
	}
	out, errOut, code = runCLI(t, "mock", "requests", "--journal", journal, "--json")
	if code != 0 || !strings.Contains(out, `"content":"the word is quince"`) || !strings.Contains(out, `"host":"api.anthropic.com"`) {
		t.Errorf("sbx mock requests --journal of --mock-journal's file: exit %d, want the agent's request\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "decisions", "--file", logFile, "--json")
	if code != 0 || !strings.Contains(out, `"host":"api.anthropic.com"`) {
		t.Errorf("sbx decisions --file of --log's file: exit %d, want the agent's request to api.anthropic.com\n%s%s", code, out, errOut)
	}
}
