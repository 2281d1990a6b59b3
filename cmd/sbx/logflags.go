package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway"
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
	fs.Float64Var(&l.rate, "log-rate", gateway.DefaultLogRate, fmt.Sprintf("write at most `N` records a second to the log file (bursts of %d); the rest are counted in a dropped record; 0 for no limit", gateway.DefaultLogBurst))
	fs.StringVar(&l.maxSize, "log-max-size", formatBytes(gateway.DefaultLogMaxBytes), "stop writing records to the log file at `BYTES` (a dropped record counts the rest); 0 for no limit")
}

// Options turns the flags into the gateway's file sink options.
func (l *logLimitFlags) Options() (gateway.FileSinkOptions, error) {
	o := gateway.FileSinkOptions{Append: l.append}
	switch {
	case l.rate < 0 || l.rate != l.rate:
		return o, fmt.Errorf("--log-rate %v: want a number of records a second, or 0 for no limit", l.rate)
	case l.rate == 0:
		o.RatePerSecond = gateway.NoLimit
	default:
		o.RatePerSecond = l.rate
	}
	n, err := parseBytes(l.maxSize)
	if err != nil {
		return o, fmt.Errorf("--log-max-size %q: %w", l.maxSize, err)
	}
	o.MaxBytes = n
	if n == 0 {
		o.MaxBytes = gateway.NoLimit
	}
	return o, nil
}

// checkExisting refuses path, the --log file, when it already holds
// something and --log-append is not given, before anything starts. The
// gateway refuses it again when it opens it (the file could change in
// between); this is the early answer, with the same error: a
// *gateway.NonEmptyLogFileError. A path it cannot look at is refused too.
func (l *logLimitFlags) checkExisting(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--log %s: %w; choose a path sbx can look at", path, err)
	case fi.Mode().IsRegular() && fi.Size() > 0 && !l.append:
		return &gateway.NonEmptyLogFileError{Path: path, Size: fi.Size()}
	}
	return nil
}

// reachableLogError words the error of outsideOf for a log path: the
// sandbox could write or replace the log, or sbx cannot tell whether it
// could, and does not write the log there either.
func reachableLogError(err error) error {
	var we *writableError
	if errors.As(err, &we) {
		return fmt.Errorf("%w, so the sandbox could replace, rewrite or link the log", err)
	}
	return fmt.Errorf("sbx cannot tell whether the sandbox could reach it (%w), so it does not write the log there", err)
}
