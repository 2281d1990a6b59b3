package main

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// controllerManifest is docs/kubernetes.md's sbx-kube-controller.yaml:
// the controller's ServiceAccount, Role, RoleBinding and Deployment.
type controllerManifest struct {
	sa   *corev1.ServiceAccount
	role *rbacv1.Role
	rb   *rbacv1.RoleBinding
	dep  *appsv1.Deployment
}

func documentedController(t testing.TB) controllerManifest {
	t.Helper()
	examples, _ := readExamples(t, "docs/kubernetes.md")
	var m controllerManifest
	for _, ex := range examples {
		if ex.kind != "file" || ex.arg != "sbx-kube-controller.yaml" {
			continue
		}
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(strings.Join(ex.lines, "\n")), 4096)
		for {
			var raw map[string]any
			if err := dec.Decode(&raw); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("docs/kubernetes.md's sbx-kube-controller.yaml: %v", err)
			}
			b, err := json.Marshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			var into any
			switch raw["kind"] {
			case "ServiceAccount":
				m.sa = &corev1.ServiceAccount{}
				into = m.sa
			case "Role":
				m.role = &rbacv1.Role{}
				into = m.role
			case "RoleBinding":
				m.rb = &rbacv1.RoleBinding{}
				into = m.rb
			case "Deployment":
				m.dep = &appsv1.Deployment{}
				into = m.dep
			default:
				t.Fatalf("docs/kubernetes.md's sbx-kube-controller.yaml: a %v, want a ServiceAccount, Role, RoleBinding and Deployment", raw["kind"])
			}
			if err := json.Unmarshal(b, into); err != nil {
				t.Fatal(err)
			}
		}
		if m.sa == nil || m.role == nil || m.rb == nil || m.dep == nil {
			t.Fatalf("docs/kubernetes.md's sbx-kube-controller.yaml lacks one of ServiceAccount, Role, RoleBinding, Deployment: %+v", m)
		}
		return m
	}
	t.Fatal("docs/kubernetes.md has no example file sbx-kube-controller.yaml: the controller's manifest")
	return m
}

// TestKubeControllerDocIsTrue: the controller's manifest in
// docs/kubernetes.md has kube.ControllerRights as its Role, binds it to
// the ServiceAccount the Deployment runs as, and runs sbx kube controller.
func TestKubeControllerDocIsTrue(t *testing.T) {
	m := documentedController(t)
	if diff := cmp.Diff(kube.Each(kube.ControllerRights), kube.Each(m.role.Rules)); diff != "" {
		t.Errorf("docs/kubernetes.md's sbx-kube-controller.yaml's Role is not kube.ControllerRights (-code +docs):\n%s", diff)
	}
	if m.rb.RoleRef.Kind != "Role" || m.rb.RoleRef.Name != m.role.Name || len(m.rb.Subjects) != 1 || m.rb.Subjects[0].Name != m.sa.Name {
		t.Errorf("the RoleBinding %+v does not bind Role %s to ServiceAccount %s alone", m.rb, m.role.Name, m.sa.Name)
	}
	spec := m.dep.Spec.Template.Spec
	if spec.ServiceAccountName != m.sa.Name || len(spec.Containers) != 1 || !slices.Equal(spec.Containers[0].Command, []string{"/sbx", "kube", "controller"}) {
		t.Errorf("the Deployment runs %v as %q, want /sbx kube controller as %s", spec.Containers, spec.ServiceAccountName, m.sa.Name)
	}
	if _, ok := m.dep.Spec.Template.Labels[kube.LabelSandbox]; ok {
		t.Errorf("the controller's pods carry %s: it would take them for a sandbox's", kube.LabelSandbox)
	}
}

// deployController applies the documented manifest in k's namespace
// with the test's image and args added to its command, and waits until
// one of its pods leads.
func (k *kubeTest) deployController(args ...string) {
	k.t.Helper()
	ctx := k.t.Context()
	m := documentedController(k.t)
	cs := k.cs
	if _, err := cs.CoreV1().ServiceAccounts(k.ns).Create(ctx, m.sa, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(k.ns).Create(ctx, m.role, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	m.rb.Subjects[0].Namespace = k.ns
	if _, err := cs.RbacV1().RoleBindings(k.ns).Create(ctx, m.rb, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	c := &m.dep.Spec.Template.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = k.gwImage, corev1.PullNever
	c.Command = append(c.Command, args...)
	// The test cluster runs no service proxy (kube-router's firewall
	// alone), so the kubernetes Service's address that a pod's
	// in-cluster configuration names leads nowhere: the controller is
	// told the API server's own address, as a cluster's service proxy
	// would reach it.
	admin, err := clientcmd.LoadFromFile(k.adminKubeconfig)
	if err != nil {
		k.t.Fatal(err)
	}
	api, err := url.Parse(admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster].Server)
	if err != nil {
		k.t.Fatal(err)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
	if _, err := cs.AppsV1().Deployments(k.ns).Create(ctx, m.dep, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() {
		if k.t.Failed() {
			out, errOut, _ := k.kubectlAs(k.adminKubeconfig, "logs", "--all-containers", "--prefix", "-l", "app=sbx-kube-controller", "--tail", "50")
			k.t.Logf("the controller's logs:\n%s%s", out, errOut)
		}
	})
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		l, err := cs.CoordinationV1().Leases(k.ns).Get(ctx, kube.ControllerLease, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, m.dep.Name) {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("90 s after the controller's Deployment was made, none of its pods leads (%v %v)", l, err)
		}
	}
}

// controllerLogs are the controller pods' logs.
func (k *kubeTest) controllerLogs() string {
	out, _, _ := k.kubectlAs(k.adminKubeconfig, "logs", "--all-containers", "-l", "app=sbx-kube-controller", "--tail", "-1")
	return out
}

// TestKubeClusterController: sbx kube controller, run as the documented
// manifest's Deployment with exactly its Role, ends a detached sandbox
// whose gateway pod was deleted (its agent pod and every other object
// go), and removes what an interrupted sbx kube run left (a sandbox's
// objects without an agent pod) once they are older than the grace,
// not before.
func TestKubeClusterController(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	const grace = 40 * time.Second
	k.deployController("--grace", grace.String(), "--resync", "2s")

	// What an interrupted sbx kube run leaves: everything but the agent
	// pod, made as the documented user.
	leftID, err := sandbox.NewID()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := gateway.NewCA(leftID, 0)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kube.MakeObjects(kube.Spec{ID: leftID, Namespace: k.ns, Image: k.agentImage, GatewayImage: k.gwImage, PullPolicy: corev1.PullNever,
		Policy: []byte(`{"default":"block"}`), CACert: ca.CertPEM(), CA: caPEM, Token: "left"})
	if err != nil {
		t.Fatal(err)
	}
	user, err := kube.Connect(k.kubeconfig, k.ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	opts := metav1.CreateOptions{}
	if _, err := user.Client.ConfigMaps(k.ns).Create(ctx, objs.ConfigMap, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := user.Client.Secrets(k.ns).Create(ctx, objs.Secret, opts); err != nil {
		t.Fatal(err)
	}
	for _, np := range []*networkingv1.NetworkPolicy{objs.AgentPolicy, objs.GatewayPolicy} {
		if _, err := user.Client.NetworkPolicies(k.ns).Create(ctx, np, opts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := user.Client.Pods(k.ns).Create(ctx, objs.Gateway, opts); err != nil {
		t.Fatal(err)
	}
	leftMade := time.Now()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		k.c.Delete(ctx, leftID)
	})

	// A detached sandbox whose gateway pod is deleted.
	id := w.runSandbox("--allow", "example.com")
	if left := k.objectsLeft(id); len(left) != 6 {
		t.Fatalf("objects of the sandbox: %v, want 6", left)
	}
	zero := int64(0)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, kube.GatewayPodName(id), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		left := k.objectsLeft(id)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after its gateway pod was deleted, the sandbox still has %v (the controller did not end it)", left)
		}
	}
	if logs := k.controllerLogs(); !strings.Contains(logs, "removing sandbox "+id+": its gateway pod is") {
		t.Errorf("the controller's logs do not say it removed %s:\n%s", id, logs)
	}

	// The leftovers stay within the grace, and go after it.
	if since := time.Since(leftMade); since < grace-5*time.Second {
		if left := k.objectsLeft(leftID); len(left) != 5 {
			t.Errorf("%v after they were made, within the grace of %v: the leftovers are %v, want all 5", since.Round(time.Second), grace, left)
		}
	}
	for deadline := leftMade.Add(grace + 60*time.Second); ; time.Sleep(time.Second) {
		left := k.objectsLeft(leftID)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after they were made (grace %v), the leftovers of an interrupted run are still there: %v", time.Since(leftMade).Round(time.Second), grace, left)
		}
	}
	if took := time.Since(leftMade); took < grace {
		t.Errorf("the leftovers went %v after they were made, before the grace of %v", took.Round(time.Second), grace)
	}
	if logs := k.controllerLogs(); !strings.Contains(logs, "removing sandbox "+leftID+": it has no agent pod") {
		t.Errorf("the controller's logs do not say it removed the leftovers %s:\n%s", leftID, logs)
	}
}
