package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// kubeFlags are the flags of every sbx kube command: which cluster and
// namespace.
type kubeFlags struct {
	kubeconfig string
	namespace  string
}

func (f *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "the kubeconfig `FILE` (default $KUBECONFIG, else ~/.kube/config)")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "the Kubernetes `NAMESPACE` (default the kubeconfig context's)")
}

func (f *kubeFlags) connect() (*kube.Cluster, error) {
	c, err := kube.Connect(f.kubeconfig, f.namespace)
	if errors.Is(err, kube.ErrNoKubeconfig) {
		return nil, fmt.Errorf("%w: give one with --kubeconfig FILE or KUBECONFIG, or put it in ~/.kube/config", err)
	}
	return c, err
}

func newKubeCmd() *cobra.Command {
	var kf kubeFlags
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Run sandboxes as pods on a Kubernetes cluster",
		Long: `Kube runs a sandbox on a Kubernetes cluster with the same two layers as
sbx run: an agent pod whose only way out is its gateway pod, by rules inside
the pod (every TCP connection and DNS query goes to the gateway) and by a
NetworkPolicy (the pod may reach its gateway pod and nothing else). The
gateway pod decides every request by the policy and writes the decision log
to its standard output. docs/kubernetes.md has the details.

Every object of a sandbox carries the label sbx.dev/sandbox=ID and is owned
by its ConfigMap sbx-ID: deleting that deletes the sandbox.`,
		Example: `  sbx kube run --image node:22 --allow registry.npmjs.org -- npm install
  sbx kube ps -n agents`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	kf.addFlags(cmd.PersistentFlags())
	policy := &cobra.Command{
		Use:   "policy",
		Short: "Show or change a cluster sandbox's running policy",
		Example: `  sbx kube policy show --sandbox 1a2b3c4d
  sbx kube policy allow --sandbox 1a2b3c4d api.github.com`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	policy.AddCommand(
		newPolicyShowCmd(&kf),
		newPolicyAddCmd(&kf, netpolicy.Allow),
		newPolicyAddCmd(&kf, netpolicy.Block),
		newPolicyRemoveCmd(&kf),
		newPolicyReplaceCmd(&kf),
	)
	for _, c := range policy.Commands() {
		c.Example = kubeExample(c.Example)
	}
	cmd.AddCommand(
		newKubeRunCmd(&kf, false),
		newKubeRunCmd(&kf, true),
		newKubePSCmd(&kf),
		newKubeStopCmd(&kf),
		newKubeCheckCmd(&kf),
		newKubeControllerCmd(&kf),
		newKubeNPProbeCmd(),
		newAnswerCmd(true, &kf),
		newAnswerCmd(false, &kf),
		newKubeMockCmd(&kf),
		newKubeDecisionsCmd(&kf),
		newKubeImageCmd(),
		newKubePodRulesCmd(),
		newKubeShimCmd(),
		policy,
	)
	return cmd
}

// kubeRunOptions are sbx kube run's flags (and sbx kube manifest's).
type kubeRunOptions struct {
	policy       policyFlags
	mockLLM      []string
	image        string
	gatewayImage string
	pull         string
	name         string
	user         int64
	env          []string
	detach       bool
	gatewayIP    string
	id           string
	serverDryRun bool
	noPodRules   bool
	logFile      string
	// secrets and secretHeaders are --secret's and --secret-header's
	// values; upstreamCA is --upstream-ca.
	secrets, secretHeaders []string
	upstreamCA             string
	// mockJournal is --mock-journal: where the mocks' journal is kept
	// once the agent ends.
	mockJournal string
	// recordLLM are --record-llm's HOST=SCRIPT values: the gateway pod
	// records, and the scripts are written here when the agent ends.
	recordLLM []string
	// The agent's limits, as sbx run's flags of the same names, and its
	// CPU request (--cpus-request; 0 for the default).
	memory      string
	cpus        float64
	cpusSet     bool // --cpus given
	cpusRequest float64
	pidsLimit   int64
	tmpSize     string
}

// kubeRunLong is the help of sbx kube run.
const kubeRunLong = `Run makes a sandbox on the cluster (its ConfigMap, Secret, NetworkPolicies,
gateway pod and, once the gateway is ready, its agent pod), shows the agent's
output, and when the agent ends removes the sandbox and exits with the
agent's status. With --detach it returns once the agent runs; sbx kube stop
removes it.

The agent container runs as a user other than root (--user, default 1000)
without capabilities, with the runtime's default seccomp profile and no
privilege escalation; HTTP_PROXY and HTTPS_PROXY point at its gateway, and
TLS clients trust the sandbox's CA (mounted at /run/sbx-ca).

The gateway pod runs sbx's own image (--gateway-image; sbx kube image
writes one to push).`

func newKubeRunCmd(kf *kubeFlags, manifest bool) *cobra.Command {
	var o kubeRunOptions
	cmd := &cobra.Command{
		Use:   "run [flags] --image IMAGE -- [COMMAND [ARG...]]",
		Short: "Run a command in a sandbox on the cluster",
		Long:  kubeRunLong,
		Example: `  sbx kube run --image node:22 --allow registry.npmjs.org -- npm install
  sbx kube run -d --name agent1 --image my-agent --policy policy.yaml
  sbx kube policy allow --sandbox agent1 api.github.com
  sbx kube decisions --sandbox agent1 --follow`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runKube(cmd, kf, &o, args) },
	}
	if manifest {
		cmd.Use = "manifest [flags] --image IMAGE -- [COMMAND [ARG...]]"
		cmd.Short = "Print a sandbox's objects as YAML instead of making them"
		cmd.Long = `Manifest prints the objects sbx kube run would make, as YAML documents, for
clusters where objects go through a pipeline of their own. The agent pod
names its gateway pod's address, which is known only once that pod runs:
apply the other objects first, then run manifest again with the same
flags, --id (the sandbox's id, in the first output's labels) and
--gateway-ip to print the agent pod alone. Without --gateway-ip the agent
pod is left out.

With --server-dry-run the objects are sent to the API server, which checks
each one (admission included) without keeping it.`
		cmd.Example = `  sbx kube manifest --image node:22 --allow registry.npmjs.org -- npm install > sandbox.yaml
  kubectl apply -f sandbox.yaml       # then, once pod sbx-ID-gateway runs:
  sbx kube manifest --id ID --gateway-ip 10.244.1.7 --image node:22 --allow registry.npmjs.org -- npm install | kubectl apply -f -
  sbx kube manifest --server-dry-run --image busybox -- true`
		cmd.RunE = func(cmd *cobra.Command, args []string) error { return kubeManifest(cmd, kf, &o, args) }
	}
	fs := cmd.Flags()
	o.policy.AddFlags(fs)
	// A cluster sandbox's questions are answered with sbx kube approve.
	if f := fs.Lookup("default"); f != nil {
		f.Usage = strings.Replace(f.Usage, "(sbx approve)", "(sbx kube approve)", 1)
	}
	fs.StringVar(&o.image, "image", "", "the agent container's `IMAGE` (required)")
	fs.StringVar(&o.gatewayImage, "gateway-image", "", "sbx's own image `REF` as the cluster pulls it (required; sbx kube image writes one to push; a digest pins it), for the gateway pod and the agent pod's rules and capture shim")
	fs.StringVar(&o.pull, "pull", "", "the pods' image pull `POLICY`: Always, IfNotPresent or Never (default: Kubernetes')")
	fs.StringArrayVar(&o.mockLLM, "mock-llm", nil, mockLLMUsage+"; the scripts go to the gateway pod in the sandbox's ConfigMap (sbx kube mock drives them)")
	fs.StringArrayVar(&o.secrets, "secret", nil, secretUsage+"; the value goes in the sandbox's Secret, which only the gateway pod mounts")
	fs.StringArrayVar(&o.secretHeaders, "secret-header", nil, secretHeaderUsage)
	fs.StringVar(&o.upstreamCA, "upstream-ca", "", "have the gateway pod trust the CA certificates (PEM) in `FILE` besides its image's roots when verifying the upstreams of inspected HTTPS requests (in the sandbox's ConfigMap)")
	fs.StringVar(&o.name, "name", "", "a `NAME` for the sandbox, for the other sbx kube commands")
	fs.Int64Var(&o.user, "user", kube.DefaultAgentUID, "the agent's `UID` (never 0)")
	fs.StringArrayVarP(&o.env, "env", "e", nil, "set `KEY=VAL` in the agent's environment; repeatable")
	fs.StringVar(&o.gatewayIP, "gateway-ip", "", "")
	fs.BoolVar(&o.serverDryRun, "server-dry-run", false, "")
	fs.StringVar(&o.memory, "memory", "", "limit the agent's memory to `BYTES`, e.g. 2g or 512m (the pod's memory limit; /tmp and HOME count against it); 0 for no limit (default: half the smallest node's, as sbx run's half of the machine's)")
	fs.Float64Var(&o.cpus, "cpus", 0, "limit the agent's CPU time to `N` CPUs, e.g. 1.5 (the pod's CPU limit); 0 for no limit (default: all the smallest node's but one, at least one)")
	fs.Float64Var(&o.cpusRequest, "cpus-request", 0, "keep `N` CPUs for the agent on its node, e.g. 0.5 (the pod's CPU request: what the scheduler reserves, not a bound; at most --cpus) (default 0.01, or --cpus when less)")
	fs.Int64Var(&o.pidsLimit, "pids-limit", sandbox.DefaultPidsLimit, "Kubernetes has no process limit for a pod (the node's kubelet sets podPidsLimit): only 0 is taken; docs/kubernetes.md")
	fs.StringVar(&o.tmpSize, "tmp-size", formatBytes(kube.DefaultTmpSize), "the size of the agent's /tmp and of HOME, each (`BYTES`; in memory, counted in --memory)")
	// Listed nowhere: only 0 is taken, and check says why another value
	// cannot be.
	fs.MarkHidden("pids-limit")
	fs.BoolVar(&o.noPodRules, "test-no-pod-rules", false, "leave the in-pod rules out, so that only the NetworkPolicy confines the agent (tests only: it takes one of the two layers away)")
	fs.MarkHidden("test-no-pod-rules")
	// An always answer's rule goes to a file sbx kube does not keep: no
	// --approvals (sbx kube approve has no --always).
	fs.MarkHidden("approvals")
	if manifest {
		fs.Lookup("gateway-ip").Usage = "print the agent pod too, for a gateway pod at `IP`"
		fs.Lookup("server-dry-run").Usage = "have the API server check the objects without keeping them"
		fs.StringVar(&o.id, "id", "", "the sandbox's `ID` (8 hex digits; default a new one): with --gateway-ip, the id the other objects were printed with")
		fs.StringArrayVar(&o.recordLLM, "record-llm", nil, "record an LLM: for `HOST=SCRIPT`, let requests to HOST's API through (inspected, under the policy, which must allow HOST) and have the gateway pod record what it answers; sbx kube stop --record-llm HOST=SCRIPT writes that to SCRIPT as it removes the sandbox (sbx kube mock recording reads it before then), for --mock-llm to replay offline; repeatable")
	} else {
		fs.BoolVarP(&o.detach, "detach", "d", false, "return once the agent runs, leaving the sandbox running")
		fs.StringVar(&o.logFile, "log", "", "keep the decision log (JSON Lines, read from the gateway pod while it runs) in `FILE`, new or empty, for sbx audit after the sandbox is gone")
		fs.StringArrayVar(&o.recordLLM, "record-llm", nil, "record an LLM: for `HOST=SCRIPT`, let requests to HOST's API through (inspected, under the policy, which must allow HOST), have the gateway pod record what it answers, and write that to SCRIPT on this machine, for --mock-llm to replay offline: when the agent ends, before the pods go, or with -d when sbx kube stop --record-llm HOST=SCRIPT removes the sandbox; repeatable")
		fs.StringVar(&o.mockJournal, "mock-journal", "", "keep the mock LLMs' journal (what the agent sent, bodies included; JSON Lines) in `FILE`, new or empty: read from the gateway pod when the agent ends, before the pods go; sbx mock requests --journal FILE reads it")
		fs.MarkHidden("gateway-ip")
		fs.MarkHidden("server-dry-run")
	}
	return cmd
}

// mockScripts reads the scripts of --mock-llm (check parsed them), for
// the sandbox's ConfigMap.
func (o *kubeRunOptions) mockScripts() ([]kube.MockScript, error) {
	var out []kube.MockScript
	for _, v := range o.mockLLM {
		host, path, err := splitLLMFlag("mock-llm", v)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--mock-llm %s: %w", v, err)
		}
		out = append(out, kube.MockScript{Host: host, Script: data})
	}
	return out, nil
}

// check checks the flags before anything is read or made.
func (o *kubeRunOptions) check(cmd *cobra.Command) error {
	if err := o.policy.Check(); err != nil {
		return err
	}
	switch {
	case o.image == "":
		return usageErrorf(cmd, "--image is required: the agent container's image, e.g. --image node:22")
	case o.user <= 0:
		return usageErrorf(cmd, "--user %d: the agent never runs as root; give a uid above 0", o.user)
	case o.user == kube.ShimUID || o.user == kube.GatewayUID:
		return usageErrorf(cmd, "--user %d is sbx's own (the capture shim's or the gateway's, which the pod's rules treat apart); give another uid", o.user)
	case o.name != "" && !validName(o.name):
		return usageErrorf(cmd, "--name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", o.name)
	}
	if cmd.Flags().Changed("approvals") {
		return usageErrorf(cmd, "--approvals keeps the rules of always answers in a file on this machine, which a cluster's gateway pod cannot write: answer with sbx kube approve --session, and put the rules you keep in the policy")
	}
	if o.mockJournal != "" && o.detach {
		return usageErrorf(cmd, "--mock-journal keeps the journal when the agent ends, and -d returns at once: give one (sbx kube mock requests --sandbox ID --json reads a detached sandbox's)")
	}
	switch corev1.PullPolicy(o.pull) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return usageErrorf(cmd, "--pull %q: want Always, IfNotPresent or Never", o.pull)
	}
	mocks, err := parseMockLLM(o.mockLLM)
	if err != nil {
		return usageError(cmd, err)
	}
	if _, err := parseRecordLLM(o.recordLLM, mocks); err != nil {
		return usageError(cmd, err)
	}
	if _, err := parseSecretFlags(o.secrets, o.secretHeaders); err != nil {
		return usageError(cmd, err)
	}
	for _, e := range o.env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return usageErrorf(cmd, "-e %q: want KEY=VAL, e.g. -e DEBUG=1", e)
		}
	}
	o.cpusSet = cmd.Flags().Changed("cpus")
	if cmd.Flags().Changed("pids-limit") && o.pidsLimit != 0 {
		return usageErrorf(cmd, "--pids-limit %d: Kubernetes has no process limit for a pod, so sbx kube cannot set one; the node's kubelet bounds every pod's processes (podPidsLimit in its configuration): ask your cluster's administrators to set it, and leave --pids-limit out (or give 0)", o.pidsLimit)
	}
	if o.cpusRequest < 0 {
		return usageErrorf(cmd, "--cpus-request %v: want a number of CPUs such as 0.5, or 0 for the default", o.cpusRequest)
	}
	if _, _, _, err := o.limits(nil); err != nil {
		return usageError(cmd, err)
	}
	if o.gatewayImage == "" {
		return usageErrorf(cmd, "--gateway-image is required: sbx's own image, as your cluster pulls it (sbx kube image -o sbx.tar writes it; push it and name it here, by digest to pin it)")
	}
	if o.logFile != "" && o.detach {
		return usageErrorf(cmd, "--log keeps the decisions while sbx kube run runs, and -d returns at once: give one (sbx kube decisions --sandbox ID --json > FILE reads a detached sandbox's)")
	}
	if o.id != "" && !kube.ValidID(o.id) {
		return usageErrorf(cmd, "--id %q: want the sandbox's id, 8 lower-case hex digits, as in its objects' label sbx.dev/sandbox", o.id)
	}
	if o.gatewayIP != "" && o.id == "" {
		return usageErrorf(cmd, "--gateway-ip needs --id: the agent pod belongs to the sandbox whose other objects were printed first (their label sbx.dev/sandbox has the id)")
	}
	if o.id != "" && o.gatewayIP == "" {
		return usageErrorf(cmd, "--id goes with --gateway-ip: it prints the agent pod of the sandbox whose other objects were printed before")
	}
	return nil
}

// limits returns the agent's memory and CPU limits and the size of its
// /tmp and HOME: the flags' when given, else defaults, sbx run's for the
// cluster's smallest node (def, from kube.Cluster.NodeDefaults) or, when
// def is nil, for this machine.
func (o *kubeRunOptions) limits(def *sandbox.Limits) (memory int64, cpus float64, tmp int64, err error) {
	d := sandbox.DefaultLimits()
	if def != nil {
		d = *def
	}
	memory, cpus = d.Memory, d.CPUs
	if o.memory != "" {
		if memory, err = parseBytes(o.memory); err != nil {
			return 0, 0, 0, fmt.Errorf("--memory %q: %w", o.memory, err)
		}
	}
	if o.cpus < 0 {
		return 0, 0, 0, fmt.Errorf("--cpus %v: want a number of CPUs such as 1 or 0.5, or 0 for no limit", o.cpus)
	}
	if o.cpusSet {
		cpus = o.cpus
	}
	// Against the default limit only when it is the cluster's (check
	// has none yet).
	if cpus > 0 && o.cpusRequest > cpus && (o.cpusSet || def != nil) {
		which := "--cpus"
		if !o.cpusSet {
			which = "its default, all the smallest node's CPUs but one"
		}
		return 0, 0, 0, fmt.Errorf("--cpus-request %v is more than the agent's CPU limit %v (%s): a request is never more than the limit; give a smaller --cpus-request or a larger --cpus", o.cpusRequest, cpus, which)
	}
	tmp, err = parseBytes(o.tmpSize)
	if err != nil || tmp == 0 {
		return 0, 0, 0, fmt.Errorf("--tmp-size %q: want a size such as 1g or 256m", o.tmpSize)
	}
	return memory, cpus, tmp, nil
}

// setLimits puts the agent's limits in s: the flags', else sbx run's
// defaults for the cluster's smallest node (c's), or for this machine when
// c is nil or cannot list the nodes, which it says on w.
func (o *kubeRunOptions) setLimits(ctx context.Context, c *kube.Cluster, s *kube.Spec, w io.Writer) error {
	var def *sandbox.Limits
	if c != nil && (o.memory == "" || !o.cpusSet) {
		l, err := c.NodeDefaults(ctx)
		switch {
		case err == nil:
			def = &l
		case errors.Is(err, kube.ErrNodesUnknown):
			fmt.Fprintf(w, "sbx kube: the cluster's nodes cannot be listed (%v): --memory and --cpus default to this machine's figures; give them to choose\n", err)
		default:
			return err
		}
	}
	var err error
	s.Memory, s.CPUs, s.TmpSize, err = o.limits(def)
	s.CPURequest = o.cpusRequest
	return err
}

// spec builds the sandbox's Spec: a new id, CA and token, and the policy
// the flags give.
func (o *kubeRunOptions) spec(cmd *cobra.Command, args []string) (kube.Spec, *netpolicy.Policy, error) {
	p, err := o.policy.Build()
	if err != nil {
		return kube.Spec{}, nil, err
	}
	policyJSON, err := json.Marshal(p.Spec())
	if err != nil {
		return kube.Spec{}, nil, err
	}
	// What the gateway pod will load: the same policy, or a clear error now.
	if _, err := netpolicy.Parse("the policy for the gateway pod", policyJSON); err != nil {
		return kube.Spec{}, nil, fmt.Errorf("the policy cannot go to the gateway pod: %w", err)
	}
	id := o.id
	if id == "" {
		if id, err = sandbox.NewID(); err != nil {
			return kube.Spec{}, nil, err
		}
	}
	ca, err := gateway.NewCA(id, caLifetime)
	if err != nil {
		return kube.Spec{}, nil, err
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		return kube.Spec{}, nil, err
	}
	// The agent's bundle.pem is these roots and the CA, as sbx run's.
	roots, err := kube.HostRoots()
	if err != nil {
		return kube.Spec{}, nil, fmt.Errorf("the agent's bundle of trusted roots: %w; install ca-certificates", err)
	}
	mocks, err := o.mockScripts()
	if err != nil {
		return kube.Spec{}, nil, err
	}
	secs, err := o.kubeSecrets(p)
	if err != nil {
		return kube.Spec{}, nil, err
	}
	if o.gatewayIP != "" && len(secs) > 0 {
		// The placeholders are new on every run: the agent pod of a
		// second run would hold others than its gateway pod's.
		return kube.Spec{}, nil, usageErrorf(cmd, "--gateway-ip with secrets: each secret's placeholder is chosen anew on every run, so an agent pod printed apart would not hold its gateway pod's; print the objects with sbx kube run instead, or keep the secrets out of sbx kube manifest")
	}
	upstreamCA, err := o.readUpstreamCA()
	if err != nil {
		return kube.Spec{}, nil, err
	}
	tok := make([]byte, 32)
	rand.Read(tok)
	llmScripts, recordHosts, err := o.llms(cmd, p)
	if err != nil {
		return kube.Spec{}, nil, err
	}
	return kube.Spec{
		LLMScripts:          llmScripts,
		RecordLLM:           recordHosts,
		Secrets:             secs,
		UpstreamCA:          upstreamCA,
		MockLLM:             mocks,
		ID:                  id,
		Name:                o.name,
		Image:               o.image,
		Command:             args,
		Env:                 o.env,
		User:                o.user,
		GatewayImage:        o.gatewayImage,
		PullPolicy:          corev1.PullPolicy(o.pull),
		Policy:              policyJSON,
		CACert:              ca.CertPEM(),
		CA:                  caPEM,
		Roots:               roots,
		Token:               hex.EncodeToString(tok),
		SkipPodRulesForTest: o.noPodRules,
	}, p, nil
}

// llms are the LLM scripts of the policy p (policyScripts) and the hosts
// of --record-llm, normalized, which the gateway pod records. A
// --mock-journal with no mock to keep the journal of is a usage error.
func (o *kubeRunOptions) llms(cmd *cobra.Command, p *netpolicy.Policy) (scripts []kube.LLMScript, recordHosts []string, err error) {
	if scripts, err = o.policyScripts(p); err != nil {
		return nil, nil, err
	}
	if o.mockJournal != "" && len(o.mockLLM) == 0 && len(scripts) == 0 {
		return nil, nil, usageErrorf(cmd, "--mock-journal keeps the journal of the mocks of --mock-llm HOST=SCRIPT and of the policy's llm responses, and there is none: give --mock-llm too")
	}
	recs, err := parseRecordLLM(o.recordLLM, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range recs {
		recordHosts = append(recordHosts, r.Host)
	}
	return scripts, recordHosts, nil
}

// policyScripts reads the LLM scripts the policy p's intercept rules
// answer with (response: {llm: NAME}), as sbx run reads them (relative
// to the policy file), for the sandbox's ConfigMap: each under the name
// the policy gives it, which the policy in the ConfigMap keeps, so that
// sbx kube policy replace with the same file names the same scripts.
func (o *kubeRunOptions) policyScripts(p *netpolicy.Policy) ([]kube.LLMScript, error) {
	// Parsed first, for sbx run's errors (the script's file and line,
	// its rules, the policy file).
	if _, err := policyScripts(o.policy.Policy, p); err != nil {
		return nil, err
	}
	var out []kube.LLMScript
	for _, name := range p.LLMScripts() {
		data, err := os.ReadFile(scriptPath(o.policy.Policy, name))
		if err != nil {
			return nil, fmt.Errorf("the policy's LLM script %s: %w", name, err)
		}
		out = append(out, kube.LLMScript{Name: name, Script: data})
	}
	return out, nil
}

// readUpstreamCA reads the file of --upstream-ca, if given: what sbx
// run's --upstream-ca takes, a file of PEM certificates.
func (o *kubeRunOptions) readUpstreamCA() ([]byte, error) {
	if o.upstreamCA == "" {
		return nil, nil
	}
	if _, err := upstreamRoots(o.upstreamCA); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(o.upstreamCA)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	return b, nil
}

// kubeSecrets reads the values of the secrets of the policy p and of
// --secret, as sbx run does, each with a new placeholder chosen here: the
// agent pod's environment holds it, and the gateway pod is told it.
func (o *kubeRunOptions) kubeSecrets(p *netpolicy.Policy) ([]kube.Secret, error) {
	flags, err := parseSecretFlags(o.secrets, o.secretHeaders)
	if err != nil {
		return nil, err
	}
	read, err := readSecrets(o.policy.Policy, p, flags, "")
	if err != nil {
		return nil, err
	}
	inPolicy := map[string]bool{}
	for _, s := range p.Secrets() {
		inPolicy[s.Name] = true
	}
	var out []kube.Secret
	for _, sec := range read {
		for _, e := range o.env {
			if k, _, _ := strings.Cut(e, "="); k == sec.Name() {
				return nil, &run.SecretEnvError{Name: k}
			}
		}
		ks := kube.Secret{Name: sec.Name(), Placeholder: sec.Placeholder(), Value: sec.Value(), InPolicy: inPolicy[sec.Name()]}
		if !ks.InPolicy {
			i := slices.IndexFunc(flags, func(f secretFlag) bool { return f.Name == sec.Name() })
			ks.Hosts, ks.Headers = flags[i].Hosts, flags[i].Headers
		}
		out = append(out, ks)
	}
	return out, nil
}

func runKube(cmd *cobra.Command, kf *kubeFlags, o *kubeRunOptions, args []string) error {
	if err := o.check(cmd); err != nil {
		return err
	}
	s, p, err := o.spec(cmd, args)
	if err != nil {
		return err
	}
	c, err := kf.connect()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	if err := o.setLimits(cmd.Context(), c, &s, stderr); err != nil {
		return err
	}
	var logDone <-chan error
	logFile, journalFile, err := o.createFiles()
	if err != nil {
		return err
	}
	defer func() { logFile.Close(); journalFile.Close() }()
	// Ctrl-C while the sandbox is made or runs removes it.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	created, err := c.Create(ctx, s, p.AllowPrivate(), false)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sbx kube: sandbox %s in namespace %s: gateway pod %s (%s), agent pod %s\n", s.ID, c.Namespace, kube.GatewayPodName(s.ID), created.GatewayIP, kube.ObjectName(s.ID))
	remove := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return c.Delete(rctx, s.ID)
	}
	agentIP, err := serveOnlyAgent(ctx, c, s)
	if err != nil {
		return combine(err, remove())
	}
	fmt.Fprintf(stderr, "sbx kube: the gateway serves the agent pod's address %s alone\n", agentIP)
	kubeRunNotes(ctx, stderr, c, s, !cmd.Flags().Changed("pids-limit"))
	if logFile != nil {
		logDone = saveDecisions(ctx, c, s.ID, logFile)
	}
	if o.detach {
		// Until the agent runs; a pod that cannot start is removed.
		if err := c.WaitStarted(ctx, s.ID); err != nil {
			return combine(err, remove())
		}
		fmt.Fprintln(cmd.OutOrStdout(), s.ID)
		o.recordingNote(stderr, c.Namespace, s.ID)
		return nil
	}
	code, err := c.Attach(ctx, s.ID, cmd.OutOrStdout())
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: combine(fmt.Errorf("interrupted; sandbox %s removed", s.ID), o.keepInterrupted(ctx, stderr, c, s, journalFile), remove())}
		}
		return combine(err, remove())
	}
	// Before the gateway pod goes, with what it holds.
	if err := o.keep(ctx, stderr, c, s, journalFile); err != nil {
		return combine(err, remove())
	}
	if err := remove(); err != nil {
		return err
	}
	if err := o.logSaved(stderr, s.ID, logDone); err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code, err: errSilent}
	}
	return nil
}

// logSaved waits until the decision log of --log is all in its file
// (the gateway's log ends with its pod) and says where it is; without
// --log (logDone nil) it does nothing.
func (o *kubeRunOptions) logSaved(stderr io.Writer, id string, logDone <-chan error) error {
	if logDone == nil {
		return nil
	}
	if err := <-logDone; err != nil {
		return fmt.Errorf("--log %s: %w", o.logFile, err)
	}
	fmt.Fprintf(stderr, "sbx kube: decision log of sandbox %s: %s\n", id, o.logFile)
	return nil
}

// createFiles creates the files of --log and --mock-journal, new or
// empty; a flag not given has a nil file (whose Close does nothing).
func (o *kubeRunOptions) createFiles() (logFile, journalFile *os.File, err error) {
	if o.logFile != "" {
		if logFile, err = createLogFile("--log", o.logFile); err != nil {
			return nil, nil, err
		}
	}
	if o.mockJournal != "" {
		if journalFile, err = createLogFile("--mock-journal", o.mockJournal); err != nil {
			logFile.Close()
			return nil, nil, err
		}
	}
	return logFile, journalFile, nil
}

// kubeRunNotes says on stderr what the user of a sandbox just made should
// know: that the node bounds its processes (when they gave no
// --pids-limit, noPidsLimit), that it runs without in-pod rules (a test
// flag), and which other NetworkPolicies select its pods.
func kubeRunNotes(ctx context.Context, stderr io.Writer, c *kube.Cluster, s kube.Spec, noPidsLimit bool) {
	if noPidsLimit {
		fmt.Fprintf(stderr, "sbx kube: the agent's processes are bounded by the node's kubelet (podPidsLimit), not by sbx: Kubernetes has no process limit for a pod\n")
	}
	if s.SkipPodRulesForTest {
		fmt.Fprintf(stderr, "sbx kube: WARNING: sandbox %s has no in-pod rules (--test-no-pod-rules): only its NetworkPolicy confines it\n", s.ID)
	}
	if others, err := c.OtherPolicies(ctx, s.ID); err == nil && len(others) > 0 {
		fmt.Fprintf(stderr, "sbx kube: WARNING: NetworkPolicies of namespace %s select sandbox %s's pods too (%s): policies add up, so what they allow its pods may do as well\n", c.Namespace, s.ID, strings.Join(others, ", "))
	}
}

// createLogFile creates the file of flag (--log, --mock-journal), new or
// empty, mode 0600.
func createLogFile(flag, path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s %s: the file is not empty; give a new file, so that two runs are never mixed in one file", flag, path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return f, nil
}

// saveDecisions copies the sandbox's decision log to f as the gateway
// writes it, until the gateway pod's log ends (the pod removed) or ctx
// is done; the channel gets the copy's error.
func saveDecisions(ctx context.Context, c *kube.Cluster, id string, f *os.File) <-chan error {
	done := make(chan error, 1)
	go func() {
		rc, err := c.DecisionLog(ctx, id, true)
		if err == nil {
			_, err = io.Copy(f, rc)
			rc.Close()
		}
		if err == nil {
			err = f.Sync()
		}
		done <- err
	}()
	return done
}

// keep reads what the flags ask to keep from the sandbox's gateway pod
// once the agent has ended: the recordings of --record-llm and the
// journal of --mock-journal (into journalFile, nil without it).
func (o *kubeRunOptions) keep(ctx context.Context, stderr io.Writer, c *kube.Cluster, s kube.Spec, journalFile *os.File) error {
	var errs []error
	if len(s.RecordLLM) > 0 {
		errs = append(errs, o.saveRecordings(ctx, stderr, c, s))
	}
	if journalFile != nil {
		if err := saveMockJournal(ctx, c, s, journalFile); err != nil {
			errs = append(errs, fmt.Errorf("--mock-journal %s: %w", o.mockJournal, err))
		} else {
			fmt.Fprintf(stderr, "sbx kube: mock journal of sandbox %s: %s\n", s.ID, o.mockJournal)
		}
	}
	return combine(errs...)
}

// keepInterrupted is keep for a run interrupted while its agent ran
// (Ctrl-C, SIGTERM): what the gateway pod recorded and journaled until
// then is still read, within 30 s, before the pods go, so that the
// interruption does not drop it unsaid.
func (o *kubeRunOptions) keepInterrupted(ctx context.Context, stderr io.Writer, c *kube.Cluster, s kube.Spec, journalFile *os.File) error {
	if len(s.RecordLLM) == 0 && journalFile == nil {
		return nil
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return o.keep(kctx, stderr, c, s, journalFile)
}

// saveRecordings reads what the sandbox's gateway pod recorded of each
// host of --record-llm, through the management API, and writes each
// script to its file, as writeRecorded says.
func (o *kubeRunOptions) saveRecordings(ctx context.Context, stderr io.Writer, c *kube.Cluster, s kube.Spec) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := c.ForwardAPI(fctx, s.ID)
	if err != nil {
		return fmt.Errorf("--record-llm: reading the recordings from the gateway pod %s: %w", kube.GatewayPodName(s.ID), err)
	}
	cl, err := api.NewClient(addr, s.Token)
	if err != nil {
		return err
	}
	defer cl.Close()
	return writeRecorded(fctx, stderr, cl, o.recordLLM)
}

// writeRecorded reads what the gateway whose management API cl reaches
// has recorded of each host of the --record-llm values, and writes each
// script to its file (writeRecordings).
func writeRecorded(ctx context.Context, stderr io.Writer, cl *api.Client, values []string) error {
	recs, err := parseRecordLLM(values, nil)
	if err != nil {
		return err
	}
	hosts := make([]string, len(recs))
	for i, r := range recs {
		hosts[i] = r.Host
	}
	_, err = writeRecordings(ctx, stderr, cl, hosts, recs, false)
	return err
}

// saveMockJournal writes the journal of each mock of the sandbox (its
// --mock-llm hosts' and its policy's LLM scripts'), read from its gateway
// pod through the management API, to f as a journal file (what sbx run's
// --mock-journal writes, which sbx mock requests --journal reads), and
// closes f.
func saveMockJournal(ctx context.Context, c *kube.Cluster, s kube.Spec, f *os.File) error {
	jf := mockllm.NewJournalFile(f)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := c.ForwardAPI(fctx, s.ID)
	if err != nil {
		jf.Close()
		return err
	}
	cl, err := api.NewClient(addr, s.Token)
	if err != nil {
		jf.Close()
		return err
	}
	defer cl.Close()
	journals, err := mockJournals(fctx, cl, s)
	if err != nil {
		jf.Close()
		return err
	}
	return writeMockJournal(jf, journals)
}

// mockJournals reads the journal of each mock of the sandbox s (its
// --mock-llm hosts' and its policy's LLM scripts') from the gateway whose
// management API cl reaches.
func mockJournals(ctx context.Context, cl *api.Client, s kube.Spec) ([]*api.MockRequests, error) {
	var mocks []api.Mock
	for _, m := range s.MockLLM {
		mocks = append(mocks, api.Mock{Host: m.Host})
	}
	for _, l := range s.LLMScripts {
		mocks = append(mocks, api.Mock{Script: l.Name})
	}
	var journals []*api.MockRequests
	for _, m := range mocks {
		ans, err := cl.MockRequests(ctx, m)
		if err != nil {
			return nil, err
		}
		journals = append(journals, ans)
	}
	return journals, nil
}

// writeMockJournal writes the mocks' journals, as the management API
// answered them, to jf, and closes it.
func writeMockJournal(jf *mockllm.JournalFile, journals []*api.MockRequests) error {
	var errs []error
	for _, ans := range journals {
		sink := jf.Sink(ans.Host, ans.Mock, ans.Script)
		for _, r := range ans.Requests {
			// The API's request is the journal's entry, field for field.
			var j mockllm.Journaled
			b, err := json.Marshal(r)
			if err == nil {
				err = json.Unmarshal(b, &j)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sink.Journaled(j)
		}
	}
	errs = append(errs, jf.Close())
	return combine(errs...)
}

// kubeManifest prints the objects, or has the API server check them.
func kubeManifest(cmd *cobra.Command, kf *kubeFlags, o *kubeRunOptions, args []string) error {
	if err := o.check(cmd); err != nil {
		return err
	}
	s, p, err := o.spec(cmd, args)
	if err != nil {
		return err
	}
	if o.serverDryRun {
		c, err := kf.connect()
		if err != nil {
			return err
		}
		if err := o.setLimits(cmd.Context(), c, &s, cmd.ErrOrStderr()); err != nil {
			return err
		}
		if _, err := c.Create(cmd.Context(), s, p.AllowPrivate(), true); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "the API server accepts sandbox %s's objects in namespace %s (server-side dry run: nothing was kept)\n", s.ID, c.Namespace)
		return nil
	}
	// Without -n the objects name no namespace: kubectl apply puts them
	// in its context's, as sbx kube run would.
	s.Namespace = kf.namespace
	if err := o.setLimits(cmd.Context(), nil, &s, cmd.ErrOrStderr()); err != nil {
		return err
	}
	objs, err := kube.MakeObjects(s)
	if err != nil {
		return err
	}
	objs.AllowPrivate(p.AllowPrivate())
	docs := []any{objs.ConfigMap, objs.Secret, objs.AgentPolicy, objs.GatewayPolicy, objs.Gateway}
	if o.gatewayIP != "" {
		docs = nil // the others were printed (and applied) before, with their own CA and token
		ip, err := netip.ParseAddr(o.gatewayIP)
		if err != nil || !ip.Is4() {
			return usageErrorf(cmd, "--gateway-ip %q: want the gateway pod's IPv4 address", o.gatewayIP)
		}
		agent, err := kube.AgentPod(s, ip)
		if err != nil {
			return err
		}
		docs = append(docs, agent)
	}
	if o.gatewayIP == "" {
		what := "the sandbox CA's private key and the API token"
		if len(s.Secrets) > 0 {
			what += " and the values of the secrets"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "sbx kube manifest: the Secret %s holds %s: keep this output where only those who may change the sandbox's policy can read it\n", kube.ObjectName(s.ID), what)
	}
	out := cmd.OutOrStdout()
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		out.Write(b)
	}
	if o.gatewayIP == "" {
		fmt.Fprintf(out, "# the agent pod comes once the gateway pod %s runs: the same command with --id %s --gateway-ip ITS-IP prints it\n", kube.GatewayPodName(s.ID), s.ID)
		o.recordingNote(cmd.ErrOrStderr(), kf.namespace, s.ID)
	}
	return nil
}

func newKubePSCmd(kf *kubeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ps",
		Short: "List the sandboxes in the namespace",
		Example: `  sbx kube ps
  sbx kube ps -n agents`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := kf.connect()
			if err != nil {
				return err
			}
			all, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			return printKubePS(cmd.OutOrStdout(), all, time.Now())
		},
	}
}

// printKubePS prints sbx kube ps's table. Everything in it but the age is
// read from objects that anyone who may edit the namespace's pods or
// ConfigMaps can write, so each field is printed as hostile text.
func printKubePS(w io.Writer, all []kube.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tAGENT\tGATEWAY\tHEALTH\tAGE\tIMAGE\tCOMMAND")
	for _, sb := range all {
		agent := orDash(printable(sb.Agent))
		if sb.ExitCode >= 0 {
			agent = fmt.Sprintf("exited (%d)", sb.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(sb.ID), orDash(printable(sb.Name)), agent, orDash(printable(sb.Gateway)), printable(kube.Health(sb)),
			now.Sub(sb.Created).Round(time.Second), printable(sb.Image), printable(truncateCommand(sb.Command)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newKubeStopCmd(kf *kubeFlags) *cobra.Command {
	var o kubeStopOptions
	cmd := &cobra.Command{
		Use:   "stop SANDBOX...",
		Short: "Remove sandboxes and every object they have",
		Long: `Stop removes sandboxes: their pods, once gone, then their NetworkPolicies,
Secret and ConfigMap. A sandbox whose gateway pod records an LLM (sbx kube
run -d --record-llm, or sbx kube manifest --record-llm) holds its recording
there alone: --record-llm HOST=SCRIPT stops its agent pod, then writes the
recording to SCRIPT, then removes the sandbox; a recording with exchanges
that no --record-llm names keeps its sandbox from being removed, unless
--discard-recordings.`,
		Example: `  sbx kube stop 1a2b3c4d
  sbx kube stop -n agents agent1 agent2
  sbx kube stop --record-llm api.anthropic.com=recorded.yaml agent1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "give the sandboxes to stop: ids, names or id prefixes (sbx kube ps lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runKubeStop(cmd, kf, &o, args) },
	}
	cmd.Flags().StringArrayVar(&o.recordLLM, "record-llm", nil, "for `HOST=SCRIPT`, write what the sandbox's gateway pod recorded of HOST (sbx kube run -d --record-llm) to SCRIPT before it goes, for --mock-llm to replay; one sandbox only; repeatable")
	cmd.Flags().BoolVar(&o.discard, "discard-recordings", false, "remove sandboxes whose gateway pods hold recordings that no --record-llm keeps, and the recordings with them")
	return cmd
}

func newKubeDecisionsCmd(kf *kubeFlags) *cobra.Command {
	var ref string
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "decisions --sandbox SANDBOX [--follow]",
		Short: "Show a cluster sandbox's decisions, from its gateway pod's log",
		Example: `  sbx kube decisions --sandbox 1a2b3c4d
  sbx kube decisions --sandbox agent1 --follow --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ref == "" {
				return usageErrorf(cmd, "say which sandbox: --sandbox ID (sbx kube ps lists them)")
			}
			c, err := kf.connect()
			if err != nil {
				return err
			}
			sb, err := c.Find(cmd.Context(), ref)
			if err != nil {
				return err
			}
			rc, err := c.DecisionLog(cmd.Context(), sb.ID, follow)
			if err != nil {
				return err
			}
			defer rc.Close()
			pr := &recordPrinter{out: cmd.OutOrStdout(), json: asJSON, color: isTerminal(cmd.OutOrStdout())}
			err = pr.showAll(rc)
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&ref, "sandbox", "", "the sandbox's `ID` (its id, name or a unique id prefix)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing decisions as they are made")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the records as JSON Lines")
	return cmd
}

// serveOnlyAgent waits until the sandbox's agent pod has its address and
// its gateway pod is ready (Create makes the agent pod before that), and
// tells the gateway, through the management API (a port-forward, with
// the sandbox's token), to serve that address alone: from then on a pod
// that reaches the gateway where the NetworkPolicy is not enforced is
// refused by the gateway itself.
func serveOnlyAgent(ctx context.Context, c *kube.Cluster, s kube.Spec) (netip.Addr, error) {
	ip, err := c.WaitAgentIP(ctx, s.ID)
	if err != nil {
		return netip.Addr{}, err
	}
	if _, err := c.WaitGatewayReady(ctx, s.ID); err != nil {
		return netip.Addr{}, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := c.ForwardAPI(fctx, s.ID)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := tellAgent(fctx, addr, s.Token, ip); err != nil {
		return netip.Addr{}, fmt.Errorf("telling the gateway pod %s to serve the agent pod's address %s alone: %w", kube.GatewayPodName(s.ID), ip, err)
	}
	return ip, nil
}

// tellAgent tells the gateway whose management API is at addr to serve
// the address agent alone (PUT /v1/clients).
func tellAgent(ctx context.Context, addr, token string, agent netip.Addr) error {
	cl, err := api.NewClient(addr, token)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = cl.SetClients(ctx, []netip.Prefix{netip.PrefixFrom(agent, agent.BitLen())})
	return err
}

// kubeClient is targetFlags.client for a sandbox on a cluster: its
// management API through a port-forward that lasts as long as ctx.
func kubeClient(ctx context.Context, kf *kubeFlags, ref string) (*api.Client, error) {
	if ref == "" {
		return nil, &exitError{code: exitUsage, err: errors.New("say which sandbox: --sandbox ID (sbx kube ps lists them)")}
	}
	c, err := kf.connect()
	if err != nil {
		return nil, err
	}
	sb, err := c.Find(ctx, ref)
	if err != nil {
		return nil, err
	}
	tok, err := c.Token(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	addr, err := c.ForwardAPI(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	return api.NewClient(addr, tok)
}

// kubeExample turns an sbx policy example into sbx kube policy's: the
// lines that talk to a gateway by --api go.
func kubeExample(ex string) string {
	var keep []string
	for _, l := range strings.Split(ex, "\n") {
		if strings.Contains(l, "--api") {
			continue
		}
		keep = append(keep, strings.ReplaceAll(l, "sbx policy", "sbx kube policy"))
	}
	return strings.Join(keep, "\n")
}
