package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// psOptions are sbx ps's flags.
type psOptions struct {
	stateDir, logDir string
	all, quiet       bool
	format           string
}

// psRow is one sandbox sbx ps lists, running or ended; the fields a
// sandbox does not have are left empty (and out of the JSON).
type psRow struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	State   string    `json:"state"`
	Command []string  `json:"command,omitempty"`
	Created time.Time `json:"created,omitzero"`
	// Of a running sandbox: its gateway, and what its API said.
	Gateway       string  `json:"gateway,omitempty"`
	PolicyVersion *uint64 `json:"policy_version,omitempty"`
	Allowed       *uint64 `json:"allowed,omitempty"`
	Blocked       *uint64 `json:"blocked,omitempty"`
	// Of an ended sandbox: when it ended, its command's exit code (none
	// when not known), and where its log and journal were written.
	Ended    time.Time `json:"ended,omitzero"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Log      string    `json:"log,omitempty"`
	Journal  string    `json:"journal,omitempty"`

	failed bool // asking its status failed: "?" in the table
}

func newPSCmd() *cobra.Command {
	var o psOptions
	cmd := &cobra.Command{
		Use:   "ps [flags]",
		Short: "List running sandboxes (with -a, ended ones too)",
		Long: `Ps lists the running sandboxes: id, name, state, command, age, gateway, and
what each one's gateway says (policy version, requests allowed and
blocked). With -a it lists the sandboxes that ended too, as Docker lists
exited containers, until sbx rm or sbx gc --logs-older-than removes them:
their state is "exited N" (the command's exit code; "ended" when it is not
known), and LOG is where their decision log was written. -q prints the ids
only; --format json prints one JSON object a sandbox, a line each.`,
		Example: `  sudo sbx ps
  sudo sbx ps -a
  sudo sbx ps -aq
  sudo sbx ps -a --format json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPS(cmd, o)
		},
	}
	fs := cmd.Flags()
	fs.BoolVarP(&o.all, "all", "a", false, "list the sandboxes that ended too, with their exit status and decision log")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print the ids only")
	fs.StringVar(&o.format, "format", "table", "print `FORMAT`: table, or json (one JSON object a sandbox, a line each)")
	fs.StringVar(&o.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.StringVar(&o.logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	fs.MarkHidden("state-dir")
	fs.MarkHidden("log-dir")
	return cmd
}

// runPS lists the sandboxes o asks for.
func runPS(cmd *cobra.Command, o psOptions) error {
	switch {
	case o.format != "table" && o.format != "json":
		return usageErrorf(cmd, "--format %q: want table or json", o.format)
	case o.quiet && cmd.Flags().Changed("format"):
		return usageErrorf(cmd, "-q prints ids only; it does not go with --format")
	}
	states, err := sandbox.List(o.stateDir)
	if err != nil {
		return orNeedsRoot(err, "sbx ps")
	}
	var rows []psRow
	var failed []string // what went wrong asking, one line per sandbox
	for _, st := range states {
		if !sandbox.OwnerAlive(st) {
			continue // a leftover: sbx gc removes it
		}
		row := psRow{ID: st.ID, Name: st.Name, State: string(st.Status), Command: st.Command, Created: st.Created,
			Gateway: st.Subnet.Addr().Next().String() + ":" + strconv.Itoa(int(st.GatewayPort))}
		if row.State == "" {
			row.State = string(sandbox.StatusRunning) // recorded by an sbx before states
		}
		if !o.quiet {
			if f := psAsk(cmd, o.stateDir, st, &row); f != "" {
				failed = append(failed, f)
			}
		}
		rows = append(rows, row)
	}
	if o.all {
		ended, err := run.ListEnded(o.stateDir, o.logDir)
		if err != nil {
			return orNeedsRoot(err, "sbx ps -a")
		}
		for i := len(ended) - 1; i >= 0; i-- { // the last to end first
			rows = append(rows, endedRow(ended[i]))
		}
	}
	out := cmd.OutOrStdout()
	switch {
	case o.quiet:
		for _, r := range rows {
			fmt.Fprintln(out, r.ID)
		}
	case o.format == "json":
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	default:
		if err := psTable(out, rows, o.all); err != nil {
			return err
		}
	}
	for _, f := range failed {
		fmt.Fprintln(cmd.ErrOrStderr(), printable(f))
	}
	if len(failed) > 0 {
		// Every sandbox is listed; the lines above say what failed.
		return &exitError{code: exitFailure, err: errSilent}
	}
	return nil
}

// psAsk asks a running sandbox for its status, into row, and returns
// what failed, "" for nothing.
func psAsk(cmd *cobra.Command, stateDir string, st sandbox.State, row *psRow) string {
	if st.Status == sandbox.StatusStarting {
		return "" // its API may not answer yet; sbx policy waits for it
	}
	s, err := psStatus(cmd.Context(), targetFlags{sandbox: st.ID, stateDir: stateDir})
	switch {
	case err != nil && endedMeanwhile(stateDir, st.ID):
		// Its command ended since the list was read, and its gateway
		// with it: not a failure to say.
		row.State = string(sandbox.StatusStopping)
	case err != nil:
		// Not a silent "-": "?" in the table, and why on stderr.
		row.failed = true
		who := st.ID
		if st.Name != "" {
			who += " (" + st.Name + ")"
		}
		return fmt.Sprintf("sbx: sandbox %s: asking its status for POLICY, ALLOWED and BLOCKED: %v", who, err)
	default:
		row.PolicyVersion, row.Allowed, row.Blocked = &s.PolicyVersion, &s.Counts.Allowed, &s.Counts.Blocked
	}
	return ""
}

// endedRow is the row of an ended sandbox.
func endedRow(e run.Ended) psRow {
	state := "ended"
	if e.ExitCode != nil {
		state = "exited " + strconv.Itoa(*e.ExitCode)
	}
	return psRow{ID: e.ID, Name: e.Name, State: state, Command: e.Command, Created: e.Created, Ended: e.Ended, ExitCode: e.ExitCode, Log: e.Log, Journal: e.Journal}
}

// psTable prints rows as sbx ps's table; all adds the ENDED and LOG
// columns.
func psTable(w io.Writer, rows []psRow, all bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "ID\tNAME\tSTATE\tCOMMAND\tAGE\tGATEWAY\tPOLICY\tALLOWED\tBLOCKED"
	if all {
		head += "\tENDED\tLOG"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		age, gw := "-", "-"
		if !r.Created.IsZero() {
			age = time.Since(r.Created).Round(time.Second).String()
		}
		if r.Gateway != "" {
			gw = r.Gateway
		}
		version, allowed, blocked := "-", "-", "-"
		switch {
		case r.failed:
			version, allowed, blocked = "?", "?", "?"
		case r.PolicyVersion != nil:
			version, allowed, blocked = strconv.FormatUint(*r.PolicyVersion, 10), strconv.FormatUint(*r.Allowed, 10), strconv.FormatUint(*r.Blocked, 10)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.ID, printable(r.Name), r.State, printable(truncateCommand(r.Command)), age, gw, version, allowed, blocked)
		if all {
			ended, log := "-", "-"
			if !r.Ended.IsZero() {
				ended = time.Since(r.Ended).Round(time.Second).String() + " ago"
			}
			if r.Log != "" {
				log = printable(r.Log)
			}
			line += "\t" + ended + "\t" + log
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func newRmCmd() *cobra.Command {
	var stateDir, logDir string
	cmd := &cobra.Command{
		Use:   "rm ID|NAME...",
		Short: "Remove what is kept of sandboxes that ended: their record and decision log",
		Long: `Rm removes what is kept of each sandbox that ended (sbx ps -a lists them),
named by its id, its --name (the last that ended of that name) or a unique
prefix of its id: its directory in /var/lib/sbx/sandboxes, with its
record, decision log and mock journal. A log or journal written elsewhere
(--log, --mock-journal) is yours, and is left: rm says where. A running
sandbox is refused: stop it first (sbx stop). Every sandbox named is
tried; the exit code is 1 when one was not removed.`,
		Example: `  sudo sbx rm 1a2b3c4d
  sudo sbx rm $(sudo sbx ps -aq)`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, ref := range args {
				if err := removeEnded(cmd.OutOrStdout(), stateDir, logDir, ref); err != nil {
					errs = append(errs, err)
				}
			}
			return combine(errs...)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	cmd.Flags().StringVar(&logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	cmd.Flags().MarkHidden("state-dir")
	cmd.Flags().MarkHidden("log-dir")
	return cmd
}

// removeEnded removes what is kept of the ended sandbox ref names, and
// says what it removed and what it left.
func removeEnded(out io.Writer, stateDir, logDir, ref string) error {
	if st, err := sandbox.Find(stateDir, ref); err == nil {
		return fmt.Errorf("sandbox %s is running; stop it first: sbx stop %s", st.ID, st.ID)
	}
	e, err := run.FindEnded(stateDir, logDir, ref)
	if err != nil {
		return orNeedsRoot(err, "sbx rm")
	}
	if err := run.RemoveEnded(stateDir, e); err != nil {
		return orNeedsRoot(err, "sbx rm")
	}
	fmt.Fprintf(out, "removed sandbox %s\n", e.ID)
	for _, f := range []string{e.Log, e.Journal} {
		if f != "" && filepath.Dir(f) != e.Dir {
			fmt.Fprintf(out, "sbx: sandbox %s's %s, written where it was told, is left\n", e.ID, printable(f))
		}
	}
	return nil
}

// expireLogs removes what is kept of the sandboxes that ended longer than
// older ago (by their record's end, else their log's last change), never
// a running sandbox's (run.ListEnded leaves those out), and says which.
func expireLogs(out io.Writer, stateDir, logDir string, older time.Duration) error {
	ended, err := run.ListEnded(stateDir, logDir)
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-older)
	var errs []error
	removed := 0
	for _, e := range ended {
		if !e.Ended.Before(cutoff) {
			continue
		}
		if err := run.RemoveEnded(stateDir, e); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		fmt.Fprintf(out, "removed the kept log of sandbox %s (ended %s)\n", e.ID, e.Ended.Local().Format(time.DateTime))
	}
	if removed == 0 && len(errs) == 0 {
		fmt.Fprintf(out, "no kept log is older than %v\n", older)
	}
	return combine(errs...)
}
