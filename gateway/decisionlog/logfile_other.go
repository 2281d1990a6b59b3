//go:build !linux

package decisionlog

import (
	"errors"
	"fmt"
	"os"
)

// openLogFile is not implemented outside Linux: the checks that keep a
// sandbox from redirecting or hanging the decision log need O_NOFOLLOW,
// O_NONBLOCK and fstat's owner and link count, as written for Linux.
func openLogFile(path, what string) (*os.File, int64, error) {
	return nil, 0, fmt.Errorf("%s %s: %w", what, path, errors.ErrUnsupported)
}

// fileID is not implemented outside Linux, where no FileSink is opened.
func fileID(f *os.File) (dev, ino uint64, err error) { return 0, 0, errors.ErrUnsupported }

// fileGone is not implemented outside Linux, where no FileSink is opened.
func fileGone(f *os.File, path string, dev, ino uint64) error { return nil }

// createLogFile is not implemented outside Linux, where no FileSink is
// opened.
func createLogFile(path string) (*os.File, error) {
	return nil, fmt.Errorf("decision log %s: %w", path, errors.ErrUnsupported)
}

// A pathWatch is not implemented outside Linux, where no FileSink is
// opened.
type pathWatch struct{}

// newPathWatch is not implemented outside Linux.
func newPathWatch(path string, f *os.File) (*pathWatch, error) { return nil, errors.ErrUnsupported }

func (pw *pathWatch) quiet() bool { return false }
func (pw *pathWatch) close()      {}
