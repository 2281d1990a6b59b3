//go:build linux

package approval

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/netpolicy"
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

// openApprovalsDir opens the directory of path, following no symbolic
// link on the way (openat2's RESOLVE_NO_SYMLINKS where the kernel has it;
// else one component at a time with O_NOFOLLOW). A path through a link is
// refused with ErrFileUntrusted, which names the link and the
// real path to give instead: a link there could be repointed.
func openApprovalsDir(path string) (*approvalsDir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("approvals file %s: %w", path, err)
	}
	dir, name := filepath.Dir(abs), filepath.Base(abs)
	if err := linkOnTheWay(abs); err != nil {
		return nil, err
	}
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = openDirNoFollow(dir)
	}
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		if lerr := linkOnTheWay(abs); lerr != nil {
			return nil, lerr // planted between the two looks
		}
		fallthrough
	case err != nil:
		err = &fs.PathError{Op: "open", Path: dir, Err: err}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("approvals file %s: its directory does not exist (make it before the run, or give another file): %w", path, err)
		}
		return nil, fmt.Errorf("approvals file %s: opening its directory: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("approvals file %s: %w", path, &fs.PathError{Op: "fstat", Path: dir, Err: err})
	}
	return &approvalsDir{path: abs, dir: dir, name: name, fd: fd, dev: st.Dev, ino: st.Ino}, nil
}

// linkOnTheWay refuses abs, an absolute path, when an entry on it (the
// file's own name included) is a symbolic link, naming the link and the
// path it leads to.
func linkOnTheWay(abs string) error {
	at := "/"
	for _, c := range strings.Split(abs, "/") {
		if c == "" {
			continue
		}
		at = filepath.Join(at, c)
		fi, err := os.Lstat(at)
		if err != nil {
			return nil // nothing below a missing entry; opening says so
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(abs)
			if err != nil {
				real = "its real path"
			}
			return untrustedFileError(abs, "reaching it goes through the symbolic link "+at+", which could be repointed to make sbx read or write another file",
				"give the file's real path ("+real+")")
		}
	}
	return nil
}

// openDirNoFollow opens the directory abs as an O_PATH descriptor one
// component at a time, refusing a symbolic link on the way (ELOOP or
// ENOTDIR), for kernels without openat2.
func openDirNoFollow(abs string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(abs, "/") {
		if c == "" {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
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
// not exist. A symbolic link at its name, a file that is not a regular
// file, and one checkApprovalsFileMode or MaxFileSize refuses,
// are refused; no more than MaxFileSize bytes are read.
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
	if err := checkApprovalsFileMode(d.path, fi.Sys().(*syscall.Stat_t).Uid, fi.Mode().Perm()); err != nil {
		return nil, 0, err
	}
	if fi.Size() > MaxFileSize {
		return nil, 0, tooLargeError(d.path, fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s to add an approved rule: %w", d.path, err)
	}
	if len(data) > MaxFileSize { // it grew meanwhile
		return nil, 0, tooLargeError(d.path, int64(len(data)))
	}
	return data, fi.Mode().Perm(), nil
}

// lock takes the advisory lock on the file: flock on ".NAME.lock" in its
// directory (made, mode 0600, when missing; never through a link), which
// every sbx process writing the file takes. It waits at most
// LockWait. unlock releases it.
func (d *approvalsDir) lock() (unlock func(), err error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	name := "." + d.name + ".lock"
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: opening its lock file: %w", d.path, &fs.PathError{Op: "open", Path: filepath.Join(d.dir, name), Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || !netpolicy.TrustedOwner(st.Uid) {
		unix.Close(fd)
		return nil, untrustedFileError(d.path, "its lock file "+filepath.Join(d.dir, name)+" is not a regular file of root or the user running sbx", "remove the lock file")
	}
	for deadline := time.Now().Add(LockWait); ; time.Sleep(20 * time.Millisecond) {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil // closing releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) || time.Now().After(deadline) {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: taking its lock %s: %w (another sbx process may be writing it); nothing was written, answer again", d.path, filepath.Join(d.dir, name), err)
		}
	}
}

// replace replaces the file with data: a new temporary file in the
// directory (made with O_EXCL|O_NOFOLLOW, mode 0600, then mode), written
// and synced, renamed over the name, and the directory synced. A link
// planted at the name meanwhile is replaced, never written through; the
// name is checked to be the file written afterwards.
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
	var written unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &written); err != nil {
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
	// The file's path still leads to the file written.
	var now unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, d.path, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != written.Dev || now.Ino != written.Ino {
		return fmt.Errorf("%s: %w: the rule was written, but the path no longer leads to the file written (something replaced it, or a directory on the way, meanwhile); check the file", d.path, ErrPathChanged)
	}
	return nil
}
