//go:build !linux

package gateway

import "net"

// tcpReset reports whether nc's peer reset it; it cannot tell but on
// Linux, and says no: the tunnel then ends as for any other failure.
func tcpReset(nc net.Conn, err error) bool { return false }
