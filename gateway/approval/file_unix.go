//go:build unix && !linux

package approval

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes flock on lockPath, the lock file of the approvals file
// at path (made, mode 0600, when missing; never through a link), waiting
// at most LockWait. unlock releases it.
func lockFile(path, lockPath string) (unlock func(), err error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: opening its lock file: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, untrustedFileError(path, "its lock file "+lockPath+" is not a regular file", "remove the lock file")
	}
	for deadline := time.Now().Add(LockWait); ; time.Sleep(20 * time.Millisecond) {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%s: taking its lock %s: %w (another sbx process may be writing it); nothing was written, answer again", path, lockPath, err)
		}
	}
}

// fileOwner returns the uid that owns fi's file.
func fileOwner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
