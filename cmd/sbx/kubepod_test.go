package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// kubePodRoot returns a command tree of sbx with only the kube commands
// of kubepod.go under "kube", as the lead's sbx kube wires them.
func kubePodRoot() *cobra.Command {
	root := &cobra.Command{Use: "sbx", Args: subcommandArgs, RunE: showHelp, SilenceUsage: true, SilenceErrors: true}
	root.SetFlagErrorFunc(flagError)
	kube := &cobra.Command{Use: "kube", Args: subcommandArgs, RunE: showHelp}
	kube.AddCommand(newKubePodRulesCmd(), newKubeShimCmd())
	root.AddCommand(kube)
	return root
}

// runKubePodCLI runs sbx kube ARGS... with kubePodRoot.
func runKubePodCLI(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errOut strings.Builder
	root := kubePodRoot()
	root.SetArgs(append([]string{"kube"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = execute(ctx, root)
	return out.String(), errOut.String(), code
}

// TestKubePodCommands checks the conventions of TestCommandTree on the
// pod's commands, and that they are hidden: they run inside pods, not at
// a user's prompt.
func TestKubePodCommands(t *testing.T) {
	for _, c := range []*cobra.Command{newKubePodRulesCmd(), newKubeShimCmd()} {
		if c.Run != nil || c.RunE == nil {
			t.Errorf("%s: want RunE and no Run", c.Name())
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: help has no Example", c.Name())
		}
		if c.Args == nil {
			t.Errorf("%s: no Args check", c.Name())
		}
		if !c.Hidden {
			t.Errorf("%s: got Hidden false, want true", c.Name())
		}
	}
}

// TestKubePodBadInvocations: each is a usage error (exit 2) naming the
// flag and the fix, found before anything is installed or listened on.
func TestKubePodBadInvocations(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"pod-rules"}, "sbx: --gateway is missing; give the gateway pod's IP address"},
		{[]string{"pod-rules", "--gateway", "gw.example"}, `sbx: --gateway "gw.example" is not an IP address`},
		{[]string{"pod-rules", "--gateway", "fd00::7"}, "is not IPv4"},
		{[]string{"pod-rules", "--gateway", "10.244.0.7", "extra"}, "sbx: unknown command \"extra\""},
		{[]string{"pod-rules", "--gateway", "10.244.0.7", "--nosuch"}, "sbx: unknown flag: --nosuch"},
		{[]string{"pod-rules", "--gateway", "10.244.0.7", "--wait-gateway", "-1s"}, "sbx: --wait-gateway -1s: want a duration of 0 (no wait) or more"},
		{[]string{"pod-rules", "--gateway", "10.244.0.7", "--wait-shim", "-1s"}, "sbx: --wait-shim -1s: want a duration of 0 (no wait) or more"},
		{[]string{"shim"}, "sbx: --gateway is missing; give the gateway pod's capture address, e.g. --gateway 10.244.0.7:15002"},
		{[]string{"shim", "--gateway", "10.244.0.7"}, `sbx: --gateway "10.244.0.7" is not IP:PORT`},
		{[]string{"shim", "--gateway", "10.244.0.7:0"}, `sbx: --gateway "10.244.0.7:0" is not IP:PORT`},
	}
	for _, tt := range tests {
		stdout, stderr, code := runKubePodCLI(t.Context(), tt.args...)
		if code != exitUsage {
			t.Errorf("sbx kube %s: got exit %d, want %d (stderr %q)", strings.Join(tt.args, " "), code, exitUsage, stderr)
		}
		if stdout != "" {
			t.Errorf("sbx kube %s: got stdout %q, want none", strings.Join(tt.args, " "), stdout)
		}
		if !strings.Contains(stderr, tt.wantStderr) {
			t.Errorf("sbx kube %s: got stderr %q, want it to hold %q", strings.Join(tt.args, " "), stderr, tt.wantStderr)
		}
	}
}
