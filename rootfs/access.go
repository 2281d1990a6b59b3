package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Exit codes of a command that cannot be started, as a shell gives them.
const (
	ExitCannotExecute = 126
	ExitNotFound      = 127
)

// AccessError says why a command cannot start in a layout: a directory on
// the way that its user cannot enter, a file it cannot execute, or a
// command that is nowhere on its PATH.
type AccessError struct {
	// Code is the shell's exit code for it: ExitCannotExecute or
	// ExitNotFound.
	Code int
	// Op is what failed: "enter" (a directory), "execute" (a file) or
	// "find" (a command not on PATH, or a path that does not exist).
	Op string
	// Path is the path in the sandbox: the directory or file, or for
	// "find" the command as given.
	Path string
	// Source is where Path is on the host, "" for "find".
	Source string
	// UID and GID are the command's user and group.
	UID, GID uint32
	// Mode, Owner and Group are Source's, for "enter" and "execute".
	Mode         fs.FileMode
	Owner, Group uint32
	// SearchPath is the PATH that was searched, for "find" of a bare
	// name.
	SearchPath string
	// Hint, when set, says where the command is outside the sandbox and
	// how to show it.
	Hint string
}

func (e *AccessError) Error() string {
	if e.Hint != "" {
		return e.message() + "; " + e.Hint
	}
	return e.message()
}

func (e *AccessError) message() string {
	switch e.Op {
	case "find":
		if e.SearchPath != "" {
			return fmt.Sprintf("%s: not found in the sandbox's PATH (%s)", e.Path, e.SearchPath)
		}
		return fmt.Sprintf("%s: no such file in the sandbox", e.Path)
	default:
		return fmt.Sprintf("uid %d cannot %s %s in the sandbox (%s, %v, owner %d:%d)", e.UID, e.Op, e.Path, e.Source, e.Mode, e.Owner, e.Group)
	}
}

// errUnknown says that a path leads where the layout cannot tell what the
// container will see: a fresh tmpfs, /proc, /dev, /sys, a masked path, or
// an image's root.
var errUnknown = errors.New("not known before the container starts")

// CheckCommand reports, before the container starts, whether argv0 can be
// started in l by uid:gid with no capability that overrides file
// permissions, from the working directory cwd ("" is /) with searchPath
// as PATH: every directory on the way must be enterable, and the command
// found and executable. It returns an *AccessError when it cannot, and
// nil when it can or when l cannot tell (a path on a fresh tmpfs, in
// /proc or /dev, or masked): the runtime has the last word. Its checks
// are those of the kernel's permission bits, for a process with no
// supplementary groups, which is how a layout's command runs.
func (l Layout) CheckCommand(uid, gid uint32, cwd, argv0, searchPath string) error {
	if l.Root == "" {
		return nil
	}
	c := checker{l: l, uid: uid, gid: gid}
	if err := c.enter("/"); err != nil {
		return c.result(err)
	}
	if cwd == "" {
		cwd = "/"
	}
	if err := c.walk(cwd, true); err != nil {
		return c.result(err)
	}
	if argv0 == "" {
		return nil
	}
	if strings.Contains(argv0, "/") {
		p := argv0
		if !path.IsAbs(p) {
			p = path.Join(cwd, p)
		}
		return c.result(c.exec(p, argv0))
	}
	var denied error
	for _, dir := range filepath.SplitList(searchPath) {
		if dir == "" {
			dir = "."
		}
		if !path.IsAbs(dir) {
			dir = path.Join(cwd, dir)
		}
		err := c.exec(path.Join(dir, argv0), argv0)
		var ae *AccessError
		switch {
		case err == nil, errors.Is(err, errUnknown):
			return nil
		case errors.As(err, &ae) && ae.Op == "find":
			continue // execvp goes on to the next directory
		case denied == nil:
			denied = err // and remembers the first refusal
		}
	}
	if denied != nil {
		return c.result(denied)
	}
	return &AccessError{Code: ExitNotFound, Op: "find", Path: argv0, UID: uid, GID: gid, SearchPath: searchPath}
}

// checker walks paths of the container through a layout.
type checker struct {
	l        Layout
	uid, gid uint32
}

// result turns errUnknown into nil: what cannot be told is not refused.
func (c checker) result(err error) error {
	if errors.Is(err, errUnknown) {
		return nil
	}
	return err
}

// exec checks that p, a path in the container, is a file the user may
// execute, and every directory on the way one it may enter. argv0 names
// the command in a "find" error.
func (c checker) exec(p, argv0 string) error {
	dir, name := path.Split(path.Clean(p))
	if err := c.walk(dir, false); err != nil {
		if ae := (*AccessError)(nil); errors.As(err, &ae) && ae.Op == "find" {
			ae.Path = argv0
		}
		return err
	}
	src, fi, err := c.resolve(path.Join(dir, name))
	if err != nil {
		if ae := (*AccessError)(nil); errors.As(err, &ae) && ae.Op == "find" {
			ae.Path = argv0
		}
		return err
	}
	if fi.IsDir() || !c.allowed(fi, 0o1) {
		return c.denied("execute", path.Join(dir, name), src, fi)
	}
	return nil
}

// walk enters every directory of p in turn, p itself included. A missing
// directory (or a file on the way) is a "find" error, but for the working
// directory, which runc makes when it is missing, it ends the walk; and
// there a directory the layout cannot tell about is passed.
func (c checker) walk(p string, workdir bool) error {
	at := "/"
	for _, part := range strings.Split(path.Clean("/"+p), "/") {
		if part == "" {
			continue
		}
		at = path.Join(at, part)
		err := c.enter(at)
		if ae := (*AccessError)(nil); workdir && errors.As(err, &ae) && ae.Op == "find" {
			return nil
		}
		if workdir && errors.Is(err, errUnknown) {
			// On a fresh tmpfs, say, where runc makes the directories
			// on the way to a mount point such as the working
			// directory's (root's, 0755).
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// enter checks that the user may enter the directory p.
func (c checker) enter(p string) error {
	src, fi, err := c.resolve(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &AccessError{Code: ExitNotFound, Op: "find", Path: p, UID: c.uid, GID: c.gid}
	}
	if !c.allowed(fi, 0o1) {
		return c.denied("enter", p, src, fi)
	}
	return nil
}

// allowed reports whether the user has the permission bit want (0o1, 0o2
// or 0o4) on fi, as the kernel decides it: the owner's bits for the owner,
// else the group's for the group, else the others'.
func (c checker) allowed(fi fs.FileInfo, want fs.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == c.uid:
		return perm>>6&want != 0
	case st.Gid == c.gid:
		return perm>>3&want != 0
	}
	return perm&want != 0
}

func (c checker) denied(op, p, src string, fi fs.FileInfo) error {
	e := &AccessError{Code: ExitCannotExecute, Op: op, Path: p, Source: src, UID: c.uid, GID: c.gid, Mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = st.Uid, st.Gid
	}
	return e
}

// resolve finds the host path of p, a path in the container, following
// symbolic links as the container would (an absolute target starts again
// at the container's root), and stats it. It returns a "find" error when
// it does not exist and errUnknown where the layout cannot tell.
func (c checker) resolve(p string) (string, fs.FileInfo, error) {
	rest := strings.Split(path.Clean("/"+p), "/")
	at := "/"
	for links := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			at = path.Dir(at)
			continue
		}
		next := path.Join(at, part)
		src, err := c.hostPath(next)
		if err != nil {
			// A directory on a fresh tmpfs, say, with a bind mount
			// below it: what is below decides.
			at = next
			continue
		}
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, &AccessError{Code: ExitNotFound, Op: "find", Path: p, UID: c.uid, GID: c.gid}
		}
		if err != nil {
			return "", nil, errUnknown
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			at = next
			continue
		}
		if links++; links > 40 {
			return "", nil, errUnknown
		}
		target, err := os.Readlink(src)
		if err != nil {
			return "", nil, errUnknown
		}
		if path.IsAbs(target) {
			at = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	src, err := c.hostPath(at)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return "", nil, errUnknown
	}
	return src, fi, nil
}

// hostPath maps p, a clean absolute path in the container with no link
// in it, to the host: through the last mount that covers it (mounts come
// in order, a later one on top), else below Root. A fresh tmpfs, masked
// paths and the kernel's file systems are errUnknown.
func (c checker) hostPath(p string) (string, error) {
	for _, k := range []string{"/proc", "/dev", "/sys"} {
		if within(p, k) {
			return "", errUnknown
		}
	}
	if slices.ContainsFunc(c.l.Masked, func(m string) bool { return within(p, m) }) {
		return "", errUnknown
	}
	for i := len(c.l.Mounts) - 1; i >= 0; i-- {
		m := c.l.Mounts[i]
		if !within(p, m.Destination) {
			continue
		}
		if m.Type != "bind" {
			return "", errUnknown
		}
		return filepath.Join(m.Source, strings.TrimPrefix(p, m.Destination)), nil
	}
	return filepath.Join(c.l.Root, p), nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
