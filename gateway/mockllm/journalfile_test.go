package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// openJournalFile makes a journal file in a new directory.
func openJournalFile(t *testing.T) (*JournalFile, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mock-requests.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	jf := NewJournalFile(f)
	t.Cleanup(func() { jf.Close() })
	return jf, path
}

// readJournalFile reads the journal file at path as a new reader would.
func readJournalFile(t *testing.T, path string) []*JournalMock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mocks, err := ReadJournal(f)
	if err != nil {
		t.Fatalf("ReadJournal: %v", err)
	}
	return mocks
}

// TestJournalFileKeepsWhatMemoryKeeps: what a Responder journals reaches
// the file as each request is answered (no Close: as after a crash), the
// same entries the Responder holds, bodies included, a body over
// MaxJournalBody cut as in memory; a reset starts the mock's journal over;
// each mock's lines are told apart.
func TestJournalFileKeepsWhatMemoryKeeps(t *testing.T) {
	jf, path := openJournalFile(t)
	r, srv := serve(t, "turns:\n  - reply: {text: one}\n  - reply: {text: two}\n")
	r.Journal = jf.Sink("api.test", "api.test", "")
	other := New(nil)
	other.Journal = jf.Sink("", "script agent.yaml", "agent.yaml")

	if _, _, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hello", false)); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", MaxJournalBody+10) // not JSON, and over the bound
	if _, _, err := post(t, srv, "POST", "/v1/messages", big); err != nil {
		t.Fatal(err)
	}
	mocks := readJournalFile(t, path)
	if len(mocks) != 2 || mocks[0].Host != "api.test" || mocks[0].Mock != "api.test" || mocks[1].Script != "agent.yaml" || mocks[1].Mock != "script agent.yaml" {
		t.Fatalf("got mocks %+v, want api.test then script agent.yaml", mocks)
	}
	if len(mocks[1].Requests) != 0 {
		t.Errorf("got %d requests of the script's mock, want none", len(mocks[1].Requests))
	}
	want := r.Requests()
	if diff := cmp.Diff(want, mocks[0].Requests, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
		cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })); diff != "" {
		t.Errorf("the file's journal differs from the Responder's (-memory +file):\n%s", diff)
	}
	if got := mocks[0].Requests[1]; !got.BodyTruncated || len(got.Body) != MaxJournalBody+2 {
		t.Errorf("got the long body kept as %d bytes, truncated %t; want a JSON string of its first %d bytes, truncated", len(got.Body), got.BodyTruncated, MaxJournalBody)
	}
	if !strings.Contains(string(mocks[0].Requests[0].Body), `"hello"`) {
		t.Errorf("got body %s, want the request's", mocks[0].Requests[0].Body)
	}

	// Read again after more requests: a new reader sees them all.
	r.Reset()
	if _, _, err := post(t, srv, "POST", "/v1/chat/completions", userBody(ChatCompletions, "m", "after the reset", false)); err != nil {
		t.Fatal(err)
	}
	mocks = readJournalFile(t, path)
	if got := mocks[0].Requests; len(got) != 1 || got[0].Seq != 1 || got[0].Path != "/v1/chat/completions" {
		t.Errorf("after a reset, got %+v, want the one request since", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("got mode %v, want 0600", fi.Mode().Perm())
	}
	if err := jf.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}
}

// TestJournalFileBounds: past its bounds the file is compacted to its
// latest lines, in a new file of mode 0600, which keeps being written;
// a reader keeps a mock's latest MaxJournalEntries requests, as a
// Responder does.
func TestJournalFileBounds(t *testing.T) {
	jf, path := openJournalFile(t)
	jf.maxLines = 20
	s := jf.Sink("api.test", "api.test", "")
	for i := 1; i <= 50; i++ {
		s.Journaled(Journaled{Seq: i, Method: "POST", Path: "/v1/messages", Body: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`), Status: 200, Outcome: "turn 1: reply"})
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > 20 {
		t.Errorf("got %d lines in the file, want at most 20", n)
	}
	mocks := readJournalFile(t, path)
	got := mocks[0].Requests
	if len(got) == 0 || got[len(got)-1].Seq != 50 || got[0].Seq <= 1 {
		t.Fatalf("got seqs %d..%d, want the latest up to 50", got[0].Seq, got[len(got)-1].Seq)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Errorf("got seq %d after %d, want the latest in order", got[i].Seq, got[i-1].Seq)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the compacted file: got %v %v, want mode 0600", fi.Mode().Perm(), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(leftovers) > 0 {
		t.Errorf("compacting left %v", leftovers)
	}

	// By bytes: one body over half the bound is kept alone.
	jf.maxLines, jf.maxBytes = 1000, 4000
	s.Journaled(Journaled{Seq: 51, Body: json.RawMessage(`"` + strings.Repeat("y", 3000) + `"`), Status: 200, Outcome: "x"})
	if fi, _ := os.Stat(path); fi.Size() > 4000 {
		t.Errorf("got a file of %d bytes, want at most 4000", fi.Size())
	}
	if got := readJournalFile(t, path)[0].Requests; len(got) != 1 || got[0].Seq != 51 {
		t.Errorf("got %d requests, want only the big one", len(got))
	}

	// The reader's own bound, that of a Responder.
	jf2, path2 := openJournalFile(t)
	s2 := jf2.Sink("api.test", "api.test", "")
	for i := 1; i <= MaxJournalEntries+30; i++ {
		s2.Journaled(Journaled{Seq: i, Status: 200, Outcome: "turn 1: reply"})
	}
	if got := readJournalFile(t, path2)[0].Requests; len(got) != MaxJournalEntries || got[0].Seq != 31 {
		t.Errorf("got %d requests from seq %d, want %d from 31", len(got), got[0].Seq, MaxJournalEntries)
	}
}

// TestReadJournal: a last line cut short is left out, a bad line in the
// middle is an error naming it.
func TestReadJournal(t *testing.T) {
	start := `{"host":"api.test","mock":"api.test","start":true}` + "\n"
	entry := `{"host":"api.test","mock":"api.test","seq":1,"time":"2025-01-01T00:00:00Z","method":"POST","path":"/v1/messages","body":{"a":1},"status":200,"outcome":"turn 1: reply"}` + "\n"
	tests := []struct {
		name, data string
		want       int    // requests of the one mock
		wantErr    string // a part of the error
	}{
		{name: "whole", data: start + entry, want: 1},
		{name: "cut short", data: start + entry + entry[:40], want: 1},
		{name: "empty", data: "", want: -1},
		{name: "bad line", data: start + "not json\n" + entry, wantErr: "line 2 is not a line of a mock journal"},
		{name: "no mock", data: `{"seq":1}` + "\n", wantErr: "line 1 is not a line of a mock journal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mocks, err := ReadJournal(strings.NewReader(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want < 0 {
				if len(mocks) != 0 {
					t.Errorf("got %d mocks, want none", len(mocks))
				}
				return
			}
			if len(mocks) != 1 || len(mocks[0].Requests) != tt.want {
				t.Errorf("got %+v, want one mock with %d requests", mocks, tt.want)
			}
		})
	}
}
