package decisionlogtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// MountTinyTmpfs mounts a 64 KiB tmpfs on dir, for a decision log that
// fills it, and unmounts it when the test ends: what is started after the
// call, and closed by a cleanup, is closed before the unmount. It needs
// root.
func MountTinyTmpfs(t testing.TB, dir string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
}
