package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/selftest"
)

// selftestOptions are the flags of sbx selftest.
type selftestOptions struct {
	runtime    string
	socket     string
	dockerHost string // hidden: for tests
	stateDir   string // hidden: for tests
	subnetPool string // hidden: for tests
	verbose    bool
	// flushRules (hidden, for tests) flushes the probed sandbox's own
	// rules, inside its namespace and on the host, before the probe runs:
	// a broken sandbox, which the selftest must report.
	flushRules bool
}

func newSelftestCmd() *cobra.Command {
	var o selftestOptions
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Try every known way out of a sandbox on this machine, and say which were stopped",
		Long: `Selftest makes throwaway sandboxes as sbx run would (capture on, the command
root inside: the hardest case; --rootfs host with containerd, an image
holding sbx with Docker) and runs sbx itself in one as a probe that tries
every way out sbx knows of: TCP, UDP, ICMP and IPv6 to an outside address,
TCP to an outside name, DNS to an outside resolver, the gateway's other
ports, a second sandbox's gateway and address, the management API (its
socket and a TCP address of the host), raw sockets, capabilities and new
namespaces; and one allowed target, which it must reach through the
gateway. Each refused attempt must fail at once, not hang. A second round
("host layer only") flushes the probed sandbox's own rules, as a process
that rewrote them could, and tries the network cases again: the host's
rules alone must stop them.

The "outside" is a network namespace selftest makes for the run (an address
in 10.214.0.0/16, servers that answer with a secret), so no traffic leaves
the machine. A case passes only when its target did not answer the probe
(its secret never came back, and its own server saw nothing) and a control,
the same attempt made from where the target may be reached, shows that the
target answers: a target that is merely down or unrouted proves nothing,
and fails the case.

It prints PASS or FAIL per case and a summary, and removes everything it
made, on Ctrl-C too; after a failure it keeps the sandboxes' decision logs
and says where. Exit code: 0 when every case passes, 1 when any fails, 125
when selftest itself cannot run (not root, no container runtime).`,
		Example: `  # On a machine where sbx runs sandboxes, as root.
  sudo sbx selftest

  # With Docker, saying what each attempt saw.
  sudo sbx selftest --runtime docker --verbose`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRuntimeFlag(o.runtime); err != nil {
				return usageError(cmd, err)
			}
			failed, err := runSelftest(cmd, o)
			if err != nil {
				return &exitError{code: exitSbxFailed, err: err}
			}
			if failed > 0 {
				return &exitError{code: exitFailure, err: errSilent}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.runtime, "runtime", "", "the container `RUNTIME`: containerd or docker (default: containerd when its socket answers, else docker)")
	fs.StringVar(&o.socket, "containerd", sandbox.DefaultContainerdSocket, "containerd's `SOCKET`")
	fs.StringVar(&o.dockerHost, "docker-host", "", "Docker's `ADDRESS` (default: DOCKER_HOST, or Docker's own default)")
	fs.StringVar(&o.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.StringVar(&o.subnetPool, "subnet-pool", sandbox.DefaultPool.String(), "take the sandboxes' /30 from `CIDR`")
	fs.BoolVar(&o.verbose, "verbose", false, "under each case, say what each attempt and its control saw")
	fs.BoolVar(&o.flushRules, "test-flush-rules", false, "for sbx's own tests: flush the probed sandbox's rules first, so that cases must fail")
	for _, name := range []string{"docker-host", "state-dir", "subnet-pool", "test-flush-rules"} {
		fs.MarkHidden(name)
	}
	return cmd
}

func newSelftestProbeCmd() *cobra.Command {
	var wait bool
	var netnsChild string
	cmd := &cobra.Command{
		Use:    selftest.ProbeCommand,
		Short:  "The probe of sbx selftest, run inside its sandbox",
		Hidden: true,
		Long: `The probe reads a plan (one JSON object) from standard input, tries each of
its attempts and writes what each saw as one JSON object on standard output.
sbx selftest judges the results; the probe judges nothing.`,
		Example: `  sbx __selftest-probe < plan.json`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case wait:
				// The second sandbox: up until selftest closes its input.
				_, err := io.Copy(io.Discard, cmd.InOrStdin())
				return err
			case netnsChild != "":
				return selftest.RunNetnsChild(cmd.Context(), cmd.OutOrStdout(), netnsChild)
			}
			return selftest.RunProbe(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&wait, selftest.ProbeWait, false, "read standard input to its end, and exit")
	cmd.Flags().StringVar(&netnsChild, selftest.ProbeNetnsChild, "", "report, from new namespaces, the links seen and what `ADDR` answered")
	return cmd
}

// runSelftest connects the runtime and runs the selftest, its report on
// stdout and its notes on stderr; it returns how many cases failed, or an
// error when it could not run.
func runSelftest(cmd *cobra.Command, o selftestOptions) (int, error) {
	ctx := cmd.Context()
	if os.Geteuid() != 0 {
		return 0, needsRoot("sbx selftest", "it makes sandboxes and a network namespace of its own")
	}
	pool, err := netip.ParsePrefix(o.subnetPool)
	if err != nil {
		return 0, fmt.Errorf("--subnet-pool %q is not a CIDR; write e.g. 10.213.0.0/16", o.subnetPool)
	}
	rt, rtName, err := connectRuntime(ctx, runtimeOptions{name: o.runtime, socket: o.socket, dockerHost: o.dockerHost})
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, selftest.ErrInterrupted
	case err != nil:
		return 0, fmt.Errorf("%w; selftest runs a sandbox: start containerd (or Docker), or name the runtime with --runtime", err)
	}
	defer rt.Close()
	// The probe is sbx itself, run as sbx __selftest-probe.
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding sbx's own executable, which the probe runs: %w", err)
	}
	sum, err := selftest.Run(ctx, selftest.Options{
		Runtime:    rt,
		DockerHost: o.dockerHost,
		ProbeExe:   exe,
		StateDir:   o.stateDir,
		Pool:       pool,
		Verbose:    o.verbose,
		FlushRules: o.flushRules,
		Notes:      selftestNotes(cmd.ErrOrStderr(), rtName),
	}, cmd.OutOrStdout())
	return sum.Failed, err
}

// selftestNotes returns the function that says the selftest's notes on
// stderr.
func selftestNotes(stderr io.Writer, rtName string) func(selftest.Note) {
	return func(n selftest.Note) {
		switch n := n.(type) {
		case selftest.Probing:
			layer := "as sbx run makes it"
			if n.HostLayer {
				layer = "with its namespace's rules flushed"
			}
			fmt.Fprintf(stderr, "sbx: selftest: probing from sandbox %s %s (runtime %s); the outside is %s, the second sandbox %s\n",
				n.ID, layer, rtName, n.Outside, n.Other)
		case selftest.LogsKept:
			fmt.Fprintf(stderr, "sbx: the sandboxes' decision logs are kept in %s\n", n.Dir)
		}
	}
}
