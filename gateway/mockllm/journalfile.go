package mockllm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// JournalSink keeps a Responder's journal elsewhere too (Responder.Journal):
// it is told of each request journaled, its entry's Body included, and of
// each Reset. Its methods are called in the journal's order with the
// Responder's lock held: they must not call the Responder.
type JournalSink interface {
	Journaled(j Journaled)
	Reset()
}

// JournalLine is a line of a journal file (JournalFile): an entry of a
// mock's journal, or the mark that the mock's journal starts here.
type JournalLine struct {
	// Host is the mocked host's name, or Script the name of the script
	// the mock answers with, as a policy names it: one is set. Mock names
	// the mock in words: the host, or "script NAME".
	Host string `json:"host,omitempty"`
	Mock string `json:"mock"`
	// Script is as Host says.
	Script string `json:"script,omitempty"`
	// Start says the mock's journal starts here, empty: what came before
	// of it is gone. A JournalFile writes such a line for each mock when
	// it is told of the mock (Sink), at each Reset, and when it compacts
	// the file. The line has no other field.
	Start bool `json:"start,omitempty"`
	// Journaled is the entry, with the fields of the management API's
	// journal; nil on a start line.
	*Journaled
}

// Bounds of a journal file: a JournalFile compacts its file when it holds
// more lines or bytes than these.
const (
	journalFileLines = 2 * MaxJournalEntries
	journalFileBytes = 2 * maxJournalBytes
	// maxJournalLine bounds a line ReadJournal takes: a body of
	// MaxJournalBody bytes written as a JSON string of \u escapes, and
	// room for the rest.
	maxJournalLine = 6*MaxJournalBody + 64<<10
)

// JournalFile writes the journals of one or more Responders to a file as
// the requests arrive, one JournalLine of JSON a line, so that what the
// agent sent outlives the Responders, and a crash loses no request that
// was answered: each line is written before the request's answer is sent.
// Its bounds are those of a Responder's journal, in all: when the file
// holds more than 2000 lines or 128 MiB it is compacted to its latest
// MaxJournalEntries lines within 64 MiB (a new file takes its place at its
// path, written whole first). Bodies are cut as the journal cuts them
// (MaxJournalBody).
//
// A JournalFile is safe for concurrent use. The first error it meets
// writing the file ends its writing (what follows is in the Responders'
// memory only); Err and Close return it.
type JournalFile struct {
	mu   sync.Mutex
	f    *os.File
	path string
	// starts are the start lines of the mocks (Sink), written first
	// again when the file is compacted.
	starts [][]byte
	// sizes are the sizes of the lines written since the file was opened
	// or last compacted, oldest first, and bytes their sum.
	sizes []int
	bytes int64
	// maxLines and maxBytes are the file's bounds (journalFileLines and
	// journalFileBytes; tests lower them).
	maxLines int
	maxBytes int64
	err      error
	closed   bool
}

// NewJournalFile returns a JournalFile that writes to f, a file open for
// writing at its end whose name (f.Name()) is its path: the caller opens
// it as safely as it must (sbx opens it as it opens the decision log).
// What f held before is left as it is. The JournalFile owns f from here:
// Close closes it.
func NewJournalFile(f *os.File) *JournalFile {
	return &JournalFile{f: f, path: f.Name(), maxLines: journalFileLines, maxBytes: journalFileBytes}
}

// Name returns the file's path.
func (jf *JournalFile) Name() string { return jf.path }

// Sink returns what a Responder's Journal is set to, to keep its journal
// in the file under the name host, mock and script (as JournalLine says),
// and writes the mock's start line.
func (jf *JournalFile) Sink(host, mock, script string) JournalSink {
	s := &journalFileSink{jf: jf, host: host, mock: mock, script: script}
	line, err := s.line(nil)
	jf.mu.Lock()
	defer jf.mu.Unlock()
	if err == nil {
		jf.starts = append(jf.starts, line)
	}
	jf.write(line, err)
	return s
}

// Err returns the error that ended the file's writing, or nil.
func (jf *JournalFile) Err() error {
	jf.mu.Lock()
	defer jf.mu.Unlock()
	return jf.err
}

// Close closes the file; later entries are not written. It returns the
// error that ended the writing, or that of closing the file.
func (jf *JournalFile) Close() error {
	jf.mu.Lock()
	defer jf.mu.Unlock()
	if jf.closed {
		return jf.err
	}
	jf.closed = true
	err := jf.f.Close()
	if jf.err == nil && err != nil {
		jf.err = fmt.Errorf("mock journal %s: %w", jf.path, err)
	}
	return jf.err
}

// write appends line (with its newline) to the file, and compacts it
// past its bounds; encErr, when not nil, is why the line could not be
// made, and ends the writing as a failed write does. jf.mu is held.
func (jf *JournalFile) write(line []byte, encErr error) {
	if jf.closed || jf.err != nil {
		return
	}
	if encErr != nil {
		jf.err = fmt.Errorf("mock journal %s: encoding a line: %w; from then on the journal was kept in memory only", jf.path, encErr)
		return
	}
	if _, err := jf.f.Write(line); err != nil {
		jf.err = fmt.Errorf("mock journal %s: %w; from then on the journal was kept in memory only", jf.path, err)
		return
	}
	jf.sizes = append(jf.sizes, len(line))
	jf.bytes += int64(len(line))
	if len(jf.sizes) > jf.maxLines || jf.bytes > jf.maxBytes {
		if err := jf.compact(); err != nil {
			jf.err = fmt.Errorf("mock journal %s: compacting it: %w; from then on the journal was kept in memory only", jf.path, err)
		}
	}
}

// compact puts in place of the file a new one that holds the mocks'
// start lines, then the latest lines, at most half the bounds. The new
// file is written whole, then renamed over the old one. jf.mu is held.
func (jf *JournalFile) compact() (retErr error) {
	keep, kept := 0, int64(0)
	for i := len(jf.sizes) - 1; i >= 0 && keep < jf.maxLines/2; i-- {
		if keep > 0 && kept+int64(jf.sizes[i]) > jf.maxBytes/2 {
			break
		}
		keep++
		kept += int64(jf.sizes[i])
	}
	wfi, err := jf.f.Stat()
	if err != nil {
		return err
	}
	// The file is read through its path, which must still name it.
	old, err := os.Open(jf.path)
	if err != nil {
		return err
	}
	defer old.Close()
	if ofi, err := old.Stat(); err != nil {
		return err
	} else if !os.SameFile(wfi, ofi) {
		return errors.New("another file took its place")
	}
	tmp, err := os.CreateTemp(filepath.Dir(jf.path), "."+filepath.Base(jf.path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var sizes []int
	var total int64
	for _, s := range jf.starts {
		if _, err := tmp.Write(s); err != nil {
			return err
		}
		sizes = append(sizes, len(s))
		total += int64(len(s))
	}
	if _, err := io.Copy(tmp, io.NewSectionReader(old, wfi.Size()-kept, kept)); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), jf.path); err != nil {
		return err
	}
	jf.f.Close()
	jf.f = tmp
	jf.sizes = append(sizes, jf.sizes[len(jf.sizes)-keep:]...)
	jf.bytes = total + kept
	return nil
}

// journalFileSink is a mock's JournalSink in a JournalFile.
type journalFileSink struct {
	jf                 *JournalFile
	host, mock, script string
}

// line is the mock's line of j, or its start line for nil, with its
// newline.
func (s *journalFileSink) line(j *Journaled) ([]byte, error) {
	l := JournalLine{Host: s.host, Mock: s.mock, Script: s.script, Start: j == nil, Journaled: j}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(l)
	return b.Bytes(), err
}

func (s *journalFileSink) Journaled(j Journaled) {
	line, err := s.line(&j)
	s.jf.mu.Lock()
	defer s.jf.mu.Unlock()
	s.jf.write(line, err)
}

func (s *journalFileSink) Reset() {
	line, err := s.line(nil)
	s.jf.mu.Lock()
	defer s.jf.mu.Unlock()
	s.jf.write(line, err)
}

// JournalMock is a mock's journal as a journal file holds it.
type JournalMock struct {
	// Host, Mock and Script name the mock, as JournalLine's.
	Host, Mock, Script string
	// Requests are the latest requests since the mock's last start line,
	// oldest first, bounded as a Responder's journal is.
	Requests []Journaled
	bytes    int
}

// ReadJournal reads a journal file that a JournalFile wrote: the journal
// of each mock it names, in the order the file first names them, each
// from its last start line on and within a Responder's bounds. A line that
// is not a JournalLine is an error naming it, but for a last line without
// its newline (a write cut short by a crash), which is left out.
func ReadJournal(r io.Reader) ([]*JournalMock, error) {
	var mocks []*JournalMock
	byKey := map[[2]string]*JournalMock{}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, complete, err := readJournalLine(br)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(line) == 0 && !complete {
			break // the end
		}
		var l JournalLine
		if err := json.Unmarshal(line, &l); err != nil || l.Host == "" && l.Script == "" || !l.Start && l.Journaled == nil {
			if !complete {
				break // cut short
			}
			if err == nil {
				err = errors.New("it names no mock, or holds no request")
			}
			return nil, fmt.Errorf("line %d is not a line of a mock journal: %w", n, err)
		}
		key := [2]string{l.Host, l.Script}
		m := byKey[key]
		if m == nil {
			m = &JournalMock{Host: l.Host, Mock: l.Mock, Script: l.Script}
			byKey[key] = m
			mocks = append(mocks, m)
		}
		if l.Start {
			m.Requests, m.bytes = nil, 0
			continue
		}
		m.Requests = append(m.Requests, *l.Journaled)
		m.bytes += len(l.Journaled.Body)
		if len(m.Requests) > 2*MaxJournalEntries || m.bytes > 2*maxJournalBytes {
			m.Requests, m.bytes = trimJournal(m.Requests, m.bytes)
		}
	}
	for _, m := range mocks {
		m.Requests, m.bytes = trimJournal(m.Requests, m.bytes)
	}
	return mocks, nil
}

// readJournalLine reads a line of at most maxJournalLine bytes, without
// its newline; complete says it had one. At the end it returns no bytes
// and false.
func readJournalLine(br *bufio.Reader) (line []byte, complete bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case len(line) > maxJournalLine:
			return nil, false, fmt.Errorf("longer than %d bytes", maxJournalLine)
		case err == nil:
			return line[:len(line)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return line, false, nil
		default:
			return nil, false, err
		}
	}
}
