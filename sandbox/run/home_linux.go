package run

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mountOverlay mounts, in a new directory of root's only below parent
// (made 0700 if missing), an overlay of
// dir whose upper layer is a tmpfs of size bytes, and returns where it
// is mounted and what unmounts it and removes the directory.
func mountOverlay(parent, dir string, size int64) (merged string, release func(), err error) {
	if strings.ContainsAny(dir, ",:\\") {
		return "", nil, fmt.Errorf("home %s: an overlay cannot be made of a path with a comma, colon or backslash", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", nil, fmt.Errorf("making the home's overlay: %w", err)
	}
	top, err := os.MkdirTemp(parent, "home-")
	if err != nil {
		return "", nil, fmt.Errorf("making the home's overlay: %w", err)
	}
	release = func() { os.Remove(top) }
	if err := unix.Mount("tmpfs", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=700,size=%d", size)); err != nil {
		release()
		return "", nil, fmt.Errorf("mounting the home overlay's tmpfs on %s: %w", top, err)
	}
	release = func() {
		unix.Unmount(top, unix.MNT_DETACH)
		os.Remove(top)
	}
	upper, work, merged := filepath.Join(top, "upper"), filepath.Join(top, "work"), filepath.Join(top, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			release()
			return "", nil, err
		}
	}
	// The overlay's root takes the upper layer's owner and mode.
	err = os.Chown(upper, int(st.Uid), int(st.Gid))
	if err == nil {
		err = os.Chmod(upper, fi.Mode().Perm())
	}
	if err != nil {
		release()
		return "", nil, err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", dir, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		release()
		return "", nil, fmt.Errorf("mounting an overlay of the home %s: %w", dir, err)
	}
	return merged, func() {
		unix.Unmount(merged, unix.MNT_DETACH)
		unix.Unmount(top, unix.MNT_DETACH)
		os.Remove(top)
	}, nil
}
