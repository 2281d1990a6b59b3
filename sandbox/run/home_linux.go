package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/sandbox"
)

// mountOverlay mounts, in a new directory of root's only below parent
// (made 0700 if missing), an overlay of
// dir whose upper layer is a tmpfs of size bytes, and returns where it
// is mounted and what unmounts it and removes the directory. The
// directory's name, home-PID-START-N, names this process (its pid and
// start time), so that GCHomes can tell the overlay of a run that died
// without its release.
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
	pid, start, err := sandbox.ThisProcess()
	if err != nil {
		return "", nil, err
	}
	top, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-%d-", homePrefix, pid, start))
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

// homePrefix starts the name of every directory mountOverlay makes.
const homePrefix = "home-"

// homeOwner returns the sbx run process a directory below the homes'
// parent was made by, from its name (home-PID-START-N); ok is false for a
// name of another form.
func homeOwner(name string) (st sandbox.State, ok bool) {
	parts := strings.Split(strings.TrimPrefix(name, homePrefix), "-")
	if !strings.HasPrefix(name, homePrefix) || len(parts) != 3 {
		return st, false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return st, false
	}
	return sandbox.State{PID: pid, PIDStart: start}, true
}

// GCHomes unmounts and removes the overlays of the home (--home overlay,
// --agent) below parent whose sbx run process is gone, as a run killed
// with SIGKILL leaves them: the overlay, then its tmpfs, then the
// directory. One whose process lives (same pid, same start time,
// sandbox.OwnerAlive) is left alone, and so is every entry whose name is
// not of mountOverlay's form. It returns the names it removed and every
// failure; parent missing is none.
func GCHomes(parent string) (removed []string, _ error) {
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the overlays of the home: %w", err)
	}
	var errs *multierror.Error
	for _, e := range entries {
		st, ok := homeOwner(e.Name())
		if !ok || !e.IsDir() || sandbox.OwnerAlive(st) {
			continue
		}
		top := filepath.Join(parent, e.Name())
		if err := unmountHome(top); err != nil {
			errs = multierror.Append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errs.ErrorOrNil()
}

// unmountHome unmounts the overlay and the tmpfs of a home's directory
// top, each when mounted, and removes top.
func unmountHome(top string) error {
	for _, m := range []string{filepath.Join(top, "merged"), top} {
		if err := unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting the home overlay %s: %w", m, err)
		}
	}
	if err := os.Remove(top); err != nil {
		return fmt.Errorf("removing the home overlay's directory: %w", err)
	}
	return nil
}
