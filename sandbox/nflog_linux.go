package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nfnetlink_log, from <linux/netfilter/nfnetlink_log.h> and
// <linux/netfilter/nfnetlink.h>.
const (
	nfnlSubsysULOG  = 4
	nfulnlMsgPacket = nfnlSubsysULOG<<8 | 0
	nfulnlMsgConfig = nfnlSubsysULOG<<8 | 1

	nfulaCfgCmd     = 1
	nfulaCfgMode    = 2
	nfulaCfgTimeout = 4
	nfulaCfgQthresh = 5
	nfulaCfgFlags   = 6

	nfulnlCfgCmdBind     = 1
	nfulnlCfgCmdPFBind   = 3
	nfulnlCfgCmdPFUnbind = 4

	nfulnlCopyPacket = 2
	nfulnlCfgFSeq    = 0x0001

	nfulaPayload = 9
	nfulaSeq     = 12
)

// How the kernel is asked to report. The copy range covers an IPv4
// header with options (60 bytes) or an IPv6 header with a few extension
// headers, and the transport header. Each report is sent as the packet is
// logged (a queue threshold of one), in the sender's own system call, so
// that a report is in the socket before the process that sent the packet
// can end: Close can then read every report of a command that has ended,
// with no batch left in the kernel. The receive buffer holds some ten
// thousand reports while Run catches up.
const (
	packetLogCopyRange = 128
	packetLogQueue     = 1
	packetLogFlush     = 1
	packetLogRcvBuf    = 4 << 20
	// packetLogReadBuf holds the largest batch the kernel sends (at most
	// 128 KiB, its limit for a log buffer).
	packetLogReadBuf = 128 << 10
)

// PacketLog receives the reports of one NFLOG group in one network
// namespace: the packets that the namespace's rules log with
// -j NFLOG --nflog-group <group>. It is made by OpenPacketLog, read by
// Run and ended by Close, which the caller must call: until then the
// namespace's kernel state lives on, even after the namespace is
// deleted. Lost and Close are safe to call from any goroutine.
type PacketLog struct {
	nsPath string
	group  uint16
	f      *os.File // the NETLINK_NETFILTER socket, made in the namespace
	rc     syscall.RawConn

	closed    atomic.Bool
	runMu     sync.Mutex // held by Run while it reads; Close waits for it
	closeOnce sync.Once
	closeErr  error
	running   atomic.Bool
	lost      atomic.Uint64

	// early holds what the kernel sent while OpenPacketLog waited for its
	// acknowledgement; Run reads it first.
	early []byte
	// Run's own: the sequence number the next report should carry, and
	// whether an overrun was counted ahead of the gap that shows it.
	nextSeq uint32
	credit  bool
}

// OpenPacketLog opens an NFLOG listener for group in the network
// namespace at nsPath (such as /var/run/netns/sbx-<id>). NFLOG groups
// belong to a namespace, so the listener is made inside it; only one
// listener may hold a group in a namespace, and a second one gets an
// error. It needs root (CAP_SYS_ADMIN to enter the namespace,
// CAP_NET_ADMIN to bind the group). Reports of IPv4 and IPv6 packets
// alike arrive, whichever of iptables and ip6tables logged them.
func OpenPacketLog(nsPath string, group uint16) (_ *PacketLog, retErr error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	fd := -1
	err = inNetns(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket in %s: %w", nsPath, err)
	}
	l := &PacketLog{nsPath: nsPath, group: group, f: os.NewFile(uintptr(fd), "nflog:"+nsPath)}
	defer func() {
		if retErr != nil {
			l.f.Close()
		}
	}()
	if l.rc, err = l.f.SyscallConn(); err != nil {
		return nil, err
	}
	if err := setupKernelSocket(l.rc, packetLogRcvBuf); err != nil {
		return nil, fmt.Errorf("setting up the NFLOG socket in %s: %w", nsPath, err)
	}

	// Old kernels hand NFLOG's packets only to the logger bound to their
	// family; newer ones have no need of this. It is best-effort: a
	// failure here still leaves the group bound below.
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		l.configure(family, 0, attr{nfulaCfgCmd, []byte{nfulnlCfgCmdPFUnbind}})
		l.configure(family, 0, attr{nfulaCfgCmd, []byte{nfulnlCfgCmdPFBind}})
	}

	// One message binds the group and sets it up, so that no report is
	// made under the kernel's defaults. The sequence numbers tell Run how
	// many reports were lost.
	mode := make([]byte, 6) // struct nfulnl_msg_config_mode
	binary.BigEndian.PutUint32(mode, packetLogCopyRange)
	mode[4] = nfulnlCopyPacket
	err = l.configure(unix.AF_UNSPEC, group,
		attr{nfulaCfgCmd, []byte{nfulnlCfgCmdBind}},
		attr{nfulaCfgMode, mode},
		attr{nfulaCfgQthresh, binary.BigEndian.AppendUint32(nil, packetLogQueue)},
		attr{nfulaCfgTimeout, binary.BigEndian.AppendUint32(nil, packetLogFlush)},
		attr{nfulaCfgFlags, binary.BigEndian.AppendUint16(nil, nfulnlCfgFSeq)})
	switch {
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EPERM) && hasCapNetAdmin():
		return nil, fmt.Errorf("binding NFLOG group %d in %s: another listener holds it (close it first, or use another group): %w", group, nsPath, err)
	case errors.Is(err, unix.EPERM):
		return nil, fmt.Errorf("binding NFLOG group %d in %s: %w (it needs CAP_NET_ADMIN; run sbx as root)", group, nsPath, err)
	case err != nil:
		return nil, fmt.Errorf("binding NFLOG group %d in %s: %w", group, nsPath, err)
	}
	return l, nil
}

// hasCapNetAdmin reports whether this process has CAP_NET_ADMIN, which
// tells a group held by someone else (EPERM with it) from a missing
// privilege (EPERM without it).
func hasCapNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_NET_ADMIN) != 0
}

// setupKernelSocket sizes a netlink socket's receive buffer (beyond the
// system's limit where allowed) and binds and connects it to the
// kernel. Connected, it takes messages from the kernel alone: a process
// in the namespace cannot send it forged ones.
func setupKernelSocket(rc syscall.RawConn, rcvbuf int) error {
	var err error
	cerr := rc.Control(func(fd uintptr) {
		if rcvbuf > 0 {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
			}
		}
		if err = unix.Bind(int(fd), &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			err = fmt.Errorf("binding: %w", err)
			return
		}
		if err = unix.Connect(int(fd), &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			err = fmt.Errorf("connecting to the kernel: %w", err)
		}
	})
	return combine(cerr, err)
}

// attr is one netlink attribute of a request.
type attr struct {
	typ  uint16
	data []byte
}

// appendNetlinkMsg appends to b a netlink message of type typ with flags
// and seq, whose payload is head followed by attrs.
func appendNetlinkMsg(b []byte, typ, flags uint16, seq uint32, head []byte, attrs ...attr) []byte {
	start := len(b)
	b = append(b, make([]byte, unix.SizeofNlMsghdr)...)
	b = append(b, head...)
	for _, a := range attrs {
		b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(a.data)))
		b = binary.NativeEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	h := b[start:]
	binary.NativeEndian.PutUint32(h[0:4], uint32(len(h)))
	binary.NativeEndian.PutUint16(h[4:6], typ)
	binary.NativeEndian.PutUint16(h[6:8], flags)
	binary.NativeEndian.PutUint32(h[8:12], seq)
	return b
}

// configure sends one NFULNL_MSG_CONFIG for group and family and waits
// (up to 5 s) for the kernel's answer. Reports that arrive meanwhile are
// kept for Run.
func (l *PacketLog) configure(family uint8, group uint16, attrs ...attr) error {
	const seq = 1
	nfgen := []byte{family, 0, 0, 0} // struct nfgenmsg: family, version 0, group (big endian)
	binary.BigEndian.PutUint16(nfgen[2:], group)
	msg := appendNetlinkMsg(nil, nfulnlMsgConfig, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, nfgen, attrs...)
	var serr error
	if err := l.rc.Write(func(fd uintptr) bool {
		_, serr = unix.Write(int(fd), msg)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	l.f.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer l.f.SetReadDeadline(time.Time{})
	buf := make([]byte, packetLogReadBuf)
	for {
		n, err := l.read(buf)
		if errors.Is(err, unix.ENOBUFS) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the kernel's answer: %w", err)
		}
		for m := range netlinkMessages(buf[:n]) {
			if m.typ == unix.NLMSG_ERROR && m.seq == seq && len(m.data) >= 4 {
				if errno := int32(binary.NativeEndian.Uint32(m.data)); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
			if m.typ == nfulnlMsgPacket {
				l.early = appendNetlinkMsg(l.early, m.typ, m.flags, m.seq, m.data)
			}
		}
	}
}

// read reads one datagram from the kernel into buf, waiting in the
// runtime's poller (so that Close or a deadline ends the wait).
func (l *PacketLog) read(buf []byte) (int, error) {
	var (
		n    int
		rerr error
	)
	err := l.rc.Read(func(fd uintptr) bool {
		n, rerr = recvFromKernel(int(fd), buf)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// recvFromKernel reads one datagram into buf, skipping any that did not
// come from the kernel (port id 0). It allocates nothing.
func recvFromKernel(fd int, buf []byte) (int, error) {
	for {
		var sa unix.RawSockaddrNetlink
		salen := uint32(unix.SizeofSockaddrNetlink)
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&salen)))
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return 0, errno
		case sa.Pid != 0:
			continue
		}
		return int(n), nil
	}
}

// netlinkMsg is one message of a netlink datagram; data is its payload
// and aliases the datagram.
type netlinkMsg struct {
	typ, flags uint16
	seq        uint32
	data       []byte
}

// netlinkMessages yields the messages of a netlink datagram, stopping at
// the first malformed header.
func netlinkMessages(b []byte) func(yield func(netlinkMsg) bool) {
	return func(yield func(netlinkMsg) bool) {
		for len(b) >= unix.SizeofNlMsghdr {
			n := int(binary.NativeEndian.Uint32(b[0:4]))
			if n < unix.SizeofNlMsghdr || n > len(b) {
				return
			}
			m := netlinkMsg{
				typ:   binary.NativeEndian.Uint16(b[4:6]),
				flags: binary.NativeEndian.Uint16(b[6:8]),
				seq:   binary.NativeEndian.Uint32(b[8:12]),
				data:  b[unix.SizeofNlMsghdr:n],
			}
			if !yield(m) {
				return
			}
			b = b[min(nlAlign(n), len(b)):]
		}
	}
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// netlinkAttrs yields the type (without the nested and byte-order
// flags) and payload of each attribute in b, stopping at the first
// malformed one.
func netlinkAttrs(b []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.SizeofRtAttr {
			n := int(binary.NativeEndian.Uint16(b[0:2]))
			if n < unix.SizeofRtAttr || n > len(b) {
				return
			}
			if !yield(binary.NativeEndian.Uint16(b[2:4])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[unix.SizeofRtAttr:n]) {
				return
			}
			b = b[min(nlAlign(n), len(b)):]
		}
	}
}

// Run reads reports until Close, calling fn for each packet, in the
// order the kernel logged them, on Run's goroutine; it returns nil after
// Close, having called fn for every report that was in the socket when
// Close was called, or the error that stopped it reading. While fn runs
// no report is read: a slow fn makes the kernel drop reports, which Lost
// counts. Only one Run may read a PacketLog at a time, and fn must not
// call Close (which waits for Run).
func (l *PacketLog) Run(fn func(Packet)) error {
	if !l.running.CompareAndSwap(false, true) {
		return fmt.Errorf("reading NFLOG group %d in %s: another Run is reading it", l.group, l.nsPath)
	}
	defer l.running.Store(false)
	l.runMu.Lock()
	defer l.runMu.Unlock()
	if early := l.early; early != nil {
		l.early = nil
		l.dispatch(early, fn)
	}
	buf := make([]byte, packetLogReadBuf)
	var drained int
	for {
		n, err := l.read(buf)
		switch {
		case err == nil && l.closed.Load():
			// After Close, what was queued is read, but no more than the
			// socket could hold: a flood that goes on does not hold
			// Close up.
			if drained += n; drained > 2*packetLogRcvBuf {
				return nil
			}
			l.dispatch(buf[:n], fn)
		case err == nil:
			l.dispatch(buf[:n], fn)
		case l.closed.Load():
			// Close's deadline: the socket is empty.
			return nil
		case errors.Is(err, unix.ENOBUFS):
			// The kernel dropped reports for want of room. Their number
			// shows as a gap in the sequence numbers once reports arrive
			// again; until then one is counted, so that Lost is not 0.
			if !l.credit {
				l.lost.Add(1)
				l.credit = true
			}
		default:
			return fmt.Errorf("reading NFLOG group %d in %s: %w", l.group, l.nsPath, err)
		}
	}
}

// dispatch calls fn for each packet report in the datagram b and counts
// the reports that the sequence numbers show lost.
func (l *PacketLog) dispatch(b []byte, fn func(Packet)) {
	for m := range netlinkMessages(b) {
		if m.typ != nfulnlMsgPacket || len(m.data) < 4 {
			continue // NLMSG_DONE ends a batch; nothing else is expected
		}
		var (
			payload []byte
			seq     uint32
			hasSeq  bool
		)
		for typ, data := range netlinkAttrs(m.data[4:]) { // after struct nfgenmsg
			switch {
			case typ == nfulaPayload:
				payload = data
			case typ == nfulaSeq && len(data) == 4:
				seq, hasSeq = binary.BigEndian.Uint32(data), true
			}
		}
		if hasSeq {
			if gap := seq - l.nextSeq; gap != 0 && gap < 1<<31 {
				// The reports queued before an overrun come after its
				// ENOBUFS, with no gap; the first gap is the overrun's.
				if l.credit {
					gap-- // counted when the overrun was seen
					l.credit = false
				}
				l.lost.Add(uint64(gap))
			}
			l.nextSeq = seq + 1
		}
		// A report without an IP header at its start is not one the
		// rules make (they log IP packets in the OUTPUT hook); it is
		// skipped.
		if p, ok := parsePayload(payload); ok {
			fn(p)
		}
	}
}

// Lost returns how many reports the kernel dropped (ENOBUFS overruns)
// so far: the gaps in the reports' sequence numbers, and one for an
// overrun whose gap no report has shown yet. It is exact but for the
// rare reports the kernel cannot allocate memory for, which it drops
// before numbering them.
func (l *PacketLog) Lost() uint64 { return l.lost.Load() }

// Close stops the listener and releases the group. A Run reading it first
// reads what is left in the socket (the reports of every packet logged
// before Close, since each is sent as it is logged) and returns nil; Close
// waits for it. Calling it again returns the first call's result.
func (l *PacketLog) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.f.SetReadDeadline(time.Now()) // ends Run's wait once the socket is empty
		l.runMu.Lock()
		l.closeErr = l.f.Close()
		l.runMu.Unlock()
	})
	return l.closeErr
}
