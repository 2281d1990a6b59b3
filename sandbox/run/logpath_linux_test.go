package run

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/rootfs"
)

// TestPrivilegedOutsideOfMounts: a log path the sandbox can reach through
// another mount than the path it is given is refused: compared as files,
// not as names. The working directory work is mounted read-write, and a
// file vol with -v; elsewhere on the host (in a mount namespace of this
// test's own) work is bind-mounted whole, a directory below it alone, vol
// onto another file, and a tmpfs shows both below work (where a recursive
// bind takes it into the sandbox) and elsewhere.
func TestPrivilegedOutsideOfMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mount namespaces and bind mounts (CI runs as root)")
	}
	// Every mount is made in a mount namespace of this goroutine's thread
	// alone, which dies with it: nothing leaks to the host even if the
	// unmounts below fail. The test runs no subtests, so that every check
	// runs on this thread.
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("making / private: %v", err)
	}
	base := t.TempDir()
	dir := func(p ...string) string {
		d := filepath.Join(append([]string{base}, p...)...)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	file := func(p string) string {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bind := func(src, dst string) {
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount of %s on %s: %v", src, dst, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", dst, err)
			}
		})
	}
	work, outside := dir("work"), dir("outside")
	dir("work", "sub", "deep")
	vol := file(filepath.Join(dir("vols"), "vol.jsonl"))
	bind(work, dir("mnt", "work"))                          // the whole working directory
	bind(filepath.Join(work, "sub"), dir("mnt", "sub"))     // a directory below it
	bind(vol, file(filepath.Join(dir("mnt"), "vol.jsonl"))) // the -v file
	tmp := dir("tmpfs")
	if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	dir("tmpfs", "logs")
	bind(tmp, dir("work", "cache")) // below work: the sandbox writes it
	if err := os.Link(vol, filepath.Join(outside, "hard.jsonl")); err != nil {
		t.Fatal(err)
	}
	bind(outside, dir("mnt", "outside")) // a bind of what the sandbox cannot write

	l := rootfs.Layout{Mounts: []rootfs.Mount{
		{Destination: "/work", Source: work, Type: "bind", Options: rootfs.ReadWriteBind},
		{Destination: "/vol.jsonl", Source: vol, Type: "bind", Options: rootfs.ReadWriteBind},
	}}
	for _, tc := range []struct {
		path    string
		refused bool
	}{
		{filepath.Join(base, "mnt", "work", "d.jsonl"), true},               // work, bound elsewhere
		{filepath.Join(base, "mnt", "work", "new", "dir", "d.jsonl"), true}, // below it, not made yet
		{filepath.Join(base, "mnt", "sub", "d.jsonl"), true},                // a directory of work, bound alone
		{filepath.Join(base, "mnt", "sub", "deep", "d.jsonl"), true},
		{filepath.Join(base, "mnt", "vol.jsonl"), true},           // the -v file, bound onto another
		{filepath.Join(outside, "hard.jsonl"), true},              // a hard link to it
		{filepath.Join(tmp, "logs", "d.jsonl"), true},             // a mount the sandbox writes below work
		{filepath.Join(work, "cache", "d.jsonl"), true},           // and where it is
		{filepath.Join(outside, "d.jsonl"), false},                // outside
		{filepath.Join(base, "mnt", "outside", "d.jsonl"), false}, // outside, bound elsewhere
		{filepath.Join(base, "vols", "other.jsonl"), false},       // next to the -v file
	} {
		err := outsideOf(tc.path, l.Writable())
		t.Logf("outsideOf(%s): %v", tc.path, err)
		var we *WritableError
		if refused := errors.As(err, &we); refused != tc.refused || err != nil && we == nil {
			t.Errorf("outsideOf(%s) = %v, want refused %v", tc.path, err, tc.refused)
		}
	}
}

// TestOutsideOf: a path is refused when it, or any entry crossed on the
// way to it (links followed one at a time), lies in a writable directory:
// a link a sandbox planted in its working directory that points outside
// is refused as well as a link outside pointing in; a read-only volume is
// not writable.
func TestOutsideOf(t *testing.T) {
	work, outside, vol := t.TempDir(), t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(work, "logs"))      // planted by a sandbox
	os.Symlink(work, filepath.Join(outside, "into-work")) // points in
	os.Symlink("../"+filepath.Base(outside), filepath.Join(vol, "rel"))
	l := rootfs.Layout{Mounts: []rootfs.Mount{
		{Destination: work, Source: work, Type: "bind", Options: rootfs.ReadWriteBind},
		{Destination: "/data", Source: vol, Type: "bind", Options: rootfs.ReadOnlyBind},
		{Destination: "/tmp", Source: "tmpfs", Type: "tmpfs"},
	}}
	writable := l.Writable()
	if !slices.Equal(writable, []string{work}) {
		t.Fatalf("Writable() = %q, want only %s", writable, work)
	}
	for path, refused := range map[string]bool{
		filepath.Join(work, "d.jsonl"):                         true,
		filepath.Join(work, "a", "b", "d.jsonl"):               true,
		filepath.Join(work, "logs", "d.jsonl"):                 true, // a link in work, to outside
		filepath.Join(outside, "into-work", "d.jsonl"):         true, // a link outside, into work
		filepath.Join(outside, "d.jsonl"):                      false,
		filepath.Join(vol, "d.jsonl"):                          false, // read-only volume
		filepath.Join(vol, "rel", "d.jsonl"):                   false,
		filepath.Join(work, "..", filepath.Base(outside), "x"): false,
	} {
		err := outsideOf(path, writable)
		if (err != nil) != refused {
			t.Errorf("outsideOf(%s) = %v, want refused %v", path, err, refused)
		}
	}
	// What the sandbox can read: the read-only volume too, and the
	// answer says read, not write.
	for path, refused := range map[string]bool{
		filepath.Join(work, "d.jsonl"):           true,
		filepath.Join(vol, "d.jsonl"):            true,
		filepath.Join(vol, "rel", "d.jsonl"):     true, // a path through the volume, whatever the link
		filepath.Join(outside, "d.jsonl"):        false,
		filepath.Join(outside, "into-work", "x"): true,
	} {
		err := unreadable(path, l.Visible())
		var re *ReadableError
		if (err != nil) != refused || refused && (!errors.As(err, &re) || !strings.HasSuffix(err.Error(), ", which the sandbox can read")) {
			t.Errorf("unreadable(%s) = %v, want refused %v (a *ReadableError saying the sandbox can read it)", path, err, refused)
		}
	}
}
