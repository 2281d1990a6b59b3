package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/sbx-dev/sbx/sandbox"
)

// Rights are the rules of the Role a user of sbx kube needs in a
// namespace, and no more: docs/kubernetes.md prints them as that Role,
// and the project's cluster tests run sbx kube as a ServiceAccount bound
// to exactly the page's Role.
var Rights = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"create", "get", "list", "delete", "deletecollection"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps/finalizers"}, Verbs: []string{"update"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete", "deletecollection"}},
	{APIGroups: []string{networkingv1.GroupName}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "get", "list", "delete", "deletecollection"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create", "get"}},
}

// A Right is one verb on one resource (with its subresource) of one API
// group, as a SelfSubjectAccessReview asks about it.
type Right struct {
	Group, Resource, Verb string
}

func (r Right) String() string {
	if r.Group == "" {
		return r.Verb + " " + r.Resource
	}
	return r.Verb + " " + r.Resource + " (" + r.Group + ")"
}

// Each returns every Right of rules, in order.
func Each(rules []rbacv1.PolicyRule) []Right {
	var out []Right
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					out = append(out, Right{Group: g, Resource: res, Verb: v})
				}
			}
		}
	}
	return out
}

// RoleYAML prints rights as the rules of a Role named name, for a user
// to hand to their administrator.
func RoleYAML(name string, rights []Right) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: %s\nrules:\n", name)
	for _, r := range rights {
		fmt.Fprintf(&b, "- apiGroups: [%q]\n  resources: [%s]\n  verbs: [%s]\n", r.Group, r.Resource, r.Verb)
	}
	return b.String()
}

// An Access is the API server's answer about one Right.
type Access struct {
	Right
	Allowed bool
	// Reason is the authorizer's, when it gave one.
	Reason string
}

// CheckRights asks the API server, one SelfSubjectAccessReview each,
// whether the kubeconfig's user has each of rights in the cluster's
// namespace (or, for a cluster-wide resource such as nodes, in the
// cluster when namespaced is false).
func (c *Cluster) CheckRights(ctx context.Context, rights []Right, namespaced bool) ([]Access, error) {
	rc, err := c.authorizationClient()
	if err != nil {
		return nil, err
	}
	out := make([]Access, 0, len(rights))
	for _, r := range rights {
		res, sub, _ := strings.Cut(r.Resource, "/")
		attrs := &authorizationv1.ResourceAttributes{Verb: r.Verb, Group: r.Group, Resource: res, Subresource: sub}
		if namespaced {
			attrs.Namespace = c.Namespace
		}
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
		var got authorizationv1.SelfSubjectAccessReview
		if err := rc.Post().Resource("selfsubjectaccessreviews").Body(review).Do(ctx).Into(&got); err != nil {
			return nil, &APIError{"create", "SelfSubjectAccessReview", r.String(), c.Namespace, err}
		}
		out = append(out, Access{Right: r, Allowed: got.Status.Allowed, Reason: got.Status.Reason})
	}
	return out, nil
}

// authorizationClient is a REST client of authorization.k8s.io/v1, made
// for sbx kube check alone.
func (c *Cluster) authorizationClient() (rest.Interface, error) {
	if c.Config == nil {
		return nil, errors.New("kube: no API server to ask (a cluster without a configuration)")
	}
	s := runtime.NewScheme()
	if err := authorizationv1.AddToScheme(s); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &authorizationv1.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	return rest.RESTClientFor(cfg)
}

// LabelCheck marks the pods and the NetworkPolicy ProbeNetworkPolicy
// makes, by its run's id.
const LabelCheck = "sbx.dev/check"

// NetworkPolicyProbe is the command of the pods ProbeNetworkPolicy
// makes, from sbx's own image: "listen" serves TCP on ProbePort;
// "dial ADDR" reports whether a connection to ADDR opens.
var NetworkPolicyProbe = []string{"/sbx", "kube", "np-probe"}

// ProbePort is where ProbeNetworkPolicy's server pod listens.
const ProbePort = 15080

// Enforcement is what ProbeNetworkPolicy found.
type Enforcement int

// What ProbeNetworkPolicy can find.
const (
	// Enforced: a connection that opened before a NetworkPolicy denied
	// it was refused after.
	Enforced Enforcement = iota
	// NotEnforced: the connection opened with the denying policy in place.
	NotEnforced
	// Unreachable: even without a policy the connection did not open, so
	// the probe says nothing about policies (the pod network itself).
	Unreachable
)

// ProbeNetworkPolicy finds out whether the namespace's NetworkPolicies
// are enforced: a server pod of image (sbx's own), a client pod that
// connects to it (it must), then a NetworkPolicy that denies the server
// every ingress and a second client that must be refused. Whatever it
// made is removed before it returns. It needs the rights of Rights.
func (c *Cluster) ProbeNetworkPolicy(ctx context.Context, image string, pull corev1.PullPolicy) (Enforcement, error) {
	id, err := sandbox.NewID()
	if err != nil {
		return 0, err
	}
	ns := c.Namespace
	sel := LabelCheck + "=" + id
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		zero := int64(0)
		c.Client.Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: sel})
		c.Client.NetworkPolicies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
	}()
	server := probePod("sbx-check-"+id+"-server", id, "server", image, pull, append(NetworkPolicyProbe, "listen"), corev1.RestartPolicyAlways)
	if _, err := c.Client.Pods(ns).Create(ctx, server, metav1.CreateOptions{FieldManager: "sbx"}); err != nil {
		return 0, &APIError{"create", "Pod", server.Name, ns, err}
	}
	addr, err := c.waitPodIP(ctx, server.Name)
	if err != nil {
		return 0, err
	}
	target := netip.AddrPortFrom(addr, ProbePort).String()
	opened, err := c.probeDial(ctx, id, "a", image, pull, target, "open")
	if err != nil {
		return 0, err
	}
	if !opened {
		return Unreachable, nil
	}
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx-check-" + id, Labels: map[string]string{LabelCheck: id}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelCheck: id, LabelRole: "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	if _, err := c.Client.NetworkPolicies(ns).Create(ctx, deny, metav1.CreateOptions{FieldManager: "sbx"}); err != nil {
		return 0, &APIError{"create", "NetworkPolicy", deny.Name, ns, err}
	}
	// A policy agent programs a new policy within seconds: the client
	// tries for a while and reports the first refusal.
	opened, err = c.probeDial(ctx, id, "b", image, pull, target, "refused")
	if err != nil {
		return 0, err
	}
	if opened {
		return NotEnforced, nil
	}
	return Enforced, nil
}

// probeDial runs a client pod that dials target until want ("open" or
// "refused") or its time runs out, and reports whether the last dial
// opened. The pod's exit code says: 0 open, 1 refused.
func (c *Cluster) probeDial(ctx context.Context, id, n, image string, pull corev1.PullPolicy, target, want string) (bool, error) {
	p := probePod("sbx-check-"+id+"-client-"+n, id, "client", image, pull, append(NetworkPolicyProbe, "dial", target, "--until", want), corev1.RestartPolicyNever)
	if _, err := c.Client.Pods(c.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: "sbx"}); err != nil {
		return false, &APIError{"create", "Pod", p.Name, c.Namespace, err}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		got, err := c.Client.Pods(c.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, &APIError{"get", "Pod", p.Name, c.Namespace, err}
		}
		if code, ok := containerExit(got, "probe"); ok {
			switch code {
			case 0:
				return true, nil
			case 1:
				return false, nil
			}
			return false, fmt.Errorf("the probe pod %s exited %d: see kubectl logs %s", p.Name, code, p.Name)
		}
		if err := podFailure(got); err != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("the probe pod %s did not finish within 2 minutes", p.Name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitPodIP waits for the pod's address, for at most 2 minutes.
func (c *Cluster) waitPodIP(ctx context.Context, name string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		got, err := c.Client.Pods(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, &APIError{"get", "Pod", name, c.Namespace, err}
		}
		if err := podFailure(got); err != nil {
			return netip.Addr{}, err
		}
		if ip, err := netip.ParseAddr(got.Status.PodIP); err == nil && got.Status.Phase == corev1.PodRunning && podReady(got) {
			return ip, nil
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("the probe pod %s did not run within 2 minutes", name)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// containerExit returns the exit code of p's container name once it
// ended.
func containerExit(p *corev1.Pod, name string) (int, bool) {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == name && st.State.Terminated != nil {
			return int(st.State.Terminated.ExitCode), true
		}
	}
	return 0, false
}

// probePod is one of ProbeNetworkPolicy's pods: sbx's image, hardened as
// the gateway is, labelled with the check's id and role.
func probePod(name, id, role, image string, pull corev1.PullPolicy, command []string, restart corev1.RestartPolicy) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelCheck: id, LabelRole: role}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			EnableServiceLinks:            new(bool),
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           image,
				ImagePullPolicy: pull,
				Command:         command,
				SecurityContext: hardened(GatewayUID, true),
			}},
		},
	}
}
