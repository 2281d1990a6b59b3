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

// quietConn reports whether nc has nothing to read and has not been
// ended by its peer: an upstream connection kept between requests must
// be, or what the upstream sent unasked (a second answer to one request)
// would be read as the answer to the next one, another host's maybe. One
// non-blocking peek; a connection that is not a socket is taken as quiet.
func quietConn(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	quiet := true
	raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		quiet = n < 0 && (err == unix.EAGAIN || err == unix.EWOULDBLOCK)
	})
	return quiet
}
