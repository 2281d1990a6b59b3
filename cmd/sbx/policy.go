package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/netpolicy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check policies, and show or change the policy of a running sandbox",
		Example: `  sbx policy validate policy.yaml
  sbx policy check --policy policy.yaml https://registry.npmjs.org/
  sbx policy allow --sandbox 1a2b3c4d api.github.com`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(
		newPolicyValidateCmd(),
		newPolicyCheckCmd(),
		newPolicyShowCmd(nil),
		newPolicyAddCmd(nil, netpolicy.Allow),
		newPolicyAddCmd(nil, netpolicy.Block),
		newPolicyRemoveCmd(nil),
		newPolicyReplaceCmd(nil),
	)
	return cmd
}

func newPolicyValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a policy file and report every problem with its line",
		Long: `Validate reads a policy file (YAML or JSON, docs/policy.md) and checks it,
and the LLM scripts its intercept rules answer with (response: {llm: SCRIPT},
paths relative to the file).

A valid file prints "FILE: valid (N rules, default D, mode M)" and exits 0.
Otherwise every problem is printed to stderr as "FILE:LINE: message", one per
line, and the exit code is 1.`,
		Example: `  sbx policy validate policy.yaml
  sbx policy validate policy.json && echo ok`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			p, err := netpolicy.ParseFile(file)
			if err != nil {
				return policyFileError(err)
			}
			// The LLM scripts its rules name are read as a sandbox would.
			if _, err := policyScripts(file, p); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%s, default %s, mode %s)\n",
				file, plural(len(p.Rules()), "rule"), p.Default(), p.Mode())
			return err
		},
	}
}

// plural returns "1 rule", "2 rules".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
