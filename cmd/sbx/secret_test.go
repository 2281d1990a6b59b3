package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSecretFlagValues: --secret's values are refused with the fix
// before anything starts, and the flags' forms give the secrets they
// say.
func TestSecretFlagValues(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	empty := writeFile(t, "empty", "\n")
	twoLines := writeFile(t, "two", "a\nb\n")
	policy := writeFile(t, "p.yaml", "version: 1\nsecrets:\n  - name: SBX_TEST_UNSET\n    from_env: SBX_TEST_UNSET\n    hosts: [a.test]\n")
	t.Setenv("SBX_TEST_EMPTY", "")
	os.Unsetenv("SBX_TEST_UNSET")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gateway", "--ca-cert", ca, "--secret", "SBX_TEST_UNSET@a.test"}, exitFailure, "--secret SBX_TEST_UNSET@a.test: the environment variable SBX_TEST_UNSET is not set in sbx's environment: export it before sbx starts"},
		{[]string{"gateway", "--ca-cert", ca, "--policy", policy}, exitFailure, policy + ": secrets: the environment variable SBX_TEST_UNSET is not set in sbx's environment"},
		{[]string{"gateway", "--ca-cert", ca, "--secret", "SBX_TEST_EMPTY@a.test"}, exitFailure, "the environment variable SBX_TEST_EMPTY is empty: set it to the secret's value"},
		{[]string{"gateway", "--ca-cert", ca, "--secret", "K=" + filepath.Join(dir, "missing") + "@a.test"}, exitFailure, "secret K: cannot read its value: open " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{[]string{"gateway", "--ca-cert", ca, "--secret", "K=" + empty + "@a.test"}, exitFailure, "secret K: the file " + empty + " holds no value: write the value in it"},
		{[]string{"gateway", "--ca-cert", ca, "--secret", "K=" + twoLines + "@a.test"}, exitFailure, "keep the value alone, on one line"},
		{[]string{"gateway", "--secret", "K@a.test"}, exitUsage, "--secret needs --ca-cert FILE"},
		{[]string{"gateway", "--secret", "1K@a.test"}, exitUsage, `--secret "1K@a.test": "1K" is not an environment variable name`},
		{[]string{"gateway", "--secret", "K"}, exitUsage, `--secret "K": no @HOST; write NAME@HOST[:PORT]`},
		{[]string{"gateway", "--secret", "K=f"}, exitUsage, "no @HOST after the file"},
		{[]string{"gateway", "--secret", "K@*"}, exitUsage, `secret host "*" is not a host`},
		{[]string{"gateway", "--secret", "K@a.test,10.0.0.0/8"}, exitUsage, `secret host "10.0.0.0/8" is not a host`},
		{[]string{"gateway", "--secret", "K@https://a.test/"}, exitUsage, `is not HOST[:PORT]`},
		{[]string{"gateway", "--secret", "K@a.test", "--secret", "K=f@b.test"}, exitUsage, "take K's value from different places"},
		{[]string{"run", "--secret", "K@*", "--", "true"}, exitUsage, `secret host "*" is not a host`},
		{[]string{"gateway", "--secret", "K@a.test", "--secret-header", "K"}, exitUsage, `--secret-header "K": write NAME=HEADER`},
		{[]string{"gateway", "--secret", "K@a.test", "--secret-header", "J=X-Key"}, exitUsage, "--secret-header J=X-Key: no --secret J; give --secret J@HOST too"},
		{[]string{"gateway", "--secret", "K@a.test", "--secret-header", "K=Host"}, exitUsage, "--secret-header K=Host: header Host frames the request or concerns one connection"},
		{[]string{"gateway", "--secret", "K@a.test", "--secret-header", "K=X Key"}, exitUsage, `header "X Key" is not a header field name`},
		{[]string{"gateway", "--ca-cert", ca, "--policy", policy, "--secret-header", "SBX_TEST_UNSET=X-Key"}, exitUsage, "a policy's secret takes header: in the policy"},
	}
	for _, tt := range tests {
		_, stderr, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}

	got, err := parseSecretFlags([]string{"A@a.test,b.test:8443", "B=/k@c.test", "A@d.test", "A@a.test"}, []string{"B=PRIVATE-TOKEN", "B=x-goog-api-key"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "A" || got[0].FromEnv != "A" || strings.Join(got[0].Hosts, " ") != "a.test b.test:8443 d.test" || got[0].Headers != nil ||
		got[1].Name != "B" || got[1].FromFile != "/k" || strings.Join(got[1].Hosts, " ") != "c.test" || strings.Join(got[1].Headers, " ") != "PRIVATE-TOKEN x-goog-api-key" {
		t.Errorf("got %+v, want A from the environment for a.test, b.test:8443 and d.test in the default headers, and B from /k for c.test in PRIVATE-TOKEN and x-goog-api-key", got)
	}
}

// TestGatewaySecret: sbx gateway --secret gives the clients a placeholder
// and sends the value to the bound host alone; neither the decision log,
// the API's answers, the 403 nor the gateway's own messages hold the
// value.
func TestGatewaySecret(t *testing.T) {
	const value = "sk-test-gateway-8c1f0e"
	t.Setenv("SBX_TEST_KEY", value)
	var mu sync.Mutex
	var gotKeys []string
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotKeys = append(gotKeys, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		io.WriteString(w, "up\n")
	}))
	defer up.Close()
	_, upPort, _ := net.SplitHostPort(up.Listener.Addr().String())
	dir := t.TempDir()
	upCA := filepath.Join(dir, "up.pem")
	os.WriteFile(upCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other host got a request: %v", r.Header)
	}))
	defer plain.Close()
	_, plainPort, _ := net.SplitHostPort(plain.Listener.Addr().String())
	logFile, caFile, sock, token := filepath.Join(dir, "decisions.jsonl"), filepath.Join(dir, "ca.pem"), filepath.Join(dir, "api.sock"), filepath.Join(dir, "token")
	pln, _ := net.Listen("tcp", "127.0.0.1:0")
	proxyAddr := pln.Addr().String()
	pln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetArgs([]string{"gateway", "--listen", proxyAddr, "--ca-cert", caFile, "--upstream-ca", upCA,
		"--allow", "example.com:" + upPort, "--allow", "other.test:" + plainPort, "--resolve", "example.com=127.0.0.1", "--resolve", "other.test=127.0.0.1",
		"--allow-private", "127.0.0.0/8", "--api", "unix:" + sock, "--token-file", token, "--log", logFile,
		"--secret", "SBX_TEST_KEY@example.com:" + upPort})
	root.SetOut(&out)
	root.SetErr(&errOut)
	done := make(chan int, 1)
	go func() { done <- execute(ctx, root) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "give the clients") {
		if time.Now().After(deadline) {
			t.Fatalf("sbx gateway did not start: %q %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	m := regexp.MustCompile(`secret SBX_TEST_KEY for example.com:` + upPort + `: give the clients SBX_TEST_KEY=(sbx-secret-SBX_TEST_KEY-[0-9a-f]{32})\n`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no placeholder in %q", out.String())
	}
	placeholder := m[1]

	tr := proxyTransport(proxyAddr, caFile)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var bodies []string
	for target, want := range map[string]int{"https://example.com:" + upPort + "/v1": 200, "http://other.test:" + plainPort + "/": 403} {
		req, _ := http.NewRequest("GET", target, nil)
		req.Header.Set("X-Api-Key", placeholder)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d %s, want %d", target, resp.StatusCode, b, want)
		}
	}
	mu.Lock()
	if len(gotKeys) != 1 || gotKeys[0] != value {
		t.Errorf("the bound host got X-Api-Key %q, want the value once", gotKeys)
	}
	mu.Unlock()

	// The API's answers.
	tok, _ := os.ReadFile(token)
	api := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 5 * time.Second}
	var answers []string
	for _, path := range []string{"/v1/status", "/v1/policy", "/v1/decisions"} {
		req, _ := http.NewRequest("GET", "http://sbx"+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := api.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		answers = append(answers, string(b))
	}
	if !strings.Contains(answers[2], `"secret":"SBX_TEST_KEY"`) {
		t.Errorf("the API's decisions lack the block by the secret: %s", answers[2])
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sbx gateway did not stop")
	}
	log, _ := os.ReadFile(logFile)
	for what, text := range map[string]string{
		"the decision log": string(log), "the API's answers": strings.Join(answers, "\n"), "the answers": strings.Join(bodies, "\n"),
		"the gateway's output": out.String() + errOut.String(),
	} {
		if strings.Contains(text, value) {
			t.Errorf("%s hold the value: %s", what, text)
		}
	}
	if !strings.Contains(string(log), `"reason":"secret SBX_TEST_KEY's placeholder sent to other.test","policy_version"`) {
		t.Errorf("the decision log lacks the block: %s", log)
	}
}

// TestGatewaySecretDir: sbx gateway as sbx kube's gateway pod runs it
// reads every secret's value from --secret-dir (the policy's, whose
// from_env names a variable that is not set, and --secret's) and takes
// the placeholders --secret-placeholder gives, which its clients hold
// already: a request with that placeholder reaches the bound host with
// the value from the directory.
func TestGatewaySecretDir(t *testing.T) {
	const value, policyValue = "sk-test-dir-51d0c2", "pk-test-dir-77e1a0"
	const ph = "sbx-secret-FLAG_KEY-00112233445566778899aabbccddeeff"
	const policyPH = "sbx-secret-POLICY_KEY-ffeeddccbbaa99887766554433221100"
	var mu sync.Mutex
	var got []string
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Api-Key")+" "+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer up.Close()
	_, upPort, _ := net.SplitHostPort(up.Listener.Addr().String())
	dir := t.TempDir()
	upCA := filepath.Join(dir, "up.pem")
	os.WriteFile(upCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644)
	values := filepath.Join(dir, "values")
	os.Mkdir(values, 0o700)
	os.WriteFile(filepath.Join(values, "FLAG_KEY"), []byte(value+"\n"), 0o600)
	os.WriteFile(filepath.Join(values, "POLICY_KEY"), []byte(policyValue), 0o600)
	policy := writeFile(t, "policy.yaml", "secrets:\n  - name: POLICY_KEY\n    from_env: SBX_TEST_UNSET_VARIABLE\n    hosts: [example.com:"+upPort+"]\n    header: Authorization\n")
	caFile := filepath.Join(dir, "ca.pem")
	pln, _ := net.Listen("tcp", "127.0.0.1:0")
	proxyAddr := pln.Addr().String()
	pln.Close()
	args := []string{"gateway", "--listen", proxyAddr, "--ca-cert", caFile, "--upstream-ca", upCA, "--policy", policy,
		"--allow", "example.com:" + upPort, "--resolve", "example.com=127.0.0.1", "--allow-private", "127.0.0.0/8",
		"--secret", "FLAG_KEY@example.com:" + upPort, "--secret-header", "FLAG_KEY=X-Api-Key", "--secret-dir", values}

	// Placeholders that are not FromSpec's, or name no secret: refused.
	for _, bad := range []string{"FLAG_KEY=the-value", "FLAG_KEY=" + policyPH, "NOPE=sbx-secret-NOPE-00112233445566778899aabbccddeeff", "FLAG_KEY"} {
		// A gateway that takes it serves until the context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut syncBuffer
		root := newRootCmd()
		root.SetArgs(append(slices.Clone(args), "--secret-placeholder", bad))
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := execute(ctx, root)
		cancel()
		if code != exitUsage || !strings.Contains(errOut.String(), "--secret-placeholder") {
			t.Errorf("--secret-placeholder %s: exit %d, want %d naming the flag: %s%s", bad, code, exitUsage, out.String(), errOut.String())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetArgs(append(args, "--secret-placeholder", "FLAG_KEY="+ph, "--secret-placeholder", "POLICY_KEY="+policyPH))
	root.SetOut(&out)
	root.SetErr(&errOut)
	done := make(chan int, 1)
	go func() { done <- execute(ctx, root) }()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "give the clients") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sbx gateway did not start: %q %q", out.String(), errOut.String())
		}
	}
	for _, want := range []string{"give the clients FLAG_KEY=" + ph + "\n", "give the clients POLICY_KEY=" + policyPH + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	tr := proxyTransport(proxyAddr, caFile)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://example.com:"+upPort+"/v1", nil)
	req.Header.Set("X-Api-Key", ph)
	req.Header.Set("Authorization", "Bearer "+policyPH)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	if want := value + " Bearer " + policyValue; len(got) != 1 || got[0] != want {
		t.Errorf("the bound host got %q, want %q once", got, want)
	}
	mu.Unlock()
	cancel()
	<-done
}

// proxyTransport is a client of the gateway at proxyAddr as its proxy,
// trusting the CA in caFile (the gateway's, for inspected hosts).
func proxyTransport(proxyAddr, caFile string) *http.Transport {
	caPEM, _ := os.ReadFile(caFile)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	pu, _ := url.Parse("http://" + proxyAddr)
	return &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}
}
