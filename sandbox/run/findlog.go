package run

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/sandbox"
)

// LogName is the name of a sandbox's decision log in its directory of
// the log directory: LogDir/<id>/decisions.jsonl.
const LogName = "decisions.jsonl"

// JournalName is the name of a sandbox's mock journal beside its decision
// log: LogDir/<id>/mock-requests.jsonl (see Spec.Gateway).
const JournalName = "mock-requests.jsonl"

// ErrNoLog is wrapped by the *LogLookupError of a reference that names
// no sandbox, running or ended.
var ErrNoLog = errors.New("no decision log")

// LogLookupError is a reference to a sandbox that FindLog cannot turn
// into one decision log.
type LogLookupError struct {
	Ref    string
	LogDir string
	// Journal says the file looked for is the mock journal (FindJournal),
	// not the decision log.
	Journal bool
	// Matches are the ids of the kept logs that Ref is a prefix of: none
	// (the error wraps ErrNoLog), or more than one.
	Matches []string
}

func (e *LogLookupError) Error() string {
	what := "log"
	if e.Journal {
		what = "mock journal"
	}
	if len(e.Matches) == 0 {
		return fmt.Sprintf("%s: no running sandbox of that id or name, and no %s of one in %s", e.Ref, what, e.LogDir)
	}
	return fmt.Sprintf("%s: the %ss of %s match; give more of the id", e.Ref, what, strings.Join(e.Matches, ", "))
}

// Unwrap makes errors.Is(err, ErrNoLog) hold when nothing matches.
func (e *LogLookupError) Unwrap() error {
	if len(e.Matches) == 0 {
		return ErrNoLog
	}
	return nil
}

// FindLog returns the path of the decision log of the sandbox ref names,
// as Start lays logs out in logDir ("" for DefaultLogDir): a running
// sandbox's, by its id, name or a unique prefix of its id (sandbox.Find
// in stateDir), else an ended sandbox's: by its id, its name or a unique
// prefix of its id, where its record (Ended) says the log was written, or
// by its id or a unique prefix of it among the logs kept. It does not
// check that the log can be read.
// The error is a *LogLookupError when no log, or more than one, matches,
// or the error of reading logDir.
func FindLog(stateDir, logDir, ref string) (string, error) {
	return findFile(stateDir, logDir, ref, LogName)
}

// FindJournal returns the path of the mock journal of the sandbox ref
// names, as FindLog finds its decision log: where Start keeps it when
// neither Gateway.LogFile nor Gateway.MockJournal place it elsewhere.
// The error is a *LogLookupError with Journal set when no journal, or
// more than one, matches, or the error of reading logDir.
func FindJournal(stateDir, logDir, ref string) (string, error) {
	return findFile(stateDir, logDir, ref, JournalName)
}

// findFile finds the file name (LogName or JournalName) of the sandbox
// ref names, for FindLog and FindJournal.
func findFile(stateDir, logDir, ref, name string) (string, error) {
	if logDir == "" {
		logDir = DefaultLogDir
	}
	if st, err := sandbox.Find(stateDir, ref); err == nil {
		return filepath.Join(logDir, st.ID, name), nil
	}
	// An ended sandbox's record says where its files went, and its name.
	if e, err := FindEnded(stateDir, logDir, ref); err == nil && e.Kept {
		path := e.Log
		if name == JournalName {
			path = e.Journal
		}
		if path != "" {
			return path, nil
		}
	}
	entries, err := os.ReadDir(logDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var matches []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), ref) {
			if _, err := os.Stat(filepath.Join(logDir, e.Name(), name)); err == nil {
				matches = append(matches, e.Name())
			}
		}
	}
	id := ref
	switch {
	case ref == "" || len(matches) == 0:
		return "", &LogLookupError{Ref: ref, LogDir: logDir, Journal: name == JournalName}
	case len(matches) > 1 && !slices.Contains(matches, ref):
		return "", &LogLookupError{Ref: ref, LogDir: logDir, Journal: name == JournalName, Matches: matches}
	case len(matches) == 1:
		id = matches[0]
	}
	return filepath.Join(logDir, id, name), nil
}
