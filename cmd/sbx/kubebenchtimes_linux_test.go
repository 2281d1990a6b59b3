package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sbx-dev/sbx/sandbox/kube"
)

// startMilestones are the moments of a sandbox's start that podTimes
// sees, in the order they come, each named as the benchmark prints it.
var startMilestones = []string{
	"gateway made", "gateway address", "gateway running", "gateway ready",
	"agent made", "agent scheduled", "agent address", "shim running", "rules running", "rules done", "agent running",
}

// podTimes records when the benchmark first sees each milestone of each
// sandbox's pods, by a watch of the namespace's pods: the time the event
// arrives, to the millisecond, where the pods' own timestamps have whole
// seconds.
type podTimes struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time // sandbox id -> milestone -> first seen
}

// watchPodTimes follows the sandboxes' pods in k's namespace until ctx is
// done.
func (k *kubeTest) watchPodTimes(ctx context.Context) *podTimes {
	pt := &podTimes{seen: map[string]map[string]time.Time{}}
	// Ends when ctx is done; a watch the server ends is made again.
	go func() {
		for ctx.Err() == nil {
			w, err := k.c.Client.Pods(k.ns).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelSandbox})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted {
					pt.note(p, time.Now())
				}
			}
			w.Stop()
		}
	}()
	return pt
}

func (pt *podTimes) note(p *corev1.Pod, now time.Time) {
	id := p.Labels[kube.LabelSandbox]
	var got []string
	ready := func() bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	running := func(sts []corev1.ContainerStatus, name string) bool {
		for _, st := range sts {
			if st.Name == name && st.State.Running != nil {
				return true
			}
		}
		return false
	}
	switch p.Labels[kube.LabelRole] {
	case kube.RoleGateway:
		got = append(got, "gateway made")
		if p.Status.PodIP != "" {
			got = append(got, "gateway address")
		}
		if running(p.Status.ContainerStatuses, "gateway") {
			got = append(got, "gateway running")
		}
		if ready() {
			got = append(got, "gateway ready")
		}
	case kube.RoleAgent:
		got = append(got, "agent made")
		if p.Spec.NodeName != "" {
			got = append(got, "agent scheduled")
		}
		if p.Status.PodIP != "" {
			got = append(got, "agent address")
		}
		if running(p.Status.InitContainerStatuses, "shim") {
			got = append(got, "shim running")
		}
		if running(p.Status.InitContainerStatuses, "rules") {
			got = append(got, "rules running")
		}
		for _, st := range p.Status.InitContainerStatuses {
			if st.Name == "rules" && st.State.Terminated != nil {
				got = append(got, "rules done")
			}
		}
		if running(p.Status.ContainerStatuses, "agent") {
			got = append(got, "agent running")
		}
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.seen[id] == nil {
		pt.seen[id] = map[string]time.Time{}
	}
	for _, m := range got {
		if _, ok := pt.seen[id][m]; !ok {
			pt.seen[id][m] = now
		}
	}
}

// summary says, for each milestone, the median and p95 of when it was
// seen after its sandbox's sbx kube run started (starts, by id).
func (pt *podTimes) summary(starts map[string]time.Time) string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var b strings.Builder
	for _, m := range startMilestones {
		var d []time.Duration
		for id, t0 := range starts {
			if t, ok := pt.seen[id][m]; ok {
				d = append(d, t.Sub(t0))
			}
		}
		if len(d) == 0 {
			fmt.Fprintf(&b, "; %s: not seen", m)
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(&b, "; %s %v (p95 %v)", m, quantile(d, 0.5).Round(time.Millisecond), quantile(d, 0.95).Round(time.Millisecond))
	}
	return strings.TrimPrefix(b.String(), "; ")
}
