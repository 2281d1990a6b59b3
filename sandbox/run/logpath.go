package run

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// A LogPathError refuses the decision log's path before anything is made.
type LogPathError struct {
	// Path is the log file's path, or with Dir the directory the logs go
	// in when no file is given (Spec.LogDir). With Journal, Path is the
	// mock journal's path (Gateway.MockJournal, or its default beside a
	// Gateway.LogFile).
	Path    string
	Dir     bool
	Journal bool
	// CannotLook says sbx could not look at Path (Reason says why).
	// Otherwise Reason is a *WritableError when the sandbox could write,
	// replace or reach Path, or why sbx cannot tell whether it could.
	CannotLook bool
	Reason     error
}

func (e *LogPathError) Error() string {
	var we *WritableError
	name, it := "decision log ", "the log"
	if e.Journal {
		name, it = gateway.MockJournalName+" ", "the journal"
	}
	switch {
	case e.CannotLook:
		return name + e.Path + ": " + e.Reason.Error()
	case errors.As(e.Reason, &we):
		return name + e.Path + ": " + e.Reason.Error() + ", so the sandbox could replace, rewrite or link " + it
	}
	return name + e.Path + ": cannot tell whether the sandbox could reach it (" + e.Reason.Error() + ")"
}

func (e *LogPathError) Unwrap() error { return e.Reason }

// A WritableError is the answer for a path the sandbox can write or
// replace: it says through what.
type WritableError struct{ text string }

func (e *WritableError) Error() string { return e.text }

// A ReadableError is the answer for a path the sandbox can read: it says
// through what.
type ReadableError struct{ text string }

func (e *ReadableError) Error() string { return e.text }

// CheckLogFile refuses path, a decision log file, when it already holds
// something and appending is not asked for, before anything starts: a
// *decisionlog.NonEmptyLogFileError, which the gateway returns too when it
// opens the file (the file could change in between; this is the early
// answer). A path it cannot look at is a *LogPathError with CannotLook.
func CheckLogFile(path string, appendTo bool) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return &LogPathError{Path: path, CannotLook: true, Reason: err}
	case fi.Mode().IsRegular() && fi.Size() > 0 && !appendTo:
		return &decisionlog.NonEmptyLogFileError{Path: path, Size: fi.Size()}
	}
	return nil
}

// CheckJournalFile refuses path, a mock journal file, as CheckLogFile
// refuses a decision log file: its errors name the journal (a
// *decisionlog.NonEmptyLogFileError whose File is
// gateway.MockJournalName, a *LogPathError with Journal).
func CheckJournalFile(path string, appendTo bool) error {
	return journalError(CheckLogFile(path, appendTo))
}

// journalError is err, a refusal of a log path, said of the mock journal.
func journalError(err error) error {
	var le *LogPathError
	if errors.As(err, &le) {
		le.Journal = true
	}
	var ne *decisionlog.NonEmptyLogFileError
	if errors.As(err, &ne) {
		ne.File = gateway.MockJournalName
	}
	return err
}

// journalBeside is the path of the mock journal kept beside the decision
// log file logFile: its name with ".mock-requests.jsonl" in place of its
// extension, as "run.jsonl" becomes "run.mock-requests.jsonl".
func journalBeside(logFile string) string {
	return strings.TrimSuffix(logFile, filepath.Ext(logFile)) + "." + JournalName
}

// checkLogPath refuses a log path the sandbox can write or reach through
// any of writable (its read-write mounts), and a log file that is not
// empty unless it is appended to. With file "" the logs go below dir,
// which is checked instead.
func checkLogPath(file, dir string, appendTo bool, writable []string) error {
	if file == "" {
		if err := outsideOf(dir, writable); err != nil {
			return &LogPathError{Path: dir, Dir: true, Reason: err}
		}
		return nil
	}
	if err := outsideOf(file, writable); err != nil {
		return &LogPathError{Path: file, Reason: err}
	}
	return CheckLogFile(file, appendTo)
}

// outsideOf returns a *WritableError when path lies in one of dirs (the
// sandbox's writable ones), or when reaching it goes through an entry
// that does, and another error when it cannot tell; see outside.
func outsideOf(path string, dirs []string) error { return outside(path, dirs, false) }

// unreadable is outsideOf for dirs the sandbox can read (rootfs.Layout's
// Visible), returning a *ReadableError.
func unreadable(path string, dirs []string) error { return outside(path, dirs, true) }

// outside returns an error when path lies in one of dirs, or when
// reaching it goes through an entry that does: a *ReadableError with
// read (dirs are what the sandbox can read), else a *WritableError; and
// another error when it cannot tell. Lying in a directory is a matter of filesystem objects,
// not of path names: every place this mount namespace shows a directory
// of dirs under (a bind mount of it or of a directory below it elsewhere,
// its filesystem mounted again; see mountAliases) counts as the directory,
// and an entry that is the same file as one of dirs (a hard link to a file
// mounted with -v) is refused too. Every directory entry on the way is
// checked where it really is, and symbolic links are followed one by one,
// so neither a link inside dirs (planted by a sandbox that can write
// there, pointing anywhere) nor a link elsewhere pointing into dirs gets
// past. dirs are compared with their own links resolved.
func outside(path string, dirs []string, read bool) error {
	type root struct {
		at   string      // where the tree of dir shows
		dir  string      // as given
		real string      // dir with its links resolved
		fi   os.FileInfo // dir's own
	}
	var roots []root
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			return err
		}
		fi, err := os.Stat(rd)
		if err != nil {
			return err
		}
		aliases, err := mountAliases(rd)
		if err != nil {
			return fmt.Errorf("finding where the mounts show %s: %w", d, err)
		}
		for _, a := range aliases {
			roots = append(roots, root{a, d, rd, fi})
		}
	}
	inside := func(p string) (root, bool) {
		for _, r := range roots {
			if rel, err := filepath.Rel(r.at, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return r, true
			}
		}
		return root{}, false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// refuse words the refusal of next, which lies in r (or is the same
	// file as r.dir, when same).
	refuse := func(next string, r root, same bool) error {
		final := next == filepath.Clean(abs)
		place := r.dir
		if r.at != r.real {
			place = r.at + " (which shares files with " + r.dir + " through a mount)"
		}
		var text string
		switch {
		case same && final:
			text = "it is the same file as " + r.dir
		case same:
			text = "reaching it goes through " + next + ", the same file as " + r.dir
		case final && next == r.at:
			text = "it is " + place
		case final:
			text = "it lies in " + place
		case next == r.at:
			text = "reaching it goes through " + place
		default:
			text = "reaching it goes through " + next + ", in " + place
		}
		if read {
			return &ReadableError{text + ", which the sandbox can read"}
		}
		return &WritableError{text + ", which the sandbox can write"}
	}
	at, rest := "/", strings.Split(abs, "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			at = filepath.Dir(at)
			continue
		}
		next := filepath.Join(at, c)
		if r, ok := inside(next); ok {
			return refuse(next, r, false)
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			at = next // nothing below a missing entry can be a link
			continue
		case err != nil:
			return err
		}
		for _, r := range roots {
			if os.SameFile(fi, r.fi) {
				return refuse(next, r, true)
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			at = next
			continue
		}
		if links++; links > 40 {
			return fmt.Errorf("too many symbolic links on the way to it")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			at = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return nil
}
