package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// kubeStandIn is a stand-in for a cluster's API server (TLS, on
// loopback) with one sandbox, 1a2b3c4d in namespace ns1, whose gateway
// pod runs and is ready and whose agent pod runs: its ConfigMap's name
// annotation and its agent's command are an attacker's markup and
// controls. Its gateway pod's log holds one decision. It records each
// request's method and path with its query.
func kubeStandIn(t *testing.T) (kubeconfig string, requests func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		labels := `"labels":{"sbx.dev/sandbox":"1a2b3c4d","sbx.dev/role":%q}`
		switch r.URL.Path {
		case "/api/v1/namespaces/ns1/configmaps":
			io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"sbx-1a2b3c4d","namespace":"ns1",`+
				`"labels":{"sbx.dev/sandbox":"1a2b3c4d"},"annotations":{"sbx.dev/name":"<b>agent</b>\u202e"},"creationTimestamp":"2026-12-02T10:00:00Z"}}]}`)
		case "/api/v1/namespaces/ns1/pods":
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[`+
				`{"metadata":{"name":"sbx-1a2b3c4d-gateway","namespace":"ns1",`+labels+`},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}},`+
				`{"metadata":{"name":"sbx-1a2b3c4d","namespace":"ns1",`+labels+`},"spec":{"containers":[{"name":"agent","image":"busybox","command":["sh","-c","echo \"<iframe src=//evil.test>\"\u001b[2J"]}]},"status":{"phase":"Running"}}]}`,
				"gateway", "agent")
		case "/api/v1/namespaces/ns1/pods/sbx-1a2b3c4d-gateway/log":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "sbx gateway: listening\n")
			io.WriteString(w, `{"v":1,"seq":1,"time":"2026-12-02T10:00:01Z","event":"decision","kind":"http","method":"GET","host":"blocked.example","port":80,"path":"/","action":"block","enforced":true,"rule":"default","reason":"no rule allows it"}`+"\n")
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: the-token}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: other}}]
current-context: x
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// uiGet logs in with the printed URL (once) and returns GET path's status
// and body.
func uiGet(t *testing.T, c *http.Client, uiURL, path string) (int, string) {
	t.Helper()
	u, err := url.Parse(uiURL)
	if err != nil {
		t.Fatal(err)
	}
	if c.Jar.Cookies(u) == nil {
		resp, err := c.Get(uiURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	base := uiURL[:strings.Index(uiURL, "/?")]
	resp, err := c.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestUIKubeSandboxes: sbx ui --kubeconfig F -n NS lists the cluster's
// sandboxes beside this host's (which are none here), as on the cluster,
// with their health, from a stand-in API server, by their label; what
// the cluster says of them (a name annotation, a command) is escaped;
// the audit page reads a cluster sandbox's decision log from its gateway
// pod's log. Red before: sbx ui had no --kubeconfig.
func TestUIKubeSandboxes(t *testing.T) {
	kubeconfig, requests := kubeStandIn(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	uiURL, _ := startUICommand(t, ctx, t.TempDir(), t.TempDir(), "--kubeconfig", kubeconfig, "-n", "ns1")
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second}

	status, body := uiGet(t, c, uiURL, "/")
	if status != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", status, body)
	}
	for _, want := range []string{`href="/s/kube:ns1:1a2b3c4d"`, "cluster, namespace ns1", "running <span class=\"health\">(ok)</span>",
		"&lt;b&gt;agent&lt;/b&gt;\\u202e", "&lt;iframe src=//evil.test&gt;", `\x1b[2J`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /: the page lacks %q:\n%s", want, body)
		}
	}
	for _, raw := range []string{"<b>agent", "<iframe", "\u202e", "\x1b"} {
		if strings.Contains(body, raw) {
			t.Errorf("GET /: the page holds %q unescaped", raw)
		}
	}
	status, body = uiGet(t, c, uiURL, "/s/kube:ns1:1a2b3c4d/audit")
	if status != http.StatusOK || !strings.Contains(body, "blocked.example") {
		t.Errorf("GET the cluster sandbox's audit page: %d, want 200 naming blocked.example:\n%s", status, body)
	}
	status, body = uiGet(t, c, uiURL, "/s/kube:ns2:1a2b3c4d")
	if status != http.StatusNotFound {
		t.Errorf("GET a sandbox of a namespace not given: %d, want 404:\n%s", status, body)
	}
	var listed bool
	for _, r := range requests() {
		if r == "GET /api/v1/namespaces/ns1/configmaps?labelSelector=sbx.dev%2Fsandbox" {
			listed = true
		}
		if strings.Contains(r, "/namespaces/other/") {
			t.Errorf("request %s: -n ns1 was given, not the context's namespace", r)
		}
	}
	if !listed {
		t.Errorf("requests %q: want the ConfigMaps listed by the label sbx.dev/sandbox", requests())
	}
}
