package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the part of the Kubernetes API that sbx kube uses: the
// sandbox's objects (pods, ConfigMaps, Secrets, NetworkPolicies), the
// nodes, and the Leases sbx kube controller elects its leader with.
// Connect's Client speaks to the API server through client-go's REST
// client with a scheme of these three API groups alone, not through
// client-go's clientset, whose scheme of every API group every sbx
// process would build at its start (docs/performance.md). The methods are
// those of client-go's typed clients; the tests run it against a stand-in
// API server.
type Client interface {
	Pods(namespace string) PodClient
	ConfigMaps(namespace string) ResourceClient[*corev1.ConfigMap, *corev1.ConfigMapList]
	Secrets(namespace string) ResourceClient[*corev1.Secret, *corev1.SecretList]
	NetworkPolicies(namespace string) ResourceClient[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList]
	Nodes() ResourceClient[*corev1.Node, *corev1.NodeList]
	Leases(namespace string) ResourceClient[*coordinationv1.Lease, *coordinationv1.LeaseList]
}

// ResourceClient makes, reads, follows and removes the objects of one
// resource (T, listed as L), as client-go's typed clients do.
type ResourceClient[T, L any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error
}

// PodClient is the ResourceClient of pods, with their logs.
type PodClient interface {
	ResourceClient[*corev1.Pod, *corev1.PodList]
	GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request
}

// codecs are the codecs of the API groups Client speaks (meta, core/v1,
// networking.k8s.io/v1, coordination.k8s.io/v1) and the codec of query parameters, made when a
// command first connects, not at every sbx process's start.
var codecs = sync.OnceValues(func() (runtime.NegotiatedSerializer, runtime.ParameterCodec) {
	s := scheme()
	return rest.CodecFactoryForGeneratedClient(s, serializer.NewCodecFactory(s)).WithoutConversion(), runtime.NewParameterCodec(s)
})

// scheme returns a scheme of the API groups Client speaks.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kube: the API scheme: %v", err))
		}
	}
	return s
}

// restClient is Connect's Client: one REST client per API group, over
// one HTTP client and one rate limiter.
type restClient struct {
	core, networking, coordination rest.Interface
	params                         runtime.ParameterCodec
}

// The rate of requests a Client sends at most when its config sets
// none: defaultBurst at once, then defaultQPS a second. client-go's own default (5 a
// second after 10, and one such limit for each API group) held sbx kube
// run back: it makes about 15 requests before the agent runs, and a wait
// for the pods polled at 5 a second, so its later requests waited up to
// 200 ms each for the limiter. The API server protects itself from a
// busy client (API Priority and Fairness); these bound a runaway loop.
const (
	defaultQPS   = 50
	defaultBurst = 100
)

// newRESTClient returns the Client of cfg: its rate limit is cfg's, or
// defaultQPS and defaultBurst when cfg sets none; one limit for all the
// API groups.
func newRESTClient(cfg *rest.Config) (*restClient, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil {
		if cfg.QPS == 0 && cfg.Burst == 0 {
			cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
		}
		if cfg.QPS > 0 {
			if cfg.Burst <= 0 {
				return nil, fmt.Errorf("the kubeconfig's burst must be above 0 where its QPS is")
			}
			cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
		}
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cf, params := codecs()
	group := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = cf
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	core, err := group(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	networking, err := group(networkingv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	coordination, err := group(coordinationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &restClient{core: core, networking: networking, coordination: coordination, params: params}, nil
}

func (c *restClient) Pods(namespace string) PodClient {
	return pods{resourceFor[corev1.Pod, corev1.PodList](c.core, c.params, "pods", namespace)}
}

func (c *restClient) ConfigMaps(namespace string) ResourceClient[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resourceFor[corev1.ConfigMap, corev1.ConfigMapList](c.core, c.params, "configmaps", namespace)
}

func (c *restClient) Secrets(namespace string) ResourceClient[*corev1.Secret, *corev1.SecretList] {
	return resourceFor[corev1.Secret, corev1.SecretList](c.core, c.params, "secrets", namespace)
}

func (c *restClient) NetworkPolicies(namespace string) ResourceClient[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return resourceFor[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList](c.networking, c.params, "networkpolicies", namespace)
}

func (c *restClient) Nodes() ResourceClient[*corev1.Node, *corev1.NodeList] {
	return resourceFor[corev1.Node, corev1.NodeList](c.core, c.params, "nodes", "")
}

func (c *restClient) Leases(namespace string) ResourceClient[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return resourceFor[coordinationv1.Lease, coordinationv1.LeaseList](c.coordination, c.params, "leases", namespace)
}

// object is a pointer to an API type: what a request's body or result is.
type object[T any] interface {
	*T
	runtime.Object
}

// restResource is the ResourceClient of one resource (its plural name) in one
// namespace ("" for a resource of the whole cluster), as client-go's
// generated clients make their requests.
type restResource[T, L any, PT object[T], PL object[L]] struct {
	client    rest.Interface
	params    runtime.ParameterCodec
	name      string
	namespace string
}

func resourceFor[T, L any, PT object[T], PL object[L]](client rest.Interface, params runtime.ParameterCodec, name, namespace string) restResource[T, L, PT, PL] {
	return restResource[T, L, PT, PL]{client: client, params: params, name: name, namespace: namespace}
}

// request starts a request of the resource.
func (r restResource[T, L, PT, PL]) request(req *rest.Request) *rest.Request {
	return req.UseProtobufAsDefaultIfPreferred(true).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name)
}

func (r restResource[T, L, PT, PL]) Create(ctx context.Context, obj PT, opts metav1.CreateOptions) (PT, error) {
	out := PT(new(T))
	err := r.request(r.client.Post()).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (r restResource[T, L, PT, PL]) Get(ctx context.Context, name string, opts metav1.GetOptions) (PT, error) {
	out := PT(new(T))
	err := r.request(r.client.Get()).Name(name).VersionedParams(&opts, r.params).Do(ctx).Into(out)
	return out, err
}

func (r restResource[T, L, PT, PL]) Update(ctx context.Context, obj PT, opts metav1.UpdateOptions) (PT, error) {
	out := PT(new(T))
	name := any(obj).(metav1.Object).GetName()
	err := r.request(r.client.Put()).Name(name).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (r restResource[T, L, PT, PL]) List(ctx context.Context, opts metav1.ListOptions) (PL, error) {
	out := PL(new(L))
	err := r.request(r.client.Get()).VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

func (r restResource[T, L, PT, PL]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.client.Get()).VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

func (r restResource[T, L, PT, PL]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	return r.request(r.client.Delete()).VersionedParams(&listOpts, r.params).Timeout(timeoutOf(listOpts)).Body(&opts).Do(ctx).Error()
}

// timeoutOf is the time a list or watch may take, from its options (0:
// the client's own).
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// pods is the PodClient of one namespace.
type pods struct {
	restResource[corev1.Pod, corev1.PodList, *corev1.Pod, *corev1.PodList]
}

func (p pods) GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request {
	return p.client.Get().Namespace(p.namespace).Name(name).Resource("pods").SubResource("log").VersionedParams(opts, p.params)
}
