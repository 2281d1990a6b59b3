package api

import (
	"io/fs"
	"os"
	"syscall"
)

// OpenToOthers says whether a file that holds a secret (the API token,
// an inspection CA's key) is open to anyone but the process that reads
// it: any permission for its group or others. One exception has the
// shape of a Kubernetes Secret mounted for a container that does not run
// as root: a file of root's, group-readable (not writable) by the
// process's own group, which is not root's, read by a process that is not
// root (the kubelet makes a Secret's files so for the pod's fsGroup). On
// a host, where a user's primary group may be shared by every user, a
// group-readable file of one's own is refused as before.
func OpenToOthers(fi fs.FileInfo) bool { return openToOthers(fi, os.Geteuid(), os.Getegid()) }

func openToOthers(fi fs.FileInfo, euid, egid int) bool {
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return false
	}
	if perm&0o037 != 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid != 0 || euid == 0 || st.Gid == 0 || int(st.Gid) != egid
}
