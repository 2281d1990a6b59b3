package decisionlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A pathWatch tells a FileSink's watcher, by one system call that looks
// nothing up (epoll_wait with no timeout), whether anything happened
// since it last looked that could have taken the log file from its path;
// only then does the watcher stat the path. It watches, with inotify, the
// file itself (its links changed: removed, or another file renamed over
// it; moved; exchanged) and every directory on the path (moved,
// exchanged or removed), and the mount table (a mount over the path makes
// no inotify event). A name on the path can name another inode only
// after one of these: an entry is removed or renamed over (the inode it
// named loses a link, or must be an empty directory, which no directory
// of the path is), or moved or exchanged (the inode is moved). So the
// directories' other entries, which change all the time in a directory
// such as /tmp, need no watching. The kernel queues these events before
// the system call that caused them returns, so a change made before a
// commit is seen by the commit's look. Its methods are called with the
// watcher's lock held.
type pathWatch struct {
	ep     int // epoll over in and mounts
	in     int // the inotify instance
	mounts int // /proc/self/mountinfo: pollable, ready when the mount table changed
	events [2]unix.EpollEvent
	buf    []byte
}

// The events a pathWatch asks for: a directory of the path moved or
// removed; the file's links changed (IN_ATTRIB), the file moved, or gone.
const (
	pathWatchDir  = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	pathWatchFile = unix.IN_ATTRIB | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF
)

// newPathWatch watches f, the file opened at path, which must be
// absolute and clean, with no symbolic link among its directories (a
// link's target can change with no event where the watch looks). It
// watches the inodes it walks through from the root, opened one below the
// other, and then checks that each is still at its name in the one above
// and that the path ends at f: a change before that check fails it, one
// after it is an event.
func newPathWatch(path string, f *os.File) (_ *pathWatch, retErr error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return nil, fmt.Errorf("watching %s: not an absolute, clean path", path)
	}
	pw := &pathWatch{ep: -1, in: -1, mounts: -1, buf: make([]byte, 4096)}
	defer func() {
		if retErr != nil {
			pw.close()
		}
	}()
	var err error
	if pw.in, err = unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err != nil {
		return nil, fmt.Errorf("watching %s: inotify_init1: %w", path, err)
	}
	// The directories below the root, opened one in the other without
	// following a symbolic link, each watched through its descriptor.
	names := strings.Split(path[1:], "/")
	dirs := make([]int, 0, len(names))
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	dirs = append(dirs, root)
	for _, name := range names[:len(names)-1] {
		fd, err := unix.Openat(dirs[len(dirs)-1], name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("watching %s: %s: %w", path, name, err)
		}
		dirs = append(dirs, fd)
		if err := pw.watch(fd, pathWatchDir); err != nil {
			return nil, fmt.Errorf("watching %s: %w", path, err)
		}
	}
	if err := pw.watch(int(f.Fd()), pathWatchFile); err != nil {
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	if pw.mounts, err = unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("watching %s: the mount table: %w", path, err)
	}
	if pw.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("watching %s: epoll_create1: %w", path, err)
	}
	for _, add := range []struct {
		fd     int
		events uint32
	}{{pw.in, unix.EPOLLIN}, {pw.mounts, unix.EPOLLPRI}} {
		if err := unix.EpollCtl(pw.ep, unix.EPOLL_CTL_ADD, add.fd, &unix.EpollEvent{Events: add.events, Fd: int32(add.fd)}); err != nil {
			return nil, fmt.Errorf("watching %s: epoll_ctl: %w", path, err)
		}
	}
	pw.quiet() // takes in what the setting up caused
	if err := onPath(dirs, names, f); err != nil {
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	return pw, nil
}

// watch watches the inode open as fd for events.
func (pw *pathWatch) watch(fd int, events uint32) error {
	_, err := unix.InotifyAddWatch(pw.in, "/proc/self/fd/"+strconv.Itoa(fd), events)
	return err
}

// onPath checks that each of dirs (the root, then a directory open in
// the one before) is still the inode at its name in the one before, and
// that the last name in the last one is f.
func onPath(dirs []int, names []string, f *os.File) error {
	var want, got unix.Stat_t
	for i, name := range names {
		if i < len(dirs)-1 {
			if err := unix.Fstat(dirs[i+1], &want); err != nil {
				return err
			}
		} else if err := unix.Fstat(int(f.Fd()), &want); err != nil {
			return err
		}
		if err := unix.Fstatat(dirs[i], name, &got, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if got.Dev != want.Dev || got.Ino != want.Ino {
			return errors.New("the path changed while it was being watched")
		}
	}
	return nil
}

// quiet reports whether nothing happened since the last call that could
// have taken the file from its path. It reads what happened, so a change
// is reported once: the caller stats the path when it returns false.
func (pw *pathWatch) quiet() bool {
	n, err := unix.EpollWait(pw.ep, pw.events[:], 0)
	if err != nil {
		return false // EINTR: look at the path
	}
	if n == 0 {
		return true
	}
	// The mount table's change was taken in by polling it; inotify's
	// events are read, every one of them a change that may have taken
	// the file from its path.
	for {
		if m, err := unix.Read(pw.in, pw.buf); err != nil || m <= 0 {
			return false // EAGAIN: all read
		}
	}
}

// close releases what the watch holds.
func (pw *pathWatch) close() {
	for _, fd := range []int{pw.ep, pw.in, pw.mounts} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	pw.ep, pw.in, pw.mounts = -1, -1, -1
}
