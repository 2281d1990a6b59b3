package decisionlog

import (
	"fmt"
	"io"
	"sync"
)

// WriterSink writes a Log's records to an io.Writer, each record as it
// comes with one Write of its line (the bytes a FileSink writes for it),
// buffering nothing: sbx gateway --log - writes the log so to standard
// output, where a reader that follows it (kubectl logs -f) sees every
// record at once. It has no budget: whatever reads the writer bounds it.
// Close does not close the writer.
type WriterSink struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

// NewWriterSink returns a sink that writes to w.
func NewWriterSink(w io.Writer) *WriterSink { return &WriterSink{w: w} }

// WriteRecord writes line to the writer.
func (s *WriterSink) WriteRecord(seq uint64, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSinkClosed
	}
	if _, err := s.w.Write(line); err != nil {
		return fmt.Errorf("writing decision record %d: %w", seq, err)
	}
	return nil
}

// Flush does nothing: every record was written when it came.
func (s *WriterSink) Flush() error { return nil }

// Close ends the sink's writes; the writer stays open.
func (s *WriterSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
