package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/sandbox"
)

// EndedName is the name of what Close keeps of a sandbox that ended, in
// its directory of the log directory: LogDir/<id>/sandbox.json.
const EndedName = "sandbox.json"

// Ended is what is kept of a sandbox that ended, as Docker keeps an
// exited container until it is removed: who it was, how it ended and
// where its decision log and mock journal were written (the log
// directory, or where --log and --mock-journal said). A sandbox that
// ended under an sbx that kept no record is known by its directory and
// log alone: Kept is false, and Ended is its log's last change.
type Ended struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Command []string  `json:"command,omitempty"`
	Created time.Time `json:"created,omitzero"`
	Ended   time.Time `json:"ended"`
	// ExitCode is the command's exit code, nil when it is not known (its
	// run failed, or no record was kept).
	ExitCode *int   `json:"exit_code"`
	Log      string `json:"log,omitempty"`
	Journal  string `json:"journal,omitempty"`
	// Dir is the sandbox's directory of the log directory, what sbx rm
	// removes.
	Dir string `json:"dir"`
	// Kept says the record was read from Dir/sandbox.json.
	Kept bool `json:"-"`
}

// writeEnded writes e to e.Dir/sandbox.json (mode 0600), making Dir
// when the log was written elsewhere.
func writeEnded(e Ended) error {
	for _, p := range []*string{&e.Log, &e.Journal} {
		if *p != "" {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	if err := os.MkdirAll(e.Dir, 0o700); err != nil {
		return fmt.Errorf("keeping the record of sandbox %s: %w", e.ID, err)
	}
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(e.Dir, "."+EndedName+".new")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("keeping the record of sandbox %s: %w", e.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(e.Dir, EndedName)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keeping the record of sandbox %s: %w", e.ID, err)
	}
	return nil
}

// ListEnded returns the sandboxes that ended whose records or logs are
// kept in logDir ("" for DefaultLogDir), oldest end first. A directory
// of a sandbox recorded in stateDir or on this machine
// (sandbox.Recorded: it runs, starts, stops, or a crash left it to sbx
// gc) is not an ended sandbox's, and is left out.
func ListEnded(stateDir, logDir string) ([]Ended, error) {
	if logDir == "" {
		logDir = DefaultLogDir
	}
	entries, err := os.ReadDir(logDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Ended
	for _, d := range entries {
		if !d.IsDir() || sandbox.CheckID(d.Name()) != nil || sandbox.Recorded(stateDir, d.Name()) {
			continue
		}
		e, ok, err := readEnded(filepath.Join(logDir, d.Name()))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b Ended) int { return a.Ended.Compare(b.Ended) })
	return out, nil
}

// readEnded reads what is kept in dir, the directory of one sandbox: its
// record, or without one its decision log; ok is false when neither is
// there.
func readEnded(dir string) (e Ended, ok bool, err error) {
	id := filepath.Base(dir)
	data, err := os.ReadFile(filepath.Join(dir, EndedName))
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &e); err != nil || e.ID != id {
			return Ended{}, false, fmt.Errorf("%s: not the record of sandbox %s (%v)", filepath.Join(dir, EndedName), id, err)
		}
		e.Dir, e.Kept = dir, true
		return e, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Ended{}, false, err
	}
	log := filepath.Join(dir, LogName)
	fi, err := os.Stat(log)
	if errors.Is(err, fs.ErrNotExist) {
		return Ended{}, false, nil
	}
	if err != nil {
		return Ended{}, false, err
	}
	e = Ended{ID: id, Ended: fi.ModTime(), Log: log, Dir: dir}
	if _, err := os.Stat(filepath.Join(dir, JournalName)); err == nil {
		e.Journal = filepath.Join(dir, JournalName)
	}
	return e, true, nil
}

// FindEnded returns the sandbox that ended that ref names among those
// ListEnded lists: by its id, its name (the last that ended of that
// name), or a unique prefix of its id. The error wraps
// sandbox.ErrNotFound when none matches.
func FindEnded(stateDir, logDir, ref string) (Ended, error) {
	all, err := ListEnded(stateDir, logDir)
	if err != nil {
		return Ended{}, err
	}
	var byName, byPrefix []Ended
	for _, e := range all {
		switch {
		case e.ID == ref:
			return e, nil
		case e.Name != "" && e.Name == ref:
			byName = append(byName, e)
		case ref != "" && strings.HasPrefix(e.ID, ref):
			byPrefix = append(byPrefix, e)
		}
	}
	switch {
	case len(byName) > 0:
		return byName[len(byName)-1], nil // the last to end
	case len(byPrefix) == 1:
		return byPrefix[0], nil
	case len(byPrefix) > 1:
		var ids []string
		for _, e := range byPrefix {
			ids = append(ids, e.ID)
		}
		return Ended{}, fmt.Errorf("%s: the ended sandboxes %s match; give more of the id", ref, strings.Join(ids, ", "))
	}
	return Ended{}, fmt.Errorf("%s: %w: no ended sandbox of that id or name is kept in %s", ref, sandbox.ErrNotFound, logDirOr(logDir))
}

// logDirOr returns logDir, or DefaultLogDir for "".
func logDirOr(logDir string) string {
	if logDir == "" {
		return DefaultLogDir
	}
	return logDir
}

// RemoveEnded removes what is kept of the ended sandbox e in the log
// directory, its directory there (record, decision log, mock journal).
// A log or journal written elsewhere (--log, --mock-journal) is the
// user's file, and is left; the caller says so.
func RemoveEnded(stateDir string, e Ended) error {
	if sandbox.Recorded(stateDir, e.ID) {
		return &StillRecordedError{ID: e.ID}
	}
	return os.RemoveAll(e.Dir)
}

// StillRecordedError is an ended sandbox's kept files that RemoveEnded
// leaves, because the state directory still records the sandbox: it runs,
// or a run that crashed left it there.
type StillRecordedError struct{ ID string }

func (e *StillRecordedError) Error() string {
	return fmt.Sprintf("sandbox %s is still recorded as running (or a run that crashed left it)", e.ID)
}
