package run

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/sandbox"
)

// TestEndedRecord: the record Close keeps of an ended sandbox (writeEnded)
// is read back by ListEnded, makes the sandbox found by its name, id and
// id prefix (FindEnded), and makes FindLog and FindJournal return where
// its log and journal were written, elsewhere than the log directory; a
// directory of a sandbox recorded in the state directory (running) is
// no ended sandbox's.
func TestEndedRecord(t *testing.T) {
	stateDir, logDir, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	code := 0
	e := Ended{ID: "0a0b0c0d", Name: "agent", Command: []string{"claude"}, Created: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		Ended: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), ExitCode: &code,
		Log: filepath.Join(elsewhere, "run.jsonl"), Journal: filepath.Join(elsewhere, "run.mock-requests.jsonl"), Dir: filepath.Join(logDir, "0a0b0c0d")}
	if err := writeEnded(e); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(e.Dir, EndedName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the record: got %v, %v; want a file of mode 0600", fi, err)
	}
	// A running sandbox's directory, which has its log: not listed.
	if err := os.MkdirAll(filepath.Join(stateDir, "9f9f9f9f"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(logDir, "9f9f9f9f"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "9f9f9f9f", LogName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := ListEnded(stateDir, logDir)
	if err != nil {
		t.Fatal(err)
	}
	want := e
	want.Kept = true
	if diff := cmp.Diff([]Ended{want}, all, cmp.AllowUnexported(Ended{})); diff != "" {
		t.Errorf("ListEnded (-want +got):\n%s", diff)
	}
	for _, ref := range []string{"agent", "0a0b0c0d", "0a0b"} {
		if got, err := FindEnded(stateDir, logDir, ref); err != nil || got.ID != e.ID {
			t.Errorf("FindEnded(%q): got %q, %v; want %s", ref, got.ID, err, e.ID)
		}
	}
	if _, err := FindEnded(stateDir, logDir, "9f9f9f9f"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("FindEnded of a running sandbox: got %v, want ErrNotFound", err)
	}
	if got, err := FindLog(stateDir, logDir, "agent"); err != nil || got != e.Log {
		t.Errorf("FindLog(agent): got %q, %v; want %q", got, err, e.Log)
	}
	if got, err := FindJournal(stateDir, logDir, "agent"); err != nil || got != e.Journal {
		t.Errorf("FindJournal(agent): got %q, %v; want %q", got, err, e.Journal)
	}
	if err := RemoveEnded(stateDir, e); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
		t.Errorf("RemoveEnded left %s: %v", e.Dir, err)
	}
	if err := RemoveEnded(stateDir, Ended{ID: "9f9f9f9f", Dir: filepath.Join(logDir, "9f9f9f9f")}); err == nil {
		t.Errorf("RemoveEnded of a running sandbox: got nil, want a refusal")
	}
}
