package main

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKubeClusterUI: sbx ui --kubeconfig F -n NS, as the documented
// user, lists a detached sandbox of the test cluster beside this host's,
// as on the cluster and with its health; its page reads its rules from
// its gateway pod through the port-forward and offers no always answer;
// a rule added on the page reaches the gateway pod (sbx kube policy show
// lists it); its audit page reads the gateway pod's log.
func TestKubeClusterUI(t *testing.T) {
	k := newKubeTest(t)
	out, errOut, code := k.sbx("run", "-d", "--name", "ui1", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never",
		"--memory", "64m", "--allow", "example.com", "--", "sleep", "3600")
	if code != 0 {
		t.Fatalf("sbx kube run -d: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	key := "kube:" + k.ns + ":" + id

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	uiURL, _ := startUICommand(t, ctx, t.TempDir(), t.TempDir(), "--kubeconfig", k.kubeconfig, "-n", k.ns)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second}

	status, body := uiGet(t, c, uiURL, "/")
	for _, want := range []string{`href="/s/` + key + `"`, "ui1", "cluster, namespace " + k.ns, `running <span class="health">(ok)</span>`} {
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET /: %d, the page lacks %q:\n%s", status, want, body)
		}
	}
	status, body = uiGet(t, c, uiURL, "/s/"+key)
	if status != http.StatusOK || !strings.Contains(body, "example.com") || !strings.Contains(body, `id="no-always"`) || strings.Contains(body, `class="error"`) {
		t.Fatalf("GET the sandbox's page: %d, want its rules (example.com), no always answers and no error:\n%s", status, body)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the sandbox's page:\n%s", body)
	}
	base := uiURL[:strings.Index(uiURL, "/?")]
	form := url.Values{"csrf": {m[1]}, "action": {"allow"}, "pattern": {"api.example.org"}}
	req, _ := http.NewRequest("POST", base+"/s/"+key+"/rules", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.CheckRedirect = nil
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("adding a rule on the page: %d, want 303", resp.StatusCode)
	}
	if out, errOut, code := k.sbx("policy", "show", "--sandbox", id); code != 0 || !strings.Contains(out, "api.example.org") {
		t.Errorf("sbx kube policy show after the page added a rule: exit %d, want api.example.org:\n%s%s", code, out, errOut)
	}
	if status, body := uiGet(t, c, uiURL, "/s/"+key+"/audit"); status != http.StatusOK {
		t.Errorf("GET the sandbox's audit page: %d, want 200:\n%s", status, body)
	}
}
