package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// inspectPolicy inspects tls.test: GETs under /allowed/ pass, the rest of
// it is blocked, request by request.
const inspectPolicy = `version: 1
default: block
rules:
  - id: allowed
    host: tls.test
    ports: [8443]
    methods: [GET, HEAD]
    path: /allowed/
    action: allow
`

// TestPrivilegedInspectRuntimes runs each TLS client on the host in a
// sandbox (the host's system directories) and has it fetch an inspected
// HTTPS URL (docs/inspection.md): each trusts the sandbox's CA without being
// told (curl, git, Python and Go through SSL_CERT_FILE and their own
// variables, Node through NODE_EXTRA_CA_CERTS, Java through the truststore
// in JAVA_TOOL_OPTIONS), reaches the upstream, verified against the
// upstream's CA (--upstream-ca), and each request is decided by the path
// rule and logged as kind https with its path; a path outside the rule
// gets the gateway's 403. Clients that honour HTTPS_PROXY come through
// CONNECT, the others (Node's fetch, Java) through capture.
func TestPrivilegedInspectRuntimes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	shared := readableDir(t)
	up := newCaptureUpstream(t, shared)
	policy := writeFile(t, "policy.yaml", inspectPolicy)
	goget := filepath.Join(shared, "httpsget")
	if out, err := exec.Command("go", "build", "-o", goget, "./testdata/httpsget").CombinedOutput(); err != nil {
		t.Fatalf("building httpsget: %v\n%s", err, out)
	}
	java, err := os.ReadFile("testdata/Get.java")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "Get.java"), java, 0o644); err != nil {
		t.Fatal(err)
	}
	base := "https://tls.test:8443"
	// Python's requests (with certifi) where some python3 on the host has
	// it: its installation is bound in at the same path.
	var pyPrefix, pyExe string
	if out, err := exec.Command("python3", "-c", "import sys, requests, certifi; print(sys.prefix); print(sys.executable)").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) == 2 {
			pyPrefix, pyExe = f[0], f[1]
		}
	}
	for _, tc := range []struct {
		name, bin, script string
	}{
		{"curl", "curl", `curl -sS -m 10 -o /dev/null -w '%{http_code} ' BASE/x; curl -sS -m 10 URL`},
		{"node", "node", `node -e 'fetch(process.argv[1]).then(r => r.text().then(b => console.log(r.status + " " + b)), e => console.log("error", e.cause || e))' URL`},
		{"python3", "/usr/bin/python3", `/usr/bin/python3 -c 'import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1]); print(r.status, r.read().decode())' URL`},
		{"python3-requests", pyExe, pyExe + ` -c 'import sys, requests; r = requests.get(sys.argv[1]); print(r.status_code, r.text)' URL`},
		{"git", "git", `git ls-remote URL 2>&1 | head -3`},
		{"go", "", `/t/httpsget URL`},
		{"java", "java", `java /t/Get.java URL 2>&1 | grep -v '^Picked up JAVA_TOOL_OPTIONS'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "python3-requests" && pyExe == "" {
				t.Skip("no python3 on this host has requests and certifi")
			}
			if tc.bin != "" {
				if _, err := exec.LookPath(tc.bin); err != nil {
					t.Skipf("%s is not on this host", tc.bin)
				}
			}
			var vols []string
			if tc.name == "python3-requests" {
				vols = []string{"-v", pyPrefix + ":" + pyPrefix + ":ro"}
			}
			path := "/allowed/" + tc.name
			script := strings.ReplaceAll(strings.ReplaceAll(tc.script, "URL", base+path), "BASE", base)
			dir := t.TempDir()
			logFile := filepath.Join(dir, "decisions.jsonl")
			args := []string{"run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(dir, "state"),
				"--subnet-pool", "10.213.225.0/24", "--log", logFile, "--policy", policy, "--host-dns", up.Addr,
				"--allow-private", up.Net, "--upstream-ca", up.CAFile, "-v", shared + ":/t:ro"}
			args = append(append(args, vols...), "--", "sh", "-c", script)
			stdout, stderr, code := runCLI(t, args...)
			t.Logf("exit %d\n%s\n%s", code, stdout, stderr)
			recs := readRecords(t, logFile)
			allowed := findRecord(recs, func(r map[string]any) bool {
				return r["event"] == "decision" && r["kind"] == "https" && r["host"] == "tls.test" && strings.HasPrefix(fmt.Sprint(r["path"]), path)
			})
			switch {
			case allowed == nil:
				t.Errorf("%s: no https decision for %s in the log", tc.name, path)
			case allowed["action"] != "allow" || allowed["rule"] != "allowed":
				t.Errorf("%s: %s decided %v by %v, want allow by rule allowed", tc.name, path, allowed["action"], allowed["rule"])
			}
			if tc.name != "git" && !strings.Contains(stdout, "hello-tls") {
				t.Errorf("%s: the upstream's answer is not in the output", tc.name)
			}
			if strings.Contains(stdout+stderr, "certificate") {
				t.Errorf("%s: a certificate error: the client does not trust the sandbox's CA", tc.name)
			}
			if tc.name == "curl" {
				if !strings.HasPrefix(stdout, "403 ") {
					t.Errorf("curl %s/x: want 403 from the path rule, got %q", base, stdout)
				}
				blocked := findRecord(recs, func(r map[string]any) bool { return r["kind"] == "https" && r["path"] == "/x" })
				if blocked == nil || blocked["action"] != "block" {
					t.Errorf("GET /x: logged %v, want an https block", blocked)
				}
			}
		})
	}
}
