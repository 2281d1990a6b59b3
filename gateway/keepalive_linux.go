package gateway

import (
	"fmt"
	"strings"
	"syscall"
)

// keepAliveInherited: on Linux a TCP connection accepted from a listening
// socket is a clone of it, with its SO_KEEPALIVE, TCP_KEEPIDLE,
// TCP_KEEPINTVL and TCP_KEEPCNT, so the keep-alive of the gateway's
// client connections is set once, on each listener (listenerKeepAlive).
const keepAliveInherited = true

// listenerKeepAlive sets on c, a TCP listening socket (network "tcp",
// "tcp4" or "tcp6"; any other is left alone), the keep-alive that Go
// sets on each connection it accepts by default, for its connections to
// inherit: a probe after keepAliveIdle seconds without a byte either way,
// then every keepAliveInterval seconds, and the connection dropped after
// keepAliveCount unanswered. The same four calls on each connection were
// a tenth of the system calls of opening a tunnel.
func listenerKeepAlive(network string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	opts := [...]struct {
		level, name, value int
		what               string
	}{
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle, "TCP_KEEPIDLE"},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval, "TCP_KEEPINTVL"},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount, "TCP_KEEPCNT"},
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		for _, o := range opts {
			if err := syscall.SetsockoptInt(int(fd), o.level, o.name, o.value); err != nil {
				serr = fmt.Errorf("setting %s on a listener: %w", o.what, err)
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
