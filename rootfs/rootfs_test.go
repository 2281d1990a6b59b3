package rootfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHostLayout(t *testing.T) {
	base := t.TempDir()
	cwd := t.TempDir()
	l, err := Host(base, cwd, HostOptions{UID: 1000, GID: 1001, TmpSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if l.Root != base || l.Cwd != cwd || !slices.Contains(l.Env, "HOME="+Home) {
		t.Errorf("layout %+v", l)
	}
	var dests []string
	for _, m := range l.Mounts {
		dests = append(dests, m.Destination)
		switch {
		case m.Destination == cwd:
			if !slices.Contains(m.Options, "rw") {
				t.Errorf("the working directory is not read-write: %+v", m)
			}
		case m.Type == "bind":
			// Read-only all the way down: a plain ro bind leaves the
			// host's submounts (say a mount under /etc) writable.
			if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "rro") {
				t.Errorf("system directory %s is not read-only recursively: %+v", m.Destination, m)
			}
		case m.Destination == Home || m.Destination == "/run":
			if !slices.Contains(m.Options, "uid=1000,gid=1001") {
				t.Errorf("%s is not owned by the command's user: %+v", m.Destination, m)
			}
		}
		// No mount honours set-user-ID or device files, here or below.
		for _, o := range []string{"nosuid", "nodev"} {
			if !slices.Contains(m.Options, o) || m.Type == "bind" && !slices.Contains(m.Options, "r"+o) {
				t.Errorf("mount at %s lacks %s (recursively for a bind): %+v", m.Destination, o, m)
			}
		}
		if m.Type == "tmpfs" && !slices.ContainsFunc(m.Options, func(o string) bool { return strings.HasPrefix(o, "size=") }) {
			t.Errorf("tmpfs at %s has no size limit: %+v", m.Destination, m)
		}
		if m.Destination == "/tmp" && !slices.Contains(m.Options, "size=5242880") {
			t.Errorf("/tmp does not take HostOptions.TmpSize: %+v", m)
		}
	}
	if got := l.Writable(); !slices.Equal(got, []string{cwd}) {
		t.Errorf("Writable() = %q, want only the working directory %s", got, cwd)
	}
	// What the sandbox can read: the skeleton root, every system
	// directory bound read-only, and the working directory.
	visible := []string{base}
	for _, name := range SystemDirs {
		if fi, err := os.Lstat("/" + name); err == nil && fi.IsDir() {
			visible = append(visible, "/"+name)
		}
	}
	visible = append(visible, cwd)
	if got := l.Visible(); !slices.Equal(got, visible) {
		t.Errorf("Visible() = %q, want %q", got, visible)
	}
	for _, want := range []string{"/usr", "/etc", "/tmp", "/run", Home, cwd} {
		if !slices.Contains(dests, want) {
			t.Errorf("no mount at %s: %v", want, dests)
		}
	}
	// A merged /usr shows as links, as on the host.
	if target, err := os.Readlink("/bin"); err == nil {
		if got, err := os.Readlink(filepath.Join(base, "bin")); err != nil || got != target {
			t.Errorf("/bin in the layout: %q %v, want a link to %q", got, err, target)
		}
	}
	if _, err := os.Stat("/etc/shadow"); err == nil && !slices.Contains(l.Masked, "/etc/shadow") {
		t.Errorf("/etc/shadow is not masked: %v", l.Masked)
	}
	// Making it twice over the same base works.
	if _, err := Host(base, cwd, HostOptions{}); err != nil {
		t.Errorf("second Host: %v", err)
	}
}

func TestHostLayoutRefusesSharingSystemDirs(t *testing.T) {
	for _, cwd := range []string{"/", "/usr", "/etc/ssh", "/usr/local/src"} {
		if _, err := Host(t.TempDir(), cwd, HostOptions{}); err == nil || !strings.Contains(err.Error(), "project directory") {
			t.Errorf("Host with cwd %s: %v, want a refusal", cwd, err)
		}
	}
}

func TestDirLayout(t *testing.T) {
	d := t.TempDir()
	l, err := Dir(d)
	if err != nil || l.Root != d || len(l.Mounts) != 0 {
		t.Errorf("Dir = %+v, %v", l, err)
	}
	vol := t.TempDir()
	l.Mounts = append(l.Mounts, Mount{Destination: "/ro", Source: vol, Type: "bind", Options: ReadOnlyBind},
		Mount{Destination: "/tmp", Source: "tmpfs", Type: "tmpfs"})
	if got, want := l.Visible(), []string{d, vol}; !slices.Equal(got, want) {
		t.Errorf("Visible() = %q, want the root and the read-only volume %q", got, want)
	}
	if got := l.Writable(); len(got) != 0 {
		t.Errorf("Writable() = %q, want none", got)
	}
	if _, err := Dir("/no/such/dir"); err == nil {
		t.Errorf("Dir of a missing directory succeeded")
	}
}

// TestHostLayoutMountPointModes: the fresh directories' mount points have
// the modes their tmpfs must have (runc gives a tmpfs its mount point's
// mode), also in a skeleton an earlier sbx made with 0755 everywhere.
func TestHostLayoutMountPointModes(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"tmp", "run", Home[1:]} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Host(base, t.TempDir(), HostOptions{UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]os.FileMode{"/tmp": 0o777 | os.ModeSticky, "/run": 0o755, Home: 0o700} {
		fi, err := os.Stat(filepath.Join(base, dir))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() &^ os.ModeDir; got != want {
			t.Errorf("mount point %s: mode %v, want %v", dir, got, want)
		}
	}
}
