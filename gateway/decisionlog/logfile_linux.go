package decisionlog

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openLogFile opens the decision log (or what, another file kept as the
// log is: see OpenFile) at path for appending, creating it
// with mode 0600 when missing, and returns it with its size. It does not
// follow a symbolic link at path and does not block on a named pipe or a
// device there (O_NOFOLLOW, O_NONBLOCK); it checks what it opened, not
// what a name pointed to a moment before, and refuses anything but a
// regular file of the effective uid with one link with an
// *UnsafeLogFileError. The file it returns is in blocking mode.
func openLogFile(path, what string) (*os.File, int64, error) {
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK |
		unix.O_NOCTTY | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	for err == unix.EINTR {
		fd, err = unix.Open(path, flags, 0o600)
	}
	if err != nil {
		return nil, 0, openLogFileError(path, what, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s %s: %w", what, path, &os.PathError{Op: "fstat", Path: path, Err: err})
	}
	euid := os.Geteuid()
	if t := fileType(st.Mode); t != 0 || int(st.Uid) != euid || st.Nlink != 1 {
		unix.Close(fd)
		e := &UnsafeLogFileError{Path: path, File: what, Type: t, EUID: euid}
		if t == 0 {
			e.UID, e.Links = int(st.Uid), uint64(st.Nlink)
		}
		return nil, 0, e
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s %s: %w", what, path, &os.PathError{Op: "fcntl", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), st.Size, nil
}

// openLogFileError words the error of opening the file at path (what it
// is: the decision log, or another).
// ELOOP from O_NOFOLLOW means a symbolic link is there. ENXIO comes from
// a named pipe nobody reads, a socket, or a device without a driver;
// Lstat tells which.
func openLogFileError(path, what string, err error) error {
	switch err {
	case unix.ELOOP:
		return &UnsafeLogFileError{Path: path, File: what, Type: os.ModeSymlink, EUID: os.Geteuid()}
	case unix.EISDIR:
		return &UnsafeLogFileError{Path: path, File: what, Type: os.ModeDir, EUID: os.Geteuid()}
	case unix.ENXIO:
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode().Type() != 0 {
			return &UnsafeLogFileError{Path: path, File: what, Type: fi.Mode().Type(), EUID: os.Geteuid()}
		}
	}
	return fmt.Errorf("%s %s: %w", what, path, &os.PathError{Op: "open", Path: path, Err: err})
}

// fileType returns the os.FileMode type bits of a stat mode.
func fileType(mode uint32) os.FileMode {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return os.ModeDir
	case unix.S_IFLNK:
		return os.ModeSymlink
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	case unix.S_IFSOCK:
		return os.ModeSocket
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		return os.ModeDevice
	default:
		return os.ModeIrregular
	}
}

// fileID returns the device and inode of f.
func fileID(f *os.File) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return uint64(st.Dev), st.Ino, nil
}

// fileGone returns an error wrapping ErrLogFileRemoved when f, the log
// file opened at path as the file dev and ino, has no name any more or
// none at path, and one wrapping ErrLogFileReplaced when path names
// another file; nil while f is the file at path. Both look at the inode
// (fstat, and lstat of path), which costs two system calls and no I/O.
func fileGone(f *os.File, path string, dev, ino uint64) error {
	var st unix.Stat_t
	switch err := unix.Lstat(path, &st); {
	case err == unix.ENOENT || err == unix.ENOTDIR:
		return ErrLogFileRemoved
	case err != nil:
		// Cannot tell by the path: the file's own link count may.
	case uint64(st.Dev) != dev || st.Ino != ino:
		return ErrLogFileReplaced
	}
	if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Nlink == 0 {
		return ErrLogFileRemoved
	}
	return nil
}

// createLogFile makes a new, empty log file at path with mode 0600, for
// a FileSink whose file vanished (see reopen). It never opens what is
// there (O_EXCL: an error wrapping os.ErrExist), and does not follow a
// symbolic link.
func createLogFile(path string) (*os.File, error) {
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	for err == unix.EINTR {
		fd, err = unix.Open(path, flags, 0o600)
	}
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
