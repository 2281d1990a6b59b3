package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/sandbox"
)

// recordTarget is what the record was about: [METHOD ]host:port[path], the
// protocol first for a bypass record, the client for a conn record.
func recordTarget(r *decisionlog.Record) string {
	switch r.Kind {
	case "conn": // refused before any request: no target, only who
		return "from " + r.Client
	case "bypass":
		t := strings.ToUpper(r.Proto) + " " + r.Host
		if r.Port != 0 {
			t += ":" + strconv.Itoa(r.Port)
		}
		if r.Count > 1 {
			t += fmt.Sprintf(" x%d", r.Count)
		}
		return t
	}
	t := r.Host + ":" + strconv.Itoa(r.Port) + r.Path
	if r.Method != "" && r.Method != "CONNECT" {
		t = r.Method + " " + t
	}
	return t
}

// recordProcess names the process the record is about, " by NAME[PID]",
// or "" when none is known. NAME is what the process executes (its
// Comm: the base name of its executable, or of the link to it that
// started it), which the sandbox can choose by naming a file so; so the
// executable's path, as the kernel gives it (/proc/PID/exe in the
// sandbox's root), follows in parentheses, " by npm[42] (/tmp/x/npm)",
// unless it is NAME in a directory of system programs (systemBin). The
// result is not escaped: the caller prints it with printable.
func recordProcess(r *decisionlog.Record) string {
	if r.PID == 0 {
		return ""
	}
	name := cmp.Or(r.Comm, "?")
	if r.Exe == "" || r.Comm != "" && slices.Contains(systemBin, path.Dir(r.Exe)) && path.Base(r.Exe) == r.Comm {
		return fmt.Sprintf(" by %s[%d]", name, r.PID)
	}
	return fmt.Sprintf(" by %s[%d] (%s)", name, r.PID, r.Exe)
}

// systemBin are the directories of system programs: a process that
// executes one of their files is named by the file's name alone.
var systemBin = []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin"}

// recordReason is the record's reason, saying so when audit mode let a block
// verdict through.
func recordReason(r *decisionlog.Record) string {
	if r.Event == "decision" && r.Action == "block" && !r.Enforced {
		return r.Reason + "; audit mode let it through"
	}
	return r.Reason
}

// formatDecision renders one record as a line; color adds ANSI colors to
// the action.
func formatDecision(r *decisionlog.Record, color bool) string {
	switch r.Event {
	case "policy":
		return fmt.Sprintf("%s  policy    %s", r.Time.Local().Format("15:04:05.000"), printable(r.Change))
	case decisionlog.EventApproval:
		return r.Time.Local().Format("15:04:05.000") + "  " + approvalLine(r)
	case "dropped":
		// The file's budget left records out (a flood); say how many.
		return fmt.Sprintf("%s  dropped   %d records left out of the log: %s%s", r.Time.Local().Format("15:04:05.000"), r.Count, printable(r.Reason), droppedTargets(r.Targets))
	}
	action := fmt.Sprintf("%-9s", r.Action)
	if color {
		code := map[string]string{"allow": "32", "block": "31", "intercept": "33"}[r.Action]
		if code != "" {
			action = "\x1b[" + code + "m" + action + "\x1b[0m"
		}
	}
	// Fixed widths rather than a tabwriter: lines are printed as they come
	// (--follow). A longer field pushes the rest of its line only.
	return fmt.Sprintf("%s  %s %-11s %-*s  %-*s  %s%s", r.Time.Local().Format("15:04:05.000"), action, r.Kind,
		targetWidth, printable(recordTarget(r)), ruleWidth, printable(r.Rule), printable(recordReason(r)), printable(recordProcess(r)))
}

// droppedTargets lists the first targets whose repeats a dropped record
// counts, as "; GET a.test:80/x ×12, ...", or "" for none.
func droppedTargets(ts []decisionlog.DroppedTarget) string {
	const show = 5
	var b strings.Builder
	for i, t := range ts {
		if i == show {
			fmt.Fprintf(&b, ", and %d more targets", len(ts)-show)
			break
		}
		sep := ", "
		if i == 0 {
			sep = "; repeats of "
		}
		fmt.Fprintf(&b, "%s%s %s %s:%d%s ×%d", sep, printable(t.Event), printable(t.Method), printable(t.Host), t.Port, printable(t.Path), t.Count)
	}
	return b.String()
}

// Column widths of formatDecision.
const targetWidth, ruleWidth = 40, 8

// printable is how every printer of cmd/sbx shows text a sandbox
// controls, on a terminal or not: escape.Text, sbx's one escaping
// function for text, so that a logged host, path or process name cannot
// drive the terminal, reorder or hide what is printed around it, or
// pose as another line.
func printable(s string) string { return escape.Text(s) }

// decisionsOptions are sbx decisions' flags.
type decisionsOptions struct {
	target       targetFlags
	file, logDir string
	follow, json bool
	since        uint64
}

// decisionsLong is the help of sbx decisions.
const decisionsLong = `Decisions prints one line per decision: time, action, kind, host:port and
path, rule, reason (policy changes too). --follow keeps printing new ones
until interrupted; --json passes the records through unchanged.

--sandbox ID reads a running sandbox's decisions from its gateway; for a
sandbox that ended (sbx ps -a) it reads its log, by its id, a unique
prefix or its name: the one kept in
/var/lib/sbx/sandboxes/<id>/decisions.jsonl, or where sbx run --log
wrote it, as the sandbox's record there says; with --follow it says that
the sandbox ended and prints what the log holds. A log file is read with
--file; --file F --follow follows it as
tail -F does, across the gateway's log rotation (the file moved away and
made anew at its path), until interrupted.`

func newDecisionsCmd() *cobra.Command {
	var o decisionsOptions
	cmd := &cobra.Command{
		Use:   "decisions [flags]",
		Short: "Show the decisions of a sandbox, running or ended, a gateway, or a decision log file",
		Long:  decisionsLong,
		Example: `  sbx decisions --sandbox 1a2b3c4d --follow
  sbx decisions --file /var/lib/sbx/sandboxes/1a2b3c4d/decisions.jsonl --json
  sbx decisions --file gateway.jsonl --follow`,
		Args: usageArgs(decisionsArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDecisions(cmd, o)
		},
	}
	o.target.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&o.file, "file", "", "read the decision log `FILE` instead")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new decisions until interrupted")
	cmd.Flags().Uint64Var(&o.since, "since", 0, "only records after sequence number `N`")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the records as JSON Lines, unchanged")
	cmd.Flags().StringVar(&o.logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	cmd.Flags().MarkHidden("log-dir")
	return cmd
}

// runDecisions prints the decisions o names: of a log file, of a sandbox
// that ended (its log), or of a running sandbox or gateway (its API).
func runDecisions(cmd *cobra.Command, o decisionsOptions) error {
	out := cmd.OutOrStdout()
	pr := &recordPrinter{out: out, json: o.json, color: isTerminal(out) && !o.json, after: o.since}
	if o.file != "" {
		if o.target.sandbox != "" || o.target.api != "" {
			return usageErrorf(cmd, "--file reads a log file; it does not go with --sandbox or --api")
		}
		if o.follow {
			return followFile(cmd.Context(), o.file, pr, cmd.ErrOrStderr())
		}
		return pr.showFile(o.file)
	}
	// A sandbox that ended left its log: that is what it decided.
	if path, ended, err := endedSandboxLog(o.target, o.logDir); err != nil {
		return err
	} else if ended {
		return showEnded(cmd, o, pr, path)
	}
	c, err := o.target.client(cmd.Context())
	if err != nil {
		// It may have ended since it was looked up.
		if path, ended, lerr := endedSandboxLog(o.target, o.logDir); lerr == nil && ended {
			return showEnded(cmd, o, pr, path)
		}
		return err
	}
	defer c.Close()
	if o.follow {
		return followDecisions(cmd, o, c, pr)
	}
	return pageDecisions(cmd.Context(), c, o.since, pr)
}

// showEnded prints the log of a sandbox that ended, saying so first to
// one who asked to follow it.
func showEnded(cmd *cobra.Command, o decisionsOptions, pr *recordPrinter, path string) error {
	f, err := openLog(path)
	if err != nil {
		return fmt.Errorf("sandbox %s ended; reading its decision log: %w", o.target.sandbox, err)
	}
	defer f.Close()
	if o.follow {
		fmt.Fprintf(cmd.ErrOrStderr(), "sbx: sandbox %s ended, so no new decisions will come; its decision log %s holds:\n", filepath.Base(filepath.Dir(path)), path)
	}
	return pr.showAll(f)
}

// followDecisions prints the decisions of c's gateway as they come, until
// the command is interrupted or the gateway stops.
func followDecisions(cmd *cobra.Command, o decisionsOptions, c *api.Client, pr *recordPrinter) error {
	stream, err := c.FollowDecisions(cmd.Context(), o.since)
	if err != nil {
		return err
	}
	defer stream.Close()
	for {
		line, err := stream.Next()
		if cmd.Context().Err() != nil {
			return nil // interrupted: the normal end
		}
		if errors.Is(err, io.EOF) { // the gateway ended the stream: it stopped
			who := "the gateway"
			if o.target.sandbox != "" {
				who = "sandbox " + o.target.sandbox
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sbx: %s stopped; no more decisions\n", who)
			return nil
		}
		if err != nil {
			return err
		}
		if err := pr.show(line); err != nil {
			return err
		}
	}
}

// pageDecisions prints the decisions c's gateway keeps after since, a
// page at a time.
func pageDecisions(ctx context.Context, c *api.Client, since uint64, pr *recordPrinter) error {
	for {
		page, err := c.Decisions(ctx, since, 1000)
		if err != nil {
			return err
		}
		for _, d := range page.Decisions {
			if err := pr.show(d); err != nil {
				return err
			}
		}
		if len(page.Decisions) == 0 || page.Next == since {
			return nil
		}
		since = page.Next
	}
}

// recordPrinter prints decision records, one a line: as formatDecision
// renders them, or with json as they came.
type recordPrinter struct {
	out         io.Writer
	json, color bool
	after       uint64 // a log file is read whole: --since skips its start
	dec         decisionlog.Decoder
}

// show prints the record line, unless it is blank, at or before
// p.after, or a close record of a listing.
func (p *recordPrinter) show(line []byte) error {
	line = []byte(strings.TrimSpace(string(line)))
	if len(line) == 0 {
		return nil
	}
	var r decisionlog.Record
	if !p.json || p.after > 0 {
		if err := p.dec.Decode(line, &r); err != nil {
			return fmt.Errorf("not a decision record (%v): %s", err, printable(string(line)))
		}
		if r.Seq <= p.after {
			return nil
		}
	}
	if p.json {
		_, err := fmt.Fprintf(p.out, "%s\n", line)
		return err
	}
	if r.Event == "close" {
		return nil
	}
	_, err := fmt.Fprintln(p.out, formatDecision(&r, p.color))
	return err
}

// showAll prints the records of r, one a line.
func (p *recordPrinter) showAll(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if err := p.show(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// showFile prints the records of the log file at path.
func (p *recordPrinter) showFile(path string) error {
	f, err := openLog(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return p.showAll(f)
}

// endedSandboxLog finds the decision log that the sandbox t.sandbox
// names kept, when no running sandbox has that id, name or id prefix:
// ended is false when one runs, or when t names no sandbox (--api), and
// the error says so when no log of that id is kept in logDir either.
// Errors other than "not found" (no permission, an ambiguous prefix) are
// left to the API client, which reports them.
func endedSandboxLog(t targetFlags, logDir string) (path string, ended bool, err error) {
	if t.sandbox == "" || t.api != "" {
		return "", false, nil
	}
	if _, err := sandbox.Find(t.stateDir, t.sandbox); !errors.Is(err, sandbox.ErrNotFound) {
		return "", false, nil
	}
	// Found as sbx audit --sandbox finds an ended sandbox's log.
	path, err = sandboxLog(auditOptions{stateDir: t.stateDir, logDir: logDir}, t.sandbox)
	if err != nil {
		return "", false, fmt.Errorf("%w; sbx ps lists the running ones", err)
	}
	return path, true, nil
}

// isTerminal reports whether w is a terminal, for colors.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// endedMeanwhile reports whether sandbox id, listed as running, has
// begun to stop or is gone since: its state says stopping, is gone, or
// its owner is.
func endedMeanwhile(stateDir, id string) bool {
	st, err := sandbox.Load(stateDir, id)
	return errors.Is(err, sandbox.ErrNotFound) || err == nil && (st.Status == sandbox.StatusStopping || !sandbox.OwnerAlive(st))
}

// psWait bounds how long sbx ps waits for each sandbox's status.
const psWait = 5 * time.Second

// psStatus asks the sandbox t names for its status (GET /v1/status),
// within psWait.
func psStatus(ctx context.Context, t targetFlags) (*api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, psWait)
	defer cancel()
	c, err := t.client(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

func truncateCommand(args []string) string {
	s := strings.Join(args, " ")
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

func newStopCmd() *cobra.Command {
	var stateDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop ID|NAME",
		Short: "Stop a running sandbox",
		Long: `Stop asks the sandbox's sbx run to end (SIGTERM, which reaches the command),
and after --timeout kills it; sbx run then tears the sandbox down. A run
that was killed leaves its sandbox to sbx gc, which stop then runs. The
sandbox is named by its id, its --name, or a unique prefix of its id.`,
		Example: `  sudo sbx stop 1a2b3c4d
  sudo sbx stop agent`,
		Args: exactArgs("ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageErrorf(cmd, "--timeout %v: want a duration of 0 or more, e.g. --timeout 30s", timeout)
			}
			st, err := sandbox.Find(stateDir, args[0])
			if err != nil {
				return orNeedsRoot(err, "sbx stop")
			}
			if !sandbox.OwnerAlive(st) {
				return fmt.Errorf("sandbox %s is not running (its sbx run is gone); sbx gc removes what it left", st.ID)
			}
			if err := syscall.Kill(st.PID, syscall.SIGTERM); errors.Is(err, syscall.EPERM) {
				return needsRoot("sbx stop", "the sandbox's sbx run is root's")
			} else if err != nil {
				return fmt.Errorf("stopping sandbox %s: %w", st.ID, err)
			}
			deadline := time.Now().Add(timeout)
			for sandbox.OwnerAlive(st) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if sandbox.OwnerAlive(st) {
				syscall.Kill(st.PID, syscall.SIGKILL)
				for i := 0; sandbox.OwnerAlive(st) && i < 100; i++ {
					time.Sleep(20 * time.Millisecond)
				}
				// The run could not tear down: do it here.
				if _, err := sandbox.GC(cmd.Context(), stateDir, nil); err != nil {
					return fmt.Errorf("sandbox %s was killed; cleaning up: %w (sbx gc retries)", st.ID, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s killed after %v and removed\n", st.ID, timeout)
				return nil
			}
			if _, err := sandbox.Load(stateDir, st.ID); !errors.Is(err, sandbox.ErrNotFound) {
				return fmt.Errorf("sandbox %s stopped but its state is left; run sbx gc", st.ID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s stopped\n", st.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Second, "how long to wait before killing it")
	cmd.Flags().MarkHidden("state-dir")
	return cmd
}

// openLog opens the decision log at path to read it. A log the user may
// not read says why and what to do: sbx run writes its logs as root,
// mode 0600, wherever --log puts them.
func openLog(path string) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w; a sandbox's decision log is root's (mode 0600), wherever --log put it: run sbx decisions with sudo", err)
	}
	return f, err
}

// decisionsArgs refuses arguments, naming the flags that take what was
// given: a sandbox (sbx decisions NAME, as docker logs NAME) or a file.
func decisionsArgs(_ *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("sbx decisions takes no argument %q: give a sandbox with --sandbox %s, or a log file with --file %s", args[0], args[0], args[0])
}
