//go:build !linux

package gateway

import "net"

// tcpReset reports whether nc's peer reset it; it cannot tell but on
// Linux, and says no: the tunnel then ends as for any other failure.
func tcpReset(nc net.Conn, err error) bool { return false }

// quietCheck would look at an upstream connection before it is reused;
// off Linux it does not, and a kept connection's unasked bytes are caught
// only when they are buffered already (upstreamPool.reusable).
type quietCheck struct{}

func newQuietCheck(net.Conn) *quietCheck { return nil }

func (*quietCheck) quietConn() bool { return true }
