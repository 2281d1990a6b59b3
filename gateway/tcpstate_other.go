//go:build !linux

package gateway

import "net"

// tcpReset reports whether nc's peer reset it; it cannot tell but on
// Linux, and says no: the tunnel then ends as for any other failure.
func tcpReset(nc net.Conn, err error) bool { return false }

// quietConn reports whether nc has nothing to read; off Linux it is not
// looked at, and a kept connection's unasked bytes are caught only when
// they came with the answer before them (upstreamPool.done).
func quietConn(net.Conn) bool { return true }
