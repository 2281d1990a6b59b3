package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/gateway/ui"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// kubeKeyPrefix starts the view's id of a cluster sandbox:
// kube:NAMESPACE:ID. This host's sandbox ids are hex digits, and a
// namespace's name holds no colon, so the view's ids never collide.
const kubeKeyPrefix = "kube:"

// kubeListWait bounds how long the view waits for a cluster's listing,
// so that a cluster that does not answer leaves the view of this host's
// sandboxes usable.
const kubeListWait = 10 * time.Second

// kubeSandboxes are the sandboxes of one namespace of a cluster, for sbx
// ui: listed as sbx kube ps lists them (their ConfigMaps and pods, by
// the label sbx.dev/sandbox), their management API reached as sbx kube
// policy, approve and decisions reach it (a port-forward to the gateway
// pod through the API server, with the token from the sandbox's Secret),
// their decision log read from the gateway pod's log.
type kubeSandboxes struct {
	c *kube.Cluster
}

// key is the view's id of cluster sandbox id.
func (k kubeSandboxes) key(id string) string {
	return kubeKeyPrefix + k.c.Namespace + ":" + id
}

// id returns the sandbox id of the view's id key, when key is one of
// this namespace's.
func (k kubeSandboxes) id(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, kubeKeyPrefix+k.c.Namespace+":")
	return id, ok && kube.ValidID(id)
}

// List returns the namespace's sandboxes. Everything in them comes from
// the cluster, where whoever may change a ConfigMap's annotations writes
// a sandbox's name and command: those are escaped as the sandbox's own
// text is (the page's template escapes markup besides).
func (k kubeSandboxes) List(ctx context.Context) ([]ui.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, kubeListWait)
	defer cancel()
	all, err := k.c.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("the cluster's sandboxes in namespace %s: %w", k.c.Namespace, err)
	}
	var out []ui.Sandbox
	for _, sb := range all {
		if !kube.ValidID(sb.ID) {
			continue // not sbx's: no sandbox of sbx kube run has such an id
		}
		var cmd []string
		for _, a := range sb.Command {
			cmd = append(cmd, escape.Text(a))
		}
		out = append(out, ui.Sandbox{
			ID:      k.key(sb.ID),
			Name:    escape.Text(sb.Name),
			Status:  kubeStatus(sb),
			Command: cmd,
			Time:    sb.Created,
			// The gateway pod's log is the decision log while the pod is
			// there.
			HasLog:   sb.Gateway != "",
			Where:    "cluster, namespace " + escape.Text(k.c.Namespace),
			Health:   escape.Text(kube.Health(sb)),
			NoAlways: true,
		})
	}
	return out, nil
}

// kubeStatus is a cluster sandbox's status for the view: "running"
// while its gateway pod serves (its API answers through a port-forward,
// also after the agent ended), "starting" until then, and "gateway gone"
// once it cannot answer.
func kubeStatus(sb kube.Sandbox) string {
	switch {
	case sb.Gateway == string(corev1.PodRunning) && sb.GatewayReady && !sb.GatewayDeleting:
		return "running"
	case sb.Gateway == string(corev1.PodPending) || sb.Gateway == string(corev1.PodRunning) && !sb.GatewayDeleting:
		return "starting"
	}
	return "gateway gone"
}

// Client returns a client of the sandbox's management API through a
// port-forward to its gateway pod, which ends when ctx does.
func (k kubeSandboxes) Client(ctx context.Context, id string) (*api.Client, error) {
	tok, err := k.c.Token(ctx, id)
	if err != nil {
		return nil, err
	}
	addr, err := k.c.ForwardAPI(ctx, id)
	if err != nil {
		return nil, err
	}
	return api.NewClient(addr, tok)
}

// OpenLog opens the sandbox's decision log, as sbx kube decisions reads
// it: its gateway pod's log, so far.
func (k kubeSandboxes) OpenLog(ctx context.Context, id string) (io.ReadCloser, error) {
	return k.c.DecisionLog(ctx, id, false)
}

// uiSandboxes are what sbx ui shows: this host's sandboxes, and those of
// the cluster namespaces it was given.
type uiSandboxes struct {
	host hostSandboxes
	kube []kubeSandboxes
}

// List lists this host's sandboxes, then each namespace's. A namespace
// that cannot be listed is an error beside the others' sandboxes, which
// the view shows with it.
func (u uiSandboxes) List(ctx context.Context) ([]ui.Sandbox, error) {
	var errs []error
	out, err := u.host.List(ctx)
	if err != nil {
		if len(u.kube) == 0 {
			return nil, err
		}
		errs = append(errs, fmt.Errorf("this host's sandboxes: %w", err))
	}
	for _, k := range u.kube {
		list, err := k.List(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, list...)
	}
	return out, combine(errs...)
}

// find returns the namespace and sandbox id of the view's id key of a
// cluster sandbox; ok is false for this host's.
func (u uiSandboxes) find(key string) (k kubeSandboxes, id string, ok bool, err error) {
	if !strings.HasPrefix(key, kubeKeyPrefix) {
		return kubeSandboxes{}, "", false, nil
	}
	for _, k := range u.kube {
		if id, ok := k.id(key); ok {
			return k, id, true, nil
		}
	}
	return kubeSandboxes{}, "", true, fmt.Errorf("no cluster sandbox %q in the namespaces sbx ui was given", key)
}

func (u uiSandboxes) Client(ctx context.Context, key string) (*api.Client, error) {
	k, id, ok, err := u.find(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return u.host.Client(ctx, key)
	}
	return k.Client(ctx, id)
}

func (u uiSandboxes) OpenLog(ctx context.Context, key string) (io.ReadCloser, error) {
	k, id, ok, err := u.find(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return u.host.OpenLog(ctx, key)
	}
	return k.OpenLog(ctx, id)
}
