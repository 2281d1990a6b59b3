package kube

import (
	"context"
	"errors"
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
