package decisionlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// dlTestSink records what a Log writes to it and can be told to fail.
type dlTestSink struct {
	mu       sync.Mutex
	seqs     []uint64
	lines    []string
	writeErr error
	closeErr error
	flushes  int
	closes   int
}

func (s *dlTestSink) WriteRecord(seq uint64, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	s.seqs = append(s.seqs, seq)
	s.lines = append(s.lines, string(line))
	return nil
}

func (s *dlTestSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushes++
	return nil
}

func (s *dlTestSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes++
	return s.closeErr
}

// dlSeq returns the seq field of a line AppendJSON or ringLine wrote,
// without a full JSON decoder, which is slow under the race detector.
func dlSeq(t testing.TB, line []byte) uint64 {
	t.Helper()
	_, after, ok := bytes.Cut(line, []byte(`"`+FieldSeq+`":`))
	if end := bytes.IndexAny(after, ",}"); ok && end > 0 {
		if seq, err := strconv.ParseUint(string(after[:end]), 10, 64); err == nil {
			return seq
		}
	}
	t.Fatalf("line %q: no seq", line)
	return 0
}

func TestLogEmit(t *testing.T) {
	sink := &dlTestSink{}
	l := NewLog("sb1", sink, nil)
	before := time.Now()
	r1 := &Record{Event: EventDecision, Sandbox: "other", V: 7, Host: "a.example"}
	if got := l.Emit(r1); got != 1 {
		t.Errorf("first Emit: got seq %d, want 1", got)
	}
	if r1.Seq != 1 || r1.V != SchemaVersion || r1.Sandbox != "sb1" {
		t.Errorf("after Emit: got Seq %d, V %d, Sandbox %q, want 1, %d, %q", r1.Seq, r1.V, r1.Sandbox, SchemaVersion, "sb1")
	}
	if r1.Time.Before(before) || r1.Time.After(time.Now()) {
		t.Errorf("after Emit: got Time %v, want the time of the call", r1.Time)
	}
	r2 := &Record{Event: EventPolicy, Time: dlTestTime, Change: "rule gh added", PolicyVersion: 2}
	if got := l.Emit(r2); got != 2 {
		t.Errorf("second Emit: got seq %d, want 2", got)
	}
	if !r2.Time.Equal(dlTestTime) {
		t.Errorf("Emit changed a set Time: got %v, want %v", r2.Time, dlTestTime)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		string(r1.AppendJSON(nil)) + "\n",
		`{"v":1,"seq":2,"event":"policy","time":"2025-03-04T04:06:07.890123Z","policy_version":2,"change":"rule gh added"}` + "\n",
	}
	if diff := cmp.Diff(want, sink.lines); diff != "" {
		t.Errorf("lines written (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{1, 2}, sink.seqs); diff != "" {
		t.Errorf("seqs written (-want +got):\n%s", diff)
	}
	if sink.closes != 1 {
		t.Errorf("sink closed %d times, want 1", sink.closes)
	}
	if got := l.Emit(&Record{Event: EventDecision}); got != 0 {
		t.Errorf("Emit after Close: got seq %d, want 0", got)
	}
	if len(sink.lines) != 2 {
		t.Errorf("Emit after Close wrote: got %d lines, want 2", len(sink.lines))
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if sink.closes != 1 {
		t.Errorf("sink closed %d times after a second Close, want 1", sink.closes)
	}
}

func TestLogSinkErrors(t *testing.T) {
	errWrite := errors.New("disk full")
	errClose := errors.New("close failed")
	bad := &dlTestSink{writeErr: errWrite, closeErr: errClose}
	good := &dlTestSink{}
	l := NewLog("", bad, good)
	if err := l.Err(); err != nil {
		t.Errorf("Err before any write: got %v, want nil", err)
	}
	for range 3 {
		l.Emit(&Record{Event: EventDecision})
	}
	if got := len(good.lines); got != 3 {
		t.Errorf("good sink: got %d lines, want 3", got)
	}
	if got := l.Errors(); got != 3 {
		t.Errorf("Errors: got %d, want 3", got)
	}
	if err := l.Err(); !errors.Is(err, errWrite) {
		t.Errorf("Err: got %v, want it to wrap %v", err, errWrite)
	}
	if err := l.Flush(); err != nil {
		t.Errorf("Flush: got %v, want nil", err)
	}
	if bad.flushes != 1 || good.flushes != 1 {
		t.Errorf("Flush: got %d and %d flushes, want 1 and 1", bad.flushes, good.flushes)
	}
	err := l.Close()
	if !errors.Is(err, errClose) {
		t.Errorf("Close: got %v, want it to wrap %v", err, errClose)
	}
	if bad.closes != 1 || good.closes != 1 {
		t.Errorf("Close: got %d and %d closes, want 1 and 1", bad.closes, good.closes)
	}
}

// openTempSink opens a FileSink with options o at decisions.jsonl in a
// new directory, and returns it with its path.
func openTempSink(t testing.TB, o FileSinkOptions) (*FileSink, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	fs, err := OpenFileSink(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return fs, path
}

func TestLogConcurrentEmit(t *testing.T) {
	const goroutines, each = 16, 1000
	fs, path := openTempSink(t, FileSinkOptions{})
	l := NewLog("sb", fs)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l.Emit(&Record{
					Event: EventDecision, ID: strconv.Itoa(g) + "-" + strconv.Itoa(i), Kind: KindConnect,
					Method: "CONNECT", Host: "example.com", Port: 443, Action: "allow", Enforced: true,
				})
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err: got %v, want nil", err)
	}
	lines := decisionlogtest.RawLines(t, path)
	if got, want := len(lines), goroutines*each; got != want {
		t.Fatalf("got %d lines, want %d", got, want)
	}
	ids := map[string]bool{}
	for i, line := range lines {
		var r struct {
			Seq uint64
			ID  string
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if want := uint64(i + 1); r.Seq != want {
			t.Fatalf("line %d: got seq %d, want %d", i+1, r.Seq, want)
		}
		if ids[r.ID] {
			t.Fatalf("line %d: id %s written twice", i+1, r.ID)
		}
		ids[r.ID] = true
	}
}

func TestFileSinkModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "decisions.jsonl")
	fs, err := OpenFileSink(path, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want os.FileMode
	}{
		{filepath.Join(dir, "a"), os.ModeDir | 0o700},
		{filepath.Join(dir, "a", "b"), os.ModeDir | 0o700},
		{path, 0o600},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != c.want {
			t.Errorf("%s: got mode %v, want %v", c.path, got, c.want)
		}
	}
}

func TestFileSinkAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	for run := range 2 {
		fs, err := OpenFileSink(path, FileSinkOptions{Append: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteRecord(uint64(run+1), []byte("{\"run\":"+strconv.Itoa(run)+"}\n")); err != nil {
			t.Fatal(err)
		}
		if err := fs.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got := decisionlogtest.RawLines(t, path)
	want := [][]byte{[]byte(`{"run":0}`), []byte(`{"run":1}`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file after two runs (-want +got):\n%s", diff)
	}
}

func TestOpenFileSinkError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if fs, err := OpenFileSink(filepath.Join(file, "decisions.jsonl"), FileSinkOptions{}); err == nil {
		fs.Close()
		t.Errorf("OpenFileSink under a regular file: got nil error, want one")
	}
}

// dlBenchLimits are limits a benchmark never reaches: the sink checks its
// budget for every record and writes every record.
var dlBenchLimits = FileSinkOptions{RatePerSecond: 1e15, Burst: math.MaxInt, MaxBytes: NoLimit}

// BenchmarkLogEmit measures the decision log's cost per proxied request
// with a file sink: encoding, the budget check and a buffered write.
func BenchmarkLogEmit(b *testing.B) {
	fs, _ := openTempSink(b, dlBenchLimits)
	l := NewLog("a1b2c3", fs)
	defer l.Close()
	rec := dlBenchRecord()
	b.ReportAllocs()
	for b.Loop() {
		rec.Time = time.Time{}
		l.Emit(rec)
	}
	b.StopTimer()
	if err := l.Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLogEmitParallel is BenchmarkLogEmit from GOMAXPROCS goroutines,
// as the gateway emits.
func BenchmarkLogEmitParallel(b *testing.B) {
	fs, _ := openTempSink(b, dlBenchLimits)
	l := NewLog("a1b2c3", fs, NewRing(0))
	defer l.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rec := dlBenchRecord()
		for pb.Next() {
			rec.Time = time.Time{}
			l.Emit(rec)
		}
	})
}

// BenchmarkLogEmitOverBudget is BenchmarkLogEmit with a sink that is over
// its rate: what a flooding sandbox costs per record left out.
func BenchmarkLogEmitOverBudget(b *testing.B) {
	fs, _ := openTempSink(b, FileSinkOptions{RatePerSecond: 1e-9, Burst: 1})
	l := NewLog("a1b2c3", fs)
	defer l.Close()
	rec := dlBenchRecord()
	b.ReportAllocs()
	for b.Loop() {
		rec.Time = time.Time{}
		l.Emit(rec)
	}
}
