package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// mockFlags are the flags of the sbx mock commands: the sandbox or
// gateway, and the mocked host.
type mockFlags struct {
	target targetFlags
	host   string
	script string
}

func (f *mockFlags) add(cmd *cobra.Command) {
	f.target.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&f.host, "host", "", "the mocked `HOST` (--mock-llm HOST=...); needed when there are several mocks")
	cmd.Flags().StringVar(&f.script, "script", "", "the policy's LLM script `NAME` (response: {llm: NAME}), as the policy writes it; needed when there are several mocks")
	cmd.MarkFlagsMutuallyExclusive("host", "script")
}

// mock is the mock the flags name: the zero api.Mock for the only one
// (or every one, for a reset).
func (f *mockFlags) mock() api.Mock {
	return api.Mock{Host: f.host, Script: f.script}
}

func newMockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mock",
		Short: "Drive the scripted LLM of a running sandbox or gateway (--mock-llm, or a policy's llm responses)",
		Long: `Mock talks to the mock LLMs of a sandbox or gateway: one per host of
--mock-llm HOST=SCRIPT, and one per script its policy's intercept rules
answer with (response: {llm: SCRIPT}). expect queues more turns after the
script's, requests shows what the agent sent (request bodies included: the
journal is the only place they are kept), and reset starts the script
over. With several mocks, name one with --host or --script.` + mockScriptHelp(),
		Example: `  sbx mock expect --sandbox 1a2b3c4d turns.yaml
  sbx mock requests --sandbox 1a2b3c4d --json
  sbx mock reset --sandbox 1a2b3c4d`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(newMockExpectCmd(), newMockRequestsCmd(), newMockResetCmd(), newMockInitCmd())
	cmd.AddCommand(newMockValidateCmd())
	return cmd
}

func newMockExpectCmd() *cobra.Command {
	var f mockFlags
	cmd := &cobra.Command{
		Use:   "expect [flags] FILE|-",
		Short: "Queue turns (YAML or JSON: a script, a list of turns or one turn) after the mock's",
		Example: `  sbx mock expect --sandbox 1a2b3c4d turns.yaml
  echo '{reply: {text: "done"}}' | sbx mock expect --sandbox 1a2b3c4d -`,
		Args: exactArgs("FILE|-"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), mockllm.MaxScriptSize+1))
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("reading the turns: %w", err)
			}
			// Checked here first, so that problems name the file.
			name := args[0]
			if name == "-" {
				name = "stdin"
			}
			if _, err := mockllm.DecodeTurns(name, data); err != nil {
				return err
			}
			c, err := f.target.client(cmd.Context())
			if err != nil {
				return err
			}
			ans, err := c.MockExpect(cmd.Context(), f.mock(), name, data)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queued %s for %s\n", plural(ans.Queued, "turn"), ans.Mock)
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newMockRequestsCmd() *cobra.Command {
	var f mockFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "requests",
		Short: "Show what the agent sent the mock, and what each request got",
		Example: `  sbx mock requests --sandbox 1a2b3c4d
  sbx mock requests --sandbox 1a2b3c4d --host api.openai.com --json | jq '.requests[].body.messages'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.target.client(cmd.Context())
			if err != nil {
				return err
			}
			ans, err := c.MockRequests(cmd.Context(), f.mock())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				return enc.Encode(ans)
			}
			if len(ans.Requests) == 0 {
				fmt.Fprintf(out, "no requests to %s yet\n", ans.Mock)
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTIME\tPATH\tMODEL\tSTREAM\tSTATUS\tOUTCOME")
			for _, j := range ans.Requests {
				fmt.Fprintf(tw, "%d\t%s\t%s %s\t%s\t%t\t%d\t%s\n", j.Seq, j.Time.Local().Format("15:04:05.000"), j.Method, j.Path, j.Model, j.Stream, j.Status, j.Outcome)
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer, request bodies included")
	return cmd
}

func newMockResetCmd() *cobra.Command {
	var f mockFlags
	cmd := &cobra.Command{
		Use:     "reset",
		Short:   "Start the mock's script over, dropping queued turns and the journal (every mock's, without --host or --script)",
		Example: `  sbx mock reset --sandbox 1a2b3c4d --host api.anthropic.com`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.target.client(cmd.Context())
			if err != nil {
				return err
			}
			ans, err := c.MockReset(cmd.Context(), f.mock())
			if err != nil {
				return err
			}
			for _, h := range ans.Reset {
				fmt.Fprintf(cmd.OutOrStdout(), "reset the mock of %s\n", h)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
