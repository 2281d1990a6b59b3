package run

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestWriteRecordings: each recording is written as a script a mock can
// replay and noted; one that cannot be written is a *RecordingError
// naming its host, and the others are written still.
func TestWriteRecordings(t *testing.T) {
	dir := t.TempDir()
	rs := newRecordings([]Recording{
		{Host: "api.anthropic.com", Path: filepath.Join(dir, "a.yaml")},
		{Host: "api.openai.com", Path: dir}, // a directory
		{Host: "api.test", Path: filepath.Join(dir, "b.yaml")},
	})
	if m := recorders(rs); len(m) != 3 || m["api.test"] != rs[2].rec {
		t.Errorf("recorders: got %v, want one for each host", m)
	}
	var notes []Note
	errs := writeRecordings(rs, func(n Note) { notes = append(notes, n) })
	var re *RecordingError
	if len(errs) != 1 || !errors.As(errs[0], &re) || re.Host != "api.openai.com" || !strings.Contains(re.Error(), "is a directory") {
		t.Errorf("got errors %v, want one *RecordingError for the directory", errs)
	}
	want := []Note{
		Recorded{Host: "api.anthropic.com", Path: filepath.Join(dir, "a.yaml")},
		Recorded{Host: "api.test", Path: filepath.Join(dir, "b.yaml")},
	}
	if len(notes) != len(want) || notes[0] != want[0] || notes[1] != want[1] {
		t.Errorf("got notes %v, want %v", notes, want)
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if _, err := mockllm.ParseScriptFile(filepath.Join(dir, f)); err != nil {
			t.Errorf("the recording %s: %v", f, err)
		}
	}
	os.Symlink(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "link.yaml"))
	if err := WriteFile(filepath.Join(dir, "link.yaml"), []byte("x")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("writing through a link: got %v, want a refusal", err)
	}
}
