package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbx-dev/sbx/sandbox"
)

// NodeDefaults are sbx run's default limits (sandbox.DefaultLimits: half
// the machine's memory, all its CPUs but one, at least one) for the
// cluster's smallest node, by its allocatable memory and CPUs, as the
// agent pod may land on any node. Pids is sandbox.DefaultPidsLimit, which
// Kubernetes cannot set for a pod (docs/kubernetes.md). Listing nodes
// needs a right of the whole cluster that many users lack: the error then
// wraps ErrNodesUnknown.
func (c *Cluster) NodeDefaults(ctx context.Context) (sandbox.Limits, error) {
	nodes, err := c.Client.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return sandbox.Limits{}, fmt.Errorf("%w: %v", ErrNodesUnknown, err)
		}
		return sandbox.Limits{}, &APIError{"list", "Node", "", "(the cluster)", err}
	}
	return nodeDefaults(nodes.Items)
}

// ErrNodesUnknown is NodeDefaults' error when the nodes cannot be listed.
var ErrNodesUnknown = errors.New("the cluster's nodes cannot be listed")

func nodeDefaults(nodes []corev1.Node) (sandbox.Limits, error) {
	var mem, milli int64
	for _, n := range nodes {
		m, cpu := n.Status.Allocatable.Memory(), n.Status.Allocatable.Cpu()
		if m.IsZero() || cpu.IsZero() {
			continue
		}
		if mem == 0 || m.Value() < mem {
			mem = m.Value()
		}
		if milli == 0 || cpu.MilliValue() < milli {
			milli = cpu.MilliValue()
		}
	}
	if mem == 0 {
		return sandbox.Limits{}, fmt.Errorf("%w: no node says how much memory and CPU it has", ErrNodesUnknown)
	}
	return sandbox.Limits{Memory: mem / 2, CPUs: float64(max(1, milli/1000-1)), Pids: sandbox.DefaultPidsLimit}, nil
}

// AgentWait bounds how long WaitAgentIP waits for the agent pod's address.
var AgentWait = 2 * time.Minute

// WaitAgentIP waits until the agent pod has its IPv4 address (it has one
// once the node made its network, before its containers run) and returns
// it; a pod that cannot run ends the wait with why. It follows the pod
// with a watch (followPods), without polling.
func (c *Cluster) WaitAgentIP(ctx context.Context, id string) (netip.Addr, error) {
	wctx, cancel := context.WithTimeout(ctx, AgentWait)
	defer cancel()
	name := ObjectName(id)
	var ip netip.Addr
	var phase corev1.PodPhase
	err := c.followPods(wctx, id, func(pods map[string]*corev1.Pod) (bool, error) {
		pod := pods[name]
		if pod == nil {
			return false, fmt.Errorf("the agent pod %s is gone", name)
		}
		phase = pod.Status.Phase
		var ok bool
		if ip, ok = podIPv4(pod); ok {
			return true, nil
		}
		if err := podFailure(pod); err != nil {
			return false, fmt.Errorf("the agent pod %s: %w", name, err)
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return netip.Addr{}, fmt.Errorf("the agent pod %s got no address within %v (phase %s); kubectl describe pod %s -n %s says why", name, AgentWait, phase, name, c.Namespace)
	}
	return ip, err
}
