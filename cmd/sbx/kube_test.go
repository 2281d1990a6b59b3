package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/kube/podnet"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// The objects name the ports and uid that the pod's rules and shim use
// by default: the two packages must agree.
func TestKubePortsAgreeWithPodRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		kube, pod int
	}{
		{"proxy", kube.ProxyPort, podnet.DefaultProxyPort},
		{"capture", kube.CapturePort, podnet.DefaultCapturePort},
		{"dns", kube.DNSPort, podnet.DefaultDNSPort},
		{"shim", kube.ShimPort, podnet.DefaultShimPort},
		{"shim uid", kube.ShimUID, podnet.DefaultShimUID},
	} {
		if c.kube != c.pod {
			t.Errorf("%s: sandbox/kube says %d, podnet %d", c.name, c.kube, c.pod)
		}
	}
}

func TestKubeRunUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kube", "run", "--", "true"}, "--image is required"},
		{[]string{"kube", "run", "--image", "busybox", "--user", "0", "--", "true"}, "never runs as root"},
		{[]string{"kube", "run", "--image", "busybox", "--user", "15001", "--", "true"}, "sbx's own"},
		{[]string{"kube", "run", "--image", "busybox", "--pull", "sometimes", "--", "true"}, "--pull"},
		{[]string{"kube", "run", "--image", "busybox", "-e", "NOVALUE", "--", "true"}, "KEY=VAL"},
		{[]string{"kube", "run", "--image", "busybox", "--", "true"}, "--gateway-image is required"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "-d", "--log", "x.jsonl", "--", "true"}, "--log"},
		{[]string{"kube", "run", "--image", "busybox", "--approvals", "a.yaml", "--", "true"}, "--approvals"},
		{[]string{"kube", "manifest", "--image", "busybox", "--gateway-image", "sbx:1", "--id", "1a2b3c4d", "--gateway-ip", "fd00::1", "--", "true"}, "--gateway-ip"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--pids-limit", "100", "--", "true"}, "podPidsLimit"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--memory", "lots", "--", "true"}, "--memory"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--cpus", "-1", "--", "true"}, "--cpus"},
		{[]string{"kube", "manifest", "--image", "busybox", "--gateway-image", "sbx:1", "--tmp-size", "0", "--", "true"}, "--tmp-size"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--cpus-request", "-1", "--", "true"}, "--cpus-request -1"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--cpus", "1", "--cpus-request", "2", "--", "true"}, "more than the agent's CPU limit 1 (--cpus)"},
		{[]string{"kube", "check", "--image", "busybox"}, "need --gateway-image"},
		{[]string{"kube", "mock", "requests", "--host", "a.test", "--script", "a.yaml"}, "none of the others can be"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--approvals", "a.yaml", "--", "true"}, "answer with sbx kube approve --session"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "-d", "--mock-llm", "a.test=s.yaml", "--mock-journal", "j.jsonl", "--", "true"}, "--mock-journal keeps the journal when the agent ends"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--mock-journal", "j.jsonl", "--", "true"}, "give --mock-llm too"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--record-llm", "a.test=/no/such/dir/s.yaml", "--", "true"}, "the directory of /no/such/dir/s.yaml does not exist"},
		{[]string{"kube", "stop", "--record-llm", "a.test=s.yaml", "1a2b3c4d", "5e6f7a8b"}, "--record-llm writes one sandbox's recordings"},
		{[]string{"kube", "stop", "--record-llm", "a.test=/no/such/dir/s.yaml", "1a2b3c4d"}, "the directory of /no/such/dir/s.yaml does not exist"},
		{[]string{"kube", "run", "--image", "busybox", "--gateway-image", "sbx:1", "--secret", "NOHOST", "--", "true"}, "--secret"},
		{[]string{"kube", "stop"}, "give the sandboxes to stop"},
		{[]string{"kube", "decisions"}, "--sandbox"},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("sbx %s: exit %d, %q; want exit %d naming %q", strings.Join(c.args, " "), code, errOut, exitUsage, c.want)
		}
	}
}

// TestKubeControllerRenewBefore: sbx kube controller refuses a renewal
// window or grace of 0 or less, naming the flag and what it wants, and
// takes one past the CA's 7 days (a drill: each CA renewed once, at once)
// on to connecting to the cluster.
func TestKubeControllerRenewBefore(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--renew-before", "0"}, "--renew-before 0s: want a duration above 0"},
		{[]string{"--renew-before", "-48h"}, "--renew-before -48h0m0s: want a duration above 0"},
		{[]string{"--grace", "0"}, "--grace 0s: want a duration above 0"},
	} {
		args := append([]string{"kube", "controller", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, c.args...)
		_, errOut, code := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("sbx %s: exit %d, %q; want exit %d naming %q", strings.Join(args, " "), code, errOut, exitUsage, c.want)
		}
	}
	for _, window := range []string{"167h", "168h", "169h", "1000h"} {
		none := filepath.Join(t.TempDir(), "none")
		_, errOut, code := runCLI(t, "kube", "controller", "--kubeconfig", none, "--renew-before", window)
		if code == exitUsage || code == 0 || !strings.Contains(errOut, none) {
			t.Errorf("sbx kube controller --renew-before %s with a kubeconfig that is not there: exit %d, %q; want it past the flags, failing on the kubeconfig", window, code, errOut)
		}
	}
}

// sbx kube manifest prints every object but the agent pod, then, given
// the sandbox's id and its gateway pod's address, the agent pod alone; the
// policy goes to the gateway pod as the flags built it.
func TestKubeManifest(t *testing.T) {
	flags := []string{"kube", "manifest", "-n", "agents", "--image", "node:22", "--gateway-image", "reg.example/sbx:1",
		"--allow", "registry.npmjs.org", "--allow-private", "10.1.2.3/32"}
	out, errOut, code := runCLI(t, append(flags, "--", "npm", "install")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "--gateway-ip") {
		t.Errorf("no hint on how to print the agent pod:\n%s", out)
	}
	var kinds []string
	var cm corev1.ConfigMap
	var id string
	for _, d := range strings.Split(out, "\n---\n") {
		meta := manifestMeta(t, d)
		kinds = append(kinds, meta.Kind)
		id = meta.Metadata.Labels[kube.LabelSandbox]
		if meta.Kind == "ConfigMap" {
			yaml.Unmarshal([]byte(d), &cm)
		}
	}
	if got, want := strings.Join(kinds, ","), "ConfigMap,Secret,NetworkPolicy,NetworkPolicy,Pod"; got != want {
		t.Errorf("kinds %s, want %s", got, want)
	}
	p, err := netpolicy.Parse("policy.yaml", []byte(cm.Data[kube.KeyPolicy]))
	if err != nil {
		t.Fatalf("the gateway pod's policy: %v", err)
	}
	if d := p.Decide(netpolicy.Target{Host: "registry.npmjs.org", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Allow {
		t.Errorf("registry.npmjs.org:443 -> %v, want allow", d)
	}
	if len(p.AllowPrivate()) != 1 || p.AllowPrivate()[0].String() != "10.1.2.3/32" {
		t.Errorf("allow_private = %v", p.AllowPrivate())
	}

	// The second step: the agent pod of that sandbox, alone.
	out, errOut, code = runCLI(t, append(flags, "--id", id, "--gateway-ip", "10.244.0.9", "--memory", "1g", "--cpus", "2", "--cpus-request", "0.5", "--tmp-size", "64m", "--", "npm", "install")...)
	if code != 0 {
		t.Fatalf("with --gateway-ip: exit %d: %s", code, errOut)
	}
	meta := manifestMeta(t, out)
	var agent corev1.Pod
	yaml.Unmarshal([]byte(out), &agent)
	if meta.Kind != "Pod" || agent.Name != kube.ObjectName(id) || meta.Metadata.Labels[kube.LabelSandbox] != id {
		t.Fatalf("with --gateway-ip: %s %s labels %v, want the agent pod %s alone", meta.Kind, agent.Name, meta.Metadata.Labels, kube.ObjectName(id))
	}
	if c := agent.Spec.Containers[0]; c.Image != "node:22" || strings.Join(c.Command, " ") != "npm install" {
		t.Errorf("agent container = %+v", c)
	}
	// sbx run's limit flags, as the pod's limits and /tmp's size.
	if l := agent.Spec.Containers[0].Resources.Limits; l.Memory().String() != "1Gi" || l.Cpu().String() != "2" {
		t.Errorf("agent limits = %v, want memory 1Gi, cpu 2", l)
	}
	if r := agent.Spec.Containers[0].Resources.Requests; r.Cpu().String() != "500m" {
		t.Errorf("agent requests = %v, want cpu 500m (--cpus-request)", r)
	}
	for _, v := range agent.Spec.Volumes {
		if v.Name == "tmp" && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.String() != "64Mi") {
			t.Errorf("/tmp volume = %+v, want a 64Mi memory emptyDir", v.EmptyDir)
		}
	}
	for _, bad := range [][]string{{"--gateway-ip", "10.244.0.9"}, {"--id", id}, {"--id", "XYZ", "--gateway-ip", "10.244.0.9"}} {
		if _, errOut, code := runCLI(t, append(append(flags, bad...), "--", "true")...); code != exitUsage {
			t.Errorf("sbx kube manifest %v: exit %d, want %d (%s)", bad, code, exitUsage, errOut)
		}
	}
}

type manifestDoc struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
}

// manifestMeta reads a YAML document's kind and metadata, and checks
// that it is in the namespace asked for and labelled with its sandbox.
func manifestMeta(t *testing.T, doc string) manifestDoc {
	t.Helper()
	var m manifestDoc
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("document %q: %v", doc, err)
	}
	if m.Metadata.Namespace != "agents" || m.Metadata.Labels[kube.LabelSandbox] == "" {
		t.Errorf("%s: namespace %q, labels %v", m.Kind, m.Metadata.Namespace, m.Metadata.Labels)
	}
	return m
}

// TestKubeManifestSecret: sbx kube manifest --secret puts the value in
// the Secret alone and tells the gateway pod the placeholder; a
// policy's secret is read here too (its file relative to the policy's),
// and the gateway pod reads it from the Secret; an agent variable set by
// -e too, or an agent pod printed apart from its gateway's placeholders,
// is refused.
func TestKubeManifestSecret(t *testing.T) {
	const value, fileValue = "sk-kube-manifest-3e9d11", "pk-kube-manifest-0a7b52"
	t.Setenv("SBX_KUBE_KEY", value)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "key.txt"), []byte(fileValue+"\n"), 0o600)
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("secrets:\n  - name: FILE_KEY\n    from_file: key.txt\n    hosts: [api.example.com]\n    methods: [POST]\n"), 0o600)
	flags := []string{"kube", "manifest", "-n", "agents", "--image", "node:22", "--gateway-image", "reg.example/sbx:1",
		"--policy", policy, "--secret", "SBX_KUBE_KEY@api.anthropic.com", "--secret-header", "SBX_KUBE_KEY=x-api-key"}
	out, errOut, code := runCLI(t, append(flags, "--", "true")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "the values of the secrets") {
		t.Errorf("no warning that the output holds the secrets' values: %s", errOut)
	}
	var secret corev1.Secret
	var gw corev1.Pod
	var cm corev1.ConfigMap
	for _, d := range strings.Split(out, "\n---\n") {
		switch manifestMeta(t, d).Kind {
		case "Secret":
			yaml.Unmarshal([]byte(d), &secret)
		case "Pod":
			yaml.Unmarshal([]byte(d), &gw)
		case "ConfigMap":
			yaml.Unmarshal([]byte(d), &cm)
		}
		if !strings.Contains(d, "kind: Secret") && (strings.Contains(d, value) || strings.Contains(d, fileValue)) {
			t.Errorf("a document other than the Secret holds a value:\n%s", d)
		}
	}
	if string(secret.Data[kube.KeySecretPrefix+"SBX_KUBE_KEY"]) != value || string(secret.Data[kube.KeySecretPrefix+"FILE_KEY"]) != fileValue {
		t.Errorf("Secret data %v, want both values", secret.Data)
	}
	cmd := strings.Join(gw.Spec.Containers[0].Command, " ")
	for _, re := range []string{
		`--secret-placeholder SBX_KUBE_KEY=sbx-secret-SBX_KUBE_KEY-[0-9a-f]{32} --secret SBX_KUBE_KEY@api.anthropic.com --secret-header SBX_KUBE_KEY=x-api-key`,
		`--secret-placeholder FILE_KEY=sbx-secret-FILE_KEY-[0-9a-f]{32}`,
	} {
		if !regexp.MustCompile(re).MatchString(cmd) {
			t.Errorf("gateway command %q does not match %q", cmd, re)
		}
	}
	// The policy keeps its secret, binding and all: the gateway pod
	// reads its value from the Secret (--secret-dir).
	if p, err := netpolicy.Parse("policy", []byte(cm.Data[kube.KeyPolicy])); err != nil || len(p.Secrets()) != 1 || p.Secrets()[0].Name != "FILE_KEY" || p.Secrets()[0].Methods[0] != "POST" {
		t.Errorf("the gateway pod's policy: %v, secrets %+v", err, p.Secrets())
	}

	if _, errOut, code := runCLI(t, append(flags, "-e", "SBX_KUBE_KEY=mine", "--", "true")...); code == 0 || !strings.Contains(errOut, "drop -e SBX_KUBE_KEY") {
		t.Errorf("-e and --secret of one name: exit %d, want the refusal: %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, append(flags, "--id", "1a2b3c4d", "--gateway-ip", "10.244.0.9", "--", "true")...); code != exitUsage || !strings.Contains(errOut, "placeholder") {
		t.Errorf("--gateway-ip with secrets: exit %d, want %d naming the placeholders: %s", code, exitUsage, errOut)
	}
	t.Setenv("SBX_KUBE_KEY", "")
	os.Unsetenv("SBX_KUBE_KEY")
	if _, errOut, code := runCLI(t, append(flags, "--", "true")...); code == 0 || !strings.Contains(errOut, "SBX_KUBE_KEY is not set") {
		t.Errorf("an unset secret: exit %d, want the refusal: %s", code, errOut)
	}
}

// TestKubeMockJournalFile: the journals sbx kube run --mock-journal reads
// from the gateway pod's API are written as sbx run's journal file, which
// sbx mock requests --journal reads back field for field.
func TestKubeMockJournalFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	in := []*api.MockRequests{
		{Host: "api.anthropic.com", Mock: "api.anthropic.com", Requests: []api.MockRequest{
			{Seq: 1, Time: when, Method: "POST", Path: "/v1/messages", Dialect: "anthropic", Model: "m", Body: json.RawMessage(`{"content":"marmalade"}`), Turn: 1, Status: 200, Outcome: "turn 1"},
			{Seq: 2, Time: when.Add(time.Second), Method: "POST", Path: "/v1/messages", Dialect: "anthropic", Unmatched: true, Status: 500, Outcome: "no turn left"},
		}},
		{Host: "api.openai.com", Mock: "api.openai.com", Requests: []api.MockRequest{}},
	}
	if err := writeMockJournal(mockllm.NewJournalFile(f), in); err != nil {
		t.Fatal(err)
	}
	for _, m := range in {
		out, errOut, code := runCLI(t, "mock", "requests", "--journal", path, "--host", m.Host, "--json")
		if code != 0 {
			t.Fatalf("sbx mock requests --journal --host %s: exit %d: %s", m.Host, code, errOut)
		}
		var got api.MockRequests
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m)
		if back, _ := json.Marshal(&got); string(back) != string(want) {
			t.Errorf("read back:\n%s\nwant\n%s", back, want)
		}
	}
}

// TestKubePSPrintsHostileText: whoever may edit the namespace's pods or
// ConfigMaps writes the name, image, command and phases sbx kube ps
// prints; none of their control bytes reaches the terminal.
func TestKubePSPrintsHostileText(t *testing.T) {
	now := time.Now()
	evil := "\x1b]0;owned\x07\x1b[2J"
	sb := kube.Sandbox{ID: "1a2b3c4d", Name: "n" + evil, Created: now.Add(-time.Minute), ExitCode: -1,
		Agent: "Running" + evil, Gateway: "Running" + evil, GatewayReady: true,
		Image: "busybox" + evil, Command: []string{"sh", "-c", evil}}
	var out bytes.Buffer
	if err := printKubePS(&out, []kube.Sandbox{sb}, now); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("sbx kube ps printed control bytes:\n%q", out.String())
	}
	for _, want := range []string{"1a2b3c4d", "busybox", "1m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sbx kube ps lacks %q:\n%s", want, out.String())
		}
	}
}

// TestKubeStopRecordings: what sbx kube stop does with a sandbox's
// recordings before it reaches the gateway pod. A --record-llm for a host
// the sandbox does not record keeps it (a typo must not drop the
// recording); a sandbox that records nothing, or whose gateway pod is
// gone or going, may go, the second said on stderr with the pod's hostile
// text escaped. (A running gateway pod's recordings: TestKubeRecordLLM,
// and TestKubeClusterRecordLLMDetached on the cluster.)
func TestKubeStopRecordings(t *testing.T) {
	recs := []run.Recording{{Host: "b.test", Path: "b.yaml"}}
	for _, c := range []struct {
		name       string
		sb         kube.Sandbox
		recs       []run.Recording
		discard    bool
		wantErr    string
		wantStderr string
	}{
		{name: "records nothing", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Running"}},
		{name: "another host", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Running", Records: []string{"a.test"}}, recs: recs,
			wantErr: "--record-llm b.test=b.yaml: sandbox 1a2b3c4d does not record b.test (it records a.test); the sandbox was not removed"},
		{name: "records nothing, given one", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Running"}, recs: recs, wantErr: "(it records -)"},
		{name: "gateway gone", sb: kube.Sandbox{ID: "1a2b3c4d", Records: []string{"a.test\x1b[2J"}},
			wantStderr: `sandbox 1a2b3c4d recorded a.test\x1b[2J, but its gateway pod is gone: the recordings went with it`},
		{name: "gateway being deleted", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Running", GatewayDeleting: true, Records: []string{"a.test"}},
			wantStderr: "its gateway pod is being deleted"},
		{name: "gateway failed", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Failed", Records: []string{"a.test"}}, wantStderr: "its gateway pod is failed"},
		{name: "discarded", sb: kube.Sandbox{ID: "1a2b3c4d", Gateway: "Running", Records: []string{"a.test"}}, discard: true},
	} {
		var stderr strings.Builder
		o := kubeStopOptions{discard: c.discard}
		// No cluster: none of these reaches the gateway pod.
		err := o.keepRecordings(t.Context(), &stderr, nil, c.sb, c.recs)
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.wantErr)
		}
		if c.wantStderr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), c.wantStderr) {
			t.Errorf("%s: stderr %q, want %q", c.name, stderr.String(), c.wantStderr)
		}
	}
}

// TestKubeRecordLLMLeftRunning: --record-llm is taken where sbx kube
// leaves the sandbox running, by sbx kube run -d (it used to be refused)
// and sbx kube manifest (it had no such flag): the gateway pod records the
// host, and stderr says how the recording is kept, since nothing writes
// SCRIPT until sbx kube stop is told to.
func TestKubeRecordLLMLeftRunning(t *testing.T) {
	script := filepath.Join(t.TempDir(), "recorded.yaml")
	out, errOut, code := runCLI(t, "kube", "manifest", "-n", "agents", "--image", "busybox", "--gateway-image", "sbx:1",
		"--allow", "api.anthropic.com", "--record-llm", "api.anthropic.com="+script, "--", "true")
	if code != 0 {
		t.Fatalf("sbx kube manifest --record-llm: exit %d\n%s", code, errOut)
	}
	var gw corev1.Pod
	for _, d := range strings.Split(out, "\n---\n") {
		if manifestMeta(t, d).Kind == "Pod" {
			yaml.Unmarshal([]byte(d), &gw)
		}
	}
	id := gw.Labels[kube.LabelSandbox]
	if cmd := strings.Join(gw.Spec.Containers[0].Command, " "); !strings.Contains(cmd, "--record-llm-api api.anthropic.com") {
		t.Errorf("the gateway pod's command %q: want --record-llm-api api.anthropic.com", cmd)
	}
	if want := "sbx kube stop -n agents --record-llm api.anthropic.com=" + script + " " + id + " writes the recording there"; !strings.Contains(errOut, want) {
		t.Errorf("sbx kube manifest --record-llm said %q, want %q", errOut, want)
	}

	none := filepath.Join(t.TempDir(), "none")
	_, errOut, code = runCLI(t, "kube", "--kubeconfig", none, "run", "-d", "--image", "busybox", "--gateway-image", "sbx:1",
		"--allow", "api.anthropic.com", "--record-llm", "api.anthropic.com="+script, "--", "true")
	if code == 0 || code == exitUsage || !strings.Contains(errOut, none) {
		t.Errorf("sbx kube run -d --record-llm with a kubeconfig that is not there: exit %d, %q; want it past the flags, failing on the kubeconfig", code, errOut)
	}
}
