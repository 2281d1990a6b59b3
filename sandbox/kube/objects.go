package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sbx-dev/sbx/sandbox"
)

// Labels and annotations on every object of a sandbox.
const (
	// LabelSandbox carries the sandbox's id: every object of a sandbox
	// has it, and sbx kube finds them by it.
	LabelSandbox = "sbx.dev/sandbox"
	// LabelRole says which pod a pod is: RoleAgent or RoleGateway.
	LabelRole = "sbx.dev/role"
	// AnnotationName is the sandbox's --name, when it has one.
	AnnotationName = "sbx.dev/name"
	// AnnotationCommand is the agent's command, as JSON, for sbx kube ps.
	AnnotationCommand = "sbx.dev/command"
	// AnnotationNoPodRules marks an agent pod whose in-pod rules were
	// left out (Spec.SkipPodRulesForTest): only its NetworkPolicy
	// confines it.
	AnnotationNoPodRules = "sbx.dev/test-no-pod-rules"

	RoleAgent   = "agent"
	RoleGateway = "gateway"
)

// The ports of a sandbox's gateway pod and the capture shim in its agent
// pod. The management API listens on the gateway pod's loopback only:
// it is reached through the Kubernetes API (port-forward), never over the
// pod network.
const (
	ProxyPort   = 3128
	CapturePort = 15002
	DNSPort     = 5353
	APIPort     = 8484
	ShimPort    = 15001
	// ShimUID is the capture shim's uid: the in-pod rules let it, and
	// only it, reach the gateway's capture port.
	ShimUID = 15001
	// GatewayUID is the gateway container's uid.
	GatewayUID = 65532
	// DefaultAgentUID is the agent container's uid unless Spec.User says
	// otherwise: it is never 0.
	DefaultAgentUID = 1000
)

// agentHome is the agent's HOME unless Spec.Env sets one: an empty
// directory the agent's uid can write, as /tmp is.
const agentHome = "/home/sbx"

// Where the pods see the sandbox's ConfigMap and Secret.
const (
	configDir = "/var/run/sbx/config"
	secretDir = "/var/run/sbx/secret"
)

// Keys of the sandbox's ConfigMap and Secret.
const (
	KeyPolicy = "policy.yaml"
	KeyCACert = "ca.pem"     // ConfigMap: the CA's certificate
	KeyBundle = "bundle.pem" // ConfigMap: the roots and the CA, for SSL_CERT_FILE
	KeyToken  = "token"      // Secret: the management API's bearer token
	KeyCA     = "ca-key.pem" // Secret: the CA's certificate and key
	// KeyUpstreamCA is the ConfigMap's key of the CAs the gateway trusts
	// besides the roots of its image, for upstreams (Spec.UpstreamCA).
	KeyUpstreamCA = "upstream-ca.pem"
	// KeySecretPrefix starts the Secret's key of each secret's value:
	// KeySecretPrefix and the secret's name.
	KeySecretPrefix = "secret-"
)

// secretValuesDir is where the gateway pod sees the secrets' values, each
// in a file of its name (sbx gateway --secret-dir).
const secretValuesDir = secretDir + "/values"

// ProcessUnknown is why the gateway pod's records name no process
// (their process_unknown): sbx run's gateway reads the owner of a
// client's socket from the sandbox's processes, which a gateway pod
// cannot see.
const ProcessUnknown = "the agent runs in another pod, whose processes the gateway pod cannot see"

// Spec is one sandbox on a cluster: what Objects and AgentPod make.
type Spec struct {
	// ID is the sandbox's id (8 lower-case hex digits; NewID makes one).
	ID string
	// Namespace is the Kubernetes namespace of every object; "" leaves it
	// out of them (Cluster.Create sets its own).
	Namespace string
	// Name is the user's name for the sandbox (--name), or "".
	Name string
	// Image is the agent container's image; Command its command (the
	// image's entrypoint when empty).
	Image   string
	Command []string
	// Env is the agent's own environment (NAME=VALUE): it wins over the
	// proxy and trust variables sbx sets.
	Env []string
	// User is the agent container's uid; 0 means DefaultAgentUID. It is
	// never root.
	User int64
	// GatewayImage is sbx's own image (sbx kube image), for the gateway
	// pod, the rules init container and the capture shim.
	GatewayImage string
	// PullPolicy is every container's image pull policy; "" lets
	// Kubernetes choose.
	PullPolicy corev1.PullPolicy
	// Policy is the gateway's policy file (YAML or JSON).
	Policy []byte
	// CACert is the inspection CA's certificate (PEM) and CA its
	// certificate and private key, for the gateway only. Roots is the
	// bundle the agent's bundle.pem adds the CA to.
	CACert, CA, Roots []byte
	// Token is the management API's bearer token.
	Token string
	// Memory and CPUs bound the agent container as sbx run's --memory
	// and --cpus bound a sandbox: its resources' limits (bytes; CPUs, e.g.
	// 1.5). 0 sets no limit. Its requests, what the scheduler keeps for it,
	// are AgentMemoryRequest and CPURequest, or the limit when less.
	Memory int64
	CPUs   float64
	// CPURequest is the CPUs the scheduler keeps for the agent container
	// on its node (its CPU request, e.g. 0.5): a reservation, not a
	// bound, which CPUs is. 0 means AgentCPURequest, or CPUs when less;
	// it is never more than CPUs when that is set.
	CPURequest float64
	// TmpSize bounds the agent's /tmp and HOME, each: emptyDirs in memory
	// (they count against Memory) with that sizeLimit. 0 means
	// DefaultTmpSize.
	TmpSize int64
	// SkipPodRulesForTest leaves the in-pod rules out, so that only the
	// NetworkPolicy confines the agent pod. Tests only: it takes away one
	// of the two layers.
	SkipPodRulesForTest bool
	// MockLLM are the scripted LLMs the gateway answers hosts with
	// instead of the network (sbx run's --mock-llm), in the sandbox's
	// ConfigMap.
	MockLLM []MockScript
	// LLMScripts are the scripts the policy's intercept rules answer
	// with (response: {llm: NAME}), by the names the policy gives them,
	// in the sandbox's ConfigMap: Policy keeps the names as written, and
	// the gateway pod is told which file holds each.
	LLMScripts []LLMScript
	// RecordLLM are the hosts whose LLM API the gateway pod records (sbx
	// run's --record-llm): it keeps each recording for its management
	// API, where sbx kube run reads it before the pod goes.
	RecordLLM []string
	// Secrets are the values the agent sees only as placeholders (sbx
	// run's --secret, docs/secrets.md): each value goes in the sandbox's
	// Secret, which only the gateway pod mounts; the agent's environment
	// has each name set to its placeholder.
	Secrets []Secret
	// UpstreamCA are CA certificates (PEM) the gateway trusts besides
	// its image's roots when it verifies the upstreams of inspected
	// HTTPS requests (sbx run's --upstream-ca), in the ConfigMap.
	UpstreamCA []byte
}

// A Secret is one secret of a sandbox: its Name (the agent's variable),
// its Placeholder (what that variable holds: sbx-secret-NAME- and 32
// hex digits, chosen by the caller) and its Value, which only the
// gateway pod sees. A secret of the policy (InPolicy) is bound to its
// hosts there; another is bound to Hosts (HOST[:PORT]) in the credential
// Headers (none: the default ones), as sbx gateway's --secret and
// --secret-header say.
type Secret struct {
	Name, Placeholder, Value string
	InPolicy                 bool
	Hosts, Headers           []string
}

// envName matches an environment variable's name, as a secret's is.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkSecrets checks the secrets' names, placeholders and values.
func (s *Spec) checkSecrets() error {
	seen := map[string]bool{}
	for _, sec := range s.Secrets {
		switch {
		case !envName.MatchString(sec.Name):
			return fmt.Errorf("sandbox %s: secret %q: the name is not an environment variable's", s.ID, sec.Name)
		case seen[sec.Name]:
			return fmt.Errorf("sandbox %s: secret %s given twice", s.ID, sec.Name)
		case !regexp.MustCompile(`^sbx-secret-` + sec.Name + `-[0-9a-f]{32}$`).MatchString(sec.Placeholder):
			return fmt.Errorf("sandbox %s: secret %s: placeholder %q: want sbx-secret-%s- and 32 hex digits", s.ID, sec.Name, sec.Placeholder, sec.Name)
		case sec.Value == "":
			return fmt.Errorf("sandbox %s: secret %s has no value", s.ID, sec.Name)
		case !sec.InPolicy && len(sec.Hosts) == 0:
			return fmt.Errorf("sandbox %s: secret %s: no hosts", s.ID, sec.Name)
		}
		seen[sec.Name] = true
	}
	return nil
}

// ErrReservedUID is the error for an agent uid that is sbx's own.
var ErrReservedUID = errors.New("reserved uid")

// ErrRequestOverLimit is the error for a CPU request above the CPU limit,
// which Kubernetes refuses.
var ErrRequestOverLimit = errors.New("a request cannot be more than its limit")

// ErrSecretEnv is the error for a secret whose name the agent's
// environment sets already.
var ErrSecretEnv = errors.New("a secret's variable set twice")

var idPattern = regexp.MustCompile(`^[0-9a-f]{8}$`)

// ValidID says whether id is a sandbox id: 8 lower-case hex digits.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// check checks the fields Objects and AgentPod need.
func (s *Spec) check() error {
	switch {
	case !idPattern.MatchString(s.ID):
		return fmt.Errorf("sandbox id %q: want 8 lower-case hex digits", s.ID)
	case s.Image == "":
		return fmt.Errorf("sandbox %s: no agent image", s.ID)
	case s.GatewayImage == "":
		return fmt.Errorf("sandbox %s: no gateway image (sbx's own, which sbx kube image writes)", s.ID)
	case s.User < 0:
		return fmt.Errorf("sandbox %s: user %d: want a uid above 0", s.ID, s.User)
	case s.User == ShimUID || s.User == GatewayUID:
		return fmt.Errorf("sandbox %s: user %d is sbx's own (the capture shim's or the gateway's, which the pod's rules treat apart): %w", s.ID, s.User, ErrReservedUID)
	case s.Memory < 0 || s.CPUs < 0 || s.TmpSize < 0 || s.CPURequest < 0:
		return fmt.Errorf("sandbox %s: memory %d, CPUs %v, CPU request %v, tmp size %d: want 0 (no limit; for the request and the tmp size, the default) or more", s.ID, s.Memory, s.CPUs, s.CPURequest, s.TmpSize)
	case s.CPUs > 0 && s.CPURequest > s.CPUs:
		return fmt.Errorf("sandbox %s: CPU request %v is more than the CPU limit %v: %w", s.ID, s.CPURequest, s.CPUs, ErrRequestOverLimit)
	case len(s.Policy) == 0 || len(s.CACert) == 0 || len(s.CA) == 0 || s.Token == "":
		return fmt.Errorf("sandbox %s: the policy, the CA and the token are required", s.ID)
	}
	if err := s.checkSecrets(); err != nil {
		return err
	}
	if _, err := s.agentEnv("http://192.0.2.1:3128"); err != nil {
		return err
	}
	size := len(s.Policy) + 2*len(s.CACert) + len(s.Roots) + len(s.UpstreamCA)
	for _, m := range s.MockLLM {
		if m.Host == "" || len(m.Script) == 0 {
			return fmt.Errorf("sandbox %s: a mock LLM needs a host and a script", s.ID)
		}
		size += len(m.Script)
	}
	for _, l := range s.LLMScripts {
		if l.Name == "" || len(l.Script) == 0 {
			return fmt.Errorf("sandbox %s: an LLM script of the policy needs a name and a script", s.ID)
		}
		size += len(l.Script)
	}
	for _, h := range s.RecordLLM {
		if h == "" || strings.HasPrefix(h, "-") {
			return fmt.Errorf("sandbox %s: recorded LLM host %q: want a host name", s.ID, h)
		}
	}
	if size > maxConfigData {
		return fmt.Errorf("sandbox %s: the policy, the LLM scripts and the CA come to %d KiB, over the %d KiB a sandbox's ConfigMap holds: shorten the scripts", s.ID, size>>10, maxConfigData>>10)
	}
	return nil
}

// A MockScript is a host the gateway pod answers from Script (YAML or
// JSON, a mock LLM's script) instead of the network.
type MockScript struct {
	Host   string
	Script []byte
}

// An LLMScript is a script the policy's llm responses name Name (YAML or
// JSON, a mock LLM's script), which the gateway pod answers those rules'
// requests from.
type LLMScript struct {
	Name   string
	Script []byte
}

// llmScriptKey is the ConfigMap's key of the i-th script of the policy.
func llmScriptKey(i int) string { return "llm-script-" + strconv.Itoa(i) + ".yaml" }

// maxConfigData bounds what the sandbox's ConfigMap holds, below the 1
// MiB an object may be.
const maxConfigData = 900 << 10

// mockKey is the ConfigMap's key of the i-th mock's script.
func mockKey(i int) string { return "mock-llm-" + strconv.Itoa(i) + ".yaml" }

// ObjectName is the name of the sandbox's ConfigMap, Secret and agent pod.
func ObjectName(id string) string { return "sbx-" + id }

// GatewayPodName is the name of the sandbox's gateway pod.
func GatewayPodName(id string) string { return "sbx-" + id + "-gateway" }

func (s *Spec) labels(role string) map[string]string {
	l := map[string]string{LabelSandbox: s.ID}
	if role != "" {
		l[LabelRole] = role
	}
	return l
}

func (s *Spec) meta(name, role string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: s.labels(role), Annotations: map[string]string{}}
	if s.Name != "" {
		m.Annotations[AnnotationName] = s.Name
	}
	if role != "" {
		// A service mesh's injector would add a sidecar and an init
		// container with NET_ADMIN of its own (Create refuses a pod that
		// comes back changed); Istio's and Linkerd's are asked not to.
		m.Annotations["sidecar.istio.io/inject"] = "false"
		m.Annotations["linkerd.io/inject"] = "disabled"
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	return m
}

// Objects are the objects of a sandbox that do not depend on where its
// gateway pod runs, in the order they are made: the ConfigMap (which owns
// the others), the Secret, the NetworkPolicies and the gateway pod. The
// agent pod comes last, from AgentPod, once the gateway pod has an address.
type Objects struct {
	ConfigMap     *corev1.ConfigMap
	Secret        *corev1.Secret
	AgentPolicy   *networkingv1.NetworkPolicy
	GatewayPolicy *networkingv1.NetworkPolicy
	Gateway       *corev1.Pod
}

// MakeObjects returns the sandbox's objects but the agent pod.
func MakeObjects(s Spec) (*Objects, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	bundle := append(append([]byte(nil), s.Roots...), '\n')
	bundle = append(bundle, s.CACert...)
	o := &Objects{
		ConfigMap: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: s.meta(ObjectName(s.ID), ""),
			Data: map[string]string{
				KeyPolicy: string(s.Policy),
				KeyCACert: string(s.CACert),
				KeyBundle: string(bundle),
			},
		},
		Secret: &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: s.meta(ObjectName(s.ID), ""),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KeyToken: []byte(s.Token), KeyCA: s.CA},
		},
		AgentPolicy:   s.agentPolicy(),
		GatewayPolicy: s.gatewayPolicy(),
		Gateway:       s.gatewayPod(),
	}
	for i, m := range s.MockLLM {
		o.ConfigMap.Data[mockKey(i)] = string(m.Script)
	}
	for i, l := range s.LLMScripts {
		o.ConfigMap.Data[llmScriptKey(i)] = string(l.Script)
	}
	if len(s.UpstreamCA) > 0 {
		o.ConfigMap.Data[KeyUpstreamCA] = string(s.UpstreamCA)
	}
	for _, sec := range s.Secrets {
		o.Secret.Data[KeySecretPrefix+sec.Name] = []byte(sec.Value)
	}
	return o, nil
}

func tcpPort(p int32) networkingv1.NetworkPolicyPort {
	proto, port := corev1.ProtocolTCP, intstr.FromInt32(p)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &port}
}

func udpPort(p int32) networkingv1.NetworkPolicyPort {
	proto, port := corev1.ProtocolUDP, intstr.FromInt32(p)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &port}
}

// gatewayPorts are the ports of the gateway pod its agent pod may reach.
func gatewayPorts() []networkingv1.NetworkPolicyPort {
	return []networkingv1.NetworkPolicyPort{tcpPort(ProxyPort), tcpPort(CapturePort), tcpPort(DNSPort), udpPort(DNSPort)}
}

// agentPolicy lets the agent pod reach its gateway pod's ports and nothing
// else, and lets nothing reach it.
func (s *Spec) agentPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: s.meta(ObjectName(s.ID)+"-agent", ""),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: s.labels(RoleAgent)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.labels(RoleGateway)}}},
				Ports: gatewayPorts(),
			}},
		},
	}
}

// privateNets are the IPv4 addresses the gateway pod's egress leaves
// out: the private, shared, link-local (cloud metadata), loopback and
// multicast ranges, where clusters put their pods, services and nodes on
// the usual set-ups. A cluster whose addresses are public (some IPv6
// clusters, pod ranges outside RFC 1918) is left to the gateway's address
// guard, which refuses only special addresses. The guard refuses these
// too unless the policy's allow_private lets them through, and then the
// NetworkPolicy has them as well (AllowPrivate).
var privateNets = []string{
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
	"169.254.0.0/16", "127.0.0.0/8", "0.0.0.0/8", "224.0.0.0/3",
}

// gatewayPolicy lets only the agent pod reach the gateway pod, on its
// ports, and the gateway pod reach public addresses.
func (s *Spec) gatewayPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: s.meta(ObjectName(s.ID)+"-gateway", ""),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: s.labels(RoleGateway)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.labels(RoleAgent)}}},
				Ports: gatewayPorts(),
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: privateNets}}}},
				// The cluster's DNS, which the gateway resolves names with.
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{udpPort(53), tcpPort(53)},
				},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10", "::1/128", "ff00::/8", "64:ff9b::/96"}}}}},
			},
		},
	}
}

// AllowPrivate adds the networks to the gateway pod's egress: those the
// policy's allow_private lets the gateway reach.
func (o *Objects) AllowPrivate(nets []netip.Prefix) {
	if len(nets) == 0 {
		return
	}
	var peers []networkingv1.NetworkPolicyPeer
	for _, n := range nets {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: n.Masked().String()}})
	}
	o.GatewayPolicy.Spec.Egress = append(o.GatewayPolicy.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers})
}

// hardened is the security context of every container but the rules init
// container: no capabilities, no privilege escalation, the runtime's
// default seccomp profile; sbx's own containers have a read-only root.
func hardened(uid int64, readOnlyRoot bool) *corev1.SecurityContext {
	f, t := false, true
	return &corev1.SecurityContext{
		RunAsUser:                &uid,
		RunAsGroup:               &uid,
		RunAsNonRoot:             &t,
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   &readOnlyRoot,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// The agent container's requests, or its limits when they are less:
// what the scheduler keeps for it on a node. Its limits are what it may
// use (Spec.Memory, Spec.CPUs); a node short of memory evicts pods that
// use more than they requested first. The CPU request is small: an agent
// that waits on its model most of the time uses little, and the
// scheduler refuses a pod whose requests the node has no room for
// whatever the pods there use (50 sandboxes, each asking 100m, would
// need 5 CPUs of a node before any ran). Spec.CPURequest (sbx kube run
// --cpus-request) keeps more for an agent that needs it.
var (
	AgentMemoryRequest = resource.MustParse("128Mi")
	AgentCPURequest    = resource.MustParse("10m")
)

// DefaultTmpSize is Spec.TmpSize's default: sbx run's --tmp-size.
const DefaultTmpSize = 1 << 30

// The gateway pod's requests and limits. The requests are what the
// gateway uses idle, with room for a little traffic: an idle gateway
// waits on its sockets. scripts/bench-kube.sh 10 on the test node
// measured (the kubelet's figures, working set and the cgroups' CPU
// usage) a gateway pod's working set at 6.2 MiB (median; the shim's
// 4.7 MiB, the two 11-12 MiB at most) and its idle CPU at 0.2m (median;
// at most 2.6m; the shim's 0.2m at most): the memory request is 2.5
// times the median, the CPU request twice the most seen. sbx
// gateway run as the pod runs it has a resident set of about 54
// MiB idle (10 MiB of it its own memory, the rest its executable's
// pages, which the node's page cache shares), 58 MiB with 300 tunnels
// open, and 75 MiB after 2000 TLS-inspected requests 50 at a time (31
// MiB its own); the limits leave room for Limits' caps on connections
// and buffers, and for bursts of CPU.
var (
	GatewayMemoryRequest = resource.MustParse("16Mi")
	GatewayMemoryLimit   = resource.MustParse("256Mi")
	GatewayCPURequest    = resource.MustParse("5m")
	GatewayCPULimit      = resource.MustParse("1")
)

// The requests of the agent pod's rules init container and capture shim,
// each: what the shim uses idle (above), with room, and the limit of
// their memory. The rules container's request counts only while it runs,
// before the shim and the agent, whose requests are more.
var (
	SmallCPURequest    = resource.MustParse("1m")
	SmallMemoryRequest = resource.MustParse("8Mi")
	SmallMemoryLimit   = resource.MustParse("64Mi")
)

// agentResources are the agent container's requests and limits.
func (s *Spec) agentResources() corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: AgentCPURequest.DeepCopy(), corev1.ResourceMemory: AgentMemoryRequest.DeepCopy()},
	}
	if s.Memory > 0 || s.CPUs > 0 {
		r.Limits = corev1.ResourceList{}
	}
	if s.Memory > 0 {
		limit := resource.NewQuantity(s.Memory, resource.BinarySI)
		r.Limits[corev1.ResourceMemory] = *limit
		if limit.Cmp(AgentMemoryRequest) < 0 {
			r.Requests[corev1.ResourceMemory] = *limit
		}
	}
	if s.CPURequest > 0 {
		r.Requests[corev1.ResourceCPU] = *milliCPUs(s.CPURequest)
	}
	if s.CPUs > 0 {
		limit := milliCPUs(s.CPUs)
		r.Limits[corev1.ResourceCPU] = *limit
		if req := r.Requests[corev1.ResourceCPU]; limit.Cmp(req) < 0 {
			r.Requests[corev1.ResourceCPU] = *limit
		}
	}
	return r
}

// milliCPUs is n CPUs as a quantity of whole millicores, at least 1m.
func milliCPUs(n float64) *resource.Quantity {
	return resource.NewMilliQuantity(max(1, int64(n*1000)), resource.DecimalSI)
}

// tmpSize is Spec.TmpSize, or its default.
func (s *Spec) tmpSize() *resource.Quantity {
	n := s.TmpSize
	if n == 0 {
		n = DefaultTmpSize
	}
	return resource.NewQuantity(n, resource.BinarySI)
}

// flagRecordLLMAPI is the flag of sbx gateway that has the gateway pod
// record a host (List reads it back).
const flagRecordLLMAPI = "--record-llm-api"

// AllowCommand is what the help of the gateway's 403 answers names to
// allow a blocked target: sbx kube policy allow, with the namespace when
// the sandbox has one.
func (s *Spec) AllowCommand() string {
	return s.command("sbx kube policy allow")
}

// MockCommand is what a mock LLM of the gateway pod names, in its answer
// to a request no turn fits, to queue a turn: sbx kube mock expect, with
// the namespace when the sandbox has one (the mock's --host or --script
// follows it).
func (s *Spec) MockCommand() string {
	return s.command("sbx kube mock expect")
}

// command is the sbx kube command cmd for this sandbox: with its
// namespace, when it has one, and its id.
func (s *Spec) command(cmd string) string {
	if s.Namespace != "" {
		cmd += " -n " + s.Namespace
	}
	return cmd + " --sandbox " + s.ID
}

func smallResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: SmallCPURequest.DeepCopy(), corev1.ResourceMemory: SmallMemoryRequest.DeepCopy()},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: SmallMemoryLimit.DeepCopy()},
	}
}

// gatewayPod runs sbx gateway with the sandbox's policy, CA and token.
func (s *Spec) gatewayPod() *corev1.Pod {
	f := false
	secretMode, configMode := int32(0o440), int32(0o444)
	fsGroup := int64(GatewayUID)
	gw := corev1.Container{
		Name:            "gateway",
		Image:           s.GatewayImage,
		ImagePullPolicy: s.PullPolicy,
		Command: []string{"/sbx", "gateway",
			"--listen", "0.0.0.0:" + strconv.Itoa(ProxyPort),
			"--capture", "0.0.0.0:" + strconv.Itoa(CapturePort),
			"--dns", "0.0.0.0:" + strconv.Itoa(DNSPort),
			"--api", "127.0.0.1:" + strconv.Itoa(APIPort),
			"--token-file", secretDir + "/" + KeyToken,
			"--ca", secretDir + "/" + KeyCA,
			"--policy", configDir + "/" + KeyPolicy,
			"--log", "-",
			"--allow-command", s.AllowCommand(),
			"--process-unknown", ProcessUnknown,
		},
		Ports: []corev1.ContainerPort{
			{Name: "proxy", ContainerPort: ProxyPort, Protocol: corev1.ProtocolTCP},
			{Name: "capture", ContainerPort: CapturePort, Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: DNSPort, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: DNSPort, Protocol: corev1.ProtocolTCP},
		},
		SecurityContext: hardened(GatewayUID, true),
		// Ready once the proxy listens: the agent pod is made then. A
		// startup probe, not a readiness probe: it stops once it passed,
		// so that the kubelet's connections, which the gateway refuses
		// once it serves its agent pod alone, do not fill the log.
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(ProxyPort)}},
			PeriodSeconds:    1,
			FailureThreshold: 120,
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: GatewayCPURequest.DeepCopy(), corev1.ResourceMemory: GatewayMemoryRequest.DeepCopy()},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: GatewayCPULimit.DeepCopy(), corev1.ResourceMemory: GatewayMemoryLimit.DeepCopy()},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "config", MountPath: configDir, ReadOnly: true},
			{Name: "secret", MountPath: secretDir, ReadOnly: true},
		},
	}
	configItems := s.gatewayConfig(&gw)
	// The secrets' values, each in a file of its name under
	// secretValuesDir; the placeholders, which the agent pod's
	// environment holds, on the command line (they are no secret).
	secretItems := []corev1.KeyToPath{{Key: KeyToken, Path: KeyToken}, {Key: KeyCA, Path: KeyCA}}
	if len(s.Secrets) > 0 {
		gw.Command = append(gw.Command, "--secret-dir", secretValuesDir)
	}
	for _, sec := range s.Secrets {
		secretItems = append(secretItems, corev1.KeyToPath{Key: KeySecretPrefix + sec.Name, Path: "values/" + sec.Name})
		gw.Command = append(gw.Command, "--secret-placeholder", sec.Name+"="+sec.Placeholder)
		if sec.InPolicy {
			continue
		}
		gw.Command = append(gw.Command, "--secret", sec.Name+"@"+strings.Join(sec.Hosts, ","))
		for _, h := range sec.Headers {
			gw.Command = append(gw.Command, "--secret-header", sec.Name+"="+h)
		}
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: s.meta(GatewayPodName(s.ID), RoleGateway),
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{gw},
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &f,
			EnableServiceLinks:           &f,
			SecurityContext:              &corev1.PodSecurityContext{FSGroup: &fsGroup},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: ObjectName(s.ID)},
					Items:                configItems,
					DefaultMode:          &configMode,
				}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName:  ObjectName(s.ID),
					Items:       secretItems,
					DefaultMode: &secretMode,
				}}},
			},
		},
	}
}

// gatewayConfig adds to the gateway container's command the flags that
// name the files of the ConfigMap it reads (the policy's, the mocks' and
// the policy's LLM scripts, the upstreams' CAs), the command its mocks
// name to queue turns, and the hosts it records, and returns the ConfigMap's items its volume holds.
func (s *Spec) gatewayConfig(gw *corev1.Container) []corev1.KeyToPath {
	configItems := []corev1.KeyToPath{{Key: KeyPolicy, Path: KeyPolicy}}
	for i, m := range s.MockLLM {
		gw.Command = append(gw.Command, "--mock-llm", m.Host+"="+configDir+"/"+mockKey(i))
		configItems = append(configItems, corev1.KeyToPath{Key: mockKey(i), Path: mockKey(i)})
	}
	for i, l := range s.LLMScripts {
		gw.Command = append(gw.Command, "--llm-script="+l.Name+"="+configDir+"/"+llmScriptKey(i)) // one argument: a name may start with -
		configItems = append(configItems, corev1.KeyToPath{Key: llmScriptKey(i), Path: llmScriptKey(i)})
	}
	if len(s.MockLLM)+len(s.LLMScripts) > 0 {
		gw.Command = append(gw.Command, "--mock-command", s.MockCommand())
	}
	for _, h := range s.RecordLLM {
		gw.Command = append(gw.Command, flagRecordLLMAPI, h)
	}
	if len(s.UpstreamCA) > 0 {
		gw.Command = append(gw.Command, "--upstream-ca", configDir+"/"+KeyUpstreamCA)
		configItems = append(configItems, corev1.KeyToPath{Key: KeyUpstreamCA, Path: KeyUpstreamCA})
	}
	return configItems
}

// AgentPod is the sandbox's agent pod, for a gateway pod at gateway: the
// rules init container, the capture shim and the user's container.
func AgentPod(s Spec, gateway netip.Addr) (*corev1.Pod, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !gateway.Is4() {
		return nil, fmt.Errorf("gateway pod address %v: want an IPv4 address", gateway)
	}
	f, t, always := false, true, corev1.ContainerRestartPolicyAlways
	root, shimUID := int64(0), int64(ShimUID)
	uid := s.User
	if uid == 0 {
		uid = DefaultAgentUID
	}
	gw := gateway.String()
	// The pod is made once the gateway pod has its address, before the
	// gateway serves: the rules container waits for its proxy, through
	// the rules, so the agent starts only once it serves. It waits for
	// the shim to listen too: the kubelet starts the rules container once
	// the shim's process runs, which may be before it listens.
	rulesArgs := []string{"/sbx", "kube", "pod-rules", "--gateway", gw, "--wait-shim", GatewayWait.String(), "--wait-gateway", GatewayWait.String()}
	if s.SkipPodRulesForTest {
		rulesArgs = append(rulesArgs, "--skip-for-test")
	}
	rules := corev1.Container{
		Name:            "rules",
		Image:           s.GatewayImage,
		ImagePullPolicy: s.PullPolicy,
		Command:         rulesArgs,
		// Its error (the gateway did not answer, say) is what the pod's
		// status says, and sbx kube run with it.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// The only container with NET_ADMIN; it exits before the agent
		// starts.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &root,
			RunAsNonRoot:             &f,
			AllowPrivilegeEscalation: &f,
			Privileged:               &f,
			ReadOnlyRootFilesystem:   &t,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: smallResources(),
	}
	shim := corev1.Container{
		Name:            "shim",
		Image:           s.GatewayImage,
		ImagePullPolicy: s.PullPolicy,
		Command:         []string{"/sbx", "kube", "shim", "--gateway", netip.AddrPortFrom(gateway, CapturePort).String(), "--listen", "127.0.0.1:" + strconv.Itoa(ShimPort)},
		// A native sidecar, for the pod's life, and the first container:
		// the kubelet starts each init container once the one before it
		// runs (a sidecar) or has ended, so the shim and the rules
		// container start together, rather than the shim after the rules
		// container's wait for the gateway.
		RestartPolicy:   &always,
		SecurityContext: hardened(shimUID, true),
		Resources:       smallResources(),
	}
	env, err := s.agentEnv("http://" + netip.AddrPortFrom(gateway, ProxyPort).String())
	if err != nil {
		return nil, err
	}
	var envVars []corev1.EnvVar
	for _, kv := range env {
		k, v, _ := cut(kv)
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: v})
	}
	configMode := int32(0o444)
	agent := corev1.Container{
		Name:            "agent",
		Image:           s.Image,
		ImagePullPolicy: s.PullPolicy,
		Command:         s.Command,
		Env:             dedupEnv(envVars),
		SecurityContext: hardened(uid, false),
		Resources:       s.agentResources(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "trust", MountPath: sandbox.TrustDir, ReadOnly: true},
			{Name: "tmp", MountPath: "/tmp"},
			{Name: "home", MountPath: agentHome},
		},
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: s.meta(ObjectName(s.ID), RoleAgent),
		Spec: corev1.PodSpec{
			InitContainers:               []corev1.Container{shim, rules},
			Containers:                   []corev1.Container{agent},
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &f,
			EnableServiceLinks:           &f,
			DNSPolicy:                    corev1.DNSNone,
			DNSConfig:                    &corev1.PodDNSConfig{Nameservers: []string{gw}},
			SecurityContext:              &corev1.PodSecurityContext{FSGroup: &uid},
			Volumes: []corev1.Volume{
				{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: ObjectName(s.ID)},
					Items:                []corev1.KeyToPath{{Key: KeyCACert, Path: "ca.pem"}, {Key: KeyBundle, Path: "bundle.pem"}},
					DefaultMode:          &configMode,
				}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: s.tmpSize()}}},
				{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: s.tmpSize()}}},
			},
		},
	}
	if s.SkipPodRulesForTest {
		pod.Annotations[AnnotationNoPodRules] = "true"
	}
	return pod, nil
}

// agentEnv is the agent's environment for a gateway whose proxy is at
// the URL proxy: the proxy, trust and HOME variables, the user's (which
// win), and each secret's name set to its placeholder, never its value,
// which only the gateway pod has. A secret whose name is set already is
// refused (ErrSecretEnv), as sbx run refuses it.
func (s *Spec) agentEnv(proxy string) ([]string, error) {
	env := []string{"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy, "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1"}
	env = append(env, "HOME="+agentHome)
	env = (&sandbox.Trust{}).Env(append(env, s.Env...))
	for _, sec := range s.Secrets {
		for _, kv := range env {
			if k, _, _ := cut(kv); k == sec.Name {
				return nil, fmt.Errorf("sandbox %s: the agent's variable %s is set already (by -e, or by sbx: the proxy, trust and HOME variables); secret %s's placeholder goes there: %w", s.ID, k, k, ErrSecretEnv)
			}
		}
		env = append(env, sec.Name+"="+sec.Placeholder)
	}
	return env, nil
}

func cut(kv string) (k, v string, ok bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// dedupEnv keeps the last of each name, in the place of the first: the
// user's variables win over sbx's.
func dedupEnv(env []corev1.EnvVar) []corev1.EnvVar {
	idx := map[string]int{}
	var out []corev1.EnvVar
	for _, e := range env {
		if i, ok := idx[e.Name]; ok {
			out[i] = e
			continue
		}
		idx[e.Name] = len(out)
		out = append(out, e)
	}
	return out
}
