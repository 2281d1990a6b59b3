package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/kube/podnet"
)

// The objects name the ports and uid that the pod's rules and shim use
// by default: the two packages must agree.
func TestKubePortsAgreeWithPodRules(t *testing.T) {
	for _, c := range []struct {
		name       string
		kube, pod int
	}{
		{"proxy", kube.ProxyPort, podnet.DefaultProxyPort},
		{"capture", kube.CapturePort, podnet.DefaultCapturePort},
		{"dns", kube.DNSPort, podnet.DefaultDNSPort},
		{"shim", kube.ShimPort, podnet.DefaultShimPort},
		{"shim uid", kube.ShimUID, podnet.DefaultShimUID},
	} {
		if c.kube != c.pod {
			t.Errorf("%s: sandbox/kube says %d, podnet %d", c.name, c.kube, c.pod)
		}
	}
}

func TestKubeRunUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kube", "run", "--", "true"}, "--image is required"},
		{[]string{"kube", "run", "--image", "busybox", "--user", "0", "--", "true"}, "never runs as root"},
		{[]string{"kube", "run", "--image", "busybox", "--user", "15001", "--", "true"}, "sbx's own"},
		{[]string{"kube", "run", "--image", "busybox", "--pull", "sometimes", "--", "true"}, "--pull"},
		{[]string{"kube", "run", "--image", "busybox", "-e", "NOVALUE", "--", "true"}, "KEY=VAL"},
		{[]string{"kube", "run", "--image", "busybox", "--default", "ask", "--", "true"}, "ask is not supported"},
		{[]string{"kube", "manifest", "--image", "busybox", "--gateway-ip", "fd00::1", "--", "true"}, "--gateway-ip"},
		{[]string{"kube", "stop"}, "give the sandboxes to stop"},
		{[]string{"kube", "decisions"}, "--sandbox"},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("sbx %s: exit %d, %q; want exit %d naming %q", strings.Join(c.args, " "), code, errOut, exitUsage, c.want)
		}
	}
}

// sbx kube manifest prints every object, and the agent pod once it has
// the gateway's address; the policy goes to the gateway pod as the flags
// built it.
func TestKubeManifest(t *testing.T) {
	out, errOut, code := runCLI(t, "kube", "manifest", "-n", "agents", "--image", "node:22", "--gateway-image", "reg.example/sbx:1",
		"--allow", "registry.npmjs.org", "--allow-private", "10.1.2.3/32", "--gateway-ip", "10.244.0.9", "--", "npm", "install")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	docs := strings.Split(out, "\n---\n")
	var kinds []string
	var cm corev1.ConfigMap
	var agent corev1.Pod
	for _, d := range docs {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			t.Fatalf("document %q: %v", d, err)
		}
		if meta.Metadata.Namespace != "agents" || meta.Metadata.Labels[kube.LabelSandbox] == "" {
			t.Errorf("%s: namespace %q, labels %v", meta.Kind, meta.Metadata.Namespace, meta.Metadata.Labels)
		}
		kinds = append(kinds, meta.Kind)
		switch meta.Kind {
		case "ConfigMap":
			yaml.Unmarshal([]byte(d), &cm)
		case "Pod":
			yaml.Unmarshal([]byte(d), &agent)
		}
	}
	if got, want := strings.Join(kinds, ","), "ConfigMap,Secret,NetworkPolicy,NetworkPolicy,Pod,Pod"; got != want {
		t.Errorf("kinds %s, want %s", got, want)
	}
	p, err := netpolicy.Parse("policy.yaml", []byte(cm.Data[kube.KeyPolicy]))
	if err != nil {
		t.Fatalf("the gateway pod's policy: %v", err)
	}
	if d := p.Decide(netpolicy.Target{Host: "registry.npmjs.org", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Allow {
		t.Errorf("registry.npmjs.org:443 -> %v, want allow", d)
	}
	if len(p.AllowPrivate()) != 1 || p.AllowPrivate()[0].String() != "10.1.2.3/32" {
		t.Errorf("allow_private = %v", p.AllowPrivate())
	}
	if agent.Spec.Containers[0].Image != "node:22" || strings.Join(agent.Spec.Containers[0].Command, " ") != "npm install" {
		t.Errorf("agent container = %+v", agent.Spec.Containers[0])
	}

	// Without the gateway's address there is no agent pod yet, and the
	// output says how to get it.
	out, _, code = runCLI(t, "kube", "manifest", "--image", "node:22", "--", "true")
	if code != 0 || strings.Count(out, "kind: Pod") != 1 || !strings.Contains(out, "--gateway-ip") {
		t.Errorf("without --gateway-ip: exit %d, %d pods, want 1 and the hint\n%s", code, strings.Count(out, "kind: Pod"), out)
	}
}
