// Package decisionlogtest holds what the tests of gateway/decisionlog,
// gateway and cmd/sbx share for decision log files: for the fault tests, a
// file that fails on demand and a tmpfs small enough to fill, and readers
// of what a log file holds. It is for tests only and imports no other
// package of sbx, so decisionlog's own tests can use it.
package decisionlogtest

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"testing"
)

// FlakyFile stands between a FileSink and its file: while err is set,
// every write fails with it (after writing half of what it was given,
// when partial is set, as a filesystem that fills up mid-write does).
// Its Write is what FileSink.SetWriteFunc takes.
type FlakyFile struct {
	mu      sync.Mutex
	err     error
	partial bool
}

// Set makes the writes that follow fail with err (nil: work), writing
// half of what they are given first when partial is set.
func (ff *FlakyFile) Set(err error, partial bool) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.err, ff.partial = err, partial
}

// Write writes b to f, or fails as Set said.
func (ff *FlakyFile) Write(f *os.File, b []byte) (int, error) {
	ff.mu.Lock()
	err, partial := ff.err, ff.partial
	ff.mu.Unlock()
	if err == nil {
		return f.Write(b)
	}
	n := 0
	if partial && len(b) > 1 {
		n, _ = f.Write(b[:len(b)/2])
	}
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: err}
}

// RawLines returns the lines of the file at path, failing when the file
// does not end in a newline.
func RawLines(t testing.TB, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil
	}
	if data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", path)
	}
	return bytes.Split(data[:len(data)-1], []byte("\n"))
}

// Line is what the fault tests read of a record.
type Line struct {
	Seq    uint64 `json:"seq"`
	Event  string `json:"event"`
	Action string `json:"action"`
	Rule   string `json:"rule"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	Count  uint64 `json:"count"`
	Reason string `json:"reason"`
}

// ReadLines decodes every line of the log at path, failing on one that
// is not a whole record (a torn write) or on seqs that do not increase.
func ReadLines(t testing.TB, path string) []Line {
	t.Helper()
	var out []Line
	for i, line := range RawLines(t, path) {
		var r Line
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d of %s is not a record (%v): %q", i+1, path, err, line)
		}
		if len(out) > 0 && r.Seq <= out[len(out)-1].Seq {
			t.Fatalf("line %d of %s: seq %d after %d", i+1, path, r.Seq, out[len(out)-1].Seq)
		}
		out = append(out, r)
	}
	return out
}
