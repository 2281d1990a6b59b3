package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sock_diag, from <linux/sock_diag.h> and <linux/inet_diag.h>.
const (
	sizeofInetDiagReqV2 = 56
	sizeofInetDiagMsg   = 72
	inetDiagReqBytecode = 1
	inetDiagBCSGE       = 2
	inetDiagBCSLE       = 3
	inetDiagSKV6Only    = 11
	inetDiagNoCookie    = ^uint32(0)
)

// maxCandidates bounds the sockets one lookup weighs: a tuple that more
// sockets match than this is not told apart.
const maxCandidates = 64

// Owners finds which process in a network namespace owns a socket,
// without eBPF: sock_diag, asked inside the namespace, names the
// socket's inode; the /proc/<pid>/fd of the namespace's processes name
// its holder.
//
// It remembers the namespace's processes, and lists /proc again only
// when a process was made since (the last PID in /proc/loadavg moved) or
// none of those it knows holds the socket: every lookup reads the
// descriptors of every process in the namespace, since a socket another
// of them holds too is nobody's. It is safe for concurrent use; lookups
// run one at a time, but for one that waits for a shared socket
// (lookAgain), which lets the others go on. The caller must Close it:
// until then the namespace's kernel state lives on, even after the
// namespace is deleted.
type Owners struct {
	nsPath       string
	nsDev, nsIno uint64

	mu      sync.Mutex
	diag    int // the NETLINK_SOCK_DIAG socket, made in the namespace; -1 once closed
	proc    int // /proc
	seq     uint32
	buf     []byte   // sock_diag replies
	dents   []byte   // directory entries
	link    []byte   // a symbolic link's target
	exe     []byte   // an executable's path
	argv    []byte   // the start of a command line
	found   []uint64 // the candidate sockets' inodes
	members []int    // the namespace's processes at the last listing, in ascending order
	listed  int      // the last PID made before that listing; -1 before the first

	// wait is how a lookup waits for a shared socket to be one
	// process's again (lookAgain), o.mu let go: time.Sleep, but in
	// tests.
	wait func(time.Duration)
}

// procDir is an open /proc/<pid>. What is read through it is that
// process's, or fails once it is gone: a new process given the same pid
// is not mistaken for it.
type procDir struct {
	pid, fd int
}

// NewOwners returns a finder for sockets in the network namespace at
// nsPath (such as /var/run/netns/sbx-<id>). It needs root:
// CAP_SYS_ADMIN to enter the namespace, and CAP_SYS_PTRACE to read the
// /proc/<pid>/fd of other users' processes.
func NewOwners(nsPath string) (_ *Owners, retErr error) {
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	o := &Owners{
		nsPath: nsPath, nsDev: st.Dev, nsIno: st.Ino,
		diag: -1, proc: -1, listed: -1, wait: time.Sleep,
		buf: make([]byte, 64<<10), dents: make([]byte, 8<<10), link: make([]byte, 64), exe: make([]byte, unix.PathMax), argv: make([]byte, unix.PathMax),
	}
	defer func() {
		if retErr != nil {
			o.Close()
		}
	}()
	err = inNetns(ns, func() error {
		var err error
		o.diag, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening a sock_diag socket in %s: %w", nsPath, err)
	}
	// A lookup waits no more than 2 s for the kernel.
	if err := unix.SetsockoptTimeval(o.diag, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		return nil, fmt.Errorf("setting up the sock_diag socket: %w", err)
	}
	if err := unix.Bind(o.diag, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("binding the sock_diag socket: %w", err)
	}
	// Connected to the kernel, it takes no message from a process in the
	// namespace, which could otherwise answer for the kernel.
	if err := unix.Connect(o.diag, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("connecting the sock_diag socket: %w", err)
	}
	if o.proc, err = unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("opening /proc: %w", err)
	}
	return o, nil
}

// Lookup returns the process owning the socket of protocol ("tcp" or
// "udp") whose local (sandbox-side) address is local and, when remote is
// valid, whose remote address is remote. It returns an error when that
// cannot be told for certain: never guess.
//
// A socket bound to the unspecified address matches any local address
// (IPv4 ones too for an IPv6 socket that takes them); an unconnected UDP
// socket matches any remote, since it may send anywhere. When several
// sockets match (say a listener and the connections it accepted), one
// process must hold them all, and no other process in the namespace any
// of them: a socket several processes hold (inherited across fork, or
// passed) is nobody's, since which of them sent on it cannot be told.
// Processes outside the namespace are never reported, and do not count
// when they hold one of its sockets. The Process's Comm is programName's.
//
// The error says why no process is named: ErrNoSocket, ErrNoHolder,
// ErrSharedSocket or ErrProcessEnded (errors.Is), a lookup that failed
// (sock_diag, /proc), more sockets with the port than are told apart, or
// one that cannot be made (a protocol other than tcp and udp, no local
// port, the Owners closed).
func (o *Owners) Lookup(proto string, local, remote netip.AddrPort) (Process, error) {
	var ipproto uint8
	switch proto {
	case "tcp":
		ipproto = unix.IPPROTO_TCP
	case "udp":
		ipproto = unix.IPPROTO_UDP
	default:
		return Process{}, fmt.Errorf("the processes of %s sockets are not looked up, only those of tcp and udp ones", proto)
	}
	local = netip.AddrPortFrom(local.Addr().Unmap().WithZone(""), local.Port())
	if !local.Addr().IsValid() || local.Port() == 0 {
		return Process{}, errors.New("a socket without a local address and port is not looked up")
	}
	if remote.Addr().IsValid() {
		remote = netip.AddrPortFrom(remote.Addr().Unmap().WithZone(""), remote.Port())
		if remote.Addr().Is4() != local.Addr().Is4() {
			return Process{}, ErrNoSocket // no socket has addresses of two families
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.diag < 0 {
		return Process{}, errOwnersClosed
	}
	if err := o.sockets(ipproto, local, remote); err != nil {
		return Process{}, err
	}
	if len(o.found) == 0 {
		return Process{}, ErrNoSocket
	}
	return o.owner()
}

// errOwnersClosed is what a lookup of closed Owners says.
var errOwnersClosed = errors.New("the sandbox's sockets are no longer looked up: it is ending")

// errTooManySockets is what a lookup says of a port more than
// maxCandidates sockets match.
var errTooManySockets = fmt.Errorf("more than %d sockets have the port, too many to tell apart", maxCandidates)

// sockets sets o.found to the inodes of the sockets that match the
// lookup: the one socket with the whole tuple for TCP with a remote
// address, else those with the local port that the addresses allow. It
// fails with errTooManySockets over maxCandidates of them, and when
// sock_diag cannot be asked.
func (o *Owners) sockets(ipproto uint8, local, remote netip.AddrPort) error {
	o.found = o.found[:0]
	family := uint8(unix.AF_INET6)
	if local.Addr().Is4() {
		family = unix.AF_INET
	}
	if ipproto == unix.IPPROTO_TCP && remote.Addr().IsValid() {
		err := o.queryErr(diagRequest(o.next(), 0, family, ipproto, local, remote), func(s diagSock) {
			// The kernel finds a listener, too, when no connection has
			// the tuple: only the tuple itself will do.
			if s.src == local.Addr() && s.sport == local.Port() && s.dst == remote.Addr() && s.dport == remote.Port() && s.inode != 0 {
				o.found = append(o.found, uint64(s.inode))
			}
		})
		if errors.Is(err, unix.ENOENT) {
			return nil // no socket has the tuple: none is found
		}
		return err
	}
	families := []uint8{family}
	if family == unix.AF_INET {
		families = append(families, unix.AF_INET6) // IPv6 sockets that take IPv4
	}
	for _, f := range families {
		err := o.queryErr(diagRequest(o.next(), unix.NLM_F_DUMP, f, ipproto, local, netip.AddrPort{}), func(s diagSock) {
			if s.matches(ipproto, local, remote) && len(o.found) <= maxCandidates {
				o.found = append(o.found, uint64(s.inode))
			}
		})
		if err != nil {
			return err
		}
	}
	if len(o.found) > maxCandidates {
		o.found = o.found[:0]
		return errTooManySockets
	}
	return nil
}

// queryErr is query, its error saying that the lookup failed.
func (o *Owners) queryErr(req []byte, each func(diagSock)) error {
	if err := o.query(req, each); err != nil {
		return fmt.Errorf("looking the socket up failed: %w", err)
	}
	return nil
}

func (o *Owners) next() uint32 {
	o.seq++
	return o.seq
}

// diagRequest returns a SOCK_DIAG_BY_FAMILY request: with NLM_F_DUMP,
// for every socket of the family and protocol with local's port (the
// kernel filters with bytecode); without, for the one socket with the
// tuple local, remote.
func diagRequest(seq uint32, flags uint16, family, ipproto uint8, local, remote netip.AddrPort) []byte {
	req := make([]byte, sizeofInetDiagReqV2)
	req[0], req[1] = family, ipproto
	binary.NativeEndian.PutUint32(req[4:8], ^uint32(0)) // every state
	id := req[8:]                                       // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:2], local.Port())
	binary.BigEndian.PutUint16(id[2:4], remote.Port())
	putDiagAddr(id[4:20], local.Addr())
	putDiagAddr(id[20:36], remote.Addr())
	binary.NativeEndian.PutUint32(id[40:44], inetDiagNoCookie)
	binary.NativeEndian.PutUint32(id[44:48], inetDiagNoCookie)
	var attrs []attr
	if flags&unix.NLM_F_DUMP != 0 {
		// sport >= port && sport <= port: two comparisons, each an op
		// and an operand of 4 bytes; a failed one jumps past the end.
		bc := make([]byte, 16)
		bc[0], bc[1] = inetDiagBCSGE, 8
		binary.NativeEndian.PutUint16(bc[2:4], 16+4)
		binary.NativeEndian.PutUint16(bc[6:8], local.Port())
		bc[8], bc[9] = inetDiagBCSLE, 8
		binary.NativeEndian.PutUint16(bc[10:12], 8+4)
		binary.NativeEndian.PutUint16(bc[14:16], local.Port())
		attrs = append(attrs, attr{inetDiagReqBytecode, bc})
	}
	return appendNetlinkMsg(nil, unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_REQUEST|flags, seq, req, attrs...)
}

// putDiagAddr writes a (big-endian) address of sock_diag: IPv4 in the
// first 4 bytes.
func putDiagAddr(b []byte, a netip.Addr) {
	switch {
	case a.Is4():
		v := a.As4()
		copy(b, v[:])
	case a.Is6():
		v := a.As16()
		copy(b, v[:])
	}
}

// diagSock is what a lookup needs of a struct inet_diag_msg. Addresses
// are unmapped: an IPv6 socket's IPv4-mapped address reads as IPv4.
type diagSock struct {
	family       uint8
	sport, dport uint16
	src, dst     netip.Addr
	inode        uint32
	v6only       bool
}

func parseDiagMsg(b []byte) (diagSock, bool) {
	if len(b) < sizeofInetDiagMsg {
		return diagSock{}, false
	}
	s := diagSock{
		family: b[0],
		sport:  binary.BigEndian.Uint16(b[4:6]),
		dport:  binary.BigEndian.Uint16(b[6:8]),
		inode:  binary.NativeEndian.Uint32(b[68:72]),
	}
	switch s.family {
	case unix.AF_INET:
		s.src = netip.AddrFrom4([4]byte(b[8:12]))
		s.dst = netip.AddrFrom4([4]byte(b[24:28]))
	case unix.AF_INET6:
		s.src = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		s.dst = netip.AddrFrom16([16]byte(b[24:40])).Unmap()
	default:
		return diagSock{}, false
	}
	for typ, data := range netlinkAttrs(b[sizeofInetDiagMsg:]) {
		if typ == inetDiagSKV6Only && len(data) >= 1 {
			s.v6only = data[0] != 0
		}
	}
	return s, true
}

// matches reports whether socket s could have local as its address and
// remote (when valid) as its peer.
func (s diagSock) matches(ipproto uint8, local, remote netip.AddrPort) bool {
	if s.sport != local.Port() || s.inode == 0 { // 0: no file (TIME_WAIT, not yet accepted)
		return false
	}
	switch {
	case s.src == local.Addr():
	case s.src.IsUnspecified():
		// Bound to any address of its family; "::" takes IPv4 too
		// unless the socket is IPv6-only.
		switch {
		case s.src.Is4() && !local.Addr().Is4():
			return false
		case s.src.Is6() && local.Addr().Is4() && s.v6only:
			return false
		}
	default:
		return false
	}
	if !remote.Addr().IsValid() {
		return true
	}
	if s.dst == remote.Addr() && s.dport == remote.Port() {
		return true
	}
	// An unconnected UDP socket sends anywhere.
	return ipproto == unix.IPPROTO_UDP && s.dst.IsUnspecified() && s.dport == 0
}

// query sends req and calls each for every socket in the reply.
func (o *Owners) query(req []byte, each func(diagSock)) error {
	seq := binary.NativeEndian.Uint32(req[8:12])
	if _, err := unix.Write(o.diag, req); err != nil {
		return fmt.Errorf("asking sock_diag: %w", err)
	}
	for {
		n, err := recvFromKernel(o.diag, o.buf)
		if err != nil {
			return fmt.Errorf("reading sock_diag: %w", err)
		}
		for m := range netlinkMessages(o.buf[:n]) {
			if m.seq != seq {
				continue // the rest of an earlier request's reply
			}
			switch m.typ {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.data)); errno != 0 {
						return unix.Errno(-errno)
					}
				}
				return nil
			case unix.SOCK_DIAG_BY_FAMILY:
				if s, ok := parseDiagMsg(m.data); ok {
					each(s)
				}
				if m.flags&unix.NLM_F_MULTI == 0 {
					return nil // the one answer to an exact request
				}
			}
		}
	}
}

// owner returns the one process in the namespace that holds any socket
// in o.found, when it holds them all; else why not (unique). o.mu is
// held; lookAgain lets go of it while it waits.
func (o *Owners) owner() (Process, error) {
	listed, err := o.refresh()
	if err != nil {
		return Process{}, fmt.Errorf("looking the socket's process up failed: %w", err)
	}
	p, err := o.unique()
	if err == ErrNoHolder && !listed {
		// A process may have joined the namespace (setns) without a
		// new PID since the last listing.
		old := o.members
		o.members = nil
		if err := o.list(); err != nil {
			o.members = old
			return Process{}, fmt.Errorf("looking the socket's process up failed: %w", err)
		}
		p, err = o.unique()
	}
	if mayChange(err) {
		return o.lookAgain(err)
	}
	return p, err
}

// mayChange reports whether err, unique's, may change in a moment.
func mayChange(err error) bool { return err == ErrSharedSocket || err == ErrProcessEnded }

// lookAgain looks at o.found's sockets again, up to sharedRetries times
// sharedRetryWait apart, while unique finds them shared (or their
// holder ending: err, the first look's), and returns what it found
// last. A socket held by two processes may be held so only for a
// moment: a child between fork (or vfork, as posix_spawn does) and exec
// holds a copy of every descriptor of its parent until the exec closes
// those marked close-on-exec, as sockets are. An agent that runs git
// while it connects elsewhere (codex does) makes that moment often
// enough to be seen. So a shared socket is nobody's only when it stays
// shared for some 20 ms.
//
// o.mu is held, and let go while it waits: the other lookups, one for
// each connection, query and packet of the sandbox, do not wait for this
// one. What they change meanwhile is o.found, put back here, and
// o.members, which is as good for this lookup as it is for theirs.
func (o *Owners) lookAgain(err error) (p Process, _ error) {
	found := slices.Clone(o.found)
	for range sharedRetries {
		o.waitUnlocked(sharedRetryWait)
		if o.diag < 0 {
			return Process{}, errOwnersClosed
		}
		o.found = append(o.found[:0], found...)
		if p, err = o.unique(); !mayChange(err) {
			break
		}
	}
	return p, err
}

// waitUnlocked waits for d (o.wait) with o.mu let go, and takes it again.
func (o *Owners) waitUnlocked(d time.Duration) {
	o.mu.Unlock()
	defer o.mu.Lock()
	o.wait(d)
}

// sharedRetries and sharedRetryWait bound how long a lookup waits for a
// socket two processes hold to be one's again (lookAgain).
const (
	sharedRetries   = 4
	sharedRetryWait = 5 * time.Millisecond
)

// refresh lists the namespace's processes again when a process was made
// since the last listing, or there was none, and says whether it did.
// The last PID made is read first: one made during the listing moves it
// past what the next lookup compares.
func (o *Owners) refresh() (bool, error) {
	last, err := lastPID(o.proc, o.link)
	if err == nil && o.listed >= 0 && last == o.listed {
		return false, nil
	}
	old := o.members
	o.members = nil
	if err := o.list(); err != nil {
		o.members = old
		return false, err
	}
	o.listed = -1
	if err == nil {
		o.listed = last
	}
	return true, nil
}

// lastPID returns the PID the kernel gave last (the last field of
// /proc/loadavg), read through proc with buf.
func lastPID(proc int, buf []byte) (int, error) {
	b, err := readFileAt(proc, "loadavg", buf)
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) != 5 {
		return 0, fmt.Errorf("unexpected /proc/loadavg %q", b)
	}
	return strconv.Atoi(string(f[4]))
}

// unique returns the process of o.members that holds every socket in
// o.found, when no other one holds any of them. Else it says why not:
// ErrNoHolder when none holds any, ErrSharedSocket when two hold them
// or one holds only some, ErrProcessEnded when the one holding them all
// ended before it was read.
func (o *Owners) unique() (Process, error) {
	all := uint64(1)<<len(o.found) - 1
	owner := procDir{fd: -1}
	defer func() {
		if owner.fd >= 0 {
			unix.Close(owner.fd)
		}
	}()
	for _, pid := range o.members {
		fd, err := unix.Openat(o.proc, strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone
		}
		seen := o.holds(fd, all)
		switch {
		case seen == 0:
			unix.Close(fd)
			continue
		case seen != all || owner.fd >= 0:
			unix.Close(fd)
			return Process{}, ErrSharedSocket
		}
		owner = procDir{pid: pid, fd: fd}
	}
	if owner.fd < 0 {
		return Process{}, ErrNoHolder
	}
	p, ok := o.process(owner)
	if !ok {
		return Process{}, ErrProcessEnded
	}
	return p, nil
}

// holds returns which sockets of o.found (a bit for each) the process
// of /proc/<pid> dir holds, if it is in the namespace: all, once it has
// seen them all.
func (o *Owners) holds(dir int, all uint64) (seen uint64) {
	var st unix.Stat_t
	if unix.Fstatat(dir, "ns/net", &st, 0) != nil || st.Dev != o.nsDev || st.Ino != o.nsIno {
		return 0
	}
	fds, err := unix.Openat(dir, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fds)
	for seen != all {
		n, err := unix.Getdents(fds, o.dents)
		if err != nil || n == 0 {
			return seen
		}
		for name := range direntNames(o.dents[:n]) {
			if ino, ok := o.socketInode(fds, name); ok {
				if i := slices.Index(o.found, ino); i >= 0 {
					seen |= 1 << i
				}
			}
		}
	}
	return seen
}

// process returns the Process of d, read after its descriptors: if the
// process is gone, this fails.
func (o *Owners) process(d procDir) (Process, bool) {
	argv, err := readFileAt(d.fd, "cmdline", o.argv)
	if err != nil {
		return Process{}, false
	}
	p := Process{PID: d.pid}
	if exe, err := readlinkAt(d.fd, "exe", o.exe); err == nil {
		p.Exe = string(exe)
	}
	argv0, _, _ := bytes.Cut(argv, []byte{0})
	p.Comm = programName(d.fd, string(argv0), p.Exe)
	return p, true
}

// programName is the name of the process of /proc/<pid> dir, whose
// command line starts with argv0 and whose executable is exe: argv0's
// base name when argv0 names the very file the kernel executed (a link
// to it, such as python3 for python3.11 or wget for busybox), else exe's
// base name; "" when exe is unknown.
//
// A process can set its comm (prctl PR_SET_NAME, as node's
// process.title does for npm) and overwrite its argv (setproctitle), but
// it cannot change which file it executes: a title that is not a path to
// that file is ignored, so npm is "node" however it titles itself, and a
// program run the same way is named the same every time. argv0 is
// looked up in the process's own root: as it is when it starts with a
// slash, else in exe's directory (where a link such as python3 sits by
// its target; the PATH a shell searched is not known). One relative to a
// working directory is not looked up.
func programName(dir int, argv0, exe string) string {
	exe = strings.TrimSuffix(exe, " (deleted)")
	if exe == "" {
		return ""
	}
	base := path.Base(exe)
	name := path.Base(argv0)
	switch {
	case argv0 == "" || name == "/" || name == "." || name == "..":
		return base
	case name == base:
		return name
	}
	file := argv0
	if !strings.HasPrefix(argv0, "/") {
		if strings.Contains(argv0, "/") {
			return base
		}
		file = path.Join(path.Dir(exe), argv0)
	}
	if !executes(dir, file) {
		return base
	}
	return name
}

// executes reports whether file, resolved in the root of the process of
// /proc/<pid> dir (symbolic links cannot leave it), is that process's
// executable.
func executes(dir int, file string) bool {
	var want, got unix.Stat_t
	if unix.Fstatat(dir, "exe", &want, 0) != nil {
		return false
	}
	root, err := unix.Openat(dir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, file, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, &got) == nil && got.Dev == want.Dev && got.Ino == want.Ino
}

// socketInode reads the link /proc/<pid>/fd/<name> (name is
// NUL-terminated) and returns the inode of "socket:[<inode>]".
func (o *Owners) socketInode(fds int, name []byte) (uint64, bool) {
	n, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(fds),
		uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&o.link[0])), uintptr(len(o.link)), 0, 0)
	if errno != 0 {
		return 0, false
	}
	target, ok := bytes.CutPrefix(o.link[:n], []byte("socket:["))
	if !ok || len(target) < 2 || target[len(target)-1] != ']' {
		return 0, false
	}
	var ino uint64
	for _, c := range target[:len(target)-1] {
		if c < '0' || c > '9' {
			return 0, false
		}
		ino = ino*10 + uint64(c-'0')
	}
	return ino, true
}

// list sets o.members to the processes in the namespace, in ascending
// order.
func (o *Owners) list() error {
	if _, err := unix.Seek(o.proc, 0, 0); err != nil {
		return err
	}
	for {
		n, err := unix.Getdents(o.proc, o.dents)
		if err != nil {
			return fmt.Errorf("listing /proc: %w", err)
		}
		if n == 0 {
			break
		}
		for name := range direntNames(o.dents[:n]) {
			name = name[:len(name)-1] // the NUL
			pid, err := strconv.Atoi(string(name))
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(o.proc, string(name)+"/ns/net", &st, 0) == nil && st.Dev == o.nsDev && st.Ino == o.nsIno {
				o.members = append(o.members, pid)
			}
		}
	}
	slices.Sort(o.members)
	return nil
}

// direntNames yields the names, NUL-terminated, in a buffer of struct
// linux_dirent64, but for "." and "..".
func direntNames(b []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) >= 19 {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i+1]
				if name[0] != '.' && !yield(name) {
					return
				}
			}
			b = b[reclen:]
		}
	}
}

// readFileAt reads the small file name in directory dir into buf.
func readFileAt(dir int, name string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func readlinkAt(dir int, name string, buf []byte) ([]byte, error) {
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Close releases the namespace and what the finder holds open. Lookups
// after it report false.
func (o *Owners) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for _, fd := range []*int{&o.diag, &o.proc} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	return combine(errs...)
}
