package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// Dir is the layout of a root filesystem directory of the user's: that
// directory, read-only, and nothing else.
func Dir(dir string) (Layout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Layout{}, fmt.Errorf("--rootfs %s is not a directory", dir)
	}
	return Layout{Root: abs}, nil
}

// Host is the layout that shows the host's system directories read-only,
// with Secrets and SSH host keys masked, cwd read-write at the same path
// (and the working directory), fresh tmpfs at /tmp, /run and Home, and
// HOME=Home. base is a directory of sbx's own (such as
// /var/lib/sbx/hostroot) where the skeleton root is kept: mount points and
// the links of a merged /usr.
func Host(base, cwd string) (Layout, error) {
	cwd = filepath.Clean(cwd)
	if !filepath.IsAbs(cwd) {
		return Layout{}, fmt.Errorf("working directory %q is not absolute", cwd)
	}
	if cwd == "/" || isSystemPath(cwd) {
		return Layout{}, fmt.Errorf("the working directory %s would be shared read-write with the sandbox; run sbx from a project directory, or give -w", cwd)
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
		l.Mounts = append(l.Mounts, Mount{Destination: host, Source: host, Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	for _, dir := range []string{"proc", "dev", "sys", "tmp", "run", Home[1:], cwd[1:]} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			return Layout{}, err
		}
	}
	l.Mounts = append(l.Mounts,
		Mount{Destination: "/tmp", Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		Mount{Destination: "/run", Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		Mount{Destination: Home, Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		Mount{Destination: cwd, Source: cwd, Type: "bind", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
	)
	for _, s := range Secrets {
		if _, err := os.Lstat(s); err == nil {
			l.Masked = append(l.Masked, s)
		}
	}
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*key")
	l.Masked = append(l.Masked, keys...)
	return l, nil
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
