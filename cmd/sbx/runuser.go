package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sbx-dev/sbx/sandbox"
)

// runUser is who a sandbox's command runs as, and why.
type runUser struct {
	uid, gid  uint32
	keepImage bool   // an image's own user wins when it is not root
	why       string // "--user", "sudo", "owner", "nobody"
}

// chooseUser picks the command's user. --user wins, 0 included (host
// root, asked for). Otherwise never root, and never root's group: under
// sudo the user who ran sudo; with --rootfs host the owner of the working
// directory (which the command shares read-write), unless that is root;
// an image's own user unless that is root; else nobody. A group 0 found
// on the way (a directory of 1000:0, SUDO_GID=0) becomes nobody's group,
// since root's group could plant set-group-ID binaries and read what only
// root's group may. A root-owned working directory stays unwritable to
// the command rather than make it host root: anything it wrote there (a
// set-user-ID binary, say) would belong to root.
func chooseUser(flag string, hostLayout, image bool, cwd string) (runUser, error) {
	if flag != "" {
		uid, gid, err := parseUser(flag)
		return runUser{uid: uid, gid: gid, why: "--user"}, err
	}
	notRootGroup := func(gid uint32) uint32 {
		if gid == 0 {
			return sandbox.NobodyID
		}
		return gid
	}
	if u := os.Getenv("SUDO_UID"); u != "" && u != "0" {
		uid, gid, err := parseUser(u + ":" + os.Getenv("SUDO_GID"))
		if err != nil {
			return runUser{}, fmt.Errorf("SUDO_UID=%s SUDO_GID=%s: %w", u, os.Getenv("SUDO_GID"), err)
		}
		return runUser{uid: uid, gid: notRootGroup(gid), why: "sudo"}, nil
	}
	if hostLayout {
		if fi, err := os.Stat(cwd); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				return runUser{uid: st.Uid, gid: notRootGroup(st.Gid), why: "owner"}, nil
			}
		}
	}
	return runUser{uid: sandbox.NobodyID, gid: sandbox.NobodyID, keepImage: image, why: "nobody"}, nil
}

// note is what sbx run says about the user before the command starts, or
// "": a warning when it is host root or root's group, or holds a
// capability that reaches the host's files, and why it cannot write a
// working directory that belongs to root.
func (u runUser) note(hostLayout bool, cwd string, capAdd []string) string {
	switch {
	case u.uid == 0:
		return "--user 0: the command runs as root on the host (without the capabilities sbx drops); what it writes in the working directory and -v mounts belongs to root, set-user-ID bits included"
	case u.gid == 0:
		return "--user with group 0: the command runs in root's group on the host; what it writes in the working directory and -v mounts belongs to that group, set-group-ID bits included"
	}
	if risky := slices.DeleteFunc(slices.Clone(capAdd), func(c string) bool { return c == "CAP_NET_RAW" }); len(risky) > 0 {
		return fmt.Sprintf("--cap-add %s: the command can use it on the host's files in the working directory and -v mounts (set file capabilities, make device nodes, change owners or become another user there); give it only to code you would run as root",
			strings.Join(risky, ", "))
	}
	if !hostLayout || u.why != "nobody" {
		return ""
	}
	if fi, err := os.Stat(cwd); err == nil && fi.Mode().Perm()&0o002 == 0 {
		return fmt.Sprintf("the command runs as nobody (uid %d), never as host root: it cannot write the working directory %s, which belongs to root; run sbx with sudo from your own user, give the directory to a user (chown), or name one with --user UID", u.uid, cwd)
	}
	return ""
}

// parseCaps checks --cap-add values: each must be one of the capabilities
// sbx drops; "chown" and "CAP_CHOWN" both name CAP_CHOWN.
func parseCaps(names []string) ([]string, error) {
	var caps []string
	for _, n := range names {
		c := strings.ToUpper(n)
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		if !slices.Contains(sandbox.DroppedCapabilities, c) {
			return nil, fmt.Errorf("--cap-add %s: sbx gives back only %s (CAP_NET_ADMIN never: the sandbox must not change its own network)",
				n, strings.Join(sandbox.DroppedCapabilities, ", "))
		}
		if !slices.Contains(caps, c) {
			caps = append(caps, c)
		}
	}
	return caps, nil
}

// limits turns --memory, --cpus, --pids-limit and --tmp-size into values.
func (o runOptions) limits() (sandbox.Limits, int64, error) {
	l := sandbox.DefaultLimits()
	if o.memory != "" {
		n, err := parseBytes(o.memory)
		if err != nil {
			return l, 0, fmt.Errorf("--memory %q: %w", o.memory, err)
		}
		l.Memory = n
	}
	if o.cpus < 0 {
		return l, 0, fmt.Errorf("--cpus %v: want a number of CPUs such as 1 or 0.5, or 0 for no limit", o.cpus)
	}
	if o.pidsLimit < 0 {
		return l, 0, fmt.Errorf("--pids-limit %d: want a number of processes, or 0 for no limit", o.pidsLimit)
	}
	l.CPUs, l.Pids = o.cpus, o.pidsLimit
	tmp, err := parseBytes(o.tmpSize)
	if err != nil || tmp == 0 {
		return l, 0, fmt.Errorf("--tmp-size %q: want a size such as 1g or 256m", o.tmpSize)
	}
	return l, tmp, nil
}

// parseBytes parses a size: a number with an optional binary suffix b, k,
// m, g or t (any case, an optional trailing "ib" or "b"), such as 2g,
// 512m or 1.5GiB.
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := 1.0
	if t != "" {
		if i := strings.IndexByte("kmgt", t[len(t)-1]); i >= 0 {
			mult = float64(int64(1) << (10 * (i + 1)))
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*mult > 1<<62 {
		return 0, errors.New("want a size in bytes such as 2g, 512m or 1073741824")
	}
	return int64(n * mult), nil
}

// formatBytes writes n in the largest binary unit of t, g and m that
// divides it, else in GiB with one decimal when it is that large (the
// help's rounded default), else in k or bytes: 512m, 2g, 11.2g.
func formatBytes(n int64) string {
	for i, u := range []string{"t", "g", "m"} {
		unit := int64(1) << (10 * (4 - i))
		if n >= unit && n%unit == 0 {
			return strconv.FormatInt(n/unit, 10) + u
		}
	}
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + "g"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// outsideOf returns a *writableError when path lies in one of dirs, or
// when reaching it goes through an entry that does, and another error when
// it cannot tell. Lying in a directory is a matter of filesystem objects,
// not of path names: every place this mount namespace shows a directory
// of dirs under (a bind mount of it or of a directory below it elsewhere,
// its filesystem mounted again; see mountAliases) counts as the directory,
// and an entry that is the same file as one of dirs (a hard link to a file
// mounted with -v) is refused too. Every directory entry on the way is
// checked where it really is, and symbolic links are followed one by one,
// so neither a link inside dirs (planted by a sandbox that can write
// there, pointing anywhere) nor a link elsewhere pointing into dirs gets
// past. dirs are compared with their own links resolved.
func outsideOf(path string, dirs []string) error {
	type root struct {
		at   string      // where the tree of dir shows
		dir  string      // as given
		real string      // dir with its links resolved
		fi   os.FileInfo // dir's own
	}
	var roots []root
	for _, d := range dirs {
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			return err
		}
		fi, err := os.Stat(rd)
		if err != nil {
			return err
		}
		aliases, err := mountAliases(rd)
		if err != nil {
			return fmt.Errorf("finding where the mounts show %s: %w", d, err)
		}
		for _, a := range aliases {
			roots = append(roots, root{a, d, rd, fi})
		}
	}
	inside := func(p string) (root, bool) {
		for _, r := range roots {
			if rel, err := filepath.Rel(r.at, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return r, true
			}
		}
		return root{}, false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// refuse words the refusal of next, which lies in r (or is the same
	// file as r.dir, when same).
	refuse := func(next string, r root, same bool) error {
		final := next == filepath.Clean(abs)
		place := r.dir
		if r.at != r.real {
			place = r.at + " (which shares files with " + r.dir + " through a mount)"
		}
		var text string
		switch {
		case same && final:
			text = "it is the same file as " + r.dir
		case same:
			text = "reaching it goes through " + next + ", the same file as " + r.dir
		case final && next == r.at:
			text = "it is " + place
		case final:
			text = "it lies in " + place
		case next == r.at:
			text = "reaching it goes through " + place
		default:
			text = "reaching it goes through " + next + ", in " + place
		}
		return &writableError{text + ", which the sandbox can write"}
	}
	at, rest := "/", strings.Split(abs, "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			at = filepath.Dir(at)
			continue
		}
		next := filepath.Join(at, c)
		if r, ok := inside(next); ok {
			return refuse(next, r, false)
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			at = next // nothing below a missing entry can be a link
			continue
		case err != nil:
			return err
		}
		for _, r := range roots {
			if os.SameFile(fi, r.fi) {
				return refuse(next, r, true)
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			at = next
			continue
		}
		if links++; links > 40 {
			return fmt.Errorf("too many symbolic links on the way to it")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			at = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return nil
}

// A writableError is outsideOf's answer for a path the sandbox can write
// or replace: it says through what.
type writableError struct{ text string }

func (e *writableError) Error() string { return e.text }
