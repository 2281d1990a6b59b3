package kube

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sbx-dev/sbx/sandbox"
)

// quantities renders a resource list as strings, for comparing.
func quantities(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}

// TestAgentPodLimits: the agent container gets sbx run's limits as its
// resources' limits (requests no higher), and /tmp and HOME are memory
// emptyDirs of --tmp-size each. Red on main: the agent pod had no limits
// and disk emptyDirs without a size.
func TestAgentPodLimits(t *testing.T) {
	for _, tc := range []struct {
		name             string
		memory           int64
		cpus, cpuRequest float64
		tmp              int64
		limits, requests map[string]string
		tmpSize          string
	}{
		{"flags", 2 << 30, 1.5, 0, 256 << 20,
			map[string]string{"memory": "2Gi", "cpu": "1500m"}, map[string]string{"memory": "128Mi", "cpu": "10m"}, "256Mi"},
		{"a request", 2 << 30, 1.5, 0.5, 0,
			map[string]string{"memory": "2Gi", "cpu": "1500m"}, map[string]string{"memory": "128Mi", "cpu": "500m"}, "1Gi"},
		{"a request as the limit", 0, 0.25, 0.25, 0,
			map[string]string{"cpu": "250m"}, map[string]string{"memory": "128Mi", "cpu": "250m"}, "1Gi"},
		{"a request and no limit", 0, 0, 2, 0,
			map[string]string{}, map[string]string{"memory": "128Mi", "cpu": "2"}, "1Gi"},
		{"below the requests", 64 << 20, 0.005, 0, 0,
			map[string]string{"memory": "64Mi", "cpu": "5m"}, map[string]string{"memory": "64Mi", "cpu": "5m"}, "1Gi"},
		{"no limits", 0, 0, 0, 0, map[string]string{}, map[string]string{"memory": "128Mi", "cpu": "10m"}, "1Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			s.Memory, s.CPUs, s.CPURequest, s.TmpSize = tc.memory, tc.cpus, tc.cpuRequest, tc.tmp
			pod, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
			if err != nil {
				t.Fatal(err)
			}
			r := pod.Spec.Containers[0].Resources
			if diff := cmp.Diff(tc.limits, quantities(r.Limits)); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.requests, quantities(r.Requests)); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			for _, name := range []string{"tmp", "home"} {
				i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
				ed := pod.Spec.Volumes[i].EmptyDir
				if ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.String() != tc.tmpSize {
					t.Errorf("volume %s: %+v, want a memory emptyDir of %s", name, ed, tc.tmpSize)
				}
			}
		})
	}
	s := testSpec()
	s.Memory = -1
	if _, err := AgentPod(s, netip.MustParseAddr("10.244.0.9")); err == nil {
		t.Error("a negative memory limit was taken")
	}
	s = testSpec()
	s.CPUs, s.CPURequest = 1, 1.5
	if _, err := AgentPod(s, netip.MustParseAddr("10.244.0.9")); !errors.Is(err, ErrRequestOverLimit) {
		t.Errorf("a CPU request above the limit: got %v, want ErrRequestOverLimit", err)
	}
}

// podCPURequest is what the scheduler keeps for a pod: the larger of its
// init containers' requests (each runs alone, before the next) and the
// sum of its containers' and native sidecars' (which run together), as
// Kubernetes computes a pod's effective request.
func podCPURequest(p *corev1.Pod) int64 {
	var sum, initMax int64
	for _, c := range p.Spec.InitContainers {
		cpu := c.Resources.Requests.Cpu().MilliValue()
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum += cpu
			initMax = max(initMax, sum)
			continue
		}
		initMax = max(initMax, sum+cpu)
	}
	for _, c := range p.Spec.Containers {
		sum += c.Resources.Requests.Cpu().MilliValue()
	}
	return max(initMax, sum)
}

// TestFiftySandboxesFit: the CPU a sandbox asks the scheduler for (its
// gateway pod and its agent pod, with the agent's default request) lets
// 50 sandboxes fit on a node of 2 CPUs, with a quarter of them left for
// the node's own pods. Red before: each sandbox asked for 160m, so 12
// fitted.
func TestFiftySandboxesFit(t *testing.T) {
	s := testSpec()
	s.Memory, s.CPUs = 1<<30, 1 // limits do not add to the requests
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	gw, ag := podCPURequest(o.Gateway), podCPURequest(agent)
	if per := gw + ag; 50*per > 1500 {
		t.Errorf("a sandbox asks for %dm of CPU (gateway pod %dm, agent pod %dm): 50 ask for %dm, more than the 1500m of a 2-CPU node left after its own pods", per, gw, ag, 50*per)
	}
}

// TestGatewayPodResources: the gateway pod has requests and limits, a
// startup probe (not a readiness probe, whose connections it would refuse
// once it serves its agent alone) and names sbx kube policy allow in its
// 403s.
func TestGatewayPodResources(t *testing.T) {
	o, err := MakeObjects(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	gw := o.Gateway.Spec.Containers[0]
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: GatewayCPURequest, corev1.ResourceMemory: GatewayMemoryRequest},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: GatewayCPULimit, corev1.ResourceMemory: GatewayMemoryLimit},
	}
	if diff := cmp.Diff(quantities(want.Limits), quantities(gw.Resources.Limits)); diff != "" || len(gw.Resources.Limits) != 2 {
		t.Errorf("gateway limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(quantities(want.Requests), quantities(gw.Resources.Requests)); diff != "" {
		t.Errorf("gateway requests (-want +got):\n%s", diff)
	}
	if gw.ReadinessProbe != nil || gw.StartupProbe == nil || gw.StartupProbe.TCPSocket == nil {
		t.Errorf("gateway probes: readiness %v, startup %v; want a startup probe alone", gw.ReadinessProbe, gw.StartupProbe)
	}
	i := slices.Index(gw.Command, "--allow-command")
	if i < 0 || gw.Command[i+1] != "sbx kube policy allow -n ns1 --sandbox 1a2b3c4d" {
		t.Errorf("gateway command %q: want --allow-command naming sbx kube policy allow for the sandbox", gw.Command)
	}
	if i := slices.Index(gw.Command, "--process-unknown"); i < 0 || gw.Command[i+1] != ProcessUnknown {
		t.Errorf("gateway command %q: want --process-unknown saying why its records name no process", gw.Command)
	}
}

func TestNodeDefaults(t *testing.T) {
	node := func(mem, cpu string) corev1.Node {
		return corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceCPU: resource.MustParse(cpu)}}}
	}
	got, err := nodeDefaults([]corev1.Node{node("16Gi", "8"), node("8Gi", "3900m"), node("32Gi", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if want := (sandbox.Limits{Memory: 4 << 30, CPUs: 1, Pids: sandbox.DefaultPidsLimit}); got != want {
		t.Errorf("got %+v, want %+v (half the smallest memory, the fewest CPUs but one, at least one)", got, want)
	}
	got, _ = nodeDefaults([]corev1.Node{node("8Gi", "4")})
	if got.CPUs != 3 {
		t.Errorf("4 CPUs: got %v, want 3", got.CPUs)
	}
	if _, err := nodeDefaults(nil); !errors.Is(err, ErrNodesUnknown) {
		t.Errorf("no nodes: got %v, want ErrNodesUnknown", err)
	}
}

// TestWaitAgentIP: WaitAgentIP returns the agent pod's IPv4 address once
// the node gave it one, and ends with why when the pod cannot run; the
// gateway is told that address (sbx kube run), so it must be the pod's.
func TestWaitAgentIP(t *testing.T) {
	f, c, _, agent := waitPods(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		a := agent.DeepCopy()
		a.Status.PodIPs = []corev1.PodIP{{IP: "fd00::7"}, {IP: "10.244.0.7"}}
		f.change(a)
	}()
	ip, err := c.WaitAgentIP(t.Context(), "1a2b3c4d")
	if err != nil || ip != netip.MustParseAddr("10.244.0.7") {
		t.Errorf("got %v, %v; want 10.244.0.7 once the pod has it", ip, err)
	}

	f, c, _, agent = waitPods(t)
	a := agent.DeepCopy()
	a.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "rules", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
	f.change(a)
	if _, err := c.WaitAgentIP(t.Context(), "1a2b3c4d"); err == nil || !strings.Contains(err.Error(), "ErrImagePull") {
		t.Errorf("a pod that cannot get its image: got %v, want the reason", err)
	}
}
