//go:build !linux

package approval

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// approvalsDir is the directory an approvals file lies in, by path:
// outside Linux, where sbx runs no sandbox, the file is checked by path
// (a link at its name is refused, its directory must be the one resolved)
// and not through a descriptor, so a change between the check and the
// write is not caught.
type approvalsDir struct {
	path string // the file's path, as resolved
	dir  string
	name string
	fi   fs.FileInfo // the directory's
}

// openApprovalsDir resolves path (resolveApprovalsPath).
func openApprovalsDir(path string) (*approvalsDir, error) {
	dir, name, err := resolveApprovalsPath(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("approvals file %s: %w", path, err)
	}
	return &approvalsDir{path: filepath.Join(dir, name), dir: dir, name: name, fi: fi}, nil
}

func (d *approvalsDir) close() {}

// lock takes the advisory lock on the file (lockFile), waiting at most
// LockWait.
func (d *approvalsDir) lock() (unlock func(), err error) {
	return lockFile(d.path, filepath.Join(d.dir, "."+d.name+".lock"))
}

// read returns the file's contents and mode; none and 0644 when it does
// not exist. A symbolic link at its name, a directory that is no longer
// the one resolved, and a file that is not a regular file are refused.
func (d *approvalsDir) read() ([]byte, fs.FileMode, error) {
	switch fi, err := os.Stat(d.dir); {
	case err != nil:
		return nil, 0, movedDirError(d.path, d.dir, "is gone ("+err.Error()+")")
	case !os.SameFile(fi, d.fi):
		return nil, 0, movedDirError(d.path, d.dir, "is not the directory it was (a link or another directory stands in its place)")
	}
	fi, err := os.Lstat(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 0o644, nil
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(d.path)
		return nil, 0, linkAtNameError(d.path, strconv.Quote(target))
	case !fi.Mode().IsRegular():
		return nil, 0, fmt.Errorf("%s is not a regular file (%s), so no approved rule is written to it; give approvals a file of their own", d.path, fi.Mode().Type())
	}
	if uid, ok := fileOwner(fi); ok {
		if err := checkApprovalsFileMode(d.path, uid, fi.Mode().Perm()); err != nil {
			return nil, 0, err
		}
	}
	if fi.Size() > MaxFileSize {
		return nil, 0, tooLargeError(d.path, fi.Size())
	}
	f, err := os.Open(d.path)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	}
	if len(data) > MaxFileSize {
		return nil, 0, tooLargeError(d.path, int64(len(data)))
	}
	return data, fi.Mode().Perm(), nil
}

// replace replaces the file with data: a temporary file in the same
// directory, written, synced and renamed over it.
func (d *approvalsDir) replace(data []byte, mode fs.FileMode) (retErr error) {
	f, err := os.CreateTemp(d.dir, "."+d.name+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := os.Rename(f.Name(), d.path); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	return nil
}
