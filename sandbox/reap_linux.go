package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/sys/unix"
)

// reapTimeout bounds how long killWithoutRuntime waits for what it killed
// to be gone.
const reapTimeout = 10 * time.Second

// shimSettle is how long no shim of a container must show up before
// killWithoutRuntime takes it that none will: the shim's own start
// process forks its daemon after the runtime asked for it, even when the
// runtime died meanwhile.
const shimSettle = 500 * time.Millisecond

// errProcessesLeft is killWithoutRuntime's failure to empty a container's
// cgroup.
var errProcessesLeft = errors.New("processes left in the container's cgroup")

// killWithoutRuntime kills what is left of containerd container id without
// asking containerd, for when it does not answer: its shim (found by its
// command line: -namespace sbx -id ID, and -address socket when socket is
// not ""), with everything the shim started (runc, runc init, the
// command), then every process in the container's cgroups (cgroupsPath in
// each mounted hierarchy), and removes those cgroups and the shim's
// sockets. What containerd keeps of the container (its record, its
// bundle) stays until containerd answers again: it cleans up after a dead
// shim when it starts, and sbx gc removes the record.
func killWithoutRuntime(id, cgroupsPath, socket string) error {
	var paths []string
	if cgroupsPath != "" && !strings.Contains(cgroupsPath, ":") { // not a systemd slice
		paths = []string{cgroupsPath}
	}
	return reapContainer(id, ContainerdNamespace, socket, paths, true)
}

// killDockerContainer kills what runs of Docker container id (its full
// id) without dockerd or its containerd, for when dockerd does not
// answer: its shim (containerd-shim* -id ID, of whatever containerd and
// namespace dockerd uses), with everything under it, then every process
// in the container's cgroups: cgroups (paths captured while it ran, as
// /proc/PID/cgroup gives them) and the cgroups of any process whose path
// names the id (Docker's cgroupfs driver: PARENT/ID; systemd's:
// docker-ID.scope); it removes those cgroups and the shim's sockets.
// dockerd's record of the container stays until it answers again (sbx gc
// removes it).
func killDockerContainer(id string, cgroups []string) error {
	if !isDockerID(id) {
		return fmt.Errorf("killing container %q without dockerd: not a full container id", id)
	}
	paths := slices.Clone(cgroups)
	for _, p := range allPids() {
		paths = append(paths, procCgroupsNaming(p, id)...)
	}
	slices.Sort(paths)
	return reapContainer(id, "", "", slices.Compact(paths), true)
}

// isDockerID reports whether id is a full container id: 64 hexadecimal
// digits, which no other cgroup or shim names by chance.
func isDockerID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// procCgroupsNaming returns the cgroup paths of process pid that name
// id, each cut after its first element that names it: the container's
// own cgroup, not one nested in it.
func procCgroupsNaming(pid int, id string) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	var paths []string
	for _, line := range strings.Split(string(data), "\n") {
		// hierarchy:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], id) {
			continue
		}
		elems := strings.Split(parts[2], "/")
		for i, e := range elems {
			if strings.Contains(e, id) {
				paths = append(paths, strings.Join(elems[:i+1], "/"))
				break
			}
		}
	}
	return paths
}

// reapContainer kills container id's shim (of namespace, "" for any, and
// of the containerd at socket, "" for any) with everything it started,
// then every process in cgroup paths (in each mounted hierarchy), and
// removes those cgroups and the shim's sockets. With killInCgroups false,
// a process in those cgroups that the shim did not start is not killed:
// the cgroup is left, and said.
func reapContainer(id, namespace, socket string, paths []string, killInCgroups bool) error {
	var errs *multierror.Error
	var killed []int
	var sockets []string
	deadline := time.Now().Add(reapTimeout)
	settleShims(func() []int { return findShims(id, namespace, socket) }, func(shim int) {
		sockets = append(sockets, boundSockets(shim)...)
		killed = append(killed, killTree(shim)...)
	}, deadline, realClock{})
	for _, p := range killed {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var dirs []string
	for _, p := range paths {
		dirs = append(dirs, cgroupDirs(p)...)
	}
	if len(dirs) > 0 && !killInCgroups {
		for _, d := range dirs {
			if len(cgroupProcs(d)) > 0 {
				errs = multierror.Append(errs, fmt.Errorf("cgroup %s of container %s holds processes its shim did not start: left as it is", d, id))
			} else if err := removeCgroup(d, deadline); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("removing the cgroup of container %s: %w", id, err))
			}
		}
	} else if len(dirs) > 0 {
		if err := killCgroups(dirs, deadline); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("killing container %s without its runtime: %w", id, err))
		} else {
			for _, d := range dirs {
				if err := removeCgroup(d, deadline); err != nil {
					errs = multierror.Append(errs, fmt.Errorf("removing the cgroup of container %s: %w", id, err))
				}
			}
		}
	}
	for _, s := range sockets {
		if err := removeShimSocket(s); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("removing the shim socket of container %s: %w", id, err))
		}
	}
	return errs.ErrorOrNil()
}

// removeShimSocket removes the unix socket at path, as a killed shim left
// it, only where nobody but root could have put something else: in a
// directory reached without a symbolic link, owned by root and writable by
// nobody else, and only when the name there is a socket. The path is the
// one the socket was bound at, as /proc/net/unix says, not where it is now:
// a directory renamed and linked elsewhere since must not make root remove
// a file there. A socket that is gone, or not where root alone writes, is
// left and is no error.
func removeShimSocket(path string) error {
	dir, name := filepath.Split(path)
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return nil // gone, or reached through a link
	}
	defer unix.Close(fd)
	var d, f unix.Stat_t
	if unix.Fstat(fd, &d) != nil || d.Uid != 0 || d.Mode&0o022 != 0 {
		return nil
	}
	if unix.Fstatat(fd, name, &f, unix.AT_SYMLINK_NOFOLLOW) != nil || f.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// shimPoll is how often settleShims looks for shims.
const shimPoll = 20 * time.Millisecond

// A settleClock is the clock settleShims waits by: realClock, or a
// test's.
type settleClock interface {
	Now() time.Time
	Sleep(time.Duration)
}

// realClock is the time of day, and time.Sleep.
type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// settleShims calls kill with each shim find finds, every shimPoll, until
// none has shown up for shimSettle, or deadline: a runtime killed while
// it started the shim leaves its "start" process to fork the shim's
// daemon a moment later, which one look would miss.
func settleShims(find func() []int, kill func(shim int), deadline time.Time, clock settleClock) {
	for quietSince := clock.Now(); clock.Now().Sub(quietSince) < shimSettle && clock.Now().Before(deadline); {
		shims := find()
		if len(shims) > 0 {
			quietSince = clock.Now()
		}
		for _, shim := range shims {
			kill(shim)
		}
		clock.Sleep(shimPoll)
	}
}

// procArgs returns the arguments of process pid, nil when it is gone.
func procArgs(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// flagValue returns the argument after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// allPids lists the machine's processes.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var ps []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// findShims returns the shims of container id: containerd-shim* processes
// (isShim) for that id, of namespace (any when "") and of that socket's
// containerd (any when "").
func findShims(id, namespace, socket string) []int {
	var shims []int
	for _, p := range allPids() {
		args, ok := isShim(p)
		if !ok {
			continue
		}
		if flagValue(args, "-id") != id || namespace != "" && flagValue(args, "-namespace") != namespace {
			continue
		}
		if socket != "" && flagValue(args, "-address") != socket {
			continue
		}
		shims = append(shims, p)
	}
	return shims
}

// isShim reports whether process pid is a containerd shim, and returns its
// arguments: root's process running a root-owned executable, not writable
// by others, whose name (as the kernel has it, not as the process says)
// starts with containerd-shim. A command line alone proves nothing: any
// user can start a process that names itself a shim of any id, and what
// sbx does to a shim (kill it, remove its socket) is done as root.
func isShim(pid int) ([]string, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	var st, exe syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || st.Uid != 0 || syscall.Stat(dir+"/exe", &exe) != nil || exe.Uid != 0 || exe.Mode&0o022 != 0 {
		return nil, false
	}
	path, err := os.Readlink(dir + "/exe")
	if err != nil || !strings.HasPrefix(filepath.Base(path), "containerd-shim") {
		return nil, false
	}
	args := procArgs(pid)
	return args, len(args) > 0
}

// procStat returns the state and parent of process pid; ok is false when
// it is gone.
func procStat(pid int) (state byte, ppid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

// alive reports whether pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// killTree stops root and every process below it (so that none of them
// starts another meanwhile), then kills them all, and returns their pids.
func killTree(root int) []int {
	tree := map[int]bool{root: true}
	syscall.Kill(root, syscall.SIGSTOP)
	for grew := true; grew; {
		grew = false
		for _, p := range allPids() {
			if _, ppid, ok := procStat(p); ok && tree[ppid] && !tree[p] {
				tree[p] = true
				syscall.Kill(p, syscall.SIGSTOP)
				grew = true
			}
		}
	}
	pids := make([]int, 0, len(tree))
	for p := range tree {
		syscall.Kill(p, syscall.SIGKILL)
		pids = append(pids, p)
	}
	return pids
}

// boundSockets returns the paths of the unix sockets process pid listens
// on (a shim's ttrpc socket, which its SIGKILL leaves behind).
func boundSockets(pid int) []string {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path; listening
		// sockets have flag __SO_ACCEPTCON (0x10000).
		fl := strings.Fields(sc.Text())
		if len(fl) < 8 || !inodes[fl[6]] || !strings.HasPrefix(fl[7], "/") {
			continue
		}
		if flags, err := strconv.ParseUint(fl[3], 16, 32); err == nil && flags&0x10000 != 0 {
			paths = append(paths, fl[7])
		}
	}
	return paths
}

// cgroupDirs returns the directories of cgroup path in every mounted
// cgroup hierarchy, v1 and v2, that has it.
func cgroupDirs(path string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 || (postFields[0] != "cgroup" && postFields[0] != "cgroup2") {
			continue
		}
		root, mnt := fields[3], fields[4]
		rel := path
		if root != "/" {
			// A hierarchy mounted from below its root (a cgroup
			// namespace): the path is relative to that root.
			if !strings.HasPrefix(path, root+"/") {
				continue
			}
			rel = strings.TrimPrefix(path, root)
		}
		d := filepath.Join(mnt, rel)
		if seen[d] {
			continue
		}
		seen[d] = true
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// cgroupProcs returns the processes in cgroup directory d.
func cgroupProcs(d string) []int {
	data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var ps []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// killCgroups kills every process in dirs until none is left, or fails
// at deadline. Processes are frozen while they are killed by pid, so that
// none forks or exits (and gives its pid away) meanwhile; a v2 cgroup
// with cgroup.kill is killed whole by the kernel.
func killCgroups(dirs []string, deadline time.Time) error {
	for {
		left := map[int]bool{} // a process is in every v1 hierarchy
		for _, d := range dirs {
			for _, p := range cgroupProcs(d) {
				left[p] = true
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d %w after %v", len(left), errProcessesLeft, reapTimeout)
		}
		var thaws []func()
		for _, d := range dirs {
			if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) != nil {
				thaws = append(thaws, freeze(d))
			}
		}
		for _, d := range dirs {
			for _, p := range cgroupProcs(d) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		for _, thaw := range thaws {
			thaw()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeze freezes cgroup d (v1 freezer or v2 cgroup.freeze) when it can,
// and returns what thaws it.
func freeze(d string) func() {
	for _, f := range []struct{ file, frozen, thawed string }{
		{"freezer.state", "FROZEN", "THAWED"},
		{"cgroup.freeze", "1", "0"},
	} {
		p := filepath.Join(d, f.file)
		if os.WriteFile(p, []byte(f.frozen), 0) != nil {
			continue
		}
		// Freezing takes a moment; killing meanwhile is still right,
		// only less sure to catch a fork.
		for range 50 {
			if data, err := os.ReadFile(p); err != nil || strings.TrimSpace(string(data)) == f.frozen {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		return func() { os.WriteFile(p, []byte(f.thawed), 0) }
	}
	return func() {}
}

// removeCgroup removes the empty cgroup directory d, retrying while the
// kernel still holds it, until deadline; one already gone is no error.
func removeCgroup(d string, deadline time.Time) error {
	for {
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing %s: %w", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orphanCandidates returns the sandbox ids named by shims of containerd
// namespace ns (-namespace NS -id ID) that containerd's records may no
// longer hold: a run killed while the task started can leave the shim
// with nothing else. Only real shims (isShim) count; whether one is gc's
// to kill is decided by its containerd (RemoveContainer asks its own, and
// kills only shims of its own socket).
func orphanCandidates(ns string) []string {
	var ids []string
	for _, p := range allPids() {
		if args, ok := isShim(p); ok && flagValue(args, "-namespace") == ns && flagValue(args, "-address") != "" {
			if id := flagValue(args, "-id"); CheckID(id) == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
