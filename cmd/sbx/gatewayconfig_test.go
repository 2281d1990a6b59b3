package main

import (
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Who sets a field of gateway.Config from sbx's flags, when it is not
// both commands alike.
type configSide int

const (
	gatewayOnly configSide = iota + 1 // sbx gateway's own flag
	runOnly                           // sbx run's own
	sandboxSets                       // neither command: sandbox/run sets it for the sandbox
	neither                           // neither: the gateway's default
	bothDiffer                        // both, each its own way
)

// oneSided are the fields of gateway.Config that sbx gateway and sbx run
// do not set alike from the same flags, and why. Every other field must
// be set by both, to the same value.
var oneSided = map[string]struct {
	side configSide
	why  string
}{
	"Listen":          {gatewayOnly, "--listen; a sandbox's gateway listens on the host end of its veth"},
	"TokenFile":       {gatewayOnly, "--token-file; a sandbox's token is in its state directory"},
	"CA":              {gatewayOnly, "--ca-cert; a sandbox gets a CA of its own, which its command is made to trust"},
	"RecordLLM":       {gatewayOnly, "both take --record-llm (compared below), but sbx run's recorders are made by sandbox/run from Spec.Recordings, which writes them at Close"},
	"ListenInterface": {sandboxSets, "the sandbox's veth"},
	"Clients":         {sandboxSets, "the sandbox's address"},
	"Fence":           {sandboxSets, "the subnet pools"},
	"DNS":             {gatewayOnly, "--dns (sbx kube's gateway pod); a sandbox's is capture's DNS stub, which sandbox/run sets"},
	"Transparent":     {sandboxSets, "capture's redirected connections; sbx gateway's --capture listener is opened after config, just before Start"},
	"OriginalDst":     {sandboxSets, "capture's (the default); with sbx gateway's --capture, handoff.Dst, set with the listener"},
	"Owner":           {sandboxSets, "capture's socket owners"},
	"Sandbox":         {sandboxSets, "the sandbox's id"},
	"Logins":          {sandboxSets, "sbx run's --login, read by sandbox/run from the home of the command's user; sbx gateway has no home to read it from"},
	"ProcessUnknown":  {gatewayOnly, "--process-unknown (sbx kube's gateway pod, which cannot see its agent's processes); sbx run's gateway names each client's process"},
	"AllowCommand":    {gatewayOnly, "--allow-command (sbx kube's gateway pod names sbx kube policy allow); sbx run's 403s name sbx policy allow --sandbox ID"},
	"Limits":          {neither, "no flag yet: the defaults"},
	"RingSize":        {neither, "no flag yet: the default"},
	"Sinks":           {runOnly, "sbx run prints decisions live on stderr (--show); sbx gateway, a service, has no live lines (sbx decisions follows its API), and with --log - (not given here) writes the log to standard output"},
	"Logger":          {bothDiffer, "sbx run's warnings are lines prefixed gateway: among the command's output; sbx gateway's are slog text on its stderr"},
}

// TestGatewayConfigSameFromSameFlags: sbx gateway and sbx run turn the
// flags they share into the same gateway.Config, field by field; the
// fields listed in oneSided are set as listed there, and a field of
// gateway.Config that is in neither (a new option) fails the test until
// it is set by both or listed.
func TestGatewayConfigSameFromSameFlags(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script.yaml")
	os.WriteFile(script, []byte("turns:\n  - reply: {text: hi}\n"), 0o644)
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("rules:\n  - id: model\n    host: api.anthropic.com\n    action: intercept\n    response: {llm: script.yaml}\n"), 0o644)
	ca, err := gateway.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	upstreamCA := filepath.Join(dir, "upstream.pem")
	if err := ca.WriteCertFile(upstreamCA); err != nil {
		t.Fatal(err)
	}
	shared := []string{
		"--policy", policy, "--allow", "api.test", "--resolve", "api.test=192.0.2.7", "--host-dns", "192.0.2.53",
		"--log", filepath.Join(dir, "decisions.jsonl"), "--log-append", "--log-rate", "5", "--log-max-size", "1m",
		"--api", "127.0.0.1:0", "--upstream-ca", upstreamCA, "--mock-journal", filepath.Join(dir, "mock-requests.jsonl"),
		"--mock-llm", "mock.test=" + script, "--record-llm", "rec.test=" + filepath.Join(dir, "rec.yaml"),
		"--secret", "SBX_TEST_KEY@api.test,api.test:8443",
	}
	t.Setenv("SBX_TEST_KEY", "sk-test-value")

	var g gatewayOptions
	gcmd := &cobra.Command{}
	g.addFlags(gcmd.Flags())
	if err := gcmd.ParseFlags(append(slices.Clone(shared), "--token-file", filepath.Join(dir, "token"), "--ca-cert", filepath.Join(dir, "ca.pem"), "--dns", "127.0.0.1:0", "--allow-command", "sbx kube policy allow --sandbox 1a2b3c4d", "--process-unknown", "the agent runs in another pod")); err != nil {
		t.Fatal(err)
	}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	gw, _, err := g.config(gcmd)
	if err != nil {
		t.Fatalf("sbx gateway: %v", err)
	}

	var r runOptions
	rcmd := &cobra.Command{}
	r.addFlags(rcmd.Flags())
	if err := rcmd.ParseFlags(shared); err != nil {
		t.Fatal(err)
	}
	if err := r.checkValues(rcmd); err != nil {
		t.Fatal(err)
	}
	spec, err := r.sandboxSpec(rcmd, []string{"true"}, io.Discard)
	if err == nil {
		err = r.readConfig(rcmd, &spec)
	}
	if err != nil {
		t.Fatalf("sbx run: %v", err)
	}
	rn := spec.Gateway

	opts := cmp.Options{
		cmp.Comparer(func(a, b *netpolicy.Policy) bool {
			return (a == nil) == (b == nil) && (a == nil || reflect.DeepEqual(a.Spec(), b.Spec()))
		}),
		cmp.Comparer(func(a, b *gateway.Resolver) bool {
			if (a == nil) != (b == nil) || a == nil {
				return a == b
			}
			ax, aerr := a.Lookup(context.Background(), "api.test")
			bx, berr := b.Lookup(context.Background(), "api.test")
			return (a.System == nil) == (b.System == nil) && aerr == nil && berr == nil && slices.Equal(ax, bx)
		}),
		cmp.Comparer(func(a, b *mockllm.Responder) bool { return (a == nil) == (b == nil) }),
		// Each command makes its own placeholder: the same secret by name
		// and hosts.
		cmp.Comparer(func(a, b *secrets.Secret) bool {
			return a.Name() == b.Name() && slices.Equal(a.Hosts(), b.Hosts()) && a.Placeholder() != b.Placeholder()
		}),
	}
	gv, rv := reflect.ValueOf(gw), reflect.ValueOf(rn)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		gf, rf := gv.Field(i), rv.Field(i)
		o, listed := oneSided[name]
		switch {
		case !listed:
			if gf.IsZero() || rf.IsZero() {
				t.Errorf("%s: sbx gateway's %v, sbx run's %v: want it set by both from the same flags, or listed in oneSided with the reason", name, gf, rf)
			} else if d := cmp.Diff(gf.Interface(), rf.Interface(), opts); d != "" {
				t.Errorf("%s differs between sbx gateway and sbx run (-gateway +run):\n%s", name, d)
			}
		case o.side == gatewayOnly && (gf.IsZero() || !rf.IsZero()):
			t.Errorf("%s: sbx gateway's %v, sbx run's %v: listed as sbx gateway's alone (%s)", name, gf, rf, o.why)
		case o.side == runOnly && (!gf.IsZero() || rf.IsZero()):
			t.Errorf("%s: sbx gateway's %v, sbx run's %v: listed as sbx run's alone (%s)", name, gf, rf, o.why)
		case (o.side == sandboxSets || o.side == neither) && (!gf.IsZero() || !rf.IsZero()):
			t.Errorf("%s: sbx gateway's %v, sbx run's %v: listed as set by neither command (%s)", name, gf, rf, o.why)
		case o.side == bothDiffer && (gf.IsZero() || rf.IsZero()):
			t.Errorf("%s: sbx gateway's %v, sbx run's %v: listed as set by both (%s)", name, gf, rf, o.why)
		}
	}
	// --record-llm: the same hosts recorded.
	var runHosts []string
	for _, rec := range spec.Recordings {
		runHosts = append(runHosts, rec.Host)
	}
	if got := slices.Sorted(maps.Keys(gw.RecordLLM)); !slices.Equal(got, runHosts) || !slices.Equal(got, []string{"rec.test"}) {
		t.Errorf("--record-llm: sbx gateway records %v, sbx run %v; want [rec.test] for both", got, runHosts)
	}
}

// TestGatewayRecordLLM: sbx gateway takes --record-llm with --ca-cert
// (refused without: recording terminates TLS), and writes the script
// when it stops, saying so.
func TestGatewayRecordLLM(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec.yaml")
	if _, stderr, code := runCLI(t, "gateway", "--allow", "rec.test", "--record-llm", "rec.test="+rec); code != exitUsage ||
		!strings.Contains(stderr, "--record-llm needs --ca-cert FILE") {
		t.Errorf("--record-llm without --ca-cert: exit %d, %q; want exit %d and --ca-cert asked for", code, stderr, exitUsage)
	}

	g := startGatewayCmd(t, "proxy on", "--listen", "127.0.0.1:0", "--allow", "rec.test",
		"--ca-cert", filepath.Join(dir, "ca.pem"), "--record-llm", "rec.test="+rec)
	if code := g.stop(t); code != 0 {
		t.Errorf("exit %d, stderr %q", code, g.errOut.String())
	}
	if want := "sbx gateway: recorded 0 exchanges with rec.test in " + rec; !strings.Contains(g.out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, g.out.String())
	}
	if _, err := mockllm.ParseScriptFile(rec); err != nil {
		t.Errorf("the recording: %v", err)
	}
}
