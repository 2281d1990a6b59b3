package kube

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func testSpec() Spec {
	return Spec{
		ID: "1a2b3c4d", Namespace: "ns1", Image: "busybox", Command: []string{"sh", "-c", "true"},
		GatewayImage: "sbx:test", Policy: []byte(`{"default":"block"}`),
		CACert: []byte("CERT"), CA: []byte("CERT+KEY"), Roots: []byte("ROOTS"), Token: "tok",
		Env: []string{"HTTPS_PROXY=mine", "FOO=bar"},
	}
}

func TestSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Spec)
		want string
	}{
		{"bad id", func(s *Spec) { s.ID = "xyz" }, "8 lower-case hex"},
		{"no image", func(s *Spec) { s.Image = "" }, "no agent image"},
		{"no gateway image", func(s *Spec) { s.GatewayImage = "" }, "no gateway image"},
		{"root", func(s *Spec) { s.User = -1 }, "above 0"},
		{"no token", func(s *Spec) { s.Token = "" }, "token"},
	} {
		s := testSpec()
		tc.set(&s)
		if _, err := MakeObjects(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestObjectsLabelledAndSecretsApart(t *testing.T) {
	s := testSpec()
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		kind   string
		labels map[string]string
	}{{"configmap", o.ConfigMap.Labels}, {"secret", o.Secret.Labels}, {"agent policy", o.AgentPolicy.Labels}, {"gateway policy", o.GatewayPolicy.Labels}, {"gateway pod", o.Gateway.Labels}, {"agent pod", agent.Labels}} {
		if m.labels[LabelSandbox] != s.ID {
			t.Errorf("%s: label %s = %q, want %q", m.kind, LabelSandbox, m.labels[LabelSandbox], s.ID)
		}
	}
	// The CA's key and the token are in the Secret, which only the
	// gateway pod mounts.
	if string(o.Secret.Data[KeyCA]) != "CERT+KEY" || string(o.Secret.Data[KeyToken]) != "tok" {
		t.Errorf("secret data = %v", o.Secret.Data)
	}
	for k, v := range o.ConfigMap.Data {
		if strings.Contains(v, "KEY") || strings.Contains(v, "tok") {
			t.Errorf("configmap key %s holds secret material: %q", k, v)
		}
	}
	for _, v := range agent.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("agent pod mounts secret %s", v.Secret.SecretName)
		}
	}
	if agent.Spec.AutomountServiceAccountToken == nil || *agent.Spec.AutomountServiceAccountToken {
		t.Error("agent pod mounts a service account token")
	}
}

func TestAgentPodHardened(t *testing.T) {
	s := testSpec()
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	if len(agent.Spec.Containers) != 1 || agent.Spec.Containers[0].Name != "agent" {
		t.Fatalf("containers = %v", agent.Spec.Containers)
	}
	a := agent.Spec.Containers[0]
	sc := a.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != DefaultAgentUID || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("agent runs as %v (non-root %v), want uid %d, non-root", sc.RunAsUser, sc.RunAsNonRoot, DefaultAgentUID)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("agent may escalate privileges")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("agent seccomp = %v, want RuntimeDefault", sc.SeccompProfile)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("agent capabilities = %+v, want all dropped, none added", sc.Capabilities)
	}
	// Only the rules container has NET_ADMIN, and it is an init container
	// that ends before the agent starts; the shim is a native sidecar,
	// started before it.
	if names := containerNames(agent.Spec.InitContainers); !slices.Equal(names, []string{"shim", "rules"}) {
		t.Errorf("init containers %v, want the shim, then the rules", names)
	}
	for _, c := range agent.Spec.InitContainers {
		added := c.SecurityContext.Capabilities.Add
		switch c.Name {
		case "rules":
			if !slices.Equal(added, []corev1.Capability{"NET_ADMIN"}) || c.RestartPolicy != nil {
				t.Errorf("rules: capabilities %v, restart policy %v; want NET_ADMIN only, a plain init container", added, c.RestartPolicy)
			}
			// The pod is made before its gateway serves: the rules
			// container, before which nothing else starts, waits for it.
			// The kubelet starts it once the shim's process runs,
			// which may be before the shim listens: it waits for that
			// too, so the agent's first connection finds the shim.
			for _, flag := range []string{"--wait-gateway", "--wait-shim"} {
				if i := slices.Index(c.Command, flag); i < 0 || i+1 >= len(c.Command) || c.Command[i+1] != GatewayWait.String() {
					t.Errorf("rules: command %q; want it to wait (%s %v)", c.Command, flag, GatewayWait)
				}
			}
		case "shim":
			if len(added) > 0 || c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways || *c.SecurityContext.RunAsUser != ShimUID {
				t.Errorf("shim: capabilities %v, restart policy %v, uid %v; want none, Always, %d", added, c.RestartPolicy, *c.SecurityContext.RunAsUser, ShimUID)
			}
		default:
			t.Errorf("unexpected init container %s", c.Name)
		}
	}
	env := map[string]string{}
	for _, e := range a.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{
		"HTTP_PROXY": "http://10.244.0.9:3128", "HTTPS_PROXY": "mine", "FOO": "bar",
		"SSL_CERT_FILE": "/run/sbx-ca/bundle.pem", "NODE_EXTRA_CA_CERTS": "/run/sbx-ca/ca.pem", "HOME": "/home/sbx",
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	if agent.Spec.DNSPolicy != corev1.DNSNone || !slices.Equal(agent.Spec.DNSConfig.Nameservers, []string{"10.244.0.9"}) {
		t.Errorf("dns = %v %v, want only the gateway", agent.Spec.DNSPolicy, agent.Spec.DNSConfig)
	}
	if _, err := AgentPod(s, netip.MustParseAddr("fd00::1")); err == nil {
		t.Error("an IPv6 gateway address was taken")
	}
}

func TestSkipPodRulesIsMarked(t *testing.T) {
	s := testSpec()
	s.SkipPodRulesForTest = true
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	rules := initContainer(agent, "rules")
	if agent.Annotations[AnnotationNoPodRules] != "true" || !slices.Contains(rules.Command, "--skip-for-test") {
		t.Errorf("annotations %v, rules command %v: want the pod marked and the rules skipped", agent.Annotations, rules.Command)
	}
}

func TestNetworkPolicies(t *testing.T) {
	o, err := MakeObjects(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	ap := o.AgentPolicy.Spec
	if len(ap.PolicyTypes) != 2 || len(ap.Ingress) != 0 || len(ap.Egress) != 1 {
		t.Fatalf("agent policy = %+v, want ingress and egress, no ingress rule, one egress rule", ap)
	}
	to := ap.Egress[0].To
	if len(to) != 1 || to[0].PodSelector == nil || to[0].PodSelector.MatchLabels[LabelRole] != RoleGateway || to[0].PodSelector.MatchLabels[LabelSandbox] != "1a2b3c4d" || to[0].IPBlock != nil || to[0].NamespaceSelector != nil {
		t.Errorf("agent egress = %+v, want its own gateway pod only", to)
	}
	gp := o.GatewayPolicy.Spec
	from := gp.Ingress[0].From
	if len(gp.Ingress) != 1 || len(from) != 1 || from[0].PodSelector.MatchLabels[LabelRole] != RoleAgent || from[0].PodSelector.MatchLabels[LabelSandbox] != "1a2b3c4d" {
		t.Errorf("gateway ingress = %+v, want its own agent pod only", gp.Ingress)
	}
	v4 := gp.Egress[0].To[0].IPBlock
	for _, n := range []string{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
		if !slices.Contains(v4.Except, n) {
			t.Errorf("gateway egress lets %s through", n)
		}
	}
	o.AllowPrivate([]netip.Prefix{netip.MustParsePrefix("10.244.0.7/32")})
	last := o.GatewayPolicy.Spec.Egress[len(o.GatewayPolicy.Spec.Egress)-1]
	if last.To[0].IPBlock.CIDR != "10.244.0.7/32" {
		t.Errorf("allow_private egress = %+v", last)
	}
}

func TestCheckAdmitted(t *testing.T) {
	s := testSpec()
	sent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAdmitted(sent, sent.DeepCopy()); err != nil {
		t.Errorf("the same pod: %v", err)
	}
	t2 := true
	for name, change := range map[string]func(p *corev1.Pod){
		"a mesh's init container": func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "istio-init", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}})
		},
		"a sidecar":          func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "proxy"}) },
		"the node's network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"a shared pid space": func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = &t2 },
		"another image":      func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" },
		"a capability added": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		},
		"privileged": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = &t2 },
	} {
		kept := sent.DeepCopy()
		change(kept)
		if err := checkAdmitted(sent, kept); !errors.Is(err, ErrPodChanged) {
			t.Errorf("%s: got %v, want ErrPodChanged", name, err)
		}
	}
}

func TestReservedUIDs(t *testing.T) {
	for _, uid := range []int64{ShimUID, GatewayUID} {
		s := testSpec()
		s.User = uid
		if _, err := AgentPod(s, netip.MustParseAddr("10.244.0.9")); !errors.Is(err, ErrReservedUID) {
			t.Errorf("uid %d: got %v, want ErrReservedUID", uid, err)
		}
	}
}

func TestPodIPv4(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{PodIP: "fd00::5", PodIPs: []corev1.PodIP{{IP: "fd00::5"}, {IP: "10.244.0.5"}}}}
	if ip, ok := podIPv4(p); !ok || ip.String() != "10.244.0.5" {
		t.Errorf("dual stack, IPv6 first: got %v %v, want 10.244.0.5", ip, ok)
	}
	p.Status.PodIPs = p.Status.PodIPs[:1]
	if _, ok := podIPv4(p); ok {
		t.Error("an IPv6-only pod gave an IPv4 address")
	}
}

// TestMockLLMObjects: a mock's script goes to the gateway pod alone, in
// the ConfigMap, and the gateway answers its host from it; scripts too
// big for a ConfigMap are refused before anything is made.
func TestMockLLMObjects(t *testing.T) {
	s := testSpec()
	s.MockLLM = []MockScript{{Host: "api.anthropic.com", Script: []byte("turns: []\n")}}
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.ConfigMap.Data["mock-llm-0.yaml"]; got != "turns: []\n" {
		t.Errorf("ConfigMap mock-llm-0.yaml: got %q, want the script", got)
	}
	cmd := strings.Join(o.Gateway.Spec.Containers[0].Command, " ")
	if want := "--mock-llm api.anthropic.com=" + configDir + "/mock-llm-0.yaml"; !strings.Contains(cmd, want) {
		t.Errorf("gateway command %q lacks %q", cmd, want)
	}
	// A request no turn fits is told to queue one with sbx kube's
	// command, for this sandbox, not sbx mock expect.
	if i := slices.Index(o.Gateway.Spec.Containers[0].Command, "--mock-command"); i < 0 || o.Gateway.Spec.Containers[0].Command[i+1] != "sbx kube mock expect -n ns1 --sandbox 1a2b3c4d" {
		t.Errorf("gateway command %q: want --mock-command \"sbx kube mock expect -n ns1 --sandbox 1a2b3c4d\"", cmd)
	}
	if plain, err := MakeObjects(testSpec()); err != nil || slices.Contains(plain.Gateway.Spec.Containers[0].Command, "--mock-command") {
		t.Errorf("a gateway pod without mocks has --mock-command (%v): %q", err, plain.Gateway.Spec.Containers[0].Command)
	}
	var mounted bool
	for _, v := range o.Gateway.Spec.Volumes {
		if v.ConfigMap != nil {
			for _, it := range v.ConfigMap.Items {
				mounted = mounted || it.Key == "mock-llm-0.yaml"
			}
		}
	}
	if !mounted {
		t.Error("the gateway pod does not mount the script")
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.0.0.7"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range agent.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, it := range v.ConfigMap.Items {
			if strings.HasPrefix(it.Key, "mock-llm") {
				t.Errorf("the agent pod mounts the script %s", it.Key)
			}
		}
	}
	s.MockLLM[0].Script = make([]byte, maxConfigData)
	if _, err := MakeObjects(s); err == nil || !strings.Contains(err.Error(), "shorten the scripts") {
		t.Errorf("a script over the ConfigMap's bound: got %v, want the refusal", err)
	}
}

// TestSecretObjects: a secret's value is in the sandbox's Secret and
// nowhere else; only the gateway pod mounts it, at the directory its
// command reads values from, and is told the placeholder; the agent pod
// holds the placeholder in its environment, and nothing of the value in
// its whole spec.
func TestSecretObjects(t *testing.T) {
	const value = "sk-test-VALUE-4f2a9c"
	const ph = "sbx-secret-API_KEY-0123456789abcdef0123456789abcdef"
	s := testSpec()
	s.Secrets = []Secret{
		{Name: "API_KEY", Placeholder: ph, Value: value, Hosts: []string{"api.example.com", "10.0.0.5:8443"}, Headers: []string{"X-Token"}},
		{Name: "POLICY_KEY", Placeholder: "sbx-secret-POLICY_KEY-ffffffffffffffffffffffffffffffff", Value: "pv-other", InPolicy: true},
	}
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(o.Secret.Data[KeySecretPrefix+"API_KEY"]); got != value {
		t.Errorf("the Secret's %sAPI_KEY = %q, want the value", KeySecretPrefix, got)
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	// Only the Secret holds a value: the ConfigMap, the gateway pod and
	// the agent pod, as the API server would keep them, hold none.
	for what, obj := range map[string]any{"ConfigMap": o.ConfigMap, "gateway pod": o.Gateway, "agent pod": agent} {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{value, "pv-other"} {
			if strings.Contains(string(b), v) {
				t.Errorf("the %s holds a secret's value %q", what, v)
			}
		}
	}
	// The gateway pod: the values mounted under the directory
	// --secret-dir names, the placeholders and the flag secret's
	// binding on its command line.
	cmd := strings.Join(o.Gateway.Spec.Containers[0].Command, " ")
	for _, want := range []string{
		"--secret-dir " + secretValuesDir,
		"--secret-placeholder API_KEY=" + ph,
		"--secret API_KEY@api.example.com,10.0.0.5:8443",
		"--secret-header API_KEY=X-Token",
		"--secret-placeholder POLICY_KEY=sbx-secret-POLICY_KEY-",
	} {
		if !strings.Contains(cmd, want) {
			t.Errorf("gateway command %q lacks %q", cmd, want)
		}
	}
	if strings.Contains(cmd, "--secret POLICY_KEY") {
		t.Errorf("gateway command %q binds the policy's secret again: the policy binds it", cmd)
	}
	var items []string
	for _, v := range o.Gateway.Spec.Volumes {
		if v.Secret != nil {
			for _, it := range v.Secret.Items {
				items = append(items, it.Key+"="+it.Path)
			}
		}
	}
	if !slices.Contains(items, KeySecretPrefix+"API_KEY=values/API_KEY") || !slices.Contains(items, KeyToken+"="+KeyToken) {
		t.Errorf("gateway pod's Secret items %v, want the value at values/API_KEY and the token", items)
	}
	// The agent pod: the placeholder in its environment, no Secret in
	// any volume or variable.
	env := map[string]string{}
	for _, e := range agent.Spec.Containers[0].Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			t.Errorf("agent env %s comes from %+v", e.Name, e.ValueFrom)
		}
	}
	if env["API_KEY"] != ph {
		t.Errorf("agent env API_KEY = %q, want the placeholder %q", env["API_KEY"], ph)
	}
	for _, c := range append(agent.Spec.InitContainers, agent.Spec.Containers...) {
		for _, e := range c.EnvFrom {
			t.Errorf("container %s takes its environment from %+v", c.Name, e)
		}
	}
	for _, v := range agent.Spec.Volumes {
		if v.Secret != nil || v.Projected != nil {
			t.Errorf("agent pod mounts volume %s from a Secret: %+v", v.Name, v.VolumeSource)
		}
	}
}

// TestSecretSpecRefused: a secret the agent's environment sets already,
// a placeholder that is not a placeholder, or an empty value are refused
// before anything is made.
func TestSecretSpecRefused(t *testing.T) {
	ok := Secret{Name: "API_KEY", Placeholder: "sbx-secret-API_KEY-0123456789abcdef0123456789abcdef", Value: "v", Hosts: []string{"api.example.com"}}
	for _, tc := range []struct {
		name string
		set  func(*Spec)
		want string
	}{
		{"set by -e", func(s *Spec) { s.Env = append(s.Env, "API_KEY=mine") }, "set already"},
		{"sbx's own variable", func(s *Spec) {
			s.Secrets[0].Name, s.Secrets[0].Placeholder = "HOME", "sbx-secret-HOME-0123456789abcdef0123456789abcdef"
		}, "set already"},
		{"bad placeholder", func(s *Spec) { s.Secrets[0].Placeholder = "the-value" }, "placeholder"},
		{"other name's placeholder", func(s *Spec) { s.Secrets[0].Placeholder = "sbx-secret-OTHER-0123456789abcdef0123456789abcdef" }, "placeholder"},
		{"no value", func(s *Spec) { s.Secrets[0].Value = "" }, "no value"},
		{"no hosts", func(s *Spec) { s.Secrets[0].Hosts = nil }, "no hosts"},
		{"twice", func(s *Spec) { s.Secrets = append(s.Secrets, s.Secrets[0]) }, "twice"},
	} {
		s := testSpec()
		s.Secrets = []Secret{ok}
		tc.set(&s)
		if _, err := MakeObjects(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestPolicyScriptObjects: the LLM scripts a policy's llm responses name
// go in the ConfigMap, and the gateway pod alone mounts them, told which
// file holds each name (the policy keeps its names, so that a policy
// replaced with the same file names the same scripts); a recorded host is
// recorded by the gateway pod for its management API; scripts too big
// for a ConfigMap are refused before anything is made.
func TestPolicyScriptObjects(t *testing.T) {
	s := testSpec()
	s.LLMScripts = []LLMScript{{Name: "-scripts/agent=1.yaml", Script: []byte("turns: []\n")}}
	s.RecordLLM = []string{"api.anthropic.com"}
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.ConfigMap.Data["llm-script-0.yaml"]; got != "turns: []\n" {
		t.Errorf("ConfigMap llm-script-0.yaml: got %q, want the script", got)
	}
	if got := o.ConfigMap.Data[KeyPolicy]; got != string(s.Policy) {
		t.Errorf("ConfigMap policy: got %q, want the policy as given", got)
	}
	args := o.Gateway.Spec.Containers[0].Command
	for _, want := range [][]string{{"--llm-script=-scripts/agent=1.yaml=" + configDir + "/llm-script-0.yaml"}, {"--record-llm-api", "api.anthropic.com"}} {
		found := false
		for i := range args {
			found = found || slices.Equal(args[i:min(i+len(want), len(args))], want)
		}
		if !found {
			t.Errorf("gateway command %q lacks %q", args, want)
		}
	}
	var mounted bool
	for _, v := range o.Gateway.Spec.Volumes {
		if v.ConfigMap != nil {
			for _, it := range v.ConfigMap.Items {
				mounted = mounted || it.Key == "llm-script-0.yaml" && it.Path == "llm-script-0.yaml"
			}
		}
	}
	if !mounted {
		t.Error("the gateway pod does not mount the script")
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.0.0.7"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range agent.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		// Its view of the ConfigMap is the CA and the trust bundle: a
		// volume of the whole ConfigMap would hold the scripts too.
		if len(v.ConfigMap.Items) == 0 {
			t.Errorf("the agent pod mounts the whole ConfigMap (volume %s), scripts and policy included", v.Name)
		}
		for _, it := range v.ConfigMap.Items {
			if it.Key != KeyCACert && it.Key != KeyBundle {
				t.Errorf("the agent pod mounts %s of the ConfigMap", it.Key)
			}
		}
	}
	s.LLMScripts[0].Script = make([]byte, maxConfigData)
	if _, err := MakeObjects(s); err == nil || !strings.Contains(err.Error(), "shorten the scripts") {
		t.Errorf("a script over the ConfigMap's bound: got %v, want the refusal", err)
	}
}

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// initContainer returns the pod's init container of that name, or an
// empty one.
func initContainer(p *corev1.Pod, name string) corev1.Container {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return c
		}
	}
	return corev1.Container{}
}
