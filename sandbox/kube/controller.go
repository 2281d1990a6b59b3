package kube

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ControllerLease is the name of the Lease sbx kube controller elects its
// leader with, in the namespace it watches.
const ControllerLease = "sbx-kube-controller"

// Controller watches the sandboxes of one namespace (sbx kube controller,
// docs/kubernetes.md) with client-go's informers over pods and
// ConfigMaps, and, while it leads (Elector), ends a sandbox whose
// gateway pod is gone, renews a sandbox's CA before it expires, and
// removes what an interrupted sbx kube run left.
type Controller struct {
	Cluster *Cluster
	// Identity is this process's name in the Lease (the pod's name).
	Identity string
	// Grace is how old the objects of a sandbox without an agent pod
	// must be before they are removed: sbx kube run makes the agent pod
	// once its gateway pod has its address, within GatewayWait.
	Grace time.Duration
	// RenewBefore is how long before its CA expires a sandbox's CA is
	// renewed. A window at or above the renewed CA's validity (7 days)
	// makes every CA due, the renewed one too: such a controller renews
	// each sandbox's CA once, when it first sees it running, and not
	// again (a drill of renewal, as the project's cluster test runs).
	RenewBefore time.Duration
	// Resync is how often every sandbox is judged again without an
	// event (the grace period and the CA's expiry pass without one).
	Resync time.Duration
	// RenewCA returns the sandbox CA of caPEM (its certificate and key,
	// the Secret's KeyCA) with a new certificate, as PEM: the
	// certificate alone and with the key. sbx kube controller gives the
	// gateway's (the same name and key, valid MaxCAValidity from now).
	RenewCA func(caPEM []byte) (certPEM, newCAPEM []byte, err error)
	// Elector's durations; zero for client-go's usual.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Out gets a line for each thing the controller does.
	Out io.Writer

	// renewed is, by sandbox, this process's last renewal of its CA.
	renewed map[string]renewal
}

// renewal is one renewal of a sandbox's CA by the controller.
type renewal struct {
	// from is the resourceVersion of the ConfigMap whose CA was renewed:
	// until the informer shows the renewed one, the sandbox is not
	// renewed again.
	from string
	// final says the renewed CA was itself due (RenewBefore at or above
	// its validity): the sandbox is not renewed again at all, lest every
	// look renew it.
	final bool
}

// ControllerRights are the rules of the Role sbx kube controller needs in
// the namespace it watches, and no more: docs/kubernetes.md prints them in
// the controller's manifest, and the project's cluster test runs the
// controller bound to exactly the page's Role. Lists and watches feed the
// informers; Cluster.Delete removes a sandbox with deletecollection by
// its label and lists until it is gone; a renewal gets and updates the
// Secret and updates the ConfigMap; the Lease elects the leader.
var ControllerRights = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "deletecollection"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch", "update", "deletecollection"}},
	{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "update", "deletecollection"}},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "deletecollection"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
}

// The controller's defaults.
const (
	DefaultControllerGrace  = 10 * time.Minute
	DefaultRenewBefore      = 48 * time.Hour
	DefaultControllerResync = 30 * time.Second
)

// Run watches until ctx ends, acting while it leads; it returns
// ErrLeaseLost when it lost the lead (its caller exits, and is started
// again), else ctx's error.
func (c *Controller) Run(ctx context.Context) error {
	if c.RenewCA == nil {
		return errors.New("kube: Controller.RenewCA is required")
	}
	ns := c.Cluster.Namespace
	pods := c.informer(&corev1.Pod{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.Cluster.Client.Pods(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Cluster.Client.Pods(ns).Watch(ctx, o)
		})
	cms := c.informer(&corev1.ConfigMap{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.Cluster.Client.ConfigMaps(ns).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Cluster.Client.ConfigMaps(ns).Watch(ctx, o)
		})
	poke := make(chan struct{}, 1)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick(poke) },
		UpdateFunc: func(any, any) { kick(poke) },
		DeleteFunc: func(any) { kick(poke) },
	}
	for _, inf := range []cache.SharedIndexInformer{pods, cms} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		go inf.RunWithContext(ctx) // ends with ctx
	}
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, cms.HasSynced) {
		return ctx.Err()
	}
	c.say("sbx kube controller: watching namespace %s as %s", ns, c.Identity)
	e := &Elector{Leases: c.Cluster.Client.Leases(ns), Name: ControllerLease, Identity: c.Identity,
		LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod}
	return e.Run(ctx, func(ctx context.Context) {
		c.say("sbx kube controller: %s leads", c.Identity)
		resync := c.Resync
		if resync <= 0 {
			resync = DefaultControllerResync
		}
		tick := time.NewTicker(resync)
		defer tick.Stop()
		for {
			c.Sweep(ctx, pods.GetStore().List(), cms.GetStore().List())
			select {
			case <-ctx.Done():
				return
			case <-poke:
			case <-tick.C:
			}
		}
	})
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// informer is an informer of the namespace's objects that carry
// LabelSandbox.
func (c *Controller) informer(obj runtime.Object, list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = LabelSandbox
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = LabelSandbox
			return watchFn(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
}

func (c *Controller) say(format string, args ...any) {
	if c.Out != nil {
		fmt.Fprintf(c.Out, format+"\n", args...)
	}
}

// observed is what the informers know of one sandbox.
type observed struct {
	id             string
	configMap      *corev1.ConfigMap
	agent, gateway *corev1.Pod
	// made is when its oldest object was made.
	made time.Time
}

// Verdicts of Judge.
const (
	Leave    = ""
	EndGone  = "end"      // the gateway pod is gone: delete the sandbox
	Leftover = "leftover" // no agent pod past the grace: delete what is there
	RenewCA  = "renew-ca" // the CA expires within RenewBefore
)

// Judge says what the controller does with a sandbox, and why, at now.
func (c *Controller) Judge(now time.Time, o observed) (verdict, why string) {
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultControllerGrace
	}
	renewBefore := c.renewBefore()
	if o.agent == nil {
		if age := now.Sub(o.made); age > grace {
			return Leftover, fmt.Sprintf("it has no agent pod %v after it was made (an interrupted sbx kube run, or an agent pod removed by hand)", age.Round(time.Second))
		}
		return Leave, ""
	}
	if gw := o.gateway; gw == nil || gw.DeletionTimestamp != nil || gw.Status.Phase == corev1.PodFailed || gw.Status.Phase == corev1.PodSucceeded {
		state := "gone"
		if gw != nil && gw.DeletionTimestamp != nil {
			state = "being deleted"
		} else if gw != nil {
			state = string(gw.Status.Phase)
		}
		return EndGone, fmt.Sprintf("its gateway pod is %s: its agent is cut off, and its rules name an address the cluster may give another pod", state)
	}
	if o.configMap != nil && o.gateway.Status.Phase == corev1.PodRunning {
		// One that expired is not renewed (the gateway refuses to read
		// it, and its leaves failed already): sbx kube stop.
		if end, ok := certEnd([]byte(o.configMap.Data[KeyCACert])); ok && end.Sub(now) < renewBefore && end.After(now) {
			return RenewCA, fmt.Sprintf("its CA expires at %s", end.UTC().Format(time.RFC3339))
		}
	}
	return Leave, ""
}

func (c *Controller) renewBefore() time.Duration {
	if c.RenewBefore <= 0 {
		return DefaultRenewBefore
	}
	return c.RenewBefore
}

// certEnd is the end of the validity of the PEM certificate.
func certEnd(certPEM []byte) (time.Time, bool) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return time.Time{}, false
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, false
	}
	return cert.NotAfter, true
}

// Sweep judges every sandbox of the informers' pods and ConfigMaps and
// does what Judge says.
func (c *Controller) Sweep(ctx context.Context, pods, configMaps []any) {
	now := time.Now()
	all := map[string]*observed{}
	get := func(m metav1.Object) *observed {
		id := m.GetLabels()[LabelSandbox]
		if !ValidID(id) {
			return nil
		}
		o := all[id]
		if o == nil {
			o = &observed{id: id, made: m.GetCreationTimestamp().Time}
			all[id] = o
		}
		if t := m.GetCreationTimestamp().Time; t.Before(o.made) {
			o.made = t
		}
		return o
	}
	for _, x := range configMaps {
		if cm, ok := x.(*corev1.ConfigMap); ok {
			if o := get(cm); o != nil {
				o.configMap = cm
			}
		}
	}
	for _, x := range pods {
		p, ok := x.(*corev1.Pod)
		if !ok {
			continue
		}
		o := get(p)
		if o == nil {
			continue
		}
		switch p.Name {
		case ObjectName(o.id):
			o.agent = p
		case GatewayPodName(o.id):
			o.gateway = p
		}
	}
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for id := range c.renewed {
		if all[id] == nil {
			delete(c.renewed, id)
		}
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		verdict, why := c.Judge(now, *all[id])
		switch verdict {
		case EndGone, Leftover:
			c.say("sbx kube controller: removing sandbox %s: %s", id, why)
			if err := c.Cluster.Delete(ctx, id); err != nil {
				c.say("sbx kube controller: removing sandbox %s: %v", id, err)
			}
		case RenewCA:
			cm := all[id].configMap
			if last, ok := c.renewed[id]; ok && (last.final || last.from == cm.ResourceVersion) {
				continue // renewed; the informer has not shown it yet, or it is due at once
			}
			c.say("sbx kube controller: renewing the CA of sandbox %s: %s", id, why)
			end, err := c.renew(ctx, cm)
			if err != nil {
				c.say("sbx kube controller: renewing the CA of sandbox %s: %v", id, err)
				continue
			}
			if c.renewed == nil {
				c.renewed = map[string]renewal{}
			}
			final := time.Until(end) < c.renewBefore()
			c.renewed[id] = renewal{from: cm.ResourceVersion, final: final}
			if final {
				c.say("sbx kube controller: renewed the CA of sandbox %s until %s, within --renew-before %v already: not renewing it again", id, end.UTC().Format(time.RFC3339), c.renewBefore())
			}
		}
	}
}

// renew writes a renewed CA into the sandbox's Secret, which its gateway
// pod reads again (sbx gateway --ca), and its certificate into the
// ConfigMap, which the agent pod's trust bundle is mounted from: the
// Secret first, since a client that trusts the old certificate verifies
// the renewed CA's leaves too (the same name and key) until the old one
// expires. It returns the renewed certificate's end.
func (c *Controller) renew(ctx context.Context, cm *corev1.ConfigMap) (time.Time, error) {
	ns := c.Cluster.Namespace
	id := cm.Labels[LabelSandbox]
	sec, err := c.Cluster.Client.Secrets(ns).Get(ctx, ObjectName(id), metav1.GetOptions{})
	if err != nil {
		return time.Time{}, &APIError{"get", "Secret", ObjectName(id), ns, err}
	}
	certPEM, caPEM, err := c.RenewCA(sec.Data[KeyCA])
	if err != nil {
		return time.Time{}, err
	}
	end, ok := certEnd(certPEM)
	if !ok {
		return time.Time{}, errors.New("the renewed CA's certificate does not parse")
	}
	sec = sec.DeepCopy()
	sec.Data[KeyCA] = caPEM
	if _, err := c.Cluster.Client.Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{FieldManager: "sbx"}); err != nil {
		return time.Time{}, &APIError{"update", "Secret", sec.Name, ns, err}
	}
	cm = cm.DeepCopy()
	old := cm.Data[KeyCACert]
	bundle, found := strings.CutSuffix(cm.Data[KeyBundle], old)
	if !found {
		bundle += "\n"
	}
	cm.Data[KeyCACert], cm.Data[KeyBundle] = string(certPEM), bundle+string(certPEM)
	if _, err := c.Cluster.Client.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "sbx"}); err != nil {
		if apierrors.IsConflict(err) {
			return time.Time{}, fmt.Errorf("the ConfigMap %s changed meanwhile; its CA is renewed at the next look: %w", cm.Name, err)
		}
		return time.Time{}, &APIError{"update", "ConfigMap", cm.Name, ns, err}
	}
	return end, nil
}
