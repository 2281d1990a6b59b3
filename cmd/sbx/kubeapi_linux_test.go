package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// testAPI is the test cluster's whole API as the cluster tests' own
// set-up and checks use it (namespaces, RBAC, Deployments, what sbx kube
// does not do), in the shape of client-go's typed clients
// (cs.CoreV1().Pods(ns).Get(ctx, name, opts)), over plain JSON requests.
// It is not client-go's clientset: that one brings every API group's
// client, apply configurations and types, which a cold CI run compiled
// three times (go vet for two systems, then go test -race) for a handful
// of calls.
type testAPI struct {
	cfg  *rest.Config
	host string
	hc   *http.Client
}

func newTestAPI(cfg *rest.Config) (*testAPI, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &testAPI{cfg: cfg, host: strings.TrimSuffix(cfg.Host, "/"), hc: hc}, nil
}

// do sends in (JSON, if not nil) with method to path and query, and
// decodes the answer into out (if not nil). An answer that is not a
// success is returned as the API's *apierrors.StatusError, so that
// apierrors.IsNotFound and the like work on it.
func (a *testAPI) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := a.host + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st metav1.Status
		if json.Unmarshal(b, &st) != nil || st.Kind != "Status" {
			st = metav1.Status{Status: metav1.StatusFailure, Code: int32(resp.StatusCode), Message: fmt.Sprintf("%s %s: %s: %.200s", method, path, resp.Status, b)}
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// apiResource is one resource's collection at path, of objects T
// (apiVersion/kind gvk) listed as L.
type apiResource[T, L any] struct {
	a    *testAPI
	path string
	gvk  schema.GroupVersionKind
}

func resourceAt[T, L any](a *testAPI, gv schema.GroupVersion, kind, ns, resource string) apiResource[T, L] {
	prefix := "/apis/" + gv.String()
	if gv.Group == "" {
		prefix = "/api/" + gv.Version
	}
	if ns != "" {
		prefix += "/namespaces/" + ns
	}
	return apiResource[T, L]{a: a, path: prefix + "/" + resource, gvk: gv.WithKind(kind)}
}

// typed sets obj's apiVersion and kind, as client-go's encoder does.
func (r apiResource[T, L]) typed(obj *T) *T {
	if o, ok := any(obj).(runtime.Object); ok {
		o.GetObjectKind().SetGroupVersionKind(r.gvk)
	}
	return obj
}

func (r apiResource[T, L]) Get(ctx context.Context, name string, _ metav1.GetOptions) (*T, error) {
	out := new(T)
	return out, r.a.do(ctx, http.MethodGet, r.path+"/"+name, nil, nil, out)
}

func (r apiResource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (*L, error) {
	out := new(L)
	return out, r.a.do(ctx, http.MethodGet, r.path, selectorQuery(opts), nil, out)
}

func (r apiResource[T, L]) Create(ctx context.Context, obj *T, _ metav1.CreateOptions) (*T, error) {
	out := new(T)
	return out, r.a.do(ctx, http.MethodPost, r.path, nil, r.typed(obj), out)
}

func (r apiResource[T, L]) Update(ctx context.Context, obj *T, _ metav1.UpdateOptions) (*T, error) {
	m, ok := any(obj).(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no name", obj)
	}
	out := new(T)
	return out, r.a.do(ctx, http.MethodPut, r.path+"/"+m.GetName(), nil, r.typed(obj), out)
}

func (r apiResource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	return r.a.do(ctx, http.MethodDelete, r.path+"/"+name, nil, &opts, nil)
}

func (r apiResource[T, L]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, list metav1.ListOptions) error {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	return r.a.do(ctx, http.MethodDelete, r.path, selectorQuery(list), &opts, nil)
}

func selectorQuery(opts metav1.ListOptions) url.Values {
	q := url.Values{}
	if opts.LabelSelector != "" {
		q.Set("labelSelector", opts.LabelSelector)
	}
	if opts.FieldSelector != "" {
		q.Set("fieldSelector", opts.FieldSelector)
	}
	return q
}

type apiCoreV1 struct{ a *testAPI }

func (a *testAPI) CoreV1() apiCoreV1 { return apiCoreV1{a} }

func (c apiCoreV1) Pods(ns string) apiResource[corev1.Pod, corev1.PodList] {
	return resourceAt[corev1.Pod, corev1.PodList](c.a, corev1.SchemeGroupVersion, "Pod", ns, "pods")
}

func (c apiCoreV1) ConfigMaps(ns string) apiResource[corev1.ConfigMap, corev1.ConfigMapList] {
	return resourceAt[corev1.ConfigMap, corev1.ConfigMapList](c.a, corev1.SchemeGroupVersion, "ConfigMap", ns, "configmaps")
}

func (c apiCoreV1) Secrets(ns string) apiResource[corev1.Secret, corev1.SecretList] {
	return resourceAt[corev1.Secret, corev1.SecretList](c.a, corev1.SchemeGroupVersion, "Secret", ns, "secrets")
}

func (c apiCoreV1) Namespaces() apiResource[corev1.Namespace, corev1.NamespaceList] {
	return resourceAt[corev1.Namespace, corev1.NamespaceList](c.a, corev1.SchemeGroupVersion, "Namespace", "", "namespaces")
}

func (c apiCoreV1) Nodes() apiResource[corev1.Node, corev1.NodeList] {
	return resourceAt[corev1.Node, corev1.NodeList](c.a, corev1.SchemeGroupVersion, "Node", "", "nodes")
}

// apiServiceAccounts are the ServiceAccounts, with their tokens.
type apiServiceAccounts struct {
	apiResource[corev1.ServiceAccount, corev1.ServiceAccountList]
}

func (c apiCoreV1) ServiceAccounts(ns string) apiServiceAccounts {
	return apiServiceAccounts{resourceAt[corev1.ServiceAccount, corev1.ServiceAccountList](c.a, corev1.SchemeGroupVersion, "ServiceAccount", ns, "serviceaccounts")}
}

// CreateToken asks for a token of the ServiceAccount name.
func (s apiServiceAccounts) CreateToken(ctx context.Context, name string, req *authv1.TokenRequest, _ metav1.CreateOptions) (*authv1.TokenRequest, error) {
	req.TypeMeta = metav1.TypeMeta{APIVersion: authv1.SchemeGroupVersion.String(), Kind: "TokenRequest"}
	out := new(authv1.TokenRequest)
	return out, s.a.do(ctx, http.MethodPost, s.path+"/"+name+"/token", nil, req, out)
}

// RESTClient is a REST client of the core group, for raw requests.
func (c apiCoreV1) RESTClient() rest.Interface {
	cfg := rest.CopyConfig(c.a.cfg)
	cfg.APIPath, cfg.GroupVersion = "/api", &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(cfg, c.a.hc)
	if err != nil {
		panic(fmt.Sprintf("a REST client of the test cluster: %v", err))
	}
	return rc
}

type apiNetworkingV1 struct{ a *testAPI }

func (a *testAPI) NetworkingV1() apiNetworkingV1 { return apiNetworkingV1{a} }

func (n apiNetworkingV1) NetworkPolicies(ns string) apiResource[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList] {
	return resourceAt[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList](n.a, networkingv1.SchemeGroupVersion, "NetworkPolicy", ns, "networkpolicies")
}

type apiRbacV1 struct{ a *testAPI }

func (a *testAPI) RbacV1() apiRbacV1 { return apiRbacV1{a} }

func (r apiRbacV1) Roles(ns string) apiResource[rbacv1.Role, rbacv1.RoleList] {
	return resourceAt[rbacv1.Role, rbacv1.RoleList](r.a, rbacv1.SchemeGroupVersion, "Role", ns, "roles")
}

func (r apiRbacV1) RoleBindings(ns string) apiResource[rbacv1.RoleBinding, rbacv1.RoleBindingList] {
	return resourceAt[rbacv1.RoleBinding, rbacv1.RoleBindingList](r.a, rbacv1.SchemeGroupVersion, "RoleBinding", ns, "rolebindings")
}

type apiAppsV1 struct{ a *testAPI }

func (a *testAPI) AppsV1() apiAppsV1 { return apiAppsV1{a} }

func (p apiAppsV1) Deployments(ns string) apiResource[appsv1.Deployment, appsv1.DeploymentList] {
	return resourceAt[appsv1.Deployment, appsv1.DeploymentList](p.a, appsv1.SchemeGroupVersion, "Deployment", ns, "deployments")
}

type apiCoordinationV1 struct{ a *testAPI }

func (a *testAPI) CoordinationV1() apiCoordinationV1 { return apiCoordinationV1{a} }

func (c apiCoordinationV1) Leases(ns string) apiResource[coordinationv1.Lease, coordinationv1.LeaseList] {
	return resourceAt[coordinationv1.Lease, coordinationv1.LeaseList](c.a, coordinationv1.SchemeGroupVersion, "Lease", ns, "leases")
}
