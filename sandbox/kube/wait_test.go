package kube

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitPods makes a stand-in cluster with the sandbox's two pods, the
// gateway running and the agent's container running.
func waitPods(t *testing.T) (*fakeAPI, *Cluster, *corev1.Pod, *corev1.Pod) {
	t.Helper()
	const id = "1a2b3c4d"
	meta := func(name, role string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{LabelSandbox: id, LabelRole: role}}
	}
	gw := &corev1.Pod{ObjectMeta: meta(GatewayPodName(id), RoleGateway), Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	agent := &corev1.Pod{ObjectMeta: meta(ObjectName(id), RoleAgent), Status: corev1.PodStatus{
		Phase:             corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}}
	f, c := fakeCluster(t, gw.DeepCopy(), agent.DeepCopy())
	return f, c, gw, agent
}

// waitFor runs WaitAgent, does change once it started, and returns what
// WaitAgent returned.
func waitFor(t *testing.T, c *Cluster, change func(ctx context.Context)) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	started := make(chan struct{})
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		code, err := c.WaitAgent(ctx, "1a2b3c4d", func() { close(started) })
		res <- result{code, err}
	}()
	select {
	case <-started:
	case r := <-res:
		t.Fatalf("WaitAgent returned %d, %v before the agent was seen running", r.code, r.err)
	}
	// The watch may start after the change is made: WaitAgent lists
	// first, so either way it sees it.
	time.Sleep(50 * time.Millisecond)
	change(ctx)
	r := <-res
	return r.code, r.err
}

func TestWaitAgentExitStatus(t *testing.T) {
	f, c, _, agent := waitPods(t)
	code, err := waitFor(t, c, func(ctx context.Context) {
		a := agent.DeepCopy()
		// The pod failed because its container did: the status wins.
		a.Status.Phase = corev1.PodFailed
		a.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}
		f.change(a)
	})
	if code != 3 || err != nil {
		t.Errorf("got %d, %v; want 3, nil", code, err)
	}
}

func TestWaitAgentGatewayEnded(t *testing.T) {
	for name, change := range map[string]func(f *fakeAPI, gw *corev1.Pod){
		"deleted": func(f *fakeAPI, gw *corev1.Pod) { f.remove(gw) },
		"failed": func(f *fakeAPI, gw *corev1.Pod) {
			gw.Status.Phase, gw.Status.Reason = corev1.PodFailed, "Evicted"
			f.change(gw)
		},
	} {
		f, c, gw, _ := waitPods(t)
		_, err := waitFor(t, c, func(context.Context) { change(f, gw) })
		if !errors.Is(err, ErrGatewayEnded) {
			t.Errorf("gateway pod %s: got %v, want ErrGatewayEnded", name, err)
		}
	}
}

// startCreate runs Create of testSpec on the stand-in API server f and
// returns what it returns, once the gateway pod is made.
func startCreate(t *testing.T, f *fakeAPI) (Spec, <-chan error) {
	t.Helper()
	c := f.connect("tok")
	s := testSpec()
	done := make(chan error, 1)
	go func() {
		_, err := c.Create(t.Context(), s, nil, false)
		done <- err
	}()
	f.waitFor(10*time.Second, "the gateway pod made", func() bool {
		return f.get(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: GatewayPodName(s.ID)}}) != nil
	})
	return s, done
}

// gatewayStatus sets the stand-in's gateway pod's status, as the kubelet
// would.
func gatewayStatus(f *fakeAPI, id string, st corev1.PodStatus) {
	gw := f.get(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: GatewayPodName(id)}}).(*corev1.Pod)
	gw.Status = st
	f.change(gw)
}

// TestCreateAgentPodOnceGatewayHasAddress: Create makes the agent pod as
// soon as the gateway pod has its address, not once it is ready, so the
// node sets the agent pod up while the gateway starts; the agent pod's
// rules container then waits for the gateway (TestAgentPodHardened). It
// follows the gateway pod with a watch: no polling.
func TestCreateAgentPodOnceGatewayHasAddress(t *testing.T) {
	f := newFakeAPI(t)
	s, done := startCreate(t, f)
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ObjectName(s.ID)}}
	// Scheduled and starting, no address yet: no agent pod.
	gatewayStatus(f, s.ID, corev1.PodStatus{Phase: corev1.PodPending})
	time.Sleep(500 * time.Millisecond)
	if f.get(agentPod) != nil {
		t.Fatal("the agent pod was made before the gateway pod had an address")
	}
	// An address, the container starting, not ready.
	gatewayStatus(f, s.ID, corev1.PodStatus{Phase: corev1.PodPending, PodIP: "10.244.0.7", PodIPs: []corev1.PodIP{{IP: "10.244.0.7"}}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Create did not return once the gateway pod had its address")
	}
	agent, _ := f.get(agentPod).(*corev1.Pod)
	if agent == nil {
		t.Fatal("no agent pod")
	}
	if cmd := strings.Join(initContainer(agent, "rules").Command, " "); !strings.Contains(cmd, "--gateway 10.244.0.7 ") || !strings.Contains(cmd, "--wait-gateway") {
		t.Errorf("the rules container's command %q: want the gateway's address and the wait for it", cmd)
	}
	if gets := f.getsLog(); len(gets) > 0 {
		t.Errorf("Create polled: %v; want it to follow the pods with a watch", gets)
	}
}

// TestCreateGatewayCannotStart: a gateway pod that cannot start ends
// Create with why, before any agent pod is made, and what was made is
// removed.
func TestCreateGatewayCannotStart(t *testing.T) {
	f := newFakeAPI(t)
	s, done := startCreate(t, f)
	gatewayStatus(f, s.ID, corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "gateway", Image: "sbx:test", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}},
	}}})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cannot get image sbx:test") {
			t.Errorf("got %v, want an error naming the image", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Create did not return once the gateway pod could not start")
	}
	if left := f.names(s.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestWaitGatewayReady: WaitGatewayReady (sbx kube run waits for it before
// it tells the gateway its agent's address) returns the gateway pod's
// address once it is ready, not when it has an address only.
func TestWaitGatewayReady(t *testing.T) {
	f := newFakeAPI(t)
	s := testSpec()
	s.Namespace = "ns"
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	running := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7"}
	o.Gateway.Status = running
	f.put(o.Gateway)
	c := f.connect("tok")
	type result struct {
		ip  netip.Addr
		err error
	}
	res := make(chan result, 1)
	go func() {
		ip, err := c.WaitGatewayReady(t.Context(), s.ID)
		res <- result{ip, err}
	}()
	select {
	case r := <-res:
		t.Fatalf("got %v, %v before the gateway pod was ready", r.ip, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	running.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	gatewayStatus(f, s.ID, running)
	select {
	case r := <-res:
		if r.err != nil || r.ip != netip.MustParseAddr("10.244.0.7") {
			t.Errorf("got %v, %v; want 10.244.0.7", r.ip, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitGatewayReady did not return once the gateway pod was ready")
	}
}
