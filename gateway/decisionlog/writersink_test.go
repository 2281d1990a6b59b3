package decisionlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// writesRecorder keeps each Write apart.
type writesRecorder struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *writesRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func (w *writesRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// TestWriterSink: a WriterSink writes each record, emitted or committed,
// with one Write before the Log returns, with no Flush, and the bytes it
// writes are those the file sink of the same Log writes.
func TestWriterSink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	var w writesRecorder
	ws := NewWriterSink(&w)
	l := NewLog("ab12cd34", fs, ws)
	recs := []*Record{
		{Event: EventPolicy, PolicyVersion: 1},
		{Event: EventDecision, Kind: KindTransparent, Host: "api.test", Port: 443, Action: "allow", Rule: "api"},
		{Event: EventDecision, Kind: KindDNS, Host: "evil.test", Action: "block", Rule: "default", Reason: "no rule \"allows\" it\n"},
		{Event: EventClose, Kind: KindTransparent, Host: "api.test", Port: 443, BytesIn: 10, BytesOut: 20},
	}
	for i, r := range recs {
		if i%2 == 0 {
			l.Emit(r)
		} else if _, err := l.Commit(r); err != nil {
			t.Fatal(err)
		}
		if got := w.count(); got != i+1 {
			t.Fatalf("after record %d: %d writes, want %d: each record written at once", i+1, got, i+1)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(file, []byte("\n"))
	if len(lines) != len(recs)+1 || len(lines[len(recs)]) != 0 {
		t.Fatalf("the file holds %q, want %d lines", file, len(recs))
	}
	for i, wr := range w.writes {
		if !bytes.Equal(wr, lines[i]) {
			t.Errorf("write %d: got %q, want the file's line %q", i+1, wr, lines[i])
		}
	}
	if err := ws.WriteRecord(9, []byte("{}\n")); !errors.Is(err, ErrSinkClosed) {
		t.Errorf("a write after Close: got %v, want ErrSinkClosed", err)
	}
}
