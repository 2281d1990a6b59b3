package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
)

func newGCCmd() *cobra.Command {
	var stateDir, socket, dockerHost string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed sandboxes left behind",
		Long: `Gc finds sandboxes whose sbx run process is gone (killed, crashed, or the
machine's power cut) and removes what they left: their containers (in
containerd and in Docker, each when it answers; a containerd shim of sbx's
namespace that containerd forgot, with what it started), network namespace,
veth pair, iptables rules and chains, and state in /run/sbx. A sandbox whose
sbx run lives holds a lease gc cannot take, so it is left alone, and so is
anything not named as sbx names its objects (a shim is known by the kernel's
word: root's process running root's containerd-shim executable). Decision logs and mock journals in /var/lib/sbx are kept. Needs root.`,
		Example: `  sudo sbx gc`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return needsRoot("sbx gc", "namespaces, iptables, containerd and Docker")
			}
			// The containers of every runtime that answers; a runtime
			// that does not (not installed, say) is said and skipped.
			rts, closers, err := connectGCRuntimes(cmd.Context(), runtimeOptions{socket: socket, dockerHost: dockerHost})
			for _, c := range closers {
				defer c.Close()
			}
			var rt sandbox.ContainerRuntime
			switch {
			case len(rts) == 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx: %v; removing networks and state only\n", err)
			case err != nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx: %v; removing the containers of the others\n", err)
				rt = rts
			default:
				rt = rts
			}
			cleaned, err := sandbox.GC(cmd.Context(), stateDir, rt)
			for _, id := range cleaned {
				fmt.Fprintf(cmd.OutOrStdout(), "removed sandbox %s\n", id)
			}
			if len(cleaned) == 0 && err == nil {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
			}
			return err
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	cmd.Flags().StringVar(&socket, "containerd", sandbox.DefaultContainerdSocket, "containerd's `SOCKET`")
	cmd.Flags().StringVar(&dockerHost, "docker-host", "", "Docker's `ADDRESS` (default: DOCKER_HOST, or Docker's own default)")
	cmd.Flags().MarkHidden("state-dir")
	cmd.Flags().MarkHidden("docker-host")
	return cmd
}
