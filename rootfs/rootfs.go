package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Mount is a mount in the container, in OCI terms.
type Mount struct {
	Destination string
	Source      string
	Type        string // "bind" or "tmpfs"
	Options     []string
}

// Layout is what the container sees as /.
type Layout struct {
	// Root is the directory used as /, read-only.
	Root string
	// Mounts come on top of Root, in order.
	Mounts []Mount
	// Masked are paths hidden from the container: a file reads as empty,
	// a directory as empty.
	Masked []string
	// Cwd is the working directory; "" means /.
	Cwd string
	// Env are variables the layout needs set, such as HOME.
	Env []string
	// Lower are host directories shown through a mount whose Source is
	// elsewhere: the user's home below its overlay. Visible counts them.
	Lower []string
}

// SystemDirs are the host's directories the host layout shows, read-only.
// On a merged-/usr system /bin, /sbin and /lib* are symbolic links to
// /usr, and are links in the layout too.
var SystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"}

// Secrets are host files the host layout masks, when they exist.
var Secrets = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private",
}

// Home is the fresh, empty home directory of the host layout.
const Home = "/home/sbx"

// Sizes of the host layout's fresh tmpfs mounts. Their pages count
// against the sandbox's memory limit as well.
const (
	// DefaultTmpSize bounds /tmp and Home each, unless HostOptions say.
	DefaultTmpSize = 1 << 30
	// RunSize bounds /run.
	RunSize = 64 << 20
)

// HostOptions tune the host layout. The zero value gives root the fresh
// directories and DefaultTmpSize.
type HostOptions struct {
	// UID and GID own /run and Home: the user the command runs as.
	UID, GID uint32
	// TmpSize bounds /tmp and Home each, in bytes; 0 means
	// DefaultTmpSize.
	TmpSize int64
	// Home is the user's home the layout shows; its zero value shows
	// none (a fresh, empty Home).
	Home HomeView
}

// freshModes are the modes of the host layout's fresh directories, by
// path below the root: /tmp for everyone (sticky: each removes only its
// own), Home for its owner only, /run writable by its owner. Their owner
// is the tmpfs's uid= and gid= option (the command's user; root for /tmp).
var freshModes = map[string]os.FileMode{
	"tmp":    0o777 | os.ModeSticky,
	"run":    0o755,
	Home[1:]: 0o700,
}

// Mount options shared by the layouts. The r-prefixed ones apply to every
// mount below the bind as well (runc ≥ 1.1 sets them with mount_setattr):
// a plain "ro" bind leaves the host's submounts writable. rprivate keeps
// mounts the host makes later from appearing inside.
var (
	// ReadOnlyBind is a recursive bind, read-only all the way down, with
	// no set-user-ID or device files honoured.
	ReadOnlyBind = []string{"rbind", "ro", "rro", "nosuid", "rnosuid", "nodev", "rnodev", "rprivate"}
	// ReadWriteBind is a recursive bind the sandbox may write, in which
	// no set-user-ID or device file is honoured.
	ReadWriteBind = []string{"rbind", "rw", "nosuid", "rnosuid", "nodev", "rnodev", "rprivate"}
)

// A NotDirError is Dir's error for a root filesystem that is not a
// directory (or cannot be looked at).
type NotDirError struct {
	// Dir is the directory as given to Dir.
	Dir string
}

func (e *NotDirError) Error() string { return "root filesystem " + e.Dir + " is not a directory" }

// A SystemWorkDirError is Host's error for a working directory that is /
// or a system directory, which the host layout would share read-write.
type SystemWorkDirError struct {
	// Dir is the working directory.
	Dir string
}

func (e *SystemWorkDirError) Error() string {
	return "the working directory " + e.Dir + " would be shared read-write with the sandbox; work in a project directory, or choose another working directory"
}

// Dir is the layout of a root filesystem directory of the user's: that
// directory, read-only, and nothing else.
// A dir that is not a directory is a *NotDirError.
func Dir(dir string) (Layout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Layout{}, &NotDirError{Dir: dir}
	}
	return Layout{Root: abs}, nil
}

// Host is the layout that shows the host's system directories read-only
// (their submounts too), with Secrets and SSH host keys masked, cwd
// read-write at the same path (and the working directory), fresh tmpfs at
// /tmp, /run and Home (the last two owned by o.UID), and HOME=Home. base is
// a directory of sbx's own (such as /var/lib/sbx/hostroot) where the
// skeleton root is kept: mount points and the links of a merged /usr.
// A cwd that is / or a system directory is a *SystemWorkDirError.
func Host(base, cwd string, o HostOptions) (Layout, error) {
	cwd = filepath.Clean(cwd)
	if !filepath.IsAbs(cwd) {
		return Layout{}, fmt.Errorf("working directory %q is not absolute", cwd)
	}
	if cwd == "/" || isSystemPath(cwd) {
		return Layout{}, &SystemWorkDirError{Dir: cwd}
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return Layout{}, fmt.Errorf("creating the host layout in %s: %w", base, err)
	}
	l := Layout{Root: base, Cwd: cwd, Env: []string{"HOME=" + Home}}
	for _, name := range SystemDirs {
		host := "/" + name
		fi, err := os.Lstat(host)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Layout{}, err
		}
		inRoot := filepath.Join(base, name)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(host)
			if err != nil {
				return Layout{}, err
			}
			if err := ensureSymlink(inRoot, target); err != nil {
				return Layout{}, err
			}
			continue
		}
		if err := os.MkdirAll(inRoot, 0o755); err != nil {
			return Layout{}, err
		}
		l.Mounts = append(l.Mounts, Mount{Destination: host, Source: host, Type: "bind", Options: ReadOnlyBind})
	}
	for _, dir := range []string{"proc", "dev", "sys", "tmp", "run", Home[1:], cwd[1:]} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			return Layout{}, err
		}
	}
	// The fresh directories' modes are their mount points' modes: runc
	// gives a tmpfs the mode of the directory it is mounted on, whatever
	// its mode= option says. A mount point made 0755 (MkdirAll, umask)
	// left /tmp unwritable to anyone but root.
	for dir, mode := range freshModes {
		if err := os.Chmod(filepath.Join(base, dir), mode); err != nil {
			return Layout{}, fmt.Errorf("setting the mode of the mount point %s in %s: %w", dir, base, err)
		}
	}
	size := o.TmpSize
	if size <= 0 {
		size = DefaultTmpSize
	}
	owner := fmt.Sprintf("uid=%d,gid=%d", o.UID, o.GID)
	l.Mounts = append(l.Mounts,
		Mount{Destination: "/tmp", Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", size)}},
		Mount{Destination: "/run", Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", owner, fmt.Sprintf("size=%d", RunSize)}},
		Mount{Destination: Home, Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=700", owner, fmt.Sprintf("size=%d", size)}},
	)
	if !o.Home.Mode.hidden() {
		home, masked, err := o.Home.mounts(owner, size)
		if err != nil {
			return Layout{}, err
		}
		if err := os.MkdirAll(filepath.Join(base, o.Home.Dir), 0o755); err != nil {
			return Layout{}, err
		}
		l.Env = []string{"HOME=" + o.Home.Dir}
		l.Mounts = append(l.Mounts, home...)
		l.Masked = append(l.Masked, masked...)
		l.Lower = append(l.Lower, o.Home.Dir)
	}
	l.Mounts = append(l.Mounts, Mount{Destination: cwd, Source: cwd, Type: "bind", Options: ReadWriteBind})
	for _, s := range Secrets {
		if _, err := os.Lstat(s); err == nil {
			l.Masked = append(l.Masked, s)
		}
	}
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*key")
	l.Masked = append(l.Masked, keys...)
	return l, nil
}

// Writable returns the host paths that the sandbox can write through l:
// the sources of its read-write bind mounts. A file sbx itself writes,
// such as the decision log, must not lie below one of them.
func (l Layout) Writable() []string {
	var paths []string
	for _, m := range l.Mounts {
		if m.Type == "bind" && !slices.Contains(m.Options, "ro") {
			paths = append(paths, m.Source)
		}
	}
	return paths
}

// Visible returns the host paths whose files the sandbox can read
// through l: Root, the sources of its bind mounts, read-only or
// read-write (Writable's among them), and Lower. A file whose contents
// the sandbox must not see, such as a secret's value, must not lie below
// one of them. Masked paths are not taken out: a file below one is refused
// all the same.
func (l Layout) Visible() []string {
	var paths []string
	if l.Root != "" {
		paths = append(paths, l.Root)
	}
	for _, m := range l.Mounts {
		if m.Type == "bind" {
			paths = append(paths, m.Source)
		}
	}
	return append(paths, l.Lower...)
}

// isSystemPath reports whether p is one of SystemDirs or below one.
func isSystemPath(p string) bool {
	for _, d := range SystemDirs {
		if p == "/"+d || strings.HasPrefix(p, "/"+d+"/") {
			return true
		}
	}
	return false
}

// ensureSymlink makes path a link to target, replacing another link.
func ensureSymlink(path, target string) error {
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return nil
	}
	os.Remove(path)
	if err := os.Symlink(target, path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}
