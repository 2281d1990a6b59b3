package decisionlog

import (
	"bytes"
	"os"
	"sync"
	"time"
)

// This file is a FileSink's batch writer: the records gathered in
// batches, written to the file by the sink's goroutine or at once for a
// commit (group commit), and a failed write undone.

// fileSinkFlushInterval bounds how long a written record waits in a
// FileSink's buffer, and so what a crash of the gateway can lose.
const fileSinkFlushInterval = 200 * time.Millisecond

// fileSinkBatch is the size of a FileSink's batches: a full one is written
// to the file at once.
const fileSinkBatch = 64 << 10

// A batchWriter owns a FileSink's file and the bytes on their way to it.
// It gathers records in batches of up to 64 KiB and hands a full batch
// to the sink's goroutine (kick, batch), which writes it without holding
// the lock the next batch is gathered under; a commit's records are
// written at once, with everything gathered before them, and verified by
// the fault watcher. Batches reach the file in the order of their records.
// A write that fails is undone (the file is truncated to what it held)
// and what it was to write waits for the next try; the watcher is told.
//
// It has two locks: mu guards the batches and is taken first; fileMu
// guards the file and is held while it is written, so that a later flush
// cannot write its records before a batch being written.
type batchWriter struct {
	watch   *faultWatcher
	renewed func(written int64) // told, fileMu held, that a new file replaced one that held written bytes
	kick    chan struct{}       // a record is waiting to be flushed; capacity 1
	batch   chan struct{}       // full holds a batch to write now; capacity 1

	mu      sync.Mutex // taken before fileMu, never after
	buf     []byte     // the batch being gathered
	full    []byte     // a full batch the sink's goroutine is to write; nil when none
	spare   []byte     // an empty batch's memory, for the next swap
	pending bool       // written since the last flush, and the goroutine was kicked
	closed  bool

	fileMu sync.Mutex
	f      *os.File // a removed file is replaced by a new one
	// writeTo writes to f (f.Write; tests replace it).
	writeTo func(f *os.File, b []byte) (int, error)
	// What failed writes left, to be written before full and buf; the
	// bytes in the file; and whether a failed write left a part of what
	// it wrote in the file that truncating could not take out (the file
	// is truncated to written before it is written).
	unwritten []byte
	written   int64
	torn      bool
}

// newBatchWriter returns the writer of f, which holds size bytes, whose
// faults watch keeps. renewed is told when a new file replaced a
// vanished one.
func newBatchWriter(f *os.File, size int64, watch *faultWatcher, renewed func(written int64)) *batchWriter {
	return &batchWriter{
		watch:   watch,
		renewed: renewed,
		kick:    make(chan struct{}, 1),
		batch:   make(chan struct{}, 1),
		buf:     make([]byte, 0, fileSinkBatch),
		f:       f,
		writeTo: (*os.File).Write,
		written: size,
	}
}

// setWriteFunc makes the writer write its file through fn.
func (w *batchWriter) setWriteFunc(fn func(f *os.File, b []byte) (int, error)) {
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	w.writeTo = fn
}

// isClosed reports whether close was called.
func (w *batchWriter) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close stops the writer's background writes and reports whether it was
// open. What it holds is written by flush, and the file closed by
// closeFile.
func (w *batchWriter) close() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.closed = true
	return true
}

// waiting returns how many records wait for the file.
func (w *batchWriter) waiting() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	return uint64(bytes.Count(w.unwritten, []byte{'\n'}) + bytes.Count(w.full, []byte{'\n'}) + bytes.Count(w.buf, []byte{'\n'}))
}

// closeFile syncs the file to disk when err is nil, closes it, and
// returns err with what failed.
func (w *batchWriter) closeFile(err error) error {
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	if err == nil {
		err = w.f.Sync()
	}
	return Combine(err, w.f.Close())
}

// writeFile writes b to the file. A write that fails after a part of b
// reached the file (a filesystem filling up) is undone, so that the file
// always ends with a whole record: the file is truncated to what it held
// before, now or, when that fails too, before the next write. fileMu is
// held.
func (w *batchWriter) writeFile(b []byte) error {
	n, err := w.writeTo(w.f, b)
	if err == nil {
		w.written += int64(n)
		return nil
	}
	if n > 0 && w.f.Truncate(w.written) != nil {
		w.torn = true
	}
	return err
}

// prepare makes the file ready to be written after a fault: a new file at
// the path when the sink's was removed or moved, none when another file
// is there; and no part of a failed commit's records in it. fileMu is
// held.
func (w *batchWriter) prepare() error {
	if w.watch.isLost() {
		if err := w.reopen(); err != nil {
			return err
		}
	}
	if w.torn {
		if err := w.f.Truncate(w.written); err != nil {
			return err
		}
		w.torn = false
	}
	return nil
}

// reopen writes to a new file at the path (renew) in place of the one
// that was removed or moved away, and gives the sink a new size budget
// (renewed). fileMu is held.
func (w *batchWriter) reopen() error {
	f, err := w.watch.renew()
	if err != nil {
		return err
	}
	w.f.Close()
	written := w.written
	w.f, w.written, w.torn = f, 0, false
	w.renewed(written)
	return nil
}

// writeFull writes the full batch, if there is one, without holding mu
// while the file is written: the Log's writers go on gathering the next
// batch meanwhile. fileMu, taken before mu is released, keeps a later
// flush from writing its records first. A sink at fault leaves the batch
// to the next flush.
func (w *batchWriter) writeFull() {
	w.mu.Lock()
	b := w.full
	if b == nil || w.closed || w.watch.fault.Load() != nil {
		w.mu.Unlock()
		return
	}
	w.full = nil
	w.fileMu.Lock()
	w.mu.Unlock()
	if err := w.writeFile(b); err != nil {
		// What was not written is written first when the file is tried
		// again; the next flush sees it under fileMu.
		w.unwritten = b
		w.watch.setFault(err) // an *os.PathError naming the file
		w.fileMu.Unlock()
		return
	}
	w.fileMu.Unlock()
	w.mu.Lock()
	w.spare = b[:0]
	w.mu.Unlock()
}

// flushIdle writes what was gathered, unless the writer is closed: the
// sink's goroutine does, fileSinkFlushInterval after a record arrived.
func (w *batchWriter) flushIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.pending = false
		w.flushLocked()
	}
}

// retry writes what waits for the file when the sink is at fault, unless
// the writer is closed: the sink's goroutine tries the file again twice
// a second.
func (w *batchWriter) retry() {
	if w.watch.fault.Load() == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && (len(w.buf) > 0 || w.full != nil || w.hasUnwritten()) {
		w.flushLocked()
	}
}

// look has the watcher look whether the file is still the one at the
// path.
func (w *batchWriter) look() {
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	w.watch.look(w.f)
}

// hasUnwritten reports whether failed writes left bytes to write.
func (w *batchWriter) hasUnwritten() bool {
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	return len(w.unwritten) > 0
}

// flush writes what waits for the file (without syncing it to disk),
// after a write of writeFull that is under way. It returns nil when the
// file can be written (a write succeeded, or nothing had to be written
// and the sink is not at fault), else the fault.
func (w *batchWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = false
	_, err := w.flushCut(0)
	return err
}

// commit writes lines, a commit's records, to the file with everything
// gathered before them, and has the watcher verify that the file is
// still the one at the path. When the file cannot be written, it returns
// the fault with removed set when the commit's records were taken out
// (of the batch, and of the file when a part of them reached it): not
// when they went into a file that vanished. What else was not written
// stays for the next try.
func (w *batchWriter) commit(lines []byte) (removed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, lines...)
	// pending stays as it is: when set, the flusher's timer is armed and
	// flushes what comes after these records. Were it cleared here, the
	// next record (most often this request's close) would wake the
	// flusher again, a goroutine handoff for every request.
	return w.flushCut(len(lines))
}

// flushLocked is flush. w.mu is held.
func (w *batchWriter) flushLocked() error {
	_, err := w.flushCut(0)
	return err
}

// flushCut writes what waits for the file: what failed writes left, the
// full batch, then the one being gathered, after a write of writeFull
// that is under way. The last cut bytes of the batch being gathered are a
// commit's records: when they cannot be written, they are taken out of
// the batch, and out of the file when a part of them reached it (what
// else was not written stays for the next try), and removed is set. It
// returns nil when the file can be written (a write succeeded, or
// nothing had to be written and the sink is not at fault), else the
// fault. w.mu is held.
func (w *batchWriter) flushCut(cut int) (removed bool, err error) {
	w.fileMu.Lock()
	defer w.fileMu.Unlock()
	fail := func(err error) (bool, error) {
		if cut > 0 {
			w.buf = w.buf[:len(w.buf)-cut]
		}
		return cut > 0, w.watch.setFault(err)
	}
	if err := w.prepare(); err != nil {
		return fail(err)
	}
	wrote := false
	if len(w.unwritten) > 0 {
		if err := w.writeFile(w.unwritten); err != nil {
			return fail(err)
		}
		w.unwritten, wrote = nil, true
	}
	if w.full != nil {
		if err := w.writeFile(w.full); err != nil {
			w.unwritten, w.full = w.full, nil
			return fail(err)
		}
		w.spare, w.full, wrote = w.full[:0], nil, true
	}
	if len(w.buf) > 0 {
		if err := w.writeFile(w.buf); err != nil {
			// None of it is in the file (writeFile); what came before
			// the commit's records is written at the next try.
			if keep := len(w.buf) - cut; keep > 0 {
				w.unwritten = bytes.Clone(w.buf[:keep])
			}
			w.buf = w.buf[:0]
			return cut > 0, w.watch.setFault(err)
		}
		w.buf, wrote = w.buf[:0], true
	}
	if cut > 0 {
		// A commit's records are in the log only if the file written is
		// still the one at the path.
		if err := w.watch.verify(w.f); err != nil {
			return false, err
		}
	}
	if e := w.watch.fault.Load(); e != nil {
		if !wrote {
			return false, e // nothing proved the file can be written again
		}
		w.watch.recovered()
	}
	return false, nil
}

// append adds line to the batch and kicks the sink's goroutine. A batch
// that line would take past fileSinkBatch is handed to the goroutine
// first, or, when it has not yet taken the one before, both are written
// here; when that fails, line is not added and the fault is returned.
func (w *batchWriter) append(line []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 && len(w.buf)+len(line) > fileSinkBatch {
		if w.full == nil {
			next := w.spare
			if next == nil {
				next = make([]byte, 0, fileSinkBatch)
			}
			w.full, w.buf, w.spare = w.buf, next, nil
			select {
			case w.batch <- struct{}{}:
			default: // the goroutine has a signal it has not taken yet
			}
		} else if err := w.flushLocked(); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, line...)
	if !w.pending {
		w.pending = true
		select {
		case w.kick <- struct{}{}:
		default: // the goroutine has a kick it has not taken yet
		}
	}
	return nil
}
