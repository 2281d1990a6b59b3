package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// logLimitFlags say how the decision log file is written: --log-append,
// which lets a log that is not empty be added to, and --log-rate and
// --log-max-size, which bound its growth. sbx run and sbx gateway share
// them.
type logLimitFlags struct {
	append  bool
	rate    float64
	maxSize string
}

func (l *logLimitFlags) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&l.append, "log-append", false, "add to the --log file when it is not empty (without it, such a file is refused, so that two runs are never mixed in one log unless asked)")
	fs.Float64Var(&l.rate, "log-rate", decisionlog.DefaultLogRate, fmt.Sprintf("write at most `N` records a second to the log file (bursts of %d); past it, a repeat of a target already written is counted in a dropped record, and a new target is still written; 0 for no limit", decisionlog.DefaultLogBurst))
	fs.StringVar(&l.maxSize, "log-max-size", formatBytes(decisionlog.DefaultLogMaxBytes), "let the log file grow to `BYTES`; then every request is blocked until the file is moved away (a dropped record counts them); 0 for no limit")
}

// Options turns the flags into the gateway's file sink options.
func (l *logLimitFlags) Options() (decisionlog.FileSinkOptions, error) {
	o := decisionlog.FileSinkOptions{Append: l.append, MaxBytesFlag: "--log-max-size"}
	switch {
	case l.rate < 0 || l.rate != l.rate:
		return o, fmt.Errorf("--log-rate %v: want a number of records a second, or 0 for no limit", l.rate)
	case l.rate == 0:
		o.RatePerSecond = decisionlog.NoLimit
	default:
		o.RatePerSecond = l.rate
	}
	n, err := parseBytes(l.maxSize)
	if err != nil {
		return o, fmt.Errorf("--log-max-size %q: %w", l.maxSize, err)
	}
	o.MaxBytes = n
	if n == 0 {
		o.MaxBytes = decisionlog.NoLimit
	}
	return o, nil
}

// checkExisting refuses path, the --log file, when it already holds
// something and --log-append is not given, before anything starts. The
// gateway refuses it again when it opens it (the file could change in
// between); this is the early answer, with the same error: a
// *decisionlog.NonEmptyLogFileError. A path it cannot look at is refused too.
func (l *logLimitFlags) checkExisting(path string) error {
	err := run.CheckLogFile(path, l.append)
	var le *run.LogPathError
	if errors.As(err, &le) {
		return logPathProblem(le)
	}
	return err
}

// checkJournal refuses path, the --mock-journal file, as checkExisting
// refuses the --log file.
func (l *logLimitFlags) checkJournal(path string) error {
	err := run.CheckJournalFile(path, l.append)
	var le *run.LogPathError
	if errors.As(err, &le) {
		return logPathProblem(le)
	}
	return err
}

// logPathProblem words e, the run library's refusal of the decision
// log's path (or the mock journal's), with the flags.
func logPathProblem(e *run.LogPathError) error {
	switch {
	case e.Journal && e.CannotLook:
		return fmt.Errorf("--mock-journal %s: %w; choose a path sbx can look at", e.Path, e.Reason)
	case e.Journal:
		return fmt.Errorf("mock journal %s: %w; keep it outside the working directory and -v mounts, and outside every other mount of them: give --mock-journal FILE there (by default it is kept beside the decision log)", e.Path, reachableJournalError(e.Reason))
	case e.CannotLook:
		return fmt.Errorf("--log %s: %w; choose a path sbx can look at", e.Path, e.Reason)
	case e.Dir:
		return fmt.Errorf("the decision logs' directory %s: %w; run sbx from another directory, or give --log FILE outside the sandbox's mounts", e.Path, reachableLogError(e.Reason))
	}
	return fmt.Errorf("--log %s: %w; keep it outside the working directory and -v mounts, and outside every other mount of them (the default is %s/<id>/decisions.jsonl)", e.Path, reachableLogError(e.Reason), logRoot)
}

// reachableJournalError is reachableLogError's wording for the mock
// journal.
func reachableJournalError(err error) error {
	var we *run.WritableError
	if errors.As(err, &we) {
		return fmt.Errorf("%w, so the sandbox could replace, rewrite or link the journal", err)
	}
	return fmt.Errorf("sbx cannot tell whether the sandbox could reach it (%w), so it does not write the journal there", err)
}

// reachableLogError words the reason the run library refused a log path
// for: the sandbox could write or replace the log, or sbx cannot tell
// whether it could, and does not write the log there either.
func reachableLogError(err error) error {
	var we *run.WritableError
	if errors.As(err, &we) {
		return fmt.Errorf("%w, so the sandbox could replace, rewrite or link the log", err)
	}
	return fmt.Errorf("sbx cannot tell whether the sandbox could reach it (%w), so it does not write the log there", err)
}
