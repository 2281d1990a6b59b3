package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Cluster is a connection to a Kubernetes API server, in one namespace.
type Cluster struct {
	Client    Client
	Config    *rest.Config
	Namespace string
	// core is Connect's REST client of the core API group, for the
	// port-forward of ForwardAPI.
	core rest.Interface
}

// ErrNoKubeconfig is Connect's error when it finds no kubeconfig.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// Connect reads the kubeconfig (kubeconfig, else $KUBECONFIG, else
// ~/.kube/config) and returns a Cluster in namespace (the kubeconfig's
// current context's when ""; "default" when it names none).
func Connect(kubeconfig, namespace string) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, ErrNoKubeconfig
		}
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("reading the kubeconfig's namespace: %w", err)
		}
	}
	cfg.UserAgent = "sbx"
	client, err := newRESTClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return &Cluster{Client: client, Config: cfg, Namespace: namespace, core: client.core}, nil
}

// APIError says which object the API server refused and what it said,
// with a hint for the usual causes.
type APIError struct {
	Op, Kind, Name, Namespace string
	Err                       error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s %s %s in namespace %s: %v", e.Op, e.Kind, e.Name, e.Namespace, e.Err)
	switch {
	case apierrors.IsForbidden(e.Err) && strings.Contains(e.Err.Error(), "violates PodSecurity"):
		msg += fmt.Sprintf("; the agent pod's rules container needs NET_ADMIN, which only the privileged Pod Security level allows: label the namespace pod-security.kubernetes.io/enforce=privileged (kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged), or use a namespace that has it", e.Namespace)
	case apierrors.IsForbidden(e.Err) && strings.Contains(e.Err.Error(), "exceeded quota"):
		msg += fmt.Sprintf("; namespace %s's ResourceQuota is used up: stop other sandboxes (sbx kube ps) or raise the quota", e.Namespace)
	case apierrors.IsForbidden(e.Err):
		msg += fmt.Sprintf("; your kubeconfig's user needs the right to %s %ss in %s (docs/kubernetes.md lists the rights sbx kube needs)", e.Op, strings.ToLower(e.Kind), e.Namespace)
	case apierrors.IsNotFound(e.Err) && e.Op == "create":
		msg += fmt.Sprintf("; does namespace %s exist? kubectl create namespace %s, or use another namespace", e.Namespace, e.Namespace)
	case apierrors.IsAlreadyExists(e.Err):
		msg += "; sbx kube stop removes a sandbox's objects"
	case apierrors.IsInvalid(e.Err):
		msg += "; the object sbx made is invalid: sbx kube manifest prints it"
	}
	return msg
}

func (e *APIError) Unwrap() error { return e.Err }

// Created is what Create made: the gateway pod's address, for the
// caller's messages.
type Created struct {
	GatewayIP netip.Addr
}

// Create makes the sandbox's objects: the ConfigMap first (it owns the
// rest, so deleting it deletes the sandbox), then the Secret, the
// NetworkPolicies and the gateway pod; once the gateway pod has its
// address, which the agent pod names, the agent pod. The agent pod is
// scheduled and set up while the gateway starts; its rules container,
// once it installed the rules, waits until the gateway's proxy answers
// through them (sbx kube pod-rules --wait-gateway), so the agent starts
// only once its gateway serves it. dryRun asks the API server to check
// each object without keeping it (the agent pod then names the address
// 192.0.2.1). A failure removes what was made.
func (c *Cluster) Create(ctx context.Context, s Spec, allowPrivate []netip.Prefix, dryRun bool) (_ Created, retErr error) {
	s.Namespace = c.Namespace
	objs, err := MakeObjects(s)
	if err != nil {
		return Created{}, err
	}
	objs.AllowPrivate(allowPrivate)
	ns := c.Namespace
	if s.Name != "" {
		all, err := c.List(ctx)
		if err != nil {
			return Created{}, err
		}
		for _, sb := range all {
			if sb.Name == s.Name {
				return Created{}, fmt.Errorf("a sandbox named %s is in namespace %s already (%s): %w", s.Name, ns, sb.ID, ErrNameInUse)
			}
		}
	}
	// The agent pod first, checked by the server without keeping it: a
	// namespace whose admission refuses it (Pod Security, quotas) fails
	// here, before anything is made.
	probe, err := AgentPod(s, netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		return Created{}, err
	}
	if _, err := c.Client.Pods(ns).Create(ctx, probe, metav1.CreateOptions{FieldManager: "sbx", DryRun: []string{metav1.DryRunAll}}); err != nil {
		return Created{}, &APIError{"create", "Pod", probe.Name, ns, err}
	}
	opts := metav1.CreateOptions{FieldManager: "sbx"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	cm, err := c.Client.ConfigMaps(ns).Create(ctx, objs.ConfigMap, opts)
	if err != nil {
		return Created{}, &APIError{"create", "ConfigMap", objs.ConfigMap.Name, ns, err}
	}
	// From here the sandbox's objects are ours to remove on failure (not
	// before: a ConfigMap that was there already is another sandbox's).
	defer func() {
		if retErr != nil && !dryRun {
			if err := c.Delete(context.WithoutCancel(ctx), s.ID); err != nil {
				retErr = fmt.Errorf("%w (and removing what was made: %v)", retErr, err)
			}
		}
	}()
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
	if dryRun {
		owner[0].UID = "00000000-0000-0000-0000-000000000000"
	}
	for _, m := range []*metav1.ObjectMeta{&objs.Secret.ObjectMeta, &objs.AgentPolicy.ObjectMeta, &objs.GatewayPolicy.ObjectMeta, &objs.Gateway.ObjectMeta} {
		m.OwnerReferences = owner
	}
	if _, err := c.Client.Secrets(ns).Create(ctx, objs.Secret, opts); err != nil {
		return Created{}, &APIError{"create", "Secret", objs.Secret.Name, ns, err}
	}
	for _, np := range []*networkingv1.NetworkPolicy{objs.AgentPolicy, objs.GatewayPolicy} {
		if _, err := c.Client.NetworkPolicies(ns).Create(ctx, np, opts); err != nil {
			return Created{}, &APIError{"create", "NetworkPolicy", np.Name, ns, err}
		}
	}
	gw, err := c.Client.Pods(ns).Create(ctx, objs.Gateway, opts)
	if err != nil {
		return Created{}, &APIError{"create", "Pod", objs.Gateway.Name, ns, err}
	}
	if err := checkAdmitted(objs.Gateway, gw); err != nil {
		return Created{}, err
	}
	var gwIP netip.Addr
	if dryRun {
		gwIP = netip.MustParseAddr("192.0.2.1")
	} else if gwIP, err = c.waitGateway(ctx, s.ID, false); err != nil {
		return Created{}, err
	}
	agent, err := AgentPod(s, gwIP)
	if err != nil {
		return Created{}, err
	}
	agent.OwnerReferences = owner
	made, err := c.Client.Pods(ns).Create(ctx, agent, opts)
	if err != nil {
		return Created{}, &APIError{"create", "Pod", agent.Name, ns, err}
	}
	if err := checkAdmitted(agent, made); err != nil {
		return Created{}, err
	}
	return Created{GatewayIP: gwIP}, nil
}

// OtherPolicies lists the namespace's NetworkPolicies, not the
// sandbox's own, that select its agent or gateway pod. NetworkPolicies add
// up: what such a policy allows, the sandbox's pods may do too.
func (c *Cluster) OtherPolicies(ctx context.Context, id string) ([]string, error) {
	nps, err := c.Client.NetworkPolicies(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, &APIError{"list", "NetworkPolicy", "", c.Namespace, err}
	}
	var names []string
	for _, np := range nps.Items {
		if np.Labels[LabelSandbox] == id {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			names = append(names, np.Name) // one sbx cannot read may select them
			continue
		}
		for _, role := range []string{RoleAgent, RoleGateway} {
			if sel.Matches(labels.Set{LabelSandbox: id, LabelRole: role}) {
				names = append(names, np.Name)
				break
			}
		}
	}
	return names, nil
}

// ErrNameInUse is Create's error when another sandbox of the namespace
// has the name asked for.
var ErrNameInUse = errors.New("sandbox name in use")

// ErrPodChanged is Create's error when the cluster admitted a pod other
// than the one sbx sent: a mutating admission webhook added a container
// (a service mesh's sidecar and its NET_ADMIN init container, say),
// changed a security context, or gave it the node's namespaces.
var ErrPodChanged = errors.New("the cluster changed the pod sbx made")

// checkAdmitted compares the pod the API server kept with the one sent:
// the containers, their images and security contexts, and the pod's
// namespaces must be as sbx made them.
func checkAdmitted(sent, kept *corev1.Pod) error {
	names := func(cs []corev1.Container) []string {
		var n []string
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return n
	}
	diff := ""
	switch {
	case !slices.Equal(names(sent.Spec.InitContainers), names(kept.Spec.InitContainers)):
		diff = fmt.Sprintf("init containers %v, not %v", names(kept.Spec.InitContainers), names(sent.Spec.InitContainers))
	case !slices.Equal(names(sent.Spec.Containers), names(kept.Spec.Containers)):
		diff = fmt.Sprintf("containers %v, not %v", names(kept.Spec.Containers), names(sent.Spec.Containers))
	case kept.Spec.HostNetwork || kept.Spec.HostPID || kept.Spec.HostIPC:
		diff = "the node's namespaces"
	case kept.Spec.ShareProcessNamespace != nil && *kept.Spec.ShareProcessNamespace:
		diff = "a shared process namespace"
	}
	all := func(p *corev1.Pod) []corev1.Container {
		return append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	}
	for i, k := range all(kept) {
		if diff != "" {
			break
		}
		s := all(sent)[i]
		if k.Image != s.Image || !sameCaps(s.SecurityContext, k.SecurityContext) || privileged(k.SecurityContext) {
			diff = "container " + k.Name + "'s image or security context"
		}
	}
	if diff == "" {
		return nil
	}
	return fmt.Errorf("pod %s came back with %s: %w; exclude the namespace from the webhook that changes pods (a service mesh's injection, say) or use another namespace", kept.Name, diff, ErrPodChanged)
}

func sameCaps(a, b *corev1.SecurityContext) bool {
	capsOf := func(sc *corev1.SecurityContext) []corev1.Capability {
		if sc == nil || sc.Capabilities == nil {
			return nil
		}
		return sc.Capabilities.Add
	}
	return slices.Equal(capsOf(a), capsOf(b))
}

func privileged(sc *corev1.SecurityContext) bool {
	return sc != nil && sc.Privileged != nil && *sc.Privileged
}

// GatewayWait bounds how long Create waits for the gateway pod's
// address, WaitGatewayReady for it to be ready, and the agent pod's rules
// container for its proxy to answer.
var GatewayWait = 2 * time.Minute

// WaitGatewayReady waits until the sandbox's gateway pod is running and
// ready (its startup probe found the proxy listening), and returns its
// address; a pod that cannot start ends the wait with why.
func (c *Cluster) WaitGatewayReady(ctx context.Context, id string) (netip.Addr, error) {
	return c.waitGateway(ctx, id, true)
}

// waitGateway waits until the gateway pod has its IPv4 address and, when
// ready, is running and ready too, and returns the address; a pod that
// cannot start, or is gone, ends the wait with why. It follows the pod
// with a watch (followPods): it sees each change as the API server has
// it, without polling.
func (c *Cluster) waitGateway(ctx context.Context, id string, ready bool) (netip.Addr, error) {
	wctx, cancel := context.WithTimeout(ctx, GatewayWait)
	defer cancel()
	name := GatewayPodName(id)
	var ip netip.Addr
	var phase corev1.PodPhase
	err := c.followPods(wctx, id, func(pods map[string]*corev1.Pod) (bool, error) {
		pod := pods[name]
		if pod == nil {
			return false, fmt.Errorf("%w: pod %s is gone", ErrGatewayEnded, name)
		}
		phase = pod.Status.Phase
		if err := podFailure(pod); err != nil {
			return false, fmt.Errorf("the gateway pod %s: %w", name, err)
		}
		if pod.DeletionTimestamp != nil {
			return false, fmt.Errorf("the gateway pod %s is being deleted", name)
		}
		if ready && (pod.Status.Phase != corev1.PodRunning || !podReady(pod)) {
			return false, nil
		}
		var ok bool
		if ip, ok = podIPv4(pod); ok {
			return true, nil
		}
		if len(pod.Status.PodIPs) > 0 {
			return false, fmt.Errorf("the gateway pod %s has no IPv4 address (%v); sbx kube needs a cluster with IPv4 pod addresses", name, pod.Status.PodIPs)
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		what := "got no address"
		if ready {
			what = "did not get ready"
		}
		return netip.Addr{}, fmt.Errorf("the gateway pod %s %s within %v (phase %s); kubectl describe pod %s -n %s says why", name, what, GatewayWait, phase, name, c.Namespace)
	}
	return ip, err
}

// podIPv4 returns the pod's IPv4 address, of a dual-stack pod too.
func podIPv4(pod *corev1.Pod) (netip.Addr, bool) {
	ips := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure says why a pod cannot run, or nil while it can: an image the
// node cannot get, a container that cannot be made, a pod that failed.
func podFailure(pod *corev1.Pod) error {
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, st := range statuses {
		if w := st.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
				return fmt.Errorf("container %s: the node cannot get image %s (%s: %s); push it where the cluster pulls from, or load it on the node (sbx kube image writes sbx's own)", st.Name, st.Image, w.Reason, w.Message)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return fmt.Errorf("container %s cannot start (%s: %s)", st.Name, w.Reason, w.Message)
			}
		}
		if t := st.State.Terminated; t != nil && st.Name != "agent" && t.ExitCode != 0 {
			return fmt.Errorf("container %s exited with status %d (%s)%s", st.Name, t.ExitCode, t.Reason, messageSuffix(t.Message))
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		return fmt.Errorf("the pod failed: %s %s", pod.Status.Reason, pod.Status.Message)
	}
	return nil
}

func messageSuffix(m string) string {
	if m = strings.TrimSpace(m); m == "" {
		return ""
	}
	return ": " + m
}

// Delete removes every object labelled with one of the sandboxes' ids
// and waits until they are gone; what is already gone is no error. Many
// sandboxes are removed together, not one after another: one deletion of
// all their pods, one wait until they are all gone, then one deletion of
// each kind of their other objects. The node stops the pods at its own
// pace, a few seconds apart when there are many (fifty sandboxes on a
// loaded 2-CPU node took longer than 109 s): Delete waits as long as they
// keep going, and fails only when none has gone for DeleteStall.
//
// Objects made while it deletes (by an sbx kube run that is still making
// the sandbox, or a second remover's view of it) are deleted in another
// round, pods first again, until none is left; Delete fails once objects
// have stayed for DeleteStall after a round.
func (c *Cluster) Delete(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if slices.Contains(ids, "") {
		return errors.New("removing sandboxes: an empty sandbox id")
	}
	sel := sandboxSelector(ids)
	var stall time.Time
	for {
		left, err := c.deleteRound(ctx, ids, sel)
		if err != nil {
			return err
		}
		if left == nil {
			if left, err = c.objects(ctx, sel); err != nil {
				return err
			}
			if len(left) == 0 {
				return nil
			}
		}
		if stall.IsZero() {
			stall = time.Now().Add(DeleteStall)
		}
		if time.Now().After(stall) {
			return fmt.Errorf("%s: still there after %v: %s", sandboxesNamed(ids), DeleteStall, strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: still there when the wait ended (%w): %s", sandboxesNamed(ids), ctx.Err(), strings.Join(left, ", "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteRound deletes the objects that match sel once: the pods, and
// once they are gone (their containers stopped, which a graceful
// deletion waits for) the NetworkPolicies, Secrets and ConfigMaps, so
// that a container never runs without its policy. When it sees pods made
// after their deletion it stops there and returns their names, for the
// next round.
func (c *Cluster) deleteRound(ctx context.Context, ids []string, selector string) (fresh []string, err error) {
	sel := metav1.ListOptions{LabelSelector: selector}
	ns := c.Namespace
	grace := int64(1)
	dctx, cancel := context.WithTimeout(ctx, DeleteStall)
	err = c.Client.Pods(ns).DeleteCollection(dctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, sel)
	cancel()
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, &APIError{"delete", "Pod", sel.LabelSelector, ns, err}
	}
	if fresh, err := c.waitPodsGone(ctx, ids); err != nil || len(fresh) > 0 {
		return fresh, err
	}
	ctx, cancel = context.WithTimeout(ctx, DeleteStall)
	defer cancel()
	var errs *multierror.Error
	for _, d := range []struct {
		kind string
		fn   func() error
	}{
		{"NetworkPolicy", func() error {
			return c.Client.NetworkPolicies(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		}},
		{"Secret", func() error { return c.Client.Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel) }},
		{"ConfigMap", func() error {
			return c.Client.ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		}},
	} {
		if err := d.fn(); err != nil && !apierrors.IsNotFound(err) {
			errs = multierror.Append(errs, &APIError{"delete", d.kind, sel.LabelSelector, ns, err})
		}
	}
	return nil, errs.ErrorOrNil()
}

// StopAgent deletes the sandbox's agent pod alone and waits, at most a
// minute, until it is gone (its containers stopped), leaving its gateway
// pod and its other objects: sbx kube stop reads what the gateway
// recorded once the agent can add nothing. An agent pod already gone is
// no error.
func (c *Cluster) StopAgent(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("stopping a sandbox's agent: an empty sandbox id")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sel := LabelSandbox + "=" + id + "," + LabelRole + "=" + RoleAgent
	grace := int64(1)
	err := c.Client.Pods(c.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{LabelSelector: sel})
	if err != nil && !apierrors.IsNotFound(err) {
		return &APIError{"delete", "Pod", sel, c.Namespace, err}
	}
	err = c.followSelected(ctx, sel, func(pods map[string]*corev1.Pod) (bool, error) { return len(pods) == 0, nil })
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("sandbox %s: its agent pod is still there after a minute", id)
	}
	return err
}

// DeleteStall bounds how long Delete waits while none of the sandboxes'
// pods goes (and for the rest of their objects to go, which the API
// server removes at once): a node that stops none in a minute is stuck,
// or gone.
var DeleteStall = time.Minute

// errStalled is waitPodsGone's cause for ending its wait.
var errStalled = errors.New("no pod went")

// waitPodsGone waits until the sandboxes' pods are gone, following them
// with a watch (followSelected) rather than listing them again and again,
// which many pods make costly. It waits as long as they keep going: each
// one gone gives the rest DeleteStall more. It returns early, with their
// names, when it sees pods that are not being deleted: made after the
// deletion, they would never go by themselves.
func (c *Cluster) waitPodsGone(ctx context.Context, ids []string) (fresh []string, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(DeleteStall, func() { cancel(errStalled) })
	defer stall.Stop()
	left := -1
	var names []string
	err = c.followSelected(ctx, sandboxSelector(ids), func(pods map[string]*corev1.Pod) (bool, error) {
		if len(pods) < left {
			stall.Reset(DeleteStall)
		}
		left, names, fresh = len(pods), slices.Sorted(maps.Keys(pods)), nil
		for _, name := range names {
			if pods[name].DeletionTimestamp == nil {
				fresh = append(fresh, name)
			}
		}
		return len(pods) == 0 || len(fresh) > 0, nil
	})
	switch {
	case err == nil:
		return fresh, nil
	case errors.Is(context.Cause(ctx), errStalled):
		return nil, fmt.Errorf("%s: no pod went for %v, %d still there: %s; kubectl describe pod says what holds them",
			sandboxesNamed(ids), DeleteStall, len(names), strings.Join(names, ", "))
	case ctx.Err() != nil && len(names) > 0:
		return nil, fmt.Errorf("%s: %d pods still there when the wait ended (%w): %s", sandboxesNamed(ids), len(names), err, strings.Join(names, ", "))
	}
	return nil, err
}

// sandboxesNamed names ids in an error: "sandbox ID", or "N sandboxes".
func sandboxesNamed(ids []string) string {
	if len(ids) == 1 {
		return "sandbox " + ids[0]
	}
	return fmt.Sprintf("%d sandboxes", len(ids))
}

// sandboxSelector is the label selector of the objects of the sandboxes
// ids: sbx.dev/sandbox=ID for one, sbx.dev/sandbox in (ID,...) for more.
// Label values hold no commas, parentheses or spaces, so ids that are
// label values cannot widen it.
func sandboxSelector(ids []string) string {
	if len(ids) == 1 {
		return LabelSandbox + "=" + ids[0]
	}
	return LabelSandbox + " in (" + strings.Join(ids, ",") + ")"
}

// Objects lists the sandbox's objects as kind/name, or those of every
// sandbox in the namespace when id is "".
func (c *Cluster) Objects(ctx context.Context, id string) ([]string, error) {
	sel := LabelSandbox + "=" + id
	if id == "" {
		sel = LabelSandbox
	}
	return c.objects(ctx, sel)
}

// objects lists the objects that match the label selector sel as
// kind/name.
func (c *Cluster) objects(ctx context.Context, sel string) ([]string, error) {
	opts := metav1.ListOptions{LabelSelector: sel}
	ns := c.Namespace
	var left []string
	pods, err := c.Client.Pods(ns).List(ctx, opts)
	if err != nil {
		return nil, &APIError{"list", "Pod", sel, ns, err}
	}
	for _, o := range pods.Items {
		left = append(left, "pod/"+o.Name)
	}
	nps, err := c.Client.NetworkPolicies(ns).List(ctx, opts)
	if err != nil {
		return nil, &APIError{"list", "NetworkPolicy", sel, ns, err}
	}
	for _, o := range nps.Items {
		left = append(left, "networkpolicy/"+o.Name)
	}
	secs, err := c.Client.Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, &APIError{"list", "Secret", sel, ns, err}
	}
	for _, o := range secs.Items {
		left = append(left, "secret/"+o.Name)
	}
	cms, err := c.Client.ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, &APIError{"list", "ConfigMap", sel, ns, err}
	}
	for _, o := range cms.Items {
		left = append(left, "configmap/"+o.Name)
	}
	return left, nil
}

// Sandbox is a sandbox on the cluster, as sbx kube ps shows it.
type Sandbox struct {
	ID, Name, Namespace string
	Created             time.Time
	// Agent and Gateway are the pods' phases ("" when the pod is gone);
	// ExitCode the agent's exit status once it ended, else -1.
	Agent, Gateway string
	// GatewayReady says the gateway container passes its readiness
	// check; GatewayDeleting that the gateway pod is being deleted
	// (evicted, drained, removed by hand).
	GatewayReady, GatewayDeleting bool
	ExitCode                      int
	Command                       []string
	Image                         string
	// Records are the hosts whose LLM API the gateway pod records for
	// its management API (sbx kube run --record-llm), as its command
	// names them; the recordings go with the pod.
	Records []string
}

// List returns the sandboxes in the namespace, oldest first.
func (c *Cluster) List(ctx context.Context) ([]Sandbox, error) {
	ns := c.Namespace
	cms, err := c.Client.ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSandbox})
	if err != nil {
		return nil, &APIError{"list", "ConfigMap", LabelSandbox, ns, err}
	}
	pods, err := c.Client.Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelSandbox})
	if err != nil {
		return nil, &APIError{"list", "Pod", LabelSandbox, ns, err}
	}
	var out []Sandbox
	for _, cm := range cms.Items {
		id := cm.Labels[LabelSandbox]
		sb := Sandbox{ID: id, Name: cm.Annotations[AnnotationName], Namespace: ns, Created: cm.CreationTimestamp.Time, ExitCode: -1}
		for _, p := range pods.Items {
			if p.Labels[LabelSandbox] != id {
				continue
			}
			switch p.Labels[LabelRole] {
			case RoleGateway:
				sb.Gateway = string(p.Status.Phase)
				sb.GatewayReady = podReady(&p)
				sb.GatewayDeleting = p.DeletionTimestamp != nil
				sb.Records = recordedHosts(&p)
			case RoleAgent:
				sb.Agent = string(p.Status.Phase)
				for _, ct := range p.Spec.Containers {
					if ct.Name == "agent" {
						sb.Command, sb.Image = ct.Command, ct.Image
					}
				}
				if code, ok := agentExit(&p); ok {
					sb.ExitCode = code
				}
			}
		}
		out = append(out, sb)
	}
	slices.SortFunc(out, func(a, b Sandbox) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Find returns the sandbox whose id, name or unique id prefix is ref.
func (c *Cluster) Find(ctx context.Context, ref string) (Sandbox, error) {
	all, err := c.List(ctx)
	if err != nil {
		return Sandbox{}, err
	}
	return FindIn(all, c.Namespace, ref)
}

// FindIn returns the sandbox of all (the sandboxes of namespace ns, as
// List returns them) whose id, name or unique id prefix is ref.
func FindIn(all []Sandbox, ns, ref string) (Sandbox, error) {
	var found, named []Sandbox
	for _, sb := range all {
		if sb.ID == ref {
			return sb, nil
		}
		if sb.Name == ref {
			named = append(named, sb)
		}
		if strings.HasPrefix(sb.ID, ref) {
			found = append(found, sb)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
	default:
		return Sandbox{}, fmt.Errorf("%d sandboxes in namespace %s are named %q; give the id (sbx kube ps lists them)", len(named), ns, ref)
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Sandbox{}, fmt.Errorf("no sandbox %q in namespace %s; sbx kube ps lists them", ref, ns)
	default:
		return Sandbox{}, fmt.Errorf("%q names %d sandboxes in namespace %s; give more of the id", ref, len(found), ns)
	}
}

// recordedHosts are the hosts the gateway pod p records for its
// management API: its gateway container's --record-llm-api flags, as
// gatewayConfig gives them.
func recordedHosts(p *corev1.Pod) []string {
	var hosts []string
	for _, ct := range p.Spec.Containers {
		if ct.Name != "gateway" {
			continue
		}
		for i, a := range ct.Command[:max(len(ct.Command)-1, 0)] {
			if a == flagRecordLLMAPI {
				hosts = append(hosts, ct.Command[i+1])
			}
		}
	}
	return hosts
}

func agentExit(p *corev1.Pod) (int, bool) {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == "agent" && st.State.Terminated != nil {
			return int(st.State.Terminated.ExitCode), true
		}
	}
	return 0, false
}

// WaitAgent waits until the agent container ends and returns its exit
// status. started is called once the container runs (or ended at once).
// It follows the sandbox's pods with a watch (followPods) rather than
// polling them: a pod that cannot run, or a gateway pod that stopped,
// ends the wait with why.
func (c *Cluster) WaitAgent(ctx context.Context, id string, started func()) (int, error) {
	w := agentWait{id: id, started: started}
	var code int
	err := c.followPods(ctx, id, func(pods map[string]*corev1.Pod) (done bool, err error) {
		code, done, err = w.judge(pods)
		return done, err
	})
	return code, err
}

// followPods calls judge with the sandbox's pods, by name: once listed,
// then at every change a watch from there brings (listed again when the
// watch ends: the server's timeout, an expired version), until judge says
// it is done or fails, or ctx is done (its error then).
func (c *Cluster) followPods(ctx context.Context, id string, judge func(pods map[string]*corev1.Pod) (bool, error)) error {
	return c.followSelected(ctx, LabelSandbox+"="+id, judge)
}

// followSelected is followPods for the pods of the label selector sel.
func (c *Cluster) followSelected(ctx context.Context, selector string, judge func(pods map[string]*corev1.Pod) (bool, error)) error {
	sel := metav1.ListOptions{LabelSelector: selector}
	for {
		list, err := c.Client.Pods(c.Namespace).List(ctx, sel)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &APIError{"list", "Pod", sel.LabelSelector, c.Namespace, err}
		}
		pods := map[string]*corev1.Pod{}
		for i := range list.Items {
			pods[list.Items[i].Name] = &list.Items[i]
		}
		if done, err := judge(pods); done || err != nil {
			return err
		}
		opts := sel
		opts.ResourceVersion = list.ResourceVersion
		watcher, err := c.Client.Pods(c.Namespace).Watch(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &APIError{"watch", "Pod", sel.LabelSelector, c.Namespace, err}
		}
		done, err := follow(ctx, watcher, pods, judge)
		watcher.Stop()
		if done || err != nil {
			return err
		}
	}
}

// agentWait is WaitAgent's judgement of the sandbox's pods.
type agentWait struct {
	id      string
	started func()
	once    bool
}

// follow applies the watch's events to pods until judge decides or the
// watch ends.
func follow(ctx context.Context, watcher watch.Interface, pods map[string]*corev1.Pod, judge func(map[string]*corev1.Pod) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-watcher.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(pods, pod.Name)
			} else {
				pods[pod.Name] = pod
			}
			if done, err := judge(pods); done || err != nil {
				return done, err
			}
		}
	}
}

// judge says whether the agent ended (with its status), or why the
// sandbox cannot go on; it calls started once the agent runs.
func (w *agentWait) judge(pods map[string]*corev1.Pod) (int, bool, error) {
	agent, gw := pods[ObjectName(w.id)], pods[GatewayPodName(w.id)]
	if agent == nil {
		return 0, false, fmt.Errorf("the agent pod %s is gone", ObjectName(w.id))
	}
	// The agent's status first: once it ended with a status other than 0
	// the pod's phase turns Failed too.
	if code, ok := agentExit(agent); ok {
		w.start()
		return code, true, nil
	}
	if err := podFailure(agent); err != nil {
		return 0, false, fmt.Errorf("the agent pod %s: %w", agent.Name, err)
	}
	switch {
	case gw == nil:
		return 0, false, fmt.Errorf("%w: pod %s is gone", ErrGatewayEnded, GatewayPodName(w.id))
	case gw.DeletionTimestamp != nil || gw.Status.Phase != corev1.PodRunning:
		return 0, false, fmt.Errorf("%w: pod %s is %s%s", ErrGatewayEnded, gw.Name, gw.Status.Phase, messageSuffix(gw.Status.Reason+" "+gw.Status.Message))
	}
	for _, st := range agent.Status.ContainerStatuses {
		if st.Name == "agent" && st.State.Running != nil {
			w.start()
		}
	}
	return 0, false, nil
}

func (w *agentWait) start() {
	if !w.once && w.started != nil {
		w.once = true
		w.started()
	}
}

// ErrGatewayEnded is WaitAgent's error when the sandbox's gateway pod
// stopped running while its agent ran: the agent is cut off, and its
// rules name an address the cluster may give another pod.
var ErrGatewayEnded = errors.New("the gateway pod ended")

// WaitStarted waits until the agent container runs (or has run).
func (c *Cluster) WaitStarted(ctx context.Context, id string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := false
	_, err := c.WaitAgent(wctx, id, func() { started = true; cancel() })
	if started {
		return nil
	}
	return err
}

// Attach copies the agent container's output to out from when it starts
// until it ends, and returns its exit status.
func (c *Cluster) Attach(ctx context.Context, id string, out io.Writer) (int, error) {
	logsDone := make(chan error, 1)
	code, err := c.WaitAgent(ctx, id, func() {
		// Ends when the agent's output ends (the container exited) or
		// ctx is done.
		go func() {
			rc, err := c.Logs(ctx, id, "agent", true)
			if err == nil {
				_, err = io.Copy(out, rc)
				rc.Close()
			}
			logsDone <- err
		}()
	})
	if err != nil {
		return 0, err
	}
	// The output ends a moment after the container: the log stream
	// closes once the kubelet has read it all.
	select {
	case err = <-logsDone:
	case <-time.After(5 * time.Second):
		err = fmt.Errorf("the agent's output did not end 5 s after it exited; kubectl logs %s -c agent -n %s has it all", ObjectName(id), c.Namespace)
	}
	return code, err
}

// Logs streams a container's output: the gateway's ("gateway", its
// decision records) or the agent's ("agent").
func (c *Cluster) Logs(ctx context.Context, id, container string, follow bool) (io.ReadCloser, error) {
	name := ObjectName(id)
	if container == "gateway" {
		name = GatewayPodName(id)
	}
	rc, err := c.Client.Pods(c.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: container, Follow: follow}).Stream(ctx)
	if err != nil {
		return nil, &APIError{"read the logs of", "Pod", name, c.Namespace, err}
	}
	return rc, nil
}

// DecisionLog streams the sandbox's decision log: the JSON Lines its
// gateway pod writes on standard output. The pod's log mixes in the
// gateway's own messages (standard error): only lines that start with
// "{" are passed on.
func (c *Cluster) DecisionLog(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	rc, err := c.Logs(ctx, id, "gateway", follow)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	// Ends when the log ends or either side is closed.
	go func() {
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 || line[0] != '{' {
				continue
			}
			if _, err := pw.Write(append(line, '\n')); err != nil {
				return
			}
		}
		pw.CloseWithError(sc.Err())
	}()
	return &pipeCloser{pr, rc}, nil
}

// pipeCloser closes the log stream too, which ends the copying goroutine.
type pipeCloser struct {
	*io.PipeReader
	src io.Closer
}

func (p *pipeCloser) Close() error {
	p.src.Close()
	return p.PipeReader.Close()
}

// Token returns the sandbox's management API token, from its Secret.
func (c *Cluster) Token(ctx context.Context, id string) (string, error) {
	sec, err := c.Client.Secrets(c.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	if err != nil {
		return "", &APIError{"get", "Secret", ObjectName(id), c.Namespace, err}
	}
	tok := strings.TrimSpace(string(sec.Data[KeyToken]))
	if tok == "" {
		return "", fmt.Errorf("the Secret %s has no %s", ObjectName(id), KeyToken)
	}
	return tok, nil
}

// ForwardAPI forwards a local port on 127.0.0.1 to the gateway pod's
// management API, through the API server, until ctx is done, and
// returns the local address.
func (c *Cluster) ForwardAPI(ctx context.Context, id string) (string, error) {
	req := c.core.Post().Resource("pods").Namespace(c.Namespace).Name(GatewayPodName(id)).SubResource("portforward")
	transport, upgrader, err := spdy.RoundTripperFor(c.Config)
	if err != nil {
		return "", err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, req.URL())
	if ws, err := portforward.NewSPDYOverWebsocketDialer(req.URL(), c.Config); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	ready := make(chan struct{})
	var errOut strings.Builder
	fw, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", APIPort)}, ready, io.Discard, &errOut)
	if err != nil {
		return "", err
	}
	done := make(chan error, 1)
	// Ends when ctx is done.
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		hint := ""
		if strings.Contains(err.Error(), "forbidden") {
			hint = fmt.Sprintf("; your kubeconfig's user needs create and get on pods/portforward in %s (sbx kube check names what is missing; docs/kubernetes.md lists the rights sbx kube needs)", c.Namespace)
		}
		return "", fmt.Errorf("port-forward to the gateway pod %s: %v%s%s", GatewayPodName(id), err, messageSuffix(errOut.String()), hint)
	case <-ctx.Done():
		return "", ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		return "", fmt.Errorf("port-forward to the gateway pod %s: no local port (%v)", GatewayPodName(id), err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), nil
}
