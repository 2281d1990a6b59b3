package run

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFindLog: an ended sandbox's log is found by its id or a unique
// prefix of it; a prefix of several ids, or of none, is a
// *LogLookupError that says which.
func TestFindLog(t *testing.T) {
	stateDir, logDir := t.TempDir(), t.TempDir()
	for _, id := range []string{"1a2b3c4d", "1a2b9999", "5e6f7a8b", "1a2b"} {
		if err := os.MkdirAll(filepath.Join(logDir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logDir, id, LogName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A directory without a log is no sandbox's log.
	if err := os.MkdirAll(filepath.Join(logDir, "5e6fdead"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ref     string
		want    string   // the id whose log is found
		matches []string // of the *LogLookupError, when nothing is found
	}{
		{ref: "1a2b3c4d", want: "1a2b3c4d"},
		{ref: "1a2b3", want: "1a2b3c4d"},
		{ref: "5e", want: "5e6f7a8b"},
		{ref: "1a2b", want: "1a2b"}, // an id that is a prefix of others is itself
		{ref: "1a", matches: []string{"1a2b", "1a2b3c4d", "1a2b9999"}},
		{ref: "ffff"},
		{ref: "agent"}, // no record (Ended) here names a sandbox agent
	}
	for _, tt := range tests {
		path, err := FindLog(stateDir, logDir, tt.ref)
		if tt.want != "" {
			if want := filepath.Join(logDir, tt.want, LogName); err != nil || path != want {
				t.Errorf("FindLog(%q) = %q, %v; want %q", tt.ref, path, err, want)
			}
			continue
		}
		var le *LogLookupError
		if !errors.As(err, &le) || !slices.Equal(le.Matches, tt.matches) || le.Ref != tt.ref || le.LogDir != logDir {
			t.Errorf("FindLog(%q) = %q, %v; want a *LogLookupError with matches %q", tt.ref, path, err, tt.matches)
			continue
		}
		if errors.Is(err, ErrNoLog) != (len(tt.matches) == 0) {
			t.Errorf("FindLog(%q): errors.Is(ErrNoLog) = %t, want %t", tt.ref, errors.Is(err, ErrNoLog), len(tt.matches) == 0)
		}
	}
	// No log directory yet: no log, not an error of its own.
	if _, err := FindLog(stateDir, filepath.Join(logDir, "none"), "1a2b"); !errors.Is(err, ErrNoLog) {
		t.Errorf("FindLog in a missing directory: got %v, want ErrNoLog", err)
	}
}

// TestFindJournal: an ended sandbox's mock journal is found as its log
// is; a sandbox that kept a log but no journal (it mocked nothing) is a
// *LogLookupError that says the journal.
func TestFindJournal(t *testing.T) {
	stateDir, logDir := t.TempDir(), t.TempDir()
	for id, files := range map[string][]string{"1a2b3c4d": {LogName, JournalName}, "5e6f7a8b": {LogName}} {
		os.MkdirAll(filepath.Join(logDir, id), 0o755)
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(logDir, id, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if path, err := FindJournal(stateDir, logDir, "1a2b"); err != nil || path != filepath.Join(logDir, "1a2b3c4d", JournalName) {
		t.Errorf("FindJournal(1a2b) = %q, %v; want the journal of 1a2b3c4d", path, err)
	}
	path, err := FindJournal(stateDir, logDir, "5e6f")
	var le *LogLookupError
	if !errors.As(err, &le) || !le.Journal || !errors.Is(err, ErrNoLog) {
		t.Errorf("FindJournal(5e6f) = %q, %v; want a *LogLookupError of the journal", path, err)
	}
}
