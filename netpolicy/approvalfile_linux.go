//go:build linux

package netpolicy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// approvalsDir is the directory an approvals file lies in, open as an
// O_PATH descriptor: the file is read and replaced by name relative to
// it (openat, renameat), so that no symbolic link planted on the way
// after it was opened is followed.
type approvalsDir struct {
	path string // the file's path, as resolved when dir was opened
	dir  string // the directory's path then, without links
	name string // the file's name in it
	fd   int
	dev  uint64 // the directory's, to tell whether dir still leads to it
	ino  uint64
}

// openApprovalsDir resolves path (resolveApprovalsPath) and opens its
// directory, following no link on the way (openat2's
// RESOLVE_NO_SYMLINKS where the kernel has it; else O_NOFOLLOW for the
// last part of a path just resolved).
func openApprovalsDir(path string) (*approvalsDir, error) {
	dir, name, err := resolveApprovalsPath(path)
	if err != nil {
		return nil, err
	}
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = unix.Open(dir, flags|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("approvals file %s: opening its directory: %w", path, &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("approvals file %s: %w", path, &fs.PathError{Op: "fstat", Path: dir, Err: err})
	}
	return &approvalsDir{path: filepath.Join(dir, name), dir: dir, name: name, fd: fd, dev: st.Dev, ino: st.Ino}, nil
}

func (d *approvalsDir) close() { unix.Close(d.fd) }

// check refuses a directory no longer at its path: writes would go to a
// directory the user no longer finds there.
func (d *approvalsDir) check() error {
	var st unix.Stat_t
	switch err := unix.Stat(d.dir, &st); {
	case err != nil:
		return movedDirError(d.path, d.dir, "is gone ("+err.Error()+")")
	case st.Dev != d.dev || st.Ino != d.ino:
		return movedDirError(d.path, d.dir, "is not the directory it was (a link or another directory stands in its place)")
	}
	return nil
}

// read returns the file's contents and mode; none and 0644 when it does
// not exist. A symbolic link at its name, and a file that is not a
// regular file, are refused.
func (d *approvalsDir) read() ([]byte, fs.FileMode, error) {
	if err := d.check(); err != nil {
		return nil, 0, err
	}
	fd, err := unix.Openat(d.fd, d.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, 0o644, nil
	case errors.Is(err, unix.ELOOP):
		target := "?"
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(d.fd, d.name, buf); err == nil {
			target = strconv.Quote(string(buf[:n]))
		}
		return nil, 0, linkAtNameError(d.path, target)
	case err != nil:
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, &fs.PathError{Op: "open", Path: d.path, Err: err})
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file (%s), so no approved rule is written to it; give approvals a file of their own", d.path, fi.Mode().Type())
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	}
	return data, fi.Mode().Perm(), nil
}

// replace replaces the file with data: a new temporary file in the
// directory (made with O_EXCL|O_NOFOLLOW, mode 0600, then mode), written
// and synced, renamed over the name, and the directory synced. A link
// planted at the name meanwhile is replaced, never written through.
func (d *approvalsDir) replace(data []byte, mode fs.FileMode) (retErr error) {
	var (
		tmp string
		fd  int
		err error
	)
	for range 10 {
		tmp = "." + d.name + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		fd, err = unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", d.path, &fs.PathError{Op: "open", Path: filepath.Join(d.dir, tmp), Err: err})
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.dir, tmp))
	defer func() {
		if retErr != nil {
			f.Close()
			unix.Unlinkat(d.fd, tmp, 0)
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
	if err := unix.Renameat(d.fd, tmp, d.fd, d.name); err != nil {
		return fmt.Errorf("writing %s: %w", d.path, &os.LinkError{Op: "rename", Old: tmp, New: d.path, Err: err})
	}
	// The rename itself, kept across a crash.
	if dfd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		unix.Fsync(dfd)
		unix.Close(dfd)
	}
	return nil
}
