package decisionlog

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// TestBatchWriterAlone drives a batch writer without a sink: appended
// records wait in the batch, a commit writes them and its own records at
// once; a commit whose write fails halfway takes its records out of the
// file and the batch (removed) and leaves the writer at fault, the
// records gathered before it kept for the next try; a flush that writes
// them ends the fault; and the file holds only whole records, in order.
func TestBatchWriterAlone(t *testing.T) {
	w, f, path := wtOpen(t)
	var renewed []int64
	bw := newBatchWriter(f, 0, w, func(written int64) { renewed = append(renewed, written) })
	ff := &decisionlogtest.FlakyFile{}
	bw.setWriteFunc(ff.Write)

	if err := bw.append([]byte("{\"seq\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if got := bw.waiting(); got != 1 {
		t.Errorf("waiting after an append: got %d, want 1", got)
	}
	if removed, err := bw.commit([]byte("{\"seq\":2}\n")); err != nil || removed {
		t.Fatalf("commit: got removed %v, %v; want false, nil", removed, err)
	}
	if got := bw.waiting(); got != 0 {
		t.Errorf("waiting after a commit: got %d, want 0", got)
	}

	if err := bw.append([]byte("{\"seq\":3}\n")); err != nil {
		t.Fatal(err)
	}
	ff.Set(syscall.ENOSPC, true)
	removed, err := bw.commit([]byte("{\"seq\":4}\n"))
	var le *LogFileError
	if !removed || !errors.As(err, &le) || !errors.Is(err, syscall.ENOSPC) || w.fault.Load() == nil {
		t.Fatalf("a failed commit: got removed %v, %v; want true and a *LogFileError wrapping ENOSPC", removed, err)
	}
	if got := bw.waiting(); got != 1 {
		t.Errorf("waiting after the failed commit: got %d, want 1 (seq 3)", got)
	}
	if err := bw.flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("flush while the file fails: got %v, want ENOSPC", err)
	}
	ff.Set(nil, false)
	if err := bw.flush(); err != nil || w.fault.Load() != nil {
		t.Errorf("flush once the file works: got %v (fault %v), want nil", err, w.fault.Load())
	}
	if !bw.close() || bw.close() {
		t.Error("close: want true once, then false")
	}
	if err := bw.closeFile(nil); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range decisionlogtest.ReadLines(t, path) {
		seqs = append(seqs, r.Seq)
	}
	if len(seqs) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
		t.Errorf("the file's seqs: got %v, want [1 2 3]", seqs)
	}
	if len(renewed) != 0 {
		t.Errorf("renewed: got %v, want no new file", renewed)
	}
}

// TestBatchWriterMakesANewFile removes the file under a writer: the next
// commit fails (its records went into the removed file, so they are not
// taken out), and the one after writes a new file at the path, telling
// how much the old one held.
func TestBatchWriterMakesANewFile(t *testing.T) {
	w, f, path := wtOpen(t)
	var renewed []int64
	bw := newBatchWriter(f, 0, w, func(written int64) { renewed = append(renewed, written) })
	defer bw.closeFile(nil)
	if _, err := bw.commit([]byte("{\"seq\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if removed, err := bw.commit([]byte("{\"seq\":2}\n")); removed || !errors.Is(err, ErrLogFileRemoved) {
		t.Errorf("a commit into the removed file: got removed %v, %v; want false, ErrLogFileRemoved", removed, err)
	}
	if _, err := bw.commit([]byte("{\"seq\":3}\n")); err != nil {
		t.Fatalf("a commit after the removal: %v", err)
	}
	if len(renewed) != 1 || renewed[0] != 20 {
		t.Errorf("renewed: got %v, want [20]", renewed)
	}
	if lines := decisionlogtest.ReadLines(t, path); len(lines) != 1 || lines[0].Seq != 3 {
		t.Errorf("the new file: got %+v, want seq 3 alone", lines)
	}
}

// TestFileSinkBatches writes records over several batches, with Flush
// between some of them, and expects every record in the file in order:
// the batches the flusher writes and those Flush writes keep their order.
// A full batch reaches the file without a Flush.
func TestFileSinkBatches(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	pad := strings.Repeat("x", 300)
	const n = 2000 // about 10 batches
	for seq := uint64(1); seq <= n; seq++ {
		if err := fs.WriteRecord(seq, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`,"pad":"`+pad+`"}`+"\n")); err != nil {
			t.Fatal(err)
		}
		if seq%777 == 0 {
			if err := fs.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if seq == 500 {
			// Past the first batch: the flusher writes it without a Flush.
			for deadline := time.Now().Add(30 * time.Second); len(decisionlogtest.RawLines(t, path)) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a full batch was not written")
				}
			}
		}
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decisionlogtest.RawLines(t, path)
	if len(lines) != n {
		t.Fatalf("got %d lines, want %d", len(lines), n)
	}
	for i, line := range lines {
		var r struct{ Seq int }
		if err := json.Unmarshal(line, &r); err != nil || r.Seq != i+1 {
			t.Fatalf("line %d: got seq %d (%v), want %d", i+1, r.Seq, err, i+1)
		}
	}
}

// TestFileSinkFlushAndCloseReportAFailingFile makes every write to the
// file fail while records go in, full batches included: Flush returns the
// write's error, and again at the next call while the file still fails,
// and Close returns an error.
func TestFileSinkFlushAndCloseReportAFailingFile(t *testing.T) {
	fs, _ := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	fs.writer.f.Close() // every write to it fails
	line := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}` + "\n")
	var werr error
	for seq := uint64(1); seq <= 1000 && werr == nil; seq++ {
		werr = fs.WriteRecord(seq, line)
		if seq%100 == 0 {
			time.Sleep(time.Millisecond) // let the flusher take a batch
		}
	}
	if werr == nil {
		werr = fs.Flush()
	}
	if !errors.Is(werr, os.ErrClosed) {
		t.Errorf("writes to a failing file: got %v, want os.ErrClosed", werr)
	}
	if err := fs.Flush(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Flush after the error: got %v, want it again", err)
	}
	if err := fs.Close(); err == nil {
		t.Error("Close after the error: got nil, want it")
	}
}

func TestFileSinkCloseFlushes(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{})
	l := NewLog("sb", fs)
	for range 3 {
		l.Emit(&Record{Event: EventDecision})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(decisionlogtest.RawLines(t, path)); got != 3 {
		t.Errorf("right after Close: got %d lines, want 3", got)
	}
	if err := fs.WriteRecord(4, []byte("{}\n")); !errors.Is(err, ErrSinkClosed) {
		t.Errorf("WriteRecord after Close: got %v, want ErrSinkClosed", err)
	}
	if err := fs.Flush(); !errors.Is(err, ErrSinkClosed) {
		t.Errorf("Flush after Close: got %v, want ErrSinkClosed", err)
	}
	if err := fs.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func TestFileSinkFlush(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{})
	defer fs.Close()
	if err := fs.WriteRecord(1, []byte("{\"seq\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := len(decisionlogtest.RawLines(t, path)); got != 1 {
		t.Errorf("after Flush: got %d lines, want 1", got)
	}
}

// TestFileSinkBackgroundFlush waits for the flusher to write a record
// nobody flushed. The flusher does it within 200 ms; the deadline only
// guards against a flusher that never runs.
func TestFileSinkBackgroundFlush(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{})
	defer fs.Close()
	for seq := uint64(1); seq <= 2; seq++ {
		if err := fs.WriteRecord(seq, []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if got := len(decisionlogtest.RawLines(t, path)); got == int(seq) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("record %d was not flushed in the background", seq)
			}
		}
	}
}
