package run

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// Recording asks for the exchanges with an LLM API to be recorded: the
// gateway lets requests to Host through (inspected, under the policy) and
// records what it answered, and Close writes the script to Path, for a
// mock to replay.
type Recording struct {
	// Host is the API's host, normalized (netpolicy.NormalizeHost).
	Host string
	// Path is the script's file; its directory must exist.
	Path string
}

// A RecordingError is a recording that could not be written.
type RecordingError struct {
	Host, Path string
	Err        error
}

func (e *RecordingError) Error() string {
	return "recording of " + e.Host + ": " + e.Err.Error()
}

func (e *RecordingError) Unwrap() error { return e.Err }

// recording is a Recording and its recorder.
type recording struct {
	Recording
	rec *mockllm.Recorder
}

// newRecordings makes a recorder for each of rs.
func newRecordings(rs []Recording) []recording {
	out := make([]recording, 0, len(rs))
	for _, r := range rs {
		out = append(out, recording{Recording: r, rec: mockllm.NewRecorder(nil)})
	}
	return out
}

// recorders is the gateway's view of recordings.
func recorders(rs []recording) map[string]*mockllm.Recorder {
	if len(rs) == 0 {
		return nil
	}
	m := make(map[string]*mockllm.Recorder, len(rs))
	for _, r := range rs {
		m[r.Host] = r.rec
	}
	return m
}

// writeRecordings writes each recording's script, whole or not at all (a
// temporary file renamed over it), and notes each it wrote. The errors
// are *RecordingError values.
func writeRecordings(rs []recording, note func(Note)) []error {
	var errs []error
	for _, r := range rs {
		var b bytes.Buffer
		turns := r.rec.Turns()
		err := mockllm.WriteScript(&b, turns)
		if err == nil {
			err = WriteFile(r.Path, b.Bytes())
		}
		if err != nil {
			errs = append(errs, &RecordingError{Host: r.Host, Path: r.Path, Err: err})
			continue
		}
		note(Recorded{Host: r.Host, Path: r.Path, Exchanges: len(turns)})
	}
	return errs
}

// WriteFile writes data to path, a file the user named for output (a
// recorded script, a report): a new path or an existing regular file
// through a temporary file renamed over it, so that path is never half
// written (an existing file keeps its permissions, a new one is 0644); a
// named pipe or a character device (such as /dev/stdout) directly,
// without creating or renaming anything. A symbolic link (the real path
// is asked for, so that no link in the output's directory decides where
// the data goes), a directory or anything else is refused with an
// *OutputPathError.
func WriteFile(path string, data []byte) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return replaceFile(path, data, 0o644)
	case err != nil:
		return fmt.Errorf("writing %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return &OutputPathError{Path: path, Is: "a symbolic link", Fix: "give the path of the file itself"}
	case fi.Mode().IsRegular():
		return replaceFile(path, data, fi.Mode().Perm())
	case isPipeOrCharDevice(fi.Mode()):
		return writeDirect(path, data)
	case fi.IsDir():
		return &OutputPathError{Path: path, Is: "a directory", Fix: "give a file name"}
	}
	return &OutputPathError{Path: path, Is: "not a regular file, a named pipe or a character device", Fix: "give a file name"}
}

// OutputPathError is WriteFile's refusal of what is at Path.
type OutputPathError struct {
	Path string
	Is   string // what is there: "a symbolic link", "a directory", ...
	Fix  string
}

func (e *OutputPathError) Error() string { return e.Path + " is " + e.Is + ": " + e.Fix }

func isPipeOrCharDevice(m fs.FileMode) bool {
	return m.Type() == fs.ModeNamedPipe || m.Type() == fs.ModeDevice|fs.ModeCharDevice
}

// replaceFile writes data to a temporary file in path's directory and
// renames it over path, with permissions perm.
func replaceFile(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeDirect writes data to the named pipe or character device at path,
// which it opens without following a link and checks again once open.
func writeDirect(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !isPipeOrCharDevice(fi.Mode()) {
		f.Close()
		return fmt.Errorf("writing %s: it changed while sbx opened it; try again", path)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
