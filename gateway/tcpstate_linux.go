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
