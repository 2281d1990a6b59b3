package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/netpolicy"
)

func newPolicyShowCmd(kube *kubeFlags) *cobra.Command {
	t := targetFlags{kube: kube}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the policy of a running sandbox or gateway",
		Example: `  sbx policy show --sandbox 1a2b3c4d
  sbx policy show --api unix:/run/sbx/gw.sock --token-file /run/sbx/gw.token --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := t.client(cmd.Context())
			if err != nil {
				return err
			}
			p, err := c.Policy(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				return enc.Encode(p)
			}
			fmt.Fprintf(out, "policy version %d: default %s, mode %s, %s\n", p.Version, p.Policy.Default, p.Policy.Mode, plural(len(p.Policy.Rules), "rule"))
			if len(p.Policy.AllowPrivate) > 0 {
				var nets []string
				for _, n := range p.Policy.AllowPrivate {
					nets = append(nets, n.String())
				}
				fmt.Fprintf(out, "allow_private: %s\n", strings.Join(nets, ", "))
			}
			return writeRules(out, p.Policy.Rules)
		},
	}
	t.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

// newPolicyAddCmd makes sbx policy allow and sbx policy block.
func newPolicyAddCmd(kube *kubeFlags, action netpolicy.Action) *cobra.Command {
	t := targetFlags{kube: kube}
	var id string
	var position int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   string(action) + " [flags] PATTERN...",
		Short: fmt.Sprintf("Add a rule that %ss PATTERN to a running sandbox or gateway", action),
		Long: fmt.Sprintf(`%s adds one rule per PATTERN (host, host:port, host:*, *.domain, IP or
CIDR, as for sbx run) to the running policy; it applies to the next request.
By default the rule goes last, but before the rules sbx run --agent
implies, which stay after every rule of yours; --position 0 puts it first,
before the rules it should beat.`, strings.ToUpper(string(action[:1]))+string(action[1:])),
		Example: fmt.Sprintf(`  sbx policy %s --sandbox 1a2b3c4d api.github.com
  sbx policy %s --sandbox 1a2b3c4d --position 0 --id gh '*.github.com:443'`, action, action),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "give at least one PATTERN, e.g. sbx policy %s --sandbox ID api.github.com", action)
			}
			if id != "" && len(args) > 1 {
				return usageErrorf(cmd, "--id names one rule; give one PATTERN with it")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// Every pattern is checked before anything is sent.
			for _, pattern := range args {
				var u *netpolicy.URLError
				if _, _, err := netpolicy.ParseFlagPattern(pattern); errors.As(err, &u) && u.Host != "" {
					return usageErrorf(cmd, "%s is a URL, not a pattern; write sbx policy %s %s", pattern, action, u.Pattern())
				} else if err != nil {
					return usageError(cmd, fmt.Errorf("%w\n%s", err, patternHelp))
				}
				if _, err := netpolicy.FlagRules(nil, nil, []string{pattern}); action == netpolicy.Allow && err != nil {
					return usageError(cmd, fmt.Errorf("%w\n%s", err, patternHelp))
				}
			}
			if cmd.Flags().Changed("position") && position < 0 {
				return usageErrorf(cmd, "--position %d: want 0 (first) or more; leave it out to add the rule last", position)
			}
			c, err := t.client(cmd.Context())
			if err != nil {
				return err
			}
			for _, pattern := range args {
				host, ports, err := netpolicy.ParseFlagPattern(pattern)
				if err != nil {
					return usageError(cmd, fmt.Errorf("%w\n%s", err, patternHelp))
				}
				req := api.AddRule{Rule: netpolicy.Rule{ID: id, Host: host, Ports: ports, Action: action}}
				var ifVersion uint64
				if cmd.Flags().Changed("position") {
					req.Position = &position
				} else if req.Position, ifVersion, err = beforeImplied(cmd.Context(), c); err != nil {
					return fmt.Errorf("%s %s: %w", action, pattern, err)
				}
				added, err := c.AddRule(cmd.Context(), req, ifVersion)
				if err != nil {
					return fmt.Errorf("%s %s: %w", action, pattern, err)
				}
				if asJSON {
					json.NewEncoder(cmd.OutOrStdout()).Encode(added)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rule %s added: %s %s (policy version %d)\n", printable(added.Rule.ID), added.Rule.Action, printable(added.Rule.Host), added.Version)
			}
			return nil
		},
	}
	t.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&id, "id", "", "the rule's `ID` (default r1, r2, ...)")
	cmd.Flags().IntVar(&position, "position", 0, "insert the rule at `N` (0 is first; default last)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newPolicyRemoveCmd(kube *kubeFlags) *cobra.Command {
	t := targetFlags{kube: kube}
	cmd := &cobra.Command{
		Use:     "remove [flags] RULE-ID...",
		Short:   "Remove rules from a running sandbox or gateway by id",
		Example: `  sbx policy remove --sandbox 1a2b3c4d gh r3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "give the id of a rule to remove (sbx policy show lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := t.client(cmd.Context())
			if err != nil {
				return err
			}
			for _, id := range args {
				r, err := c.RemoveRule(cmd.Context(), id, 0)
				if err != nil {
					return fmt.Errorf("removing rule %s: %w (sbx policy show lists the rules)", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rule %s removed (policy version %d)\n", id, r.Version)
			}
			return nil
		},
	}
	t.AddFlags(cmd.Flags())
	return cmd
}

func newPolicyReplaceCmd(kube *kubeFlags) *cobra.Command {
	t := targetFlags{kube: kube}
	var ifVersion uint64
	cmd := &cobra.Command{
		Use:   "replace [flags] FILE",
		Short: "Replace the whole policy of a running sandbox or gateway with a policy file",
		Long: `Replace sends FILE (YAML or JSON) as the new policy. An invalid file changes
nothing and its problems are printed; with --if-version N the change is made
only if the running policy is still version N.`,
		Example: `  sbx policy replace --sandbox 1a2b3c4d policy.yaml`,
		Args:    exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			// Check locally first, for FILE:LINE messages.
			if _, err := netpolicy.Parse(args[0], data); err != nil {
				return policyFileError(err)
			}
			c, err := t.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := c.ReplacePolicy(cmd.Context(), data, ifVersion)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "policy replaced from %s (policy version %d)\n", args[0], r.Version)
			return nil
		},
	}
	t.AddFlags(cmd.Flags())
	cmd.Flags().Uint64Var(&ifVersion, "if-version", 0, "replace only if the running policy is version `N`")
	return cmd
}

// writeRules prints rules as a table, one a line, for sbx policy show.
func writeRules(out io.Writer, rules []netpolicy.Rule) error {
	if len(rules) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACTION\tHOST\tPORTS\tMETHODS\tPATH")
	for _, r := range rules {
		var ports []string
		for _, p := range r.Ports {
			ports = append(ports, p.String())
		}
		action := string(r.Action)
		switch {
		case action == "": // a mark only (--inspect)
			action = "inspect"
		case r.Inspect:
			action += "+inspect"
		}
		// What an intercept answers: a status, or a scripted LLM.
		if r.Response != nil && r.Response.LLM != "" {
			action += " (llm: " + r.Response.LLM + ")"
		} else if r.Response != nil {
			action += " (" + strconv.Itoa(r.Response.Status) + ")"
		}
		// A rule an answer added holds the host and path the
		// sandbox asked for.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(r.ID), printable(action), printable(r.Host), strings.Join(ports, ","), printable(strings.Join(r.Methods, ",")), printable(r.Path))
	}
	return tw.Flush()
}

// beforeImplied is where a rule added without --position goes: nil for
// last, or the place of the first of the rules sbx run --agent implied
// when the policy ends with them, so that the user's rule comes before
// them as the user's flags do (docs/home.md). ifVersion is the version
// of the policy read, for the change to be made only on it (else none).
func beforeImplied(ctx context.Context, c *api.Client) (position *int, ifVersion uint64, _ error) {
	p, err := c.Policy(ctx)
	if err != nil {
		return nil, 0, err
	}
	rules := p.Policy.Rules
	n := len(rules)
	for n > 0 && strings.HasPrefix(rules[n-1].ID, agentRulePrefix) {
		n--
	}
	if n == len(rules) {
		return nil, 0, nil
	}
	return &n, p.Version, nil
}
