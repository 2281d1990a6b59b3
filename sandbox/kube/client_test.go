package kube

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// TestRESTClientRequests: the Client Connect makes asks an API server
// (a stand-in on loopback) what client-go's clientset would: each call's
// method, path, query and body, as the kubeconfig's user, and reads what
// the server answers.
func TestRESTClientRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	decoder := serializer.NewCodecFactory(scheme()).UniversalDeserializer()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			_, gvk, err := decoder.Decode(b, nil, nil)
			if err != nil {
				t.Errorf("%s: the body does not decode: %v", line, err)
			} else {
				line += " " + gvk.Kind
			}
		}
		if r.Header.Get("Authorization") != "Bearer the-token" || r.UserAgent() != "sbx" {
			line += " as " + r.Header.Get("Authorization") + " " + r.UserAgent()
		}
		mu.Lock()
		got = append(got, line)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/log"):
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "the agent's output\n")
		case r.URL.Query().Get("watch") == "true":
			io.WriteString(w, `{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"agent","resourceVersion":"8"}}}`+"\n")
		case strings.HasSuffix(r.URL.Path, "/networkpolicies"):
			io.WriteString(w, `{"kind":"NetworkPolicyList","apiVersion":"networking.k8s.io/v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"sbx-1a2b3c4d-agent"}}]}`)
		case strings.HasSuffix(r.URL.Path, "/nodes"):
			io.WriteString(w, `{"kind":"NodeList","apiVersion":"v1","items":[{"metadata":{"name":"node1"}}]}`)
		case strings.Contains(r.URL.Path, "/secrets/"):
			io.WriteString(w, `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"sbx-1a2b3c4d"},"data":{"token":"dG9r"}}`)
		case strings.HasSuffix(r.URL.Path, "/pods"):
			io.WriteString(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"agent","uid":"u1"}}`)
		default:
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: the-token}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
current-context: x
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Connect(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	made, err := c.Client.Pods(c.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "sbx", DryRun: []string{metav1.DryRunAll}})
	if err != nil || made.UID != "u1" {
		t.Errorf("Create: got %v, %v; want the server's pod (uid u1)", made, err)
	}
	if sec, err := c.Client.Secrets(c.Namespace).Get(ctx, "sbx-1a2b3c4d", metav1.GetOptions{}); err != nil || string(sec.Data["token"]) != "tok" {
		t.Errorf("Get: got %v, %v; want the Secret with its token", sec, err)
	}
	sel := metav1.ListOptions{LabelSelector: LabelSandbox + "=1a2b3c4d"}
	if nps, err := c.Client.NetworkPolicies(c.Namespace).List(ctx, sel); err != nil || len(nps.Items) != 1 || nps.ResourceVersion != "7" {
		t.Errorf("List: got %v, %v; want one NetworkPolicy at version 7", nps, err)
	}
	if nodes, err := c.Client.Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 1 {
		t.Errorf("List of nodes: got %v, %v; want one", nodes, err)
	}
	grace := int64(0)
	if err := c.Client.ConfigMaps(c.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, sel); err != nil {
		t.Errorf("DeleteCollection: %v", err)
	}
	w, err := c.Client.Pods(c.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector, ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Modified || ev.Object.(*corev1.Pod).ResourceVersion != "8" {
		t.Errorf("Watch: got %v %v, want the pod MODIFIED at version 8", ev.Type, ev.Object)
	}
	w.Stop()
	logs, err := c.Logs(ctx, "1a2b3c4d", "agent", true)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(logs)
	logs.Close()
	if string(out) != "the agent's output\n" {
		t.Errorf("Logs: got %q", out)
	}
	want := []string{
		"POST /api/v1/namespaces/ns/pods?dryRun=All&fieldManager=sbx Pod",
		"GET /api/v1/namespaces/ns/secrets/sbx-1a2b3c4d?",
		"GET /apis/networking.k8s.io/v1/namespaces/ns/networkpolicies?labelSelector=sbx.dev%2Fsandbox%3D1a2b3c4d",
		"GET /api/v1/nodes?",
		"DELETE /api/v1/namespaces/ns/configmaps?labelSelector=sbx.dev%2Fsandbox%3D1a2b3c4d DeleteOptions",
		"GET /api/v1/namespaces/ns/pods?labelSelector=sbx.dev%2Fsandbox%3D1a2b3c4d&resourceVersion=7&watch=true",
		"GET /api/v1/namespaces/ns/pods/sbx-1a2b3c4d/log?container=agent&follow=true",
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestRESTClientRateLimit: a kubeconfig sets no rate limit (client-go's
// default would then be 5 requests a second after 10, for each API group
// apart, which sbx kube run waited on): Connect's Client has one limit,
// defaultQPS after defaultBurst, for all its API groups.
func TestRESTClientRateLimit(t *testing.T) {
	c := newFakeAPI(t).connect("the-token")
	rc := c.Client.(*restClient)
	lim := rc.core.GetRateLimiter()
	if lim == nil {
		t.Fatal("the core API group's client has no rate limiter")
	}
	if got := lim.QPS(); got != defaultQPS {
		t.Errorf("got QPS %v, want %v", got, defaultQPS)
	}
	for name, g := range map[string]rest.Interface{"networking": rc.networking, "coordination": rc.coordination} {
		if g.GetRateLimiter() != lim {
			t.Errorf("the %s API group's client has a rate limiter of its own, want the one of all groups", name)
		}
	}
	// A burst of requests, as sbx kube run sends them, is not held back.
	for i := range defaultBurst {
		if !lim.TryAccept() {
			t.Fatalf("request %d of a burst of %d held back", i+1, defaultBurst)
		}
	}
}
