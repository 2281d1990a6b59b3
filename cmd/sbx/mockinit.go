package main

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// starterScripts are the scripts sbx mock init writes, one per agent,
// named mockinit/AGENT.yaml. The agents' end-to-end tests
// (agents_linux_test.go) run the real agents against exactly these.
//
//go:embed mockinit/*.yaml
var starterScripts embed.FS

// starterAgents are the agents sbx mock init has a script for.
var starterAgents = []string{"claude-code", "codex", "gemini", "generic"}

// starterScript returns the starter script for agent, one of
// starterAgents.
func starterScript(agent string) ([]byte, error) {
	return starterScripts.ReadFile("mockinit/" + agent + ".yaml")
}

func newMockInitCmd() *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:   "init --agent claude-code|codex|gemini|generic [FILE]",
		Short: "Write a starter script for an agent (its side requests, one tool call, a comment on each turn)",
		Long: `Init writes a script for --mock-llm to start from: for Claude Code
(api.anthropic.com), the Codex CLI (api.openai.com), the Gemini CLI
(generativelanguage.googleapis.com) or any agent (generic), with a turn for a session without tools, a tool call that
writes a file and lists the directory, the answer once the tool's output
comes back, and the agent's side requests. Its comments say how to run
the agent headless in a sandbox against it. Written to FILE, which must
not exist yet, or to standard output.`,
		Example: `  sbx mock init --agent claude-code claude.yaml
  sbx run --mock-llm api.anthropic.com=claude.yaml -e ANTHROPIC_API_KEY=sk-mock -- \
    claude -p "write sbx-mock.txt and list the files" --model claude-sonnet-4-5 --dangerously-skip-permissions
  sbx mock init --agent codex > codex.yaml
  sbx mock init --agent gemini > gemini.yaml`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if agent == "" {
				return usageErrorf(cmd, "sbx mock init needs --agent %s", strings.Join(starterAgents, "|"))
			}
			if agent == "claude" {
				// The name sbx run --agent gives Claude Code.
				agent = "claude-code"
			}
			if !slices.Contains(starterAgents, agent) {
				return usageErrorf(cmd, "--agent %q: there is no starter script for it; give one of %s", agent, strings.Join(starterAgents, ", "))
			}
			data, err := starterScript(agent)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				_, err := cmd.OutOrStdout().Write(data)
				return err
			}
			return writeNewFile(args[0], data)
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the `AGENT` to write a script for: "+strings.Join(starterAgents, ", ")+" (claude is claude-code)")
	return cmd
}

// writeNewFile writes data to path, which must not exist (not even as a
// symbolic link): a starter script never replaces a script of the user's.
func writeNewFile(path string, data []byte) (retErr error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; remove it or name another file: %w", path, err)
	} else if err != nil {
		return fmt.Errorf("writing the starter script: %w", err)
	}
	defer func() {
		if retErr != nil {
			os.Remove(path)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing the starter script %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the starter script %s: %w", path, err)
	}
	return nil
}
