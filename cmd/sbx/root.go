package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/hashicorp/go-multierror"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/netpolicy/strictyaml"
)

// Exit codes of every sbx command.
const (
	exitOK      = 0
	exitFailure = 1 // the thing asked about is invalid, or the command failed
	exitUsage   = 2 // bad flags, wrong arguments, a bad pattern or target
)

// exitError is an error that chooses the process's exit code. execute
// prints err as "sbx: <message>", one "sbx: " per line, or as it is when
// plain is set.
type exitError struct {
	code int
	err  error // never nil
	// plain prints err without the "sbx: " prefix, for output that tools
	// parse, such as a policy file's "FILE:LINE: message" lines.
	plain bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError returns err as a usage error (exit 2) with a pointer to cmd's
// help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: exitUsage, err: fmt.Errorf("%w\nrun '%s --help' for usage", err, cmd.CommandPath())}
}

// usageErrorf is usageError with a formatted message.
func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return usageError(cmd, fmt.Errorf(format, args...))
}

// execute runs root under ctx, reports its error on root's stderr and
// returns the exit code the command chose: exitFailure for an error that
// chose none.
func execute(ctx context.Context, root *cobra.Command) int {
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	reportError(root.ErrOrStderr(), err)
	return code
}

// reportError prints err, worded for the command line (cliMessage):
// every line prefixed with "sbx: ", unless it is a plain exitError.
func reportError(w io.Writer, err error) {
	if errors.Is(err, errSilent) {
		return // the command reported its own failure
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.plain {
		fmt.Fprintln(w, err)
		return
	}
	for _, line := range flatten(err) {
		fmt.Fprintln(w, "sbx: "+line)
	}
}

// flatten returns what err says as lines of its own, worded for the
// command line (cliMessage): the errors a *multierror.Error in it
// combines each on its own line, after whatever wrapped it ("tearing down
// sandbox 1a2b: " + each), and not in multierror's "1 error occurred:"
// list with tabs and blank lines.
func flatten(err error) []string {
	var me *multierror.Error
	if errors.As(err, &me) && len(me.Errors) > 0 {
		if prefix, ok := strings.CutSuffix(err.Error(), me.Error()); ok {
			var lines []string
			for _, e := range me.Errors {
				for _, l := range flatten(e) {
					lines = append(lines, prefix+l)
				}
			}
			return lines
		}
	}
	return strings.Split(cliMessage(err), "\n")
}

// needsRoot is the error of a command that needs root, run without it:
// what needs root, why, and what to do instead.
func needsRoot(what, why string) error {
	return fmt.Errorf("%s needs root (%s): run it with sudo", what, why)
}

// orNeedsRoot turns a permission error on sbx's state (/run/sbx is root's)
// into needsRoot's advice; other errors pass unchanged.
func orNeedsRoot(err error, what string) error {
	if errors.Is(err, fs.ErrPermission) {
		return needsRoot(what, "sandboxes are recorded in /run/sbx, which only root can read")
	}
	return err
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Run untrusted code in a network-isolated sandbox",
		Long: `sbx runs code you do not trust (coding agents, plugins, package installs) in a
container whose only way out is a gateway that allows, blocks or intercepts
every request by a policy, and logs every decision.

Exit codes: 0 success, 1 invalid input file or failure, 2 usage error.`,
		Example: `  # Would a sandbox allowed only the npm registry reach it?
  sbx policy check --allow registry.npmjs.org https://registry.npmjs.org/

  # Check a policy file.
  sbx policy validate policy.yaml`,
		Args:          subcommandArgs,
		RunE:          runRoot,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.Flags().Bool("version", false, "print what sbx version prints, and exit")
	// Before cobra's own check, which would exit 1: flags that go
	// together or exclude each other are usage errors too.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return usageError(cmd, err)
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			return usageError(cmd, err)
		}
		return nil
	}
	root.AddCommand(
		newApproveCmd(),
		newDenyCmd(),
		newAuditCmd(),
		newDecisionsCmd(),
		newGCCmd(),
		newGatewayCmd(),
		newImageCmd(),
		newKubeCmd(),
		newMockCmd(),
		newPolicyCmd(),
		newPSCmd(),
		newRmCmd(),
		newRunCmd(),
		newSelftestCmd(),
		newSelftestProbeCmd(),
		newStopCmd(),
		newUICmd(),
		newVersionCmd(),
	)
	return root
}

// runRoot is sbx's own RunE: with --version it prints what sbx version
// prints, as other tools' --version does; else its help.
func runRoot(cmd *cobra.Command, args []string) error {
	if v, _ := cmd.Flags().GetBool("version"); v {
		return printVersion(cmd.OutOrStdout())
	}
	return showHelp(cmd, args)
}

// showHelp is the RunE of a command that only groups subcommands: without
// arguments it prints its help.
func showHelp(cmd *cobra.Command, _ []string) error {
	return cmd.Help()
}

// subcommandArgs is the Args of a command that only groups subcommands: an
// argument is an unknown subcommand, a usage error. (Cobra's own check
// covers the root command only and gives no exit code.)
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError(cmd, errors.New(msg))
}

// exactArgs wants one argument per name, and makes any other count a
// usage error that names them.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		return usageErrorf(cmd, "%s takes %s, got %s", cmd.CommandPath(), strings.Join(names, " "), plural(len(args), "argument"))
	}
}

// usageArgs makes the errors of an argument check usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError(cmd, err)
		}
		return nil
	}
}

// flagError is every command's FlagErrorFunc: a flag that does not parse
// is a usage error, and an unknown one says which of the command's flags
// it may have meant.
func flagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		typed := ne.GetSpecifiedName()
		if s := ne.GetSpecifiedShortnames(); s != "" {
			// -allow is the shorthands a, l, l, o, w: the long flag
			// given one dash is the likelier mistake.
			typed = s
		}
		if s := suggestFlags(cmd.Flags(), typed); len(s) > 0 {
			err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
		}
	}
	return usageError(cmd, err)
}

// suggestFlags returns the flags of fs whose long names are nearest typed
// (a flag's name, without dashes, as given), as "--name": a name that
// differs in case only, or by at most two edits (one for a name of three
// letters or fewer), or that typed begins when it is three letters or
// more. Hidden and deprecated flags are never suggested.
func suggestFlags(fs *pflag.FlagSet, typed string) []string {
	typed = strings.ToLower(typed)
	maxDist := 2
	if len(typed) <= 3 {
		maxDist = 1
	}
	best := maxDist + 1
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		d := strictyaml.EditDistance(typed, f.Name)
		if len(typed) >= 3 && strings.HasPrefix(f.Name, typed) {
			d = min(d, 1)
		}
		switch {
		case d > maxDist || d > best:
		case d < best:
			best, names = d, []string{"--" + f.Name}
		default:
			names = append(names, "--"+f.Name)
		}
	})
	return names
}
