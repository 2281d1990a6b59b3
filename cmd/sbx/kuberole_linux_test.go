package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sbx-dev/sbx/sandbox/kube"
)

// kubeUser is the ServiceAccount the sbx kube tests run sbx as.
const kubeUser = "sbx-user"

// documentedRole returns the Role docs/kubernetes.md gives as the rights
// sbx kube needs (its example file sbx-kube-role.yaml).
func documentedRole(t testing.TB) *rbacv1.Role {
	t.Helper()
	examples, _ := readExamples(t, "docs/kubernetes.md")
	for _, ex := range examples {
		if ex.kind != "file" || ex.arg != "sbx-kube-role.yaml" {
			continue
		}
		var r rbacv1.Role
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(strings.Join(ex.lines, "\n")), 4096).Decode(&r); err != nil {
			t.Fatalf("docs/kubernetes.md's sbx-kube-role.yaml: %v", err)
		}
		if r.Kind != "Role" || len(r.Rules) == 0 {
			t.Fatalf("docs/kubernetes.md's sbx-kube-role.yaml is a %q with %d rules, want a Role with rules", r.Kind, len(r.Rules))
		}
		return &r
	}
	t.Fatal("docs/kubernetes.md has no example file sbx-kube-role.yaml: the Role sbx kube's users need")
	return nil
}

// asDocumentedUser makes a ServiceAccount in k's namespace bound to the
// documented Role and nothing else, and writes a kubeconfig that is that
// account (a token from the TokenRequest API) for k.sbx: every sbx kube
// command of the tests runs with only the rights the docs list, so one
// that needs another right fails its test. The test's own set-up (the
// namespace, plain pods, kubectl exec) stays the administrator's.
func (k *kubeTest) asDocumentedUser() {
	k.t.Helper()
	role := documentedRole(k.t)
	role.Namespace = k.ns
	path := k.kubeconfigFor(kubeUser, role)
	// The account can do what the docs say and not more: it cannot
	// list the namespace's ServiceAccounts.
	out, errOut, err := k.kubectlAs(path, "auth", "can-i", "list", "serviceaccounts")
	if err == nil || strings.TrimSpace(out) != "no" {
		k.t.Fatalf("the documented user can list ServiceAccounts (%q %q %v): the test would not show a missing right", out, errOut, err)
	}
	k.kubeconfig = path
}

// kubeconfigFor makes a ServiceAccount name in k's namespace bound to
// role (made there too) and nothing else, and returns the path of a
// kubeconfig that is that account, with a token from the TokenRequest
// API.
func (k *kubeTest) kubeconfigFor(name string, role *rbacv1.Role) string {
	k.t.Helper()
	ctx := k.t.Context()
	cs := k.cs
	if _, err := cs.RbacV1().Roles(k.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("Role %s: %v", role.Name, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(k.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: k.ns}},
	}
	if _, err := cs.RbacV1().RoleBindings(k.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	hour := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(k.ns).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("a token for %s: %v", name, err)
	}
	admin, err := clientcmd.LoadFromFile(k.adminKubeconfig)
	if err != nil {
		k.t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: name, Namespace: k.ns}
	cfg.CurrentContext = "test"
	path := filepath.Join(k.t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		k.t.Fatal(err)
	}
	return path
}

// kubectlAs runs the cluster's kubectl with kubeconfig.
func (k *kubeTest) kubectlAs(kubeconfig string, args ...string) (string, string, error) {
	k.t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(k.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", k.ns}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestKubeRoleDocIsTrue: the Role docs/kubernetes.md gives is the one sbx
// kube check asks the API server about.
func TestKubeRoleDocIsTrue(t *testing.T) {
	doc := kube.Each(documentedRole(t).Rules)
	if diff := cmp.Diff(kube.Each(kube.Rights), doc); diff != "" {
		t.Errorf("docs/kubernetes.md's sbx-kube-role.yaml is not kube.Rights (-code +docs):\n%s", diff)
	}
}

// TestKubeClusterCheck: sbx kube check says, before anything is made,
// what the user's rights, the namespace's admission and the network
// plugin allow, and what to ask for.
func TestKubeClusterCheck(t *testing.T) {
	k := newKubeTest(t)
	args := []string{"check", "--gateway-image", k.gwImage, "--image", k.agentImage, "--pull", "Never"}
	out, errOut, code := k.sbx(args...)
	for _, want := range []string{"ok       pods: create, get, list, watch, delete, deletecollection", "ok       pods/portforward: create, get", "admission: ok", "network policy: enforced", "sbx kube run can work here"} {
		if !strings.Contains(out, want) {
			t.Errorf("the documented user's check: no %q in\n%s", want, out)
		}
	}
	if code != 0 || strings.Contains(out, "MISSING") {
		t.Errorf("the documented user's check: exit %d, want 0 and nothing missing\n%s%s", code, out, errOut)
	}
	if left, err := k.cs.CoreV1().Pods(k.ns).List(t.Context(), metav1.ListOptions{LabelSelector: kube.LabelCheck}); err != nil || len(left.Items) > 0 {
		t.Errorf("pods left by the check: %v %v", err, left)
	}

	// A user without one right is told which, as a Role to ask for, and
	// nothing is made.
	role := documentedRole(t)
	role.Name, role.Namespace = "sbx-partial", k.ns
	for i := range role.Rules {
		if slices.Contains(role.Rules[i].Resources, "pods/portforward") {
			role.Rules[i].Verbs = []string{"create"}
		}
	}
	partial := k.kubeconfigFor("sbx-partial", role)
	out, errOut, code = runCLI(t, append([]string{"kube", "--kubeconfig", partial, "-n", k.ns}, args...)...)
	for _, want := range []string{"MISSING  pods/portforward: get", "kind: Role", "resources: [pods/portforward]\n  verbs: [get]", "admission and network policy: not checked without the rights above"} {
		if !strings.Contains(out, want) {
			t.Errorf("a user without get on pods/portforward: no %q in\n%s", want, out)
		}
	}
	if code != exitFailure {
		t.Errorf("a user without get on pods/portforward: exit %d, want %d\n%s", code, exitFailure, errOut)
	}

	// A namespace whose Pod Security level refuses the rules container.
	k.podSecurity("baseline")
	out, errOut, code = k.sbx(args...)
	if code != exitFailure || !strings.Contains(out, "admission: refused") || !strings.Contains(out, "pod-security.kubernetes.io/enforce=privileged") {
		t.Errorf("a baseline namespace: exit %d, want %d and the Pod Security fix\n%s%s", code, exitFailure, out, errOut)
	}
}
