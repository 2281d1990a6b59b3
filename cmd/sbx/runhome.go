package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/rootfs"
)

// homeRWNote is what sbx run says, unless quiet, before it shows the
// home read-write.
const homeRWNote = "--home rw: the command can read and change everything in your home, its credential stores too (~/.ssh, ~/.aws, the agents' logins, ...); --home overlay keeps them out and its writes off your home"

// homeFlags adds --home and --agent, which say how much of the user's
// home --rootfs host shows (docs/home.md).
func homeFlags(fs *pflag.FlagSet, home, agent, dir *string) {
	fs.StringVar(dir, "home-dir", "", "the user's home (tests)")
	fs.MarkHidden("home-dir")
	fs.StringVar(home, "home", string(rootfs.HomeEmpty), "with --rootfs host: the user's home as empty (a fresh HOME), ro (read-only), overlay (writes thrown away at the end) or rw (`MODE`); all but rw show its credential stores (~/.ssh, ~/.aws, the agents' logins, ...) empty")
	fs.StringVar(agent, "agent", "", "with --rootfs host: show only the `AGENT`'s install and settings of the home (claude, codex or gemini), as an overlay, its login files read empty; allows its API hosts after your rules (docs/home.md)")
}

// homeMode checks --home and --agent against the root filesystem flags
// and parses --home, warning on stderr before the home is shown
// read-write.
func (o runOptions) homeMode(cmd *cobra.Command, stderr io.Writer) (rootfs.HomeMode, error) {
	mode, err := rootfs.ParseHomeMode(o.home)
	if err != nil {
		return "", fmt.Errorf("--home %q: want empty, ro, overlay or rw", o.home)
	}
	shown := mode != rootfs.HomeEmpty || o.agent != ""
	if shown && (o.image != "" || o.rootfs != "host") {
		return "", fmt.Errorf("--home and --agent show the user's home in --rootfs host only")
	}
	if o.agent != "" {
		names := []string{"claude", "codex", "gemini"}
		if !slices.Contains(names, o.agent) {
			return "", fmt.Errorf("--agent %q: want claude, codex or gemini", o.agent)
		}
		if cmd.Flags().Changed("home") {
			return "", fmt.Errorf("--agent %s shows the agent's files of the home as an overlay: give no --home with it", o.agent)
		}
	}
	if mode == rootfs.HomeRW && !o.quiet {
		fmt.Fprintln(stderr, "sbx: "+homeRWNote)
	}
	return mode, nil
}
