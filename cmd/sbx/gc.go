package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
)

func newGCCmd() *cobra.Command {
	var stateDir, socket string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed sandboxes left behind",
		Long: `Gc finds sandboxes whose sbx run process is gone (killed, crashed, or the
machine's power cut) and removes what they left: their container, network
namespace, veth pair, iptables rules and chains, and state in /run/sbx.
Running sandboxes and anything not named as sbx names its objects are left
alone. Decision logs in /var/lib/sbx are kept. Needs root.`,
		Example: `  sudo sbx gc`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return needsRoot("sbx gc", "namespaces, iptables, containerd")
			}
			var rt sandbox.ContainerRuntime
			cd, err := sandbox.ConnectContainerd(cmd.Context(), socket)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx: %v; removing networks and state only\n", err)
			} else {
				defer cd.Close()
				rt = cd
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
	cmd.Flags().MarkHidden("state-dir")
	return cmd
}
