package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/sandbox/run"
)

func TestParseMockLLM(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("turns:\n  - reply: {text: hi}\n"), 0o644)
	os.WriteFile(bad, []byte("turns:\n  - reply: {text: hi}\n  - reply: {txet: hi}\n"), 0o644)

	mocks, err := parseMockLLM([]string{"API.Anthropic.com=" + good, "localhost=" + good})
	if err != nil || len(mocks) != 2 || mocks["api.anthropic.com"] == nil || mocks["localhost"] == nil {
		t.Fatalf("got %v, %v; want two mocks by normalized host", mocks, err)
	}
	for _, tc := range []struct {
		values []string
		want   []string
	}{
		{[]string{"api.test"}, []string{"--mock-llm", "want HOST=SCRIPT"}},
		{[]string{"https://api.test/=" + good}, []string{"--mock-llm", "host name"}},
		{[]string{"api.test=" + filepath.Join(dir, "missing.yaml")}, []string{"--mock-llm", "missing.yaml", "no such file", "give the path"}},
		{[]string{"api.test=" + bad}, []string{"--mock-llm", bad + ":3:", "txet"}},
		{[]string{"api.test=" + good, "API.test.=" + good}, []string{"mocked twice"}},
	} {
		_, err := parseMockLLM(tc.values)
		if err == nil {
			t.Errorf("%v: got no error, want one", tc.values)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: got %q, want it to contain %q", tc.values, err, w)
			}
		}
	}
}

func TestParseRecordLLM(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{[]string{"api.anthropic.com"}, "want HOST=SCRIPT"},
		{[]string{"https://api.anthropic.com=" + dir + "/a.yaml"}, "give a host name"},
		{[]string{"api.anthropic.com=" + dir + "/nodir/a.yaml"}, "does not exist"},
		{[]string{"api.anthropic.com=" + dir + "/a.yaml", "API.anthropic.com=" + dir + "/b.yaml"}, "already recorded or mocked"},
	} {
		if _, err := parseRecordLLM(tt.values, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseRecordLLM(%q): got %v, want an error containing %q", tt.values, err, tt.want)
		}
	}
	rs, err := parseRecordLLM([]string{"API.anthropic.com=" + dir + "/a.yaml"}, nil)
	if want := []run.Recording{{Host: "api.anthropic.com", Path: dir + "/a.yaml"}}; err != nil || !slices.Equal(rs, want) {
		t.Errorf("parseRecordLLM: got %v, %v; want %v", rs, err, want)
	}
	if got := recordedNote(run.Recorded{Host: "api.anthropic.com", Path: dir + "/a.yaml", Exchanges: 2}); !strings.Contains(got, "recorded 2 exchanges") || !strings.Contains(got, "replay with --mock-llm api.anthropic.com="+dir+"/a.yaml") {
		t.Errorf("recordedNote: got %q, want the count and how to replay", got)
	}
}

// TestRecordingErrors: the recordings the run library could not write
// come last, as one error, each named by its --record-llm host.
func TestRecordingErrors(t *testing.T) {
	teardown := errors.New("removing the namespace: busy")
	err := multierror.Append(teardown,
		&run.RecordingError{Host: "a.test", Path: "/x/a.yaml", Err: errors.New("writing /x/a.yaml: no space")},
		&run.RecordingError{Host: "b.test", Path: "/x", Err: errors.New("/x is a directory")})
	got := recordingErrors(err)
	var merr *multierror.Error
	if !errors.As(got, &merr) || len(merr.Errors) != 2 || merr.Errors[0] != teardown {
		t.Fatalf("got %v, want the teardown's error, then the recordings'", got)
	}
	if want := "--record-llm a.test: writing /x/a.yaml: no space\n--record-llm b.test: /x is a directory"; merr.Errors[1].Error() != want {
		t.Errorf("got %q, want %q", merr.Errors[1], want)
	}
}
