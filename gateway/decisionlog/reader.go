package decisionlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxLineBytes is the longest line a Reader takes. The gateway's records
// are far shorter (hosts, paths and reasons are bounded); a longer line is
// not a decision record.
const MaxLineBytes = 1 << 20

// ErrTruncated is wrapped by the LineError of a log's last line when that
// line ends without a newline and is not a whole record: the log is still
// being written, or its writer stopped in the middle of a record. A
// reader can take the records before it and say the log is incomplete.
var ErrTruncated = errors.New("the last line ends without a newline and is not a whole record")

// A LineError is a line of a log that is not a decision record.
type LineError struct {
	Name string // the log's name, as given to NewReader
	Line int    // 1 for the first line
	Err  error
}

func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: not a decision record: %v", e.Name, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// A Reader reads a decision log one record at a time, streaming: it holds
// one line in memory, however long the log. Empty lines are skipped. Make
// one with NewReader.
type Reader struct {
	name string
	br   *bufio.Reader
	line int
	dec  Decoder
	raw  []byte // the last line read, without its newline
	// unended says the last line read had no newline: the log's end.
	unended bool
	err     error
}

// NewReader returns a Reader of r, whose errors name it name (a file
// name, or "standard input").
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{name: name, br: bufio.NewReaderSize(r, 256<<10)}
}

// Name returns the name the Reader was made with.
func (r *Reader) Name() string { return r.name }

// Line returns the number of the line the last record came from.
func (r *Reader) Line() int { return r.line }

// Raw returns the last record's line as read, without its newline; it is
// valid until the next call of Next.
func (r *Reader) Raw() []byte { return r.raw }

// Next decodes the next record into rec. It returns io.EOF at the end of
// the log, a *LineError for a line that is not a record (and then
// nothing more), or the underlying reader's error. A last line without a
// newline is read like any other; when it is not a record, its LineError
// wraps ErrTruncated.
func (r *Reader) Next(rec *Record) error {
	for r.err == nil {
		line, err := r.readLine()
		if err != nil {
			r.err = err
			break
		}
		r.line++
		r.raw = line
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := r.dec.Decode(line, rec); err != nil {
			if r.unended && !errors.Is(err, ErrNewerVersion) {
				err = fmt.Errorf("%w (%v)", ErrTruncated, err)
			}
			r.err = &LineError{Name: r.name, Line: r.line, Err: err}
			break
		}
		return nil
	}
	return r.err
}

// readLine returns the next line without its newline, io.EOF after the
// last.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: gather it, up to MaxLineBytes.
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = r.br.ReadSlice('\n')
			long = append(long, line...)
			if len(long) > MaxLineBytes {
				return nil, &LineError{Name: r.name, Line: r.line + 1, Err: fmt.Errorf("line longer than %d bytes", MaxLineBytes)}
			}
		}
		line = long
	}
	if err == io.EOF {
		if len(line) == 0 {
			return nil, io.EOF
		}
		r.unended = true
		return line, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.name, err)
	}
	return line[:len(line)-1], nil
}
