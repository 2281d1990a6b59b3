package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
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
// It remembers the namespace's processes and the last one found to own
// a socket, and tries that one first (a program usually opens many
// connections); it lists /proc again only when none of the processes it
// knows holds the socket. It is safe for concurrent use; lookups run one
// at a time. The caller must Close it: until then the namespace's kernel
// state lives on, even after the namespace is deleted.
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
	found   []uint64 // the candidate sockets' inodes
	members []int    // the namespace's processes at the last listing, in ascending order
	last    procDir  // the process found last; fd -1 when none
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
		diag: -1, proc: -1, last: procDir{fd: -1},
		buf: make([]byte, 64<<10), dents: make([]byte, 8<<10), link: make([]byte, 64), exe: make([]byte, unix.PathMax),
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
// valid, whose remote address is remote. ok is false when it cannot be
// told for certain: never guess.
//
// A socket bound to the unspecified address matches any local address
// (IPv4 ones too for an IPv6 socket that takes them); an unconnected UDP
// socket matches any remote, since it may send anywhere. When several
// sockets match (say a listener and the connections it accepted), one
// process must hold them all. Of the processes that hold one socket
// (inherited across fork), the one reported is the first found: the
// process found last, if it is one of them. Processes outside the
// namespace are never reported, even when they hold one of its sockets.
func (o *Owners) Lookup(proto string, local, remote netip.AddrPort) (p Process, ok bool) {
	var ipproto uint8
	switch proto {
	case "tcp":
		ipproto = unix.IPPROTO_TCP
	case "udp":
		ipproto = unix.IPPROTO_UDP
	default:
		return Process{}, false
	}
	local = netip.AddrPortFrom(local.Addr().Unmap().WithZone(""), local.Port())
	if !local.Addr().IsValid() || local.Port() == 0 {
		return Process{}, false
	}
	if remote.Addr().IsValid() {
		remote = netip.AddrPortFrom(remote.Addr().Unmap().WithZone(""), remote.Port())
		if remote.Addr().Is4() != local.Addr().Is4() {
			return Process{}, false
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.diag < 0 {
		return Process{}, false
	}
	if err := o.sockets(ipproto, local, remote); err != nil || len(o.found) == 0 {
		return Process{}, false
	}
	return o.owner()
}

// sockets sets o.found to the inodes of the sockets that match the
// lookup: the one socket with the whole tuple for TCP with a remote
// address, else those with the local port that the addresses allow.
func (o *Owners) sockets(ipproto uint8, local, remote netip.AddrPort) error {
	o.found = o.found[:0]
	family := uint8(unix.AF_INET6)
	if local.Addr().Is4() {
		family = unix.AF_INET
	}
	if ipproto == unix.IPPROTO_TCP && remote.Addr().IsValid() {
		return o.query(diagRequest(o.next(), 0, family, ipproto, local, remote), func(s diagSock) {
			// The kernel finds a listener, too, when no connection has
			// the tuple: only the tuple itself will do.
			if s.src == local.Addr() && s.sport == local.Port() && s.dst == remote.Addr() && s.dport == remote.Port() && s.inode != 0 {
				o.found = append(o.found, uint64(s.inode))
			}
		})
	}
	families := []uint8{family}
	if family == unix.AF_INET {
		families = append(families, unix.AF_INET6) // IPv6 sockets that take IPv4
	}
	for _, f := range families {
		err := o.query(diagRequest(o.next(), unix.NLM_F_DUMP, f, ipproto, local, netip.AddrPort{}), func(s diagSock) {
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

// owner returns the process that holds every socket in o.found: the
// last one found if it still does, else the first of the namespace's
// known processes, else the first of those listed anew.
func (o *Owners) owner() (Process, bool) {
	skip := 0 // tried already
	if o.last.fd >= 0 {
		if p, ok := o.holds(o.last); ok {
			return p, true
		}
		skip = o.last.pid
	}
	for _, pid := range o.members {
		if pid == skip {
			continue
		}
		if p, ok := o.try(pid); ok {
			return p, true
		}
	}
	old := o.members
	o.members = nil
	if err := o.list(); err != nil {
		o.members = old
		return Process{}, false
	}
	for _, pid := range o.members {
		if _, seen := slices.BinarySearch(old, pid); seen || pid == skip {
			continue
		}
		if p, ok := o.try(pid); ok {
			return p, true
		}
	}
	return Process{}, false
}

// try opens /proc/<pid> and, if the process holds o.found, makes it the
// last found and returns it.
func (o *Owners) try(pid int) (Process, bool) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Process{}, false
	}
	d := procDir{pid: pid, fd: fd}
	p, ok := o.holds(d)
	if !ok {
		unix.Close(fd)
		return Process{}, false
	}
	if o.last.fd >= 0 {
		unix.Close(o.last.fd)
	}
	o.last = d
	return p, true
}

// holds returns the process of d if it is in the namespace and holds
// every socket in o.found.
func (o *Owners) holds(d procDir) (Process, bool) {
	var st unix.Stat_t
	if unix.Fstatat(d.fd, "ns/net", &st, 0) != nil || st.Dev != o.nsDev || st.Ino != o.nsIno {
		return Process{}, false
	}
	fds, err := unix.Openat(d.fd, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Process{}, false
	}
	defer unix.Close(fds)
	var seen uint64 // a bit for each of o.found
	all := uint64(1)<<len(o.found) - 1
	for seen != all {
		n, err := unix.Getdents(fds, o.dents)
		if err != nil || n == 0 {
			return Process{}, false
		}
		for name := range direntNames(o.dents[:n]) {
			if ino, ok := o.socketInode(fds, name); ok {
				if i := slices.Index(o.found, ino); i >= 0 {
					seen |= 1 << i
				}
			}
		}
	}
	p := Process{PID: d.pid}
	// Read after the descriptors: if the process is gone, this fails.
	comm, err := readFileAt(d.fd, "comm", o.link)
	if err != nil {
		return Process{}, false
	}
	p.Comm = string(bytes.TrimSuffix(comm, []byte("\n")))
	if exe, err := readlinkAt(d.fd, "exe", o.exe); err == nil {
		p.Exe = string(exe)
	}
	return p, true
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
	for _, fd := range []*int{&o.diag, &o.proc, &o.last.fd} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
