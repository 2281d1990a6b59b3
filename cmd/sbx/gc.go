package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

func newGCCmd() *cobra.Command {
	var stateDir, socket, dockerHost, logDir, logsOlderThan string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed sandboxes left behind",
		Long: `Gc finds sandboxes whose sbx run process is gone (killed, crashed, or the
machine's power cut) and removes what they left: their containers (in
containerd and in Docker, each when it answers; a containerd shim of sbx's
namespace that containerd forgot, with what it started), network namespace,
veth pair, iptables rules and chains, state in /run/sbx, and the overlays of
the home (--home overlay, --agent) in /var/lib/sbx/homes. A sandbox whose
sbx run lives holds a lease gc cannot take (and its home overlay names
its process), so it is left alone, and so is
anything not named as sbx names its objects (a shim is known by the kernel's
word: root's process running root's containerd-shim executable). Decision logs and mock journals in /var/lib/sbx are kept, unless
--logs-older-than DURATION (such as 72h or 30d) is given: then what is kept
of each sandbox that ended longer ago than that (its directory in
/var/lib/sbx/sandboxes: record, decision log, mock journal; sbx ps -a
lists them) is removed too, never a running sandbox's. Needs root.`,
		Example: `  sudo sbx gc`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var older time.Duration
			if cmd.Flags().Changed("logs-older-than") {
				d, err := parseAge(logsOlderThan)
				if err != nil {
					return usageErrorf(cmd, "--logs-older-than %q: %v", logsOlderThan, err)
				}
				older = d
			}
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
			// After the containers, which may still have them mounted.
			homes, herr := run.GCHomes(run.HomesDir(hostRoot))
			for _, name := range homes {
				fmt.Fprintf(cmd.OutOrStdout(), "removed home overlay %s\n", name)
			}
			err = combine(err, herr)
			if len(cleaned) == 0 && len(homes) == 0 && err == nil {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
			}
			if cmd.Flags().Changed("logs-older-than") {
				err = combine(err, expireLogs(cmd.OutOrStdout(), stateDir, logDir, older))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	cmd.Flags().StringVar(&socket, "containerd", sandbox.DefaultContainerdSocket, "containerd's `SOCKET`")
	cmd.Flags().StringVar(&dockerHost, "docker-host", "", "Docker's `ADDRESS` (default: DOCKER_HOST, or Docker's own default)")
	cmd.Flags().StringVar(&logsOlderThan, "logs-older-than", "", "also remove what is kept of sandboxes that ended longer than `DURATION` ago (72h, 30d): record, decision log, mock journal")
	cmd.Flags().StringVar(&logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	cmd.Flags().MarkHidden("state-dir")
	cmd.Flags().MarkHidden("docker-host")
	cmd.Flags().MarkHidden("log-dir")
	return cmd
}

// parseAge parses a duration as Go does (90m, 72h), or a number of days
// (30d); it must not be negative.
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, errors.New("want a duration such as 72h or 30d")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New("want a duration such as 72h or 30d")
		}
	}
	if d < 0 {
		return 0, errors.New("want a duration of 0 or more")
	}
	return d, nil
}
