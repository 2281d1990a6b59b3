package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeUser is the ServiceAccount the sbx kube tests run sbx as.
const kubeUser = "sbx-user"

// documentedRole returns the Role docs/kubernetes.md gives as the rights
// sbx kube needs (its example file sbx-kube-role.yaml).
func documentedRole(t *testing.T) *rbacv1.Role {
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
	ctx := k.t.Context()
	role := documentedRole(k.t)
	role.Namespace = k.ns
	cs := k.cs
	if _, err := cs.RbacV1().Roles(k.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("the documented Role: %v", err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(k.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: kubeUser}}, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: kubeUser, Namespace: k.ns}},
	}
	if _, err := cs.RbacV1().RoleBindings(k.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	hour := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(k.ns).CreateToken(ctx, kubeUser, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("a token for %s: %v", kubeUser, err)
	}
	admin, err := clientcmd.LoadFromFile(k.adminKubeconfig)
	if err != nil {
		k.t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = cluster
	cfg.AuthInfos[kubeUser] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: kubeUser, Namespace: k.ns}
	cfg.CurrentContext = "test"
	path := filepath.Join(k.t.TempDir(), "user.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		k.t.Fatal(err)
	}
	k.kubeconfig = path
	// The account can do what the docs say and not more: it cannot
	// list the namespace's ServiceAccounts.
	out, errOut, err := k.kubectlAs(path, "auth", "can-i", "list", "serviceaccounts")
	if err == nil || strings.TrimSpace(out) != "no" {
		k.t.Fatalf("the documented user can list ServiceAccounts (%q %q %v): the test would not show a missing right", out, errOut, err)
	}
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
