package run

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
)

// TestGatewayConfigKeepsTheCallersAndSetsTheSandboxs: the sandbox's
// gateway gets every field of the Spec's gateway.Config that the sandbox
// does not imply as the caller set it, the management API's socket before
// the caller's addresses, and for every other field what the sandbox
// implies; each of those is one that prepare refuses to find set
// (sandboxOwned), so that none is silently overwritten. A field added to
// gateway.Config is the caller's unless gatewayConfig sets it.
func TestGatewayConfigKeepsTheCallersAndSetsTheSandboxs(t *testing.T) {
	policy, err := netpolicy.Parse("test", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	responder := &mockllm.Responder{}
	caller := gateway.Config{
		API:           []string{"127.0.0.1:7000"},
		Policy:        policy,
		Resolver:      &gateway.Resolver{},
		Limits:        gateway.Limits{DialTimeout: time.Second},
		LogLimits:     decisionlog.FileSinkOptions{Burst: 3, Append: true},
		Sinks:         []decisionlog.Sink{decisionlog.NewRing(1)},
		RingSize:      7,
		Logger:        slog.New(slog.DiscardHandler),
		UpstreamRoots: x509.NewCertPool(),
		MockLLM:       map[string]*mockllm.Responder{"api.test": responder},
		LLMScripts:    map[string]*mockllm.Responder{"agent": responder},
	}
	if set := sandboxOwned(&caller); len(set) > 0 {
		t.Fatalf("the caller's config already sets %v", set)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := sandbox.GatewayConfig{
		ID:        "abc123",
		Listen:    netip.MustParseAddrPort("10.213.0.1:3128"),
		Interface: "sbxhabc123",
		Client:    netip.MustParseAddr("10.213.0.2"),
		Fence:     []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16")},
		StateDir:  "/run/sbx/abc123",
		Capture:   &sandbox.GatewayCapture{DNS: netip.MustParseAddrPort("10.213.0.1:53"), Transparent: ln, Owners: &sandbox.Owners{}},
	}
	ca, err := gateway.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	recorders := map[string]*mockllm.Recorder{"rec.test": mockllm.NewRecorder(nil)}
	got := gatewayConfig(caller, c, ca, "/logs/abc123/decisions.jsonl", recorders)

	for name, tc := range map[string]struct{ got, want any }{
		"Listen":          {got.Listen, "10.213.0.1:3128"},
		"ListenInterface": {got.ListenInterface, "sbxhabc123"},
		"Clients":         {got.Clients, []netip.Prefix{netip.MustParsePrefix("10.213.0.2/32")}},
		"Fence":           {got.Fence, c.Fence},
		"Sandbox":         {got.Sandbox, "abc123"},
		"API":             {got.API, []string{"unix:/run/sbx/abc123/api.sock", "127.0.0.1:7000"}},
		"TokenFile":       {got.TokenFile, "/run/sbx/abc123/token"},
		"LogFile":         {got.LogFile, "/logs/abc123/decisions.jsonl"},
		"CA":              {got.CA, ca},
		"RecordLLM":       {got.RecordLLM, recorders},
		"DNS":             {got.DNS, "10.213.0.1:53"},
		"Transparent":     {got.Transparent, net.Listener(ln)},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", name, tc.got, tc.want)
		}
	}
	if got.Owner == nil {
		t.Errorf("Owner: got nil, want the sandbox's owners")
	}

	// Every field is the caller's, the sandbox's (refused when the caller
	// sets it), or one of the two merged.
	merged := []string{"API", "LogFile"}
	owned := sandboxOwned(&got)
	gv, cv := reflect.ValueOf(got), reflect.ValueOf(caller)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		same := gv.Field(i).Kind() != reflect.Func && reflect.DeepEqual(gv.Field(i).Interface(), cv.Field(i).Interface()) ||
			gv.Field(i).Kind() == reflect.Func && gv.Field(i).IsNil() == cv.Field(i).IsNil()
		switch {
		case slices.Contains(merged, name):
		case slices.Contains(owned, name) && same:
			t.Errorf("%s: listed as the sandbox's (sandboxOwned) but left as the caller's", name)
		case !slices.Contains(owned, name) && !same:
			t.Errorf("%s: changed from the caller's %v to %v, but a caller may set it (add it to sandboxOwned)", name, cv.Field(i), gv.Field(i))
		}
	}

	// Without capture: no DNS stub, no transparent listener, no owners;
	// a nil Logger discards.
	c.Capture = nil
	caller.Logger = nil
	got = gatewayConfig(caller, c, nil, "/logs/x", nil)
	if got.DNS != "" || got.Transparent != nil || got.Owner != nil || got.Logger == nil {
		t.Errorf("without capture: DNS %q, Transparent %v, Owner set %t, Logger %v; want none, and a Logger", got.DNS, got.Transparent, got.Owner != nil, got.Logger)
	}
}

// TestGatewayProcess: the gateway's Owner gives the process Owners.Lookup
// found, or, when it found none, why not in Unknown, the error's message
// (a record's process_unknown, docs/decision-log.md).
func TestGatewayProcess(t *testing.T) {
	tests := []struct {
		p    sandbox.Process
		err  error
		want gateway.Process
	}{
		{sandbox.Process{PID: 42, Comm: "node", Exe: "/usr/bin/node"}, nil, gateway.Process{PID: 42, Comm: "node", Exe: "/usr/bin/node"}},
		{sandbox.Process{}, sandbox.ErrNoSocket, gateway.Process{Unknown: "no socket has these addresses any more: its process closed it or ended"}},
		{sandbox.Process{}, sandbox.ErrSharedSocket, gateway.Process{Unknown: "several processes in the sandbox hold the socket"}},
		{sandbox.Process{}, fmt.Errorf("looking the socket up failed: %w", errors.New("reading sock_diag: no buffer space")), gateway.Process{Unknown: "looking the socket up failed: reading sock_diag: no buffer space"}},
	}
	for _, tt := range tests {
		if got := gatewayProcess(tt.p, tt.err); got != tt.want {
			t.Errorf("gatewayProcess(%+v, %v) = %+v, want %+v", tt.p, tt.err, got, tt.want)
		}
	}
}
