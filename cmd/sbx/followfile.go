package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// followPoll is how often a followed log file is looked at for new
// records, and for a new file at its path.
const followPoll = 100 * time.Millisecond

// fileFollower prints the records of a decision log file as they are
// written, as tail -F follows a file: to the end of the file, then what
// is added, and across rotation. The gateway's log is rotated by moving
// (or removing) the file: it then makes a new one at the path with its
// next record. The follower reads the old file to its end, then the new
// one from its start; a file cut shorter than what was read is read
// again from its start.
type fileFollower struct {
	path   string
	pr     *recordPrinter
	stderr io.Writer
	f      *os.File
	fi     os.FileInfo // of f, when it was opened
	off    int64       // bytes of f read
	part   []byte      // the start of a line whose newline is not written yet
	buf    []byte
}

// followFile prints the records of the log file at path, and those
// written to it after, until ctx is done (the user's interrupt: a normal
// end).
func followFile(ctx context.Context, path string, pr *recordPrinter, stderr io.Writer) error {
	ff := &fileFollower{path: path, pr: pr, stderr: stderr, buf: make([]byte, 64<<10)}
	if err := ff.open(); err != nil {
		return err
	}
	defer func() { ff.f.Close() }()
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		if err := ff.readNew(); err != nil {
			return err
		}
		if err := ff.checkPath(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// open opens the file at the path, to read from its start.
func (ff *fileFollower) open() error {
	f, err := openLog(ff.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is a %s, not a log file: --follow follows a regular file", ff.path, fileKind(fi.Mode()))
	}
	ff.f, ff.fi, ff.off, ff.part = f, fi, 0, nil
	return nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// readNew prints the whole lines written to the file since the last
// read; a line without its newline yet waits for it.
func (ff *fileFollower) readNew() error {
	for {
		n, err := ff.f.Read(ff.buf)
		ff.off += int64(n)
		if n > 0 {
			if perr := ff.printLines(ff.buf[:n]); perr != nil {
				return perr
			}
		}
		if errors.Is(err, io.EOF) || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", ff.path, err)
		}
	}
}

// printLines prints the records whose lines b ends, keeping the start of
// one it does not end.
func (ff *fileFollower) printLines(b []byte) error {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			ff.part = append(ff.part, b...)
			return nil
		}
		line := b[:i]
		if len(ff.part) > 0 {
			line = append(ff.part, line...)
			ff.part = ff.part[:0]
		}
		if err := ff.pr.show(line); err != nil {
			return fmt.Errorf("%s: %w", ff.path, err)
		}
		b = b[i+1:]
	}
}

// checkPath follows the path to a new file when the one being read was
// moved or removed and another is there, after the old one's last
// records; and reads the file again from its start when it was cut.
func (ff *fileFollower) checkPath() error {
	fi, err := os.Stat(ff.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // moved away, its successor not made yet: wait for it
	}
	if err != nil {
		return err
	}
	if os.SameFile(fi, ff.fi) {
		if fi.Size() < ff.off {
			fmt.Fprintf(ff.stderr, "sbx: %s was truncated; reading it from its start\n", ff.path)
			if _, err := ff.f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			ff.off, ff.part = 0, nil
		}
		return nil
	}
	// A new file: the old one's last records first.
	if err := ff.readNew(); err != nil {
		return err
	}
	if len(ff.part) > 0 {
		fmt.Fprintf(ff.stderr, "sbx: %s was rotated with an unfinished last line (%d bytes), left out\n", ff.path, len(ff.part))
	}
	old := ff.f
	if err := ff.open(); err != nil {
		ff.f = old
		if errors.Is(err, os.ErrNotExist) {
			return nil // gone again: look next time
		}
		return err
	}
	old.Close()
	fmt.Fprintf(ff.stderr, "sbx: %s was rotated; following the new file\n", ff.path)
	return nil
}
