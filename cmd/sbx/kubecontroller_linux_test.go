package main

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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
	cm, err := user.Client.ConfigMaps(k.ns).Create(ctx, objs.ConfigMap, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The controller ages a sandbox by its oldest object's creation time
	// as the API server recorded it, in whole seconds, rounded down: the
	// grace counts from there, not from when the test's last create
	// returned (up to a second and a few requests later).
	leftMade := cm.CreationTimestamp.Time
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

// agentTLS is what the agent's Go client saw of one HTTPS request
// through the gateway (testdata/httpsget -chain): the serial numbers and
// ends of the leaf and of the CA certificate the gateway showed with it.
type agentTLS struct {
	leafEnd, caSerial, caEnd string
	answer                   string
}

var chainLine = regexp.MustCompile(`(?m)^cert ([01]) serial=([0-9a-f]+) not-after=(\S+) `)

// agentGet makes a new HTTPS connection from the agent to target with a Go
// client that trusts caFile alone, and returns what it saw.
func (k *kubeTest) agentGet(agent, caFile, target string) (agentTLS, error) {
	out, errOut, err := k.exec(agent, "agent", "", "sh", "-c", `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; exec /tmp/httpsget -ca "$1" -chain "$2"`, "sh", caFile, target)
	if err != nil {
		return agentTLS{}, fmt.Errorf("%v\n%s%s", err, out, errOut)
	}
	var r agentTLS
	for _, m := range chainLine.FindAllStringSubmatch(out, -1) {
		if m[1] == "0" {
			r.leafEnd = m[3]
		} else {
			r.caSerial, r.caEnd = m[2], m[3]
		}
	}
	r.answer = chainLine.ReplaceAllString(out, "")
	if r.leafEnd == "" || r.caSerial == "" {
		return r, fmt.Errorf("the agent's client showed no leaf and CA certificate:\n%s", out)
	}
	return r, nil
}

func pemCert(t testing.TB, what string, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate in %q", what, data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

// TestKubeClusterCARenewal: sbx kube controller, run as the documented
// manifest's Deployment with exactly its Role and told a renewal window
// past the CA's 7 days (--renew-before 169h, so that a fresh sandbox's CA
// is due), renews the CA of a running sandbox once, and the agent sees it
// work. Before: the agent, with a Go client that trusts only the CA
// certificate it read from /run/sbx-ca at start, gets a leaf for an
// inspected host from the gateway, shown with that CA. After the
// controller writes the renewed CA (the Secret, then the ConfigMap: both
// hold the same new certificate, of the same name and key, ending later),
// a new connection gets, within the kubelet's volume sync and the
// gateway's 10 s re-read, a leaf issued by the renewed CA, and the same
// client, still with the certificate it read at start, verifies it. The
// agent pod's /run/sbx-ca files get the renewed certificate too. It logs
// how long the renewal took to reach the agent.
func TestKubeClusterCARenewal(t *testing.T) {
	k := newKubeTest(t)
	w := &kubeWorld{kubeTest: k}
	ctx := t.Context()

	// An HTTPS server of the test's own on the node's address, which the
	// sandbox's policy inspects.
	upPEM, upCert := testCertificate(t, kubeNodeIP)
	ln, err := net.Listen("tcp", kubeNodeIP+":0")
	if err != nil {
		t.Fatalf("listening on the node's address %s (the test runs in the cluster's network): %v", kubeNodeIP, err)
	}
	hs := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{upCert}}, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "hello-from-upstream\n")
	})}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	up := ln.Addr().String()
	upCA := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(upCA, upPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	id := w.runSandbox("--upstream-ca", upCA, "--allow", up, "--inspect", up, "--allow-private", kubeNodeIP+"/32")
	agent := kube.ObjectName(id)
	k.copyHTTPSGet(agent)

	// The agent reads its CA at start.
	const atStart = "/tmp/ca-at-start.pem"
	out, errOut, err := w.exec(agent, "agent", "", "sh", "-c", "cp "+sandbox.TrustDir+"/ca.pem "+atStart+" && cat "+atStart)
	if err != nil {
		t.Fatalf("reading the agent's CA: %v\n%s%s", err, out, errOut)
	}
	cm, err := k.cs.CoreV1().ConfigMaps(k.ns).Get(ctx, agent, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out != cm.Data[kube.KeyCACert] {
		t.Fatalf("the agent's %s/ca.pem is not the sandbox's CA certificate in its ConfigMap:\n%s", sandbox.TrustDir, out)
	}
	old := pemCert(t, "the sandbox's CA certificate", []byte(out))
	target := "https://" + up + "/"
	before, err := k.agentGet(agent, atStart, target)
	if err != nil {
		t.Fatalf("the agent's request before renewal: %v", err)
	}
	oldEnd := old.NotAfter.UTC().Format(time.RFC3339)
	if before.caSerial != fmt.Sprintf("%x", old.SerialNumber) || before.caEnd != oldEnd || before.leafEnd != oldEnd || !strings.Contains(before.answer, "hello-from-upstream") {
		t.Fatalf("before renewal the agent saw %+v, want a leaf and CA ending %s, the CA's serial %x, and the upstream's answer", before, oldEnd, old.SerialNumber)
	}

	k.deployController("--renew-before", "169h", "--resync", "5s")
	var renewed *x509.Certificate
	var renewedAt time.Time
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		sec, err := k.cs.CoreV1().Secrets(k.ns).Get(ctx, agent, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ca, err := gateway.ParseCA(sec.Data[kube.KeyCA])
		if err != nil {
			t.Fatalf("the sandbox's Secret's CA: %v", err)
		}
		if c := ca.Certificate(); c.SerialNumber.Cmp(old.SerialNumber) != 0 {
			renewed, renewedAt = c, time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the controller leads with --renew-before 169h, the sandbox's Secret holds its first CA still (serial %x): the controller did not renew it", old.SerialNumber)
		}
	}
	t.Logf("the controller renewed the CA: serial %x, until %s", renewed.SerialNumber, renewed.NotAfter.UTC().Format(time.RFC3339))
	type publicKey interface{ Equal(crypto.PublicKey) bool }
	if !renewed.NotAfter.After(old.NotAfter) || renewed.Subject.String() != old.Subject.String() || !renewed.PublicKey.(publicKey).Equal(old.PublicKey) || !renewed.IsCA {
		t.Errorf("the renewed CA certificate: %s until %s, same key %v; want a CA of the same name (%s) and key ending after %s",
			renewed.Subject, renewed.NotAfter, renewed.PublicKey.(publicKey).Equal(old.PublicKey), old.Subject, oldEnd)
	}
	// The ConfigMap follows the Secret at once.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		cm, err = k.cs.CoreV1().ConfigMaps(k.ns).Get(ctx, agent, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := pemCert(t, "the ConfigMap's ca.pem", []byte(cm.Data[kube.KeyCACert])); c.Equal(renewed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the Secret got the renewed CA, the ConfigMap's ca.pem is not its certificate:\n%s", cm.Data[kube.KeyCACert])
		}
	}
	if !strings.HasSuffix(cm.Data[kube.KeyBundle], cm.Data[kube.KeyCACert]) || strings.Contains(cm.Data[kube.KeyBundle], string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: old.Raw}))) {
		t.Errorf("the ConfigMap's bundle.pem does not end with the renewed certificate alone (of the sandbox's)")
	}

	// The agent, on new connections, with the certificate it read at
	// start: the gateway's leaves are the renewed CA's once the kubelet
	// has updated the gateway pod's file and the gateway read it.
	renewedEnd := renewed.NotAfter.UTC().Format(time.RFC3339)
	const bound = 3 * time.Minute
	var took time.Duration
	for deadline := renewedAt.Add(bound); ; time.Sleep(time.Second) {
		got, err := k.agentGet(agent, atStart, target)
		if err != nil {
			t.Fatalf("%v after the renewal, the agent's request with the CA certificate it read at start: %v", time.Since(renewedAt).Round(time.Second), err)
		}
		if got.caSerial == fmt.Sprintf("%x", renewed.SerialNumber) {
			took = time.Since(renewedAt)
			if got.caEnd != renewedEnd || got.leafEnd != renewedEnd || !strings.Contains(got.answer, "hello-from-upstream") {
				t.Errorf("after the renewal the agent saw %+v, want a leaf and CA ending %s and the upstream's answer", got, renewedEnd)
			}
			break
		}
		if got.caSerial != before.caSerial {
			t.Fatalf("the agent saw a CA of serial %s, neither the first (%s) nor the renewed (%x)", got.caSerial, before.caSerial, renewed.SerialNumber)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the controller renewed the CA, the gateway still serves leaves of the first one (the kubelet's Secret volume sync and the gateway's 10 s re-read should take less)", bound)
		}
	}
	t.Logf("renewal to use: the agent got a leaf of the renewed CA %v after the controller wrote it to the Secret (bound %v)", took.Round(time.Second), bound)
	gwLogs, _, _ := k.kubectlAs(k.adminKubeconfig, "logs", "--all-containers", kube.GatewayPodName(id))
	if !strings.Contains(gwLogs, "CA renewed from") || !strings.Contains(gwLogs, "valid until "+renewedEnd) {
		t.Errorf("the gateway pod's log does not say it took the renewed CA (until %s):\n%s", renewedEnd, gwLogs)
	}

	// The agent pod's trust files follow the ConfigMap.
	for deadline := renewedAt.Add(bound); ; time.Sleep(time.Second) {
		out, errOut, err := w.exec(agent, "agent", "", "cat", sandbox.TrustDir+"/ca.pem")
		if err != nil {
			t.Fatalf("reading the agent's CA: %v\n%s%s", err, out, errOut)
		}
		if out == cm.Data[kube.KeyCACert] {
			t.Logf("the agent pod's %s/ca.pem got the renewed certificate %v after the renewal", sandbox.TrustDir, time.Since(renewedAt).Round(time.Second))
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after the renewal, the agent pod's %s/ca.pem is not the renewed certificate", bound, sandbox.TrustDir)
			break
		}
	}
	// Renewed once: the renewed CA is due too with this window, and is
	// left.
	if n := strings.Count(k.controllerLogs(), "renewing the CA of sandbox "+id); n != 1 {
		t.Errorf("the controller's logs say it renewed the CA of %s %d times, want once:\n%s", id, n, k.controllerLogs())
	}
}
