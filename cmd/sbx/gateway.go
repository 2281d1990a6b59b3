package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// gatewayOptions are the flags of sbx gateway: those it shares with sbx
// run (gatewayFlags), and its own.
type gatewayOptions struct {
	gatewayFlags
	listen    string
	tokenFile string
	caCert    string
	// ca is --ca: the CA's file (certificate and key) to inspect with.
	ca string
	// capture and dns are --capture and --dns: where sbx kube's gateway
	// pod takes the connections its capture shim hands over, and the
	// DNS queries of the agent pod.
	capture, dns string
	// allowCommand is --allow-command: what a 403's help says to run to
	// allow what was blocked (sbx kube's gateway pod names sbx kube's).
	allowCommand string
	// mockCommand is --mock-command: what a mock's answer to a request
	// no turn fits says to run to queue one (sbx kube's gateway pod names
	// sbx kube's).
	mockCommand string
	// placeholders are --secret-placeholder's NAME=PLACEHOLDER values.
	placeholders []string
	// processUnknown is --process-unknown: why the records name no
	// process.
	processUnknown string
	// recordAPI are --record-llm-api's hosts: recorded as --record-llm
	// records, for the management API alone.
	recordAPI []string
	// llmScripts are --llm-script's NAME=FILE values.
	llmScripts []string
}

// stdoutLog is the --log value that writes the decision log to standard
// output.
const stdoutLog = "-"

func newGatewayCmd() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway [flags]",
		Short: "Run the gateway alone: a deciding, logging HTTP proxy",
		Long: `Gateway runs sbx's gateway without a sandbox, for containers or hosts that sbx
did not start: an HTTP forward proxy and CONNECT tunnel that decides every
request by the policy, refuses private and special addresses (the address
guard), and logs every decision as JSON Lines.

Point clients at it with HTTP_PROXY and HTTPS_PROXY. With --api it also
serves the management API (docs/api.md), where rules can be changed while
it runs; every request there needs the bearer token in --token-file.

With --ca-cert FILE, hosts the policy inspects (rules with inspect,
methods, path or intercept; --inspect) have their TLS terminated with
certificates from a CA made at start and held only in memory, valid for 7
days; FILE gets its certificate, which the clients must trust. Without it
such hosts' tunnels are decided as a whole, as without inspection. With
--ca FILE the CA is the one in FILE (its certificate and private key,
PEM), made elsewhere (sbx kube makes one per sandbox); --ca-cert then
writes that CA's certificate. The gateway reads FILE again every 10 s: a
new, valid CA there (sbx kube controller renews a sandbox's) serves the
inspected connections opened from then on; one that does not read as a
CA keeps the running one, and stderr says why.

With --capture ADDR it also serves the connections a capture shim hands
over (sbx kube's agent pod redirects every TCP connection to one): each
starts with a PROXY protocol v1 line naming where it was going, and is
decided as sbx run decides a captured connection (docs/capture.md). With
--dns ADDR it answers DNS queries there, over UDP and TCP, as sbx run's
DNS stub does. --log - writes the decision log to standard output, one
JSON line a record as it is decided; the other messages go to standard
error.

With --mock-llm HOST=SCRIPT, requests to HOST are answered from the script
by a mock LLM and never reach the network, whatever the policy says. Plain
http:// base URLs work as they are; HTTPS to HOST needs --ca-cert (the mock
terminates TLS), and without it a CONNECT to HOST is refused. With
--record-llm HOST=SCRIPT (and --ca-cert), HOST's HTTPS goes through under
the policy, inspected, and what HOST answered is written to SCRIPT when
the gateway stops, for --mock-llm to replay. --record-llm-api HOST records
the same way but keeps the script for the management API (GET
/v1/mock/recording) instead of writing a file, as sbx kube's gateway pod
does. --llm-script NAME=FILE reads the LLM script the policy's llm
responses name NAME from FILE (sbx kube's gateway pod: from the sandbox's
ConfigMap).

SIGHUP reloads the --policy file (with the other policy flags, as at
start) and makes it the running policy, in place of the rules of the file
and of any change through the API; a policy record in the decision log
and a line say so. A file that does not load keeps the running policy,
and stderr and a policy record say why.

It runs until interrupted (Ctrl-C or SIGTERM), then closes its listeners,
ends open tunnels and flushes the decision log.`,
		Example: `  # Allow the npm registry, block the rest, log decisions to a file.
  sbx gateway --allow registry.npmjs.org --log decisions.jsonl

  # With the management API on a unix socket.
  sbx gateway --policy policy.yaml --api unix:/run/sbx/gw.sock --token-file /run/sbx/gw.token

  # A scripted model for an agent under test, over http:// and HTTPS.
  sbx gateway --mock-llm api.anthropic.com=script.yaml --ca-cert ca.pem

  # Test against a local server under a fake name.
  sbx gateway --allow api.test:8080 --resolve api.test=127.0.0.1 --allow-private 127.0.0.0/8`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return runGateway(cmd, &o) },
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// addFlags defines sbx gateway's flags in fs.
func (o *gatewayOptions) addFlags(fs *pflag.FlagSet) {
	o.gatewayFlags.addFlags(fs, gatewayFlagUsage{
		log:         "write the decision log (JSON Lines) to `FILE`, new or empty unless --log-append; - for standard output (the other messages then go to standard error)",
		api:         "serve the management API on `ADDR`: host:port or unix:PATH; repeatable",
		mockLLM:     mockLLMUsage + " (HTTPS needs --ca-cert)",
		recordLLM:   "record an LLM: for `HOST=SCRIPT`, let requests to HOST's API through (inspected, under the policy, which must allow HOST; needs --ca-cert) and write what it answered to SCRIPT when the gateway stops, for --mock-llm to replay offline; repeatable",
		mockJournal: "keep the mock LLMs' journal (what the agent sent, bodies included; JSON Lines) in `FILE` as requests arrive, new or empty unless --log-append; sbx mock requests --journal FILE reads it",
	})
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3128", "proxy listen `ADDR` (host:port)")
	fs.StringVar(&o.tokenFile, "token-file", "", "the API's bearer token `FILE`; a random token is written there (mode 0600) when it is missing")
	fs.StringVar(&o.caCert, "ca-cert", "", "inspect TLS where the policy asks, with a CA made now whose certificate is written to `FILE` (PEM), for the clients to trust")
	fs.StringVar(&o.ca, "ca", "", "inspect TLS where the policy asks, with the CA in `FILE` (PEM: its certificate and private key, readable by owner and group only) instead of one made now; with --ca-cert, that file gets its certificate")
	fs.StringVar(&o.capture, "capture", "", "serve the connections a capture shim hands over on `ADDR` (host:port), each starting with a PROXY protocol v1 line naming where it was going (sbx kube's gateway pod)")
	fs.StringVar(&o.dns, "dns", "", "answer DNS queries on `ADDR` (host:port), UDP and TCP, as sbx run's DNS stub does")
	fs.StringVar(&o.secretDir, "secret-dir", "", "read every secret's value (the policy's and --secret's) from the file `DIR`/NAME instead of the variable or file its binding names (sbx kube's gateway pod: the sandbox's Secret)")
	fs.StringArrayVar(&o.placeholders, "secret-placeholder", nil, "give secret NAME the placeholder PLACEHOLDER (`NAME=PLACEHOLDER`, sbx-secret-NAME- and 32 hex digits) instead of a new one: the clients hold it already (sbx kube's agent pod); repeatable")
	fs.StringVar(&o.processUnknown, "process-unknown", "", "say `WHY` the gateway cannot name the process behind a request, in each record's process_unknown (sbx kube's gateway pod: the agent's processes are in another pod)")
	fs.StringArrayVar(&o.recordAPI, "record-llm-api", nil, "record an LLM as --record-llm does, for `HOST`, but keep the script for the management API (GET /v1/mock/recording) instead of writing a file (sbx kube's gateway pod: sbx kube run reads it before the pod goes); needs --ca-cert or --ca; repeatable")
	fs.StringArrayVar(&o.llmScripts, "llm-script", nil, "read the LLM script the policy's llm responses name NAME from FILE (`NAME=FILE`) instead of the path NAME gives (sbx kube's gateway pod: the scripts are in the sandbox's ConfigMap); repeatable")
	fs.StringVar(&o.allowCommand, "allow-command", "", "the `COMMAND` a 403's help names to allow what was blocked, the target following it (default: sbx policy allow --api ADDR --token-file FILE)")
	fs.StringVar(&o.mockCommand, "mock-command", expectCommand, "the `COMMAND` a mock LLM's answer to a request no turn fits names to queue one, the mock's --host or --script following it (sbx kube's gateway pod names sbx kube mock expect and its sandbox)")
}

// runGateway runs sbx gateway until the command's context is done, then
// stops it and writes the recordings.
func runGateway(cmd *cobra.Command, o *gatewayOptions) error {
	if err := o.policy.Check(); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return usageError(cmd, err)
	}
	// From here SIGHUP reloads the policy file rather than ending sbx
	// (one that comes while the gateway starts waits for it).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, recs, err := o.config(cmd)
	if err != nil {
		return err
	}
	// Always answers write the approvals file resolved now.
	if cfg.ApprovalsFile != "" {
		defer approval.PinFile(cfg.ApprovalsFile)()
	}
	if o.capture != "" {
		ln, err := net.Listen("tcp", o.capture)
		if err != nil {
			return fmt.Errorf("--capture: listening for handed-over connections on %s: %w; give a free host:port", o.capture, err)
		}
		// Start owns it from here, and closes it when it fails.
		cfg.Transparent, cfg.OriginalDst = handoff.Listener(ln), handoff.Dst
	}
	g, err := gateway.Start(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	// With the decision log on standard output, it is the only thing
	// there.
	out := cmd.OutOrStdout()
	if o.log == stdoutLog {
		out = cmd.ErrOrStderr()
	}
	sayServing(out, o, cfg, g)
	// --ca's file is read again now and then: sbx kube controller renews
	// a sandbox's CA by writing a new one into its Secret, which the
	// kubelet puts in the gateway pod's file.
	var caTick <-chan time.Time
	caFile := caReload{path: o.ca}
	if o.ca != "" {
		caFile.last, _ = os.ReadFile(o.ca)
		t := time.NewTicker(caReloadEvery)
		defer t.Stop()
		caTick = t.C
	}
	for done := false; !done; {
		select {
		case <-cmd.Context().Done():
			done = true
		case <-hup:
			o.reloadPolicy(g, out, cmd.ErrOrStderr())
		case <-caTick:
			caFile.check(g.Server, out, cmd.ErrOrStderr())
		}
	}
	fmt.Fprintln(out, "sbx gateway: stopping")
	errs := []error{g.Close()}
	// Once the gateway is closed, so that every exchange is in.
	for _, err := range recs.Write(func(n run.Note) {
		if r, ok := n.(run.Recorded); ok {
			fmt.Fprintln(out, "sbx gateway: "+recordedNote(r))
		}
	}) {
		var re *run.RecordingError
		if errors.As(err, &re) {
			err = fmt.Errorf("--record-llm %s: %w", re.Host, re.Err)
		}
		errs = append(errs, err)
	}
	return combine(errs...)
}

// caReloadEvery is how often sbx gateway --ca reads its file again.
var caReloadEvery = 10 * time.Second

// caReload is sbx gateway --ca's file and what it held when last read.
type caReload struct {
	path string
	last []byte
}

// check reads the file again and, when it holds another CA, makes that
// the gateway's (tunnels opened from then on are served with it). A file
// that does not read as a CA keeps the running one, and stderr says why,
// once per change of the file.
func (r *caReload) check(s interface{ SetCA(*gateway.CA) error }, out, stderr io.Writer) {
	data, err := os.ReadFile(r.path)
	if err != nil || bytes.Equal(data, r.last) {
		return
	}
	r.last = data
	ca, err := gateway.ReadCAFile(r.path)
	if err == nil {
		err = s.SetCA(ca)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sbx gateway: --ca %s changed but the running CA stays: %v\n", r.path, err)
		return
	}
	fmt.Fprintf(out, "sbx gateway: CA renewed from %s: valid until %s\n", r.path, ca.Certificate().NotAfter.UTC().Format(time.RFC3339))
}

// sayServing says where the started gateway g serves, what it logs where,
// and the placeholders of its secrets.
func sayServing(out io.Writer, o *gatewayOptions, cfg gateway.Config, g *gateway.Gateway) {
	p := cfg.Policy
	fmt.Fprintf(out, "sbx gateway: proxy on %s (policy: %s, default %s, mode %s)\n",
		g.ProxyAddr, plural(len(p.Rules()), "rule"), p.Default(), p.Mode())
	if cfg.Transparent != nil {
		fmt.Fprintf(out, "sbx gateway: handed-over connections on %s\n", cfg.Transparent.Addr())
	}
	if g.DNSAddr != nil {
		fmt.Fprintf(out, "sbx gateway: DNS on %s (UDP and TCP)\n", g.DNSAddr)
	}
	for _, a := range g.APIAddrs {
		fmt.Fprintf(out, "sbx gateway: management API on %s (token in %s)\n", a, o.tokenFile)
	}
	switch o.log {
	case "":
	case stdoutLog:
		fmt.Fprintln(out, "sbx gateway: decision log on standard output")
	default:
		fmt.Fprintf(out, "sbx gateway: decision log in %s\n", o.log)
	}
	if o.mockJournal != "" && len(cfg.MockLLM)+len(cfg.LLMScripts) > 0 {
		fmt.Fprintf(out, "sbx gateway: mock journal in %s\n", o.mockJournal)
	}
	for _, sec := range cfg.Secrets {
		// The placeholder is no secret: the clients set it in place of
		// the value, which the gateway sends to these hosts only.
		fmt.Fprintf(out, "sbx gateway: secret %s for %s: give the clients %s=%s\n", sec.Name(), strings.Join(sec.Hosts(), ", "), sec.Name(), sec.Placeholder())
	}
}

// reloadPolicy builds the policy of the flags and the --policy file
// again and makes it the running one, as SIGHUP asks; a policy record
// says so (the store's change). A file that does not load, or a policy
// the gateway cannot take (other secrets, LLM scripts it has not read),
// keeps the running policy: why is said on stderr and in a policy record
// of the version that stays.
func (o *gatewayOptions) reloadPolicy(g *gateway.Gateway, out, stderr io.Writer) {
	store := g.Server.Store()
	if o.policy.Policy == "" {
		fmt.Fprintf(stderr, "sbx gateway: SIGHUP: there is no --policy file to reload; the policy stays version %d\n", store.Load().Version())
		return
	}
	p, err := o.policy.Build()
	var snap *netpolicy.Snapshot
	if err == nil {
		snap, err = store.Reload(p.Spec(), "policy reloaded from "+o.policy.Policy+" on SIGHUP")
	}
	if err != nil {
		cur := store.Load()
		why := strings.Join(flatten(err), "; ")
		change := fmt.Sprintf("policy reload from %s on SIGHUP failed, so version %d stays: %s", o.policy.Policy, cur.Version(), why)
		g.Log.Emit(&decisionlog.Record{Event: decisionlog.EventPolicy, PolicyVersion: cur.Version(), Change: change})
		fmt.Fprintf(stderr, "sbx gateway: reloading the policy from %s on SIGHUP failed, so the running policy (version %d) stays:\n", o.policy.Policy, cur.Version())
		for _, line := range flatten(err) {
			fmt.Fprintln(stderr, "sbx gateway:   "+line)
		}
		return
	}
	sp := snap.Policy()
	fmt.Fprintf(out, "sbx gateway: policy reloaded from %s on SIGHUP (policy version %d: %s, default %s, mode %s)\n",
		o.policy.Policy, snap.Version(), plural(len(sp.Rules()), "rule"), sp.Default(), sp.Mode())
}

// config reads what the flags name and returns the gateway's
// configuration, and the recorders of --record-llm: it makes the CA of
// --ca-cert and writes its certificate.
func (o *gatewayOptions) config(cmd *cobra.Command) (gateway.Config, *run.Recorders, error) {
	cfg, err := o.gatewayFlags.config()
	if err != nil {
		return cfg, nil, usageError(cmd, err)
	}
	switch o.log {
	case "":
	case stdoutLog:
		cfg.LogFile = ""
		cfg.Sinks = []decisionlog.Sink{decisionlog.NewWriterSink(cmd.OutOrStdout())}
	default:
		if err := o.logLimits.checkExisting(o.log); err != nil {
			return cfg, nil, err
		}
	}
	if o.mockJournal != "" {
		if err := o.logLimits.checkJournal(o.mockJournal); err != nil {
			return cfg, nil, err
		}
	}
	o.scriptFiles = map[string]string{}
	for _, v := range o.llmScripts {
		i := strings.LastIndexByte(v, '=') // check made sure there is one
		o.scriptFiles[v[:i]] = v[i+1:]
	}
	recordings, err := o.read(cmd, &cfg)
	if err != nil {
		return cfg, nil, err
	}
	if err := setPlaceholders(cfg.Secrets, o.placeholders); err != nil {
		return cfg, nil, usageError(cmd, err)
	}
	if len(cfg.Secrets) > 0 && !o.hasCA() {
		return cfg, nil, fmt.Errorf("the policy %s has secrets, which need --ca-cert FILE: the gateway puts their values in the headers of HTTPS requests by terminating them, with a CA whose certificate the clients trust", o.policy.Policy)
	}
	recs := run.NewRecorders(recordings)
	if cfg.RecordLLM, err = o.recorders(recs, cfg.MockLLM); err != nil {
		return cfg, nil, usageError(cmd, err)
	}
	cfg.Listen, cfg.TokenFile, cfg.DNS = o.listen, o.tokenFile, o.dns
	cfg.AllowCommand, cfg.ProcessUnknown = o.allowCommand, o.processUnknown
	if o.mockCommand != "" {
		setQueueHints(o.mockCommand, cfg.MockLLM, cfg.LLMScripts)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	// A CA only where clients can be told to trust it: without one, an
	// inspected host's CONNECT is refused with a 403 that says why,
	// rather than a TLS failure no client explains.
	switch {
	case o.ca != "":
		if cfg.CA, err = gateway.ReadCAFile(o.ca); err != nil {
			return cfg, nil, fmt.Errorf("--ca: %w", err)
		}
	case o.caCert != "":
		if cfg.CA, err = gateway.NewCA("gateway", caLifetime); err != nil {
			return cfg, nil, err
		}
	}
	if o.caCert != "" {
		if err := cfg.CA.WriteCertFile(o.caCert); err != nil {
			return cfg, nil, fmt.Errorf("--ca-cert: %w", err)
		}
	}
	return cfg, recs, nil
}

// recorders are the gateway's recorders: recs' (--record-llm) and one for
// each host of --record-llm-api, whose script only the management API
// gives. A host is recorded or mocked once.
func (o *gatewayOptions) recorders(recs *run.Recorders, mocks map[string]*mockllm.Responder) (map[string]*mockllm.Recorder, error) {
	out := recs.Gateway()
	for _, raw := range o.recordAPI {
		host, err := netpolicy.NormalizeHost(raw)
		if err != nil {
			return nil, fmt.Errorf("--record-llm-api %s: %w; give a host name such as api.anthropic.com, without scheme, port or path", raw, err)
		}
		if out[host] != nil || mocks[host] != nil {
			return nil, fmt.Errorf("--record-llm-api %s: %s is already recorded or mocked; give one --record-llm, --record-llm-api or --mock-llm per host", raw, host)
		}
		if out == nil {
			out = map[string]*mockllm.Recorder{}
		}
		out[host] = mockllm.NewRecorder(nil)
	}
	return out, nil
}

// check checks the values of the flags that are not policy flags, before
// anything is read or started: each error names its flag and the fix.
func (o *gatewayOptions) check() error {
	if err := checkHostPort("--listen", o.listen); err != nil {
		return err
	}
	for _, f := range []struct{ flag, v string }{{"--capture", o.capture}, {"--dns", o.dns}} {
		if f.v == "" {
			continue
		}
		if err := checkHostPort(f.flag, f.v); err != nil {
			return err
		}
	}
	for _, a := range o.api {
		if path, ok := strings.CutPrefix(a, "unix:"); ok {
			if path == "" {
				return fmt.Errorf("--api %q: want unix:PATH with a path, e.g. --api unix:/run/sbx/gw.sock", a)
			}
			continue
		}
		if err := checkHostPort("--api", a); err != nil {
			return fmt.Errorf("%w, or unix:PATH", err)
		}
	}
	if strings.ContainsFunc(o.processUnknown, unicode.IsControl) {
		return fmt.Errorf("--process-unknown %q: want one line of printable text", o.processUnknown)
	}
	if strings.ContainsFunc(o.allowCommand, unicode.IsControl) {
		return fmt.Errorf("--allow-command %q: want one line of printable text", o.allowCommand)
	}
	if strings.ContainsFunc(o.mockCommand, unicode.IsControl) {
		return fmt.Errorf("--mock-command %q: want one line of printable text", o.mockCommand)
	}
	if len(o.api) > 0 && o.tokenFile == "" {
		return errors.New("--api needs --token-file FILE: the API's bearer token is kept there (a random one is written when it is missing)")
	}
	if len(o.recordAPI) > 0 && !o.hasCA() {
		return errors.New("--record-llm-api needs --ca-cert FILE or --ca FILE: the gateway records HTTPS by terminating it, with a CA whose certificate the clients trust")
	}
	for _, v := range o.llmScripts {
		if i := strings.LastIndexByte(v, '='); i <= 0 || i == len(v)-1 {
			return fmt.Errorf("--llm-script %q: want NAME=FILE, the script's name as the policy's llm responses write it and the file to read it from", v)
		}
	}
	if len(o.recordLLM) > 0 && !o.hasCA() {
		return errors.New("--record-llm needs --ca-cert FILE: the gateway records HTTPS by terminating it, with a CA whose certificate the clients trust")
	}
	if err := o.gatewayFlags.checkValues(); err != nil {
		return err
	}
	if len(o.secrets) > 0 && !o.hasCA() {
		return errors.New("--secret needs --ca-cert FILE: the gateway puts a secret's value in the headers of HTTPS requests by terminating them, with a CA whose certificate the clients trust")
	}
	return nil
}

// hasCA reports whether the gateway inspects with a CA: --ca-cert's or
// --ca's.
func (o *gatewayOptions) hasCA() bool { return o.caCert != "" || o.ca != "" }

// checkHostPort checks a flag's host:port address to listen on: an IP or
// name (empty for every address) and a port number (0 for any free one).
func checkHostPort(flag, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("%s %q: want host:port, e.g. %s 127.0.0.1:3128", flag, v, flag)
	}
	return nil
}
