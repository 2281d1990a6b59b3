package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// TestKubeClusterAgentLimits: the agent pod has the limits sbx run
// applies, read from inside it (its cgroup, its /tmp), and a blocked
// request's 403 names sbx kube policy allow for the sandbox. Red on main:
// the flags did not exist, the pod had no limits, /tmp was the node's
// disk, and the 403 named sbx policy allow --api ADDR --token-file FILE.
func TestKubeClusterAgentLimits(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	id := w.runSandbox("--memory", "200m", "--cpus", "0.5", "--tmp-size", "16m")
	agent := kube.ObjectName(id)
	sh := func(script string) string {
		t.Helper()
		out, errOut, err := w.exec(agent, "agent", "", "sh", "-c", script)
		if err != nil {
			t.Fatalf("%s in the agent: %v\n%s%s", script, err, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	// cgroup v2, else v1: what the kernel enforces on the agent.
	if got := sh("cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); got != fmt.Sprint(200<<20) {
		t.Errorf("the agent's memory limit, from inside: %q, want %d", got, 200<<20)
	}
	if got := sh("cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"); got != "50000 100000" {
		t.Errorf("the agent's CPU quota, from inside: %q, want 50000 100000 (half a CPU)", got)
	}
	for _, dir := range []string{"/tmp", "/home/sbx"} {
		// df -k: filesystem, size in KiB, used, free, use%, mount.
		fields := strings.Fields(sh("df -k " + dir + " | tail -1"))
		if len(fields) < 2 || fields[0] != "tmpfs" || fields[1] != fmt.Sprint(16<<10) {
			t.Errorf("%s in the agent: df says %q, want a tmpfs of %d KiB", dir, fields, 16<<10)
		}
	}
	// Filling /tmp stops at its size.
	if out, errOut, err := w.exec(agent, "agent", "", "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=32"); err == nil || !strings.Contains(errOut, "No space left") {
		t.Errorf("writing 32 MiB to a 16 MiB /tmp: %v, want No space left\n%s%s", err, out, errOut)
	}

	// The 403 an agent sees names the command that fixes it on a cluster.
	gw, err := k.cs.CoreV1().Pods(k.ns).Get(t.Context(), kube.GatewayPodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := w.probe(agent, "agent", []map[string]any{{"id": "blocked", "kind": "tcp", "addr": gw.Status.PodIP + ":3128",
		"send": "GET http://blocked.test/ HTTP/1.0\r\nHost: blocked.test\r\n\r\n"}})
	want := "sbx kube policy allow -n " + k.ns + " --sandbox " + id + " blocked.test:80"
	if r := res["blocked"]; !strings.Contains(r.Data, "403 Forbidden") || !strings.Contains(r.Data, "\n  "+want+"\n") {
		t.Errorf("the agent's 403:\n%s\nwant it to name %q", r.Data, want)
	}

	// --pids-limit is refused with why: Kubernetes has no such limit for
	// a pod.
	out, errOut, code := k.sbx("run", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pids-limit", "100", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "podPidsLimit") {
		t.Errorf("--pids-limit 100: exit %d, want %d naming podPidsLimit\n%s%s", code, exitUsage, out, errOut)
	}
}

// TestKubeClusterGatewayServesItsAgentAlone: once the agent pod has its
// address, sbx kube run tells the gateway pod, which from then on refuses
// every other client on its proxy, capture and DNS ports, and logs it.
// The gateway pod's NetworkPolicy is deleted first, to stand for a cluster
// whose network plugin does not enforce NetworkPolicy: the control pod
// then reaches the gateway pod, and the gateway itself refuses it. Red on
// main: the control pod got the gateway's 403 (it was served). Setting
// the clients back to none through the management API shows the same
// attempt served, so the test can tell.
func TestKubeClusterGatewayServesItsAgentAlone(t *testing.T) {
	w := newKubeWorld(t)
	id := w.runSandbox("--allow", w.web+":8080", "--allow-private", w.web+"/32")
	agent := kube.ObjectName(id)
	ctx := t.Context()
	gw, err := w.cs.CoreV1().Pods(w.ns).Get(ctx, kube.GatewayPodName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := w.cs.CoreV1().Pods(w.ns).Get(ctx, "control", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gwIP, ctlIP := gw.Status.PodIP, ctl.Status.PodIP
	agentPod, err := w.cs.CoreV1().Pods(w.ns).Get(ctx, agent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The management API says whom the gateway serves.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := w.c.ForwardAPI(fctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := w.c.Token(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, err := cl.Clients(ctx); err != nil || strings.Join(got.Clients, ",") != agentPod.Status.PodIP+"/32" {
		t.Fatalf("GET /v1/clients: %v %v, want the agent pod's address %s/32 alone", got, err, agentPod.Status.PodIP)
	}

	// As if the network plugin did not enforce NetworkPolicy.
	if err := w.cs.NetworkingV1().NetworkPolicies(w.ns).Delete(ctx, kube.ObjectName(id)+"-gateway", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	attempts := []map[string]any{
		{"id": "proxy", "kind": "tcp", "addr": gwIP + ":3128", "send": "GET http://" + w.web + ":8080/ HTTP/1.0\r\nHost: " + w.web + ":8080\r\n\r\n"},
		{"id": "capture", "kind": "tcp", "addr": gwIP + ":15002", "send": "PROXY TCP4 " + ctlIP + " " + w.web + " 40000 8080\r\nGET / HTTP/1.0\r\nHost: " + w.web + ":8080\r\n\r\n"},
		{"id": "dns", "kind": "dns-udp", "addr": gwIP + ":5353", "name": "probe.test"},
	}
	refusal := "client " + ctlIP + " is not this gateway's sandbox"
	// kube-router takes a moment to lift the policy: until the gateway
	// logs a refusal of the control pod.
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, _ := w.probe("control", "main", attempts[:1])
		if r := res["proxy"]; r.Data != "" {
			t.Fatalf("the control pod was served by the gateway: %+v", r)
		}
		if slicesContainsReason(w.decisions(id), refusal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the gateway's NetworkPolicy went, no refusal of the control pod %s is logged: %v", ctlIP, w.decisions(id))
		}
		time.Sleep(time.Second)
	}
	res, _ := w.probe("control", "main", attempts)
	for _, a := range attempts {
		r := res[a["id"].(string)]
		if r.Data != "" || r.Answered || len(r.Addrs) > 0 {
			t.Errorf("%s: the control pod was served: %+v", a["id"], r)
		}
	}
	// The agent is served as before.
	if out, errOut, err := w.exec(agent, "agent", "", "wget", "-q", "-O-", "http://"+w.web+":8080/"); err != nil || !strings.Contains(out, "hello-from-web") {
		t.Errorf("the agent through its gateway: %v\n%s%s", err, out, errOut)
	}

	// Red check: with the gateway told to serve every client, the same
	// attempt is served (the gateway's refusal was what stopped it).
	if _, err := cl.SetClients(ctx, []netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	res, _ = w.probe("control", "main", attempts[:1])
	if r := res["proxy"]; !strings.Contains(r.Data, "hello-from-web") {
		t.Errorf("with the clients unset the control pod is still not served (%+v): the test cannot tell the gateway's refusal from something else", r)
	}
}

// slicesContainsReason reports whether a record has the reason.
func slicesContainsReason(recs []map[string]any, reason string) bool {
	for _, r := range recs {
		if r["reason"] == reason {
			return true
		}
	}
	return false
}
