package gateway

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpReset reports whether the kernel has closed nc's TCP connection
// (state TCP_CLOSE) after a failure err of a reset (ECONNRESET) or of a
// write to a peer gone (EPIPE): then nc's peer reset it. A splice moves
// bytes between two connections and its error does not say which failed;
// the state does.
func tcpReset(nc net.Conn, err error) bool {
	if !isResetError(err) {
		return false
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, rerr := sc.SyscallConn()
	if rerr != nil {
		return false
	}
	closed := false
	raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && info.State == unix.BPF_TCP_CLOSE
	})
	return closed
}

// quietCheck is how an upstream connection is looked at before it is
// reused (quietConn): made once with the connection, so that looking
// allocates nothing on the requests' path.
type quietCheck struct {
	raw   syscall.RawConn // nil (or a nil check): not a socket, taken as quiet
	quiet bool
	peek  func(fd uintptr)
}

// newQuietCheck makes nc's quietCheck.
func newQuietCheck(nc net.Conn) *quietCheck {
	q := &quietCheck{}
	if sc, ok := nc.(syscall.Conn); ok {
		q.raw, _ = sc.SyscallConn()
	}
	q.peek = func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		q.quiet = n < 0 && (err == unix.EAGAIN || err == unix.EWOULDBLOCK)
	}
	return q
}

// quietConn reports whether the connection has nothing to read and has
// not been ended by its peer: an upstream connection kept between
// requests must be, or what the upstream sent unasked (a second answer to
// one request) would be read as the answer to the next one, another
// host's maybe. One non-blocking peek; it sees what came before it.
func (q *quietCheck) quietConn() bool {
	if q == nil || q.raw == nil {
		return true
	}
	q.quiet = true
	q.raw.Control(q.peek)
	return q.quiet
}
