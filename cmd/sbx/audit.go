package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/audit"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// auditOptions are sbx audit's flags.
type auditOptions struct {
	sandboxes []string
	format    string
	out       string
	suggest   bool
	wildcards bool
	expect    string
	diff      bool
	factor    float64
	stateDir  string
	logDir    string
	kube      []string // --kube: sandboxes on a cluster, read from their gateway pods' logs
	kf        kubeFlags
}

func newAuditCmd() *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit [flags] LOG...",
		Short: "Report what sandboxes reached, suggest a policy, gate CI on one, or diff two runs",
		Long: `Audit reads decision logs (files, - for standard input, --kube ID for a
sandbox on a cluster, read from its gateway pod, or --sandbox ID for
a sandbox's log, running or ended; several are merged) and answers the
questions of an audit or a security review.

  sbx audit LOG...                  a report: one row per target (host, port)
                                    with kinds, methods, frequent paths,
                                    allowed/blocked/intercepted counts, bytes,
                                    first and last seen, rules and processes;
                                    DNS queries and packets sent around the
                                    gateway; a summary line
  sbx audit --suggest LOG...        a policy that allows exactly what the logs
                                    saw, for review
  sbx audit --expect POLICY LOG...  replays every attempt against POLICY with
                                    the gateway's own decision code (and its
                                    address guard, on the addresses the log
                                    names) and lists what it would not allow
  sbx audit --diff OLD NEW          what NEW reaches that OLD did not, what it
                                    no longer reaches, and counts that changed
                                    more than --factor times

Logs are read as a stream: their size does not bound what can be audited.
A log whose last line is cut short (a running sandbox's, or one whose
gateway stopped mid-record) is read up to that line, with a warning.

Exit code: 0; with --expect, 1 when POLICY does not allow an attempt (or the
log is incomplete: records the gateway left out, seqs it skips that no
dropped record counts, a last line cut short);
with --diff, 1 when NEW reaches something new (or may: an incomplete log);
2 for bad input (a file that is not a decision log, a policy that does not
load, wrong flags), and when --suggest cannot write a policy for the logs
(a bug: the message says so).`,
		Example: `  sbx audit --sandbox 1a2b3c4d
  sbx audit --format html -o report.html run1.jsonl run2.jsonl
  sbx audit --suggest decisions.jsonl > reviewed-policy.yaml
  sbx audit --expect reviewed-policy.yaml decisions.jsonl   # in CI
  sbx audit --diff v1.jsonl v2.jsonl
  sbx audit --diff --sandbox 1a2b --sandbox 3c4d`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAudit(cmd, o, args)
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&o.sandboxes, "sandbox", nil, "read the decision log of sandbox `ID` (its id, a unique prefix, or its --name; running or ended, see sbx ps -a); repeatable")
	fs.StringVar(&o.format, "format", "", "the output's format: text, json, markdown or html (default text, or what -o's extension names)")
	fs.StringVarP(&o.out, "output", "o", "", "write to `FILE` instead of standard output: replaced whole, its permissions kept; a named pipe or device is written directly, a symbolic link refused")
	fs.BoolVar(&o.suggest, "suggest", false, "print a policy (YAML) that allows exactly what the logs saw")
	fs.BoolVar(&o.wildcards, "suggest-wildcards", false, "with --suggest, fold 3 or more sibling subdomains into *.domain")
	fs.StringVar(&o.expect, "expect", "", "replay the logs against policy `FILE` and list what it would not allow (exit 1 if anything)")
	fs.BoolVar(&o.diff, "diff", false, "compare two logs, OLD NEW (two files, or --sandbox OLD --sandbox NEW): exit 1 when NEW reaches something OLD did not")
	fs.Float64Var(&o.factor, "factor", 10, "with --diff, list targets whose attempts or bytes changed more than `N` times")
	fs.StringArrayVar(&o.kube, "kube", nil, "read the decision log of sandbox `ID` on a cluster (sbx kube), from its gateway pod; repeatable")
	o.kf.addFlags(fs)
	fs.StringVar(&o.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.StringVar(&o.logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	fs.MarkHidden("state-dir")
	fs.MarkHidden("log-dir")
	return cmd
}

func runAudit(cmd *cobra.Command, o auditOptions, args []string) error {
	format, err := auditFormat(cmd, o)
	if err != nil {
		return err
	}
	var out bytes.Buffer // written whole at the end: a failed audit leaves no half a file
	code := exitOK
	switch {
	case o.diff:
		code, err = auditDiff(cmd, o, args, format, &out)
	case o.expect != "":
		code, err = auditExpect(cmd, o, args, format, &out)
	default:
		err = auditReport(cmd, o, args, format, &out)
	}
	if err != nil {
		return err
	}
	if err := writeOutput(cmd.OutOrStdout(), o.out, out.Bytes()); err != nil {
		return err
	}
	if code != exitOK {
		return &exitError{code: code, err: errSilent}
	}
	return nil
}

// auditFormat checks that sbx audit's flags go together, and returns the
// output's format.
func auditFormat(cmd *cobra.Command, o auditOptions) (string, error) {
	modes := 0
	for _, on := range []bool{o.suggest, o.expect != "", o.diff} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return "", usageErrorf(cmd, "--suggest, --expect and --diff each do their own job: give one")
	case o.wildcards && !o.suggest:
		return "", usageErrorf(cmd, "--suggest-wildcards goes with --suggest")
	case cmd.Flags().Changed("factor") && !o.diff:
		return "", usageErrorf(cmd, "--factor goes with --diff")
	case !(o.factor > 1) || math.IsInf(o.factor, 0): // NaN too
		return "", usageErrorf(cmd, "--factor %v: want a finite number above 1", o.factor)
	case o.suggest && cmd.Flags().Changed("format") && o.format != "yaml":
		return "", usageErrorf(cmd, "--suggest writes a policy file (YAML); --format does not apply")
	}
	format := o.format
	if format == "" {
		format = formatOf(o.out)
	}
	if !o.suggest && !slices.Contains(audit.Formats, format) {
		return "", usageErrorf(cmd, "--format %q: use one of %s", format, strings.Join(audit.Formats, ", "))
	}
	if (o.diff || o.expect != "") && format == audit.FormatHTML {
		if cmd.Flags().Changed("format") {
			return "", usageErrorf(cmd, "--format html is for the report; --expect and --diff write text, markdown or json")
		}
		return "", usageErrorf(cmd, "-o %s: its extension asks for html, which is for the report; --expect and --diff write text, markdown or json (give -o a .txt, .md or .json name, or --format)", o.out)
	}
	return format, nil
}

// auditDiff writes to out what the second log reaches that the first did
// not (sbx audit --diff), and returns exitFailure when it reaches
// something new.
func auditDiff(cmd *cobra.Command, o auditOptions, args []string, format string, out *bytes.Buffer) (int, error) {
	// OLD and NEW: two files, or two sandboxes, in the order given.
	// Which of a file and a --sandbox came first is not known.
	switch {
	case len(o.kube) > 0:
		return 0, usageErrorf(cmd, "--diff reads files or --sandbox logs; save a cluster sandbox's log first: sbx kube decisions --sandbox ID --json > FILE")
	case len(args) > 0 && len(o.sandboxes) > 0:
		return 0, usageErrorf(cmd, "--diff takes OLD and NEW both as files (or -) or both as --sandbox: sbx audit --diff OLD NEW, or --diff --sandbox OLD --sandbox NEW")
	case len(args)+len(o.sandboxes) != 2:
		return 0, usageErrorf(cmd, "--diff compares two logs: sbx audit --diff OLD NEW, or --diff --sandbox OLD --sandbox NEW")
	}
	srcs, err := auditSources(cmd, o, args, o.sandboxes)
	if err != nil {
		return 0, err
	}
	var reps [2]*audit.Report
	for i, src := range srcs {
		s, err := audit.Summarize(cmd.Context(), []audit.Source{src}, audit.Limits{})
		if err != nil {
			return 0, auditInputError(err)
		}
		reps[i] = s.Report()
	}
	d := audit.DiffReports(reps[0], reps[1], o.factor)
	if err := audit.WriteDiff(out, d, format); err != nil {
		return 0, err
	}
	if d.ReachesNew() {
		return exitFailure, nil
	}
	return exitOK, nil
}

// auditExpect writes to out what the policy of --expect would not allow
// of the logs, and returns exitFailure when there is any.
func auditExpect(cmd *cobra.Command, o auditOptions, args []string, format string, out *bytes.Buffer) (int, error) {
	p, err := netpolicy.ParseFile(o.expect)
	if err != nil {
		return 0, &exitError{code: exitUsage, err: fmt.Errorf("--expect: %w", err)}
	}
	srcs, err := auditSources(cmd, o, args, o.sandboxes)
	if err != nil {
		return 0, err
	}
	e, err := audit.Expect(cmd.Context(), p, o.expect, srcs, audit.Limits{})
	if err != nil {
		return 0, auditInputError(err)
	}
	if err := audit.WriteExpectation(out, e, format); err != nil {
		return 0, err
	}
	if !e.Holds() {
		return exitFailure, nil
	}
	return exitOK, nil
}

// auditReport writes to out the report of the logs, or with --suggest a
// policy that allows what they saw.
func auditReport(cmd *cobra.Command, o auditOptions, args []string, format string, out *bytes.Buffer) error {
	srcs, err := auditSources(cmd, o, args, o.sandboxes)
	if err != nil {
		return err
	}
	s, err := audit.Summarize(cmd.Context(), srcs, audit.Limits{})
	if err != nil {
		return auditInputError(err)
	}
	rep := s.Report()
	if !o.suggest {
		return audit.WriteReport(out, rep, format)
	}
	policy, err := audit.Suggest(rep, audit.SuggestOptions{Wildcards: o.wildcards})
	if err != nil {
		// A log sbx audit cannot write a policy for: not a finding (exit
		// 1 says that of --expect and --diff).
		return &exitError{code: exitUsage, err: fmt.Errorf("%w; please report it, with the log if you can", err)}
	}
	out.Write(policy)
	return nil
}

// formatOf names the format a file's extension asks for, text when none.
func formatOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html", ".htm":
		return audit.FormatHTML
	case ".md", ".markdown":
		return audit.FormatMarkdown
	case ".json":
		return audit.FormatJSON
	}
	return audit.FormatText
}

// auditInputError makes a log that cannot be read exit 2, bad input,
// a line that is not a record printed as FILE:LINE: message; an
// interrupted read is reported as it is.
func auditInputError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	var le *decisionlog.LineError
	return &exitError{code: exitUsage, err: err, plain: errors.As(err, &le)}
}

// auditSources turns LOG arguments and --sandbox values into sources. A
// file must open now, so that a typo is reported before anything is read.
func auditSources(cmd *cobra.Command, o auditOptions, files, sandboxes []string) ([]audit.Source, error) {
	if len(files)+len(sandboxes)+len(o.kube) == 0 {
		return nil, usageErrorf(cmd, "give decision logs to read: files, - for standard input, --sandbox ID, or --kube ID")
	}
	var srcs []audit.Source
	stdin := false
	for _, f := range files {
		if f == "-" {
			if stdin {
				return nil, usageErrorf(cmd, "- (standard input) can be read once")
			}
			stdin = true
			in := cmd.InOrStdin()
			srcs = append(srcs, audit.Source{Name: "standard input", Open: func() (io.ReadCloser, error) { return io.NopCloser(in), nil }})
			continue
		}
		if err := checkLogFile(f); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		srcs = append(srcs, fileSource(f))
	}
	for _, ref := range sandboxes {
		path, err := sandboxLog(o, ref)
		if err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		srcs = append(srcs, fileSource(path))
	}
	if len(o.kube) > 0 {
		c, err := o.kf.connect()
		if err != nil {
			return nil, err
		}
		ctx := cmd.Context()
		for _, ref := range o.kube {
			sb, err := c.Find(ctx, ref)
			if err != nil {
				return nil, &exitError{code: exitUsage, err: err}
			}
			name := fmt.Sprintf("sandbox %s on the cluster (namespace %s)", sb.ID, c.Namespace)
			srcs = append(srcs, audit.Source{Name: name, Open: func() (io.ReadCloser, error) { return c.DecisionLog(ctx, sb.ID, false) }})
		}
	}
	return srcs, nil
}

func fileSource(path string) audit.Source {
	return audit.Source{Name: path, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}

// checkLogFile says what is wrong with a log file argument, if anything.
func checkLogFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(path, "/."):
		// A sandbox's id or name, given as docker logs takes one.
		return fmt.Errorf("%s: no such file; for the sandbox %s give --sandbox %s, or give a decision log (sbx run prints its path at the end)", path, path, path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such file; give a decision log (sbx run prints its path at the end) or --sandbox ID", path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: %w; sandboxes' logs are root's: run sbx audit with sudo", path, fs.ErrPermission)
	case err != nil:
		return err
	case fi.IsDir():
		if _, err := os.Stat(filepath.Join(path, "decisions.jsonl")); err == nil {
			return fmt.Errorf("%s is a directory; did you mean %s?", path, filepath.Join(path, "decisions.jsonl"))
		}
		return fmt.Errorf("%s is a directory, not a decision log", path)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%s: %w; sandboxes' logs are root's: run sbx audit with sudo", path, fs.ErrPermission)
	} else if err != nil {
		return err
	}
	return f.Close()
}

// sandboxLog finds the decision log of the sandbox ref names (see
// run.FindLog) and checks that it can be read.
func sandboxLog(o auditOptions, ref string) (string, error) {
	if ref == "" {
		return "", errors.New("--sandbox: give a sandbox id")
	}
	path, err := run.FindLog(o.stateDir, o.logDir, ref)
	var le *run.LogLookupError
	switch {
	case errors.As(err, &le) && len(le.Matches) == 0:
		return "", fmt.Errorf("--sandbox %w (sbx ps -a lists the sandboxes whose logs are kept; a log file is read as a file)", err)
	case errors.As(err, &le):
		return "", fmt.Errorf("--sandbox %w", err)
	case err != nil:
		return "", orNeedsRoot(err, "--sandbox")
	}
	if err := checkLogFile(path); err != nil {
		return "", fmt.Errorf("--sandbox %s: %w (a sandbox run with --log keeps its log where that said)", ref, err)
	}
	return path, nil
}

// writeOutput writes data to w when path is empty or "-", else to path as
// run.WriteFile writes it (never half written, straight into a pipe or
// device); what it refuses at path is a usage error of -o.
func writeOutput(w io.Writer, path string, data []byte) error {
	if path == "" || path == "-" {
		_, err := w.Write(data)
		return err
	}
	err := run.WriteFile(path, data)
	if oe := (*run.OutputPathError)(nil); errors.As(err, &oe) {
		return &exitError{code: exitUsage, err: fmt.Errorf("-o %w", err)}
	}
	return err
}
