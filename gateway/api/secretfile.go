package api

import (
	"io/fs"
	"os"
	"syscall"
)

// OpenToOthers says whether a file that holds a secret (the API token,
// an inspection CA's key) is open to anyone but the process that reads
// it: readable by others, writable by its group or others, or readable
// by a group that is not the process's own. A group-readable file of the
// process's own group is taken: that is how Kubernetes mounts a Secret
// for a container that does not run as root (files of root, group
// fsGroup, mode 0440).
func OpenToOthers(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	if perm&0o026 != 0 {
		return true
	}
	if perm&0o040 == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || int(st.Gid) != os.Getegid()
}
