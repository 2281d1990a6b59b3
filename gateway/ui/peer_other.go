//go:build !linux

package ui

import (
	"errors"
	"net"
)

// peerUID would return the uid of the process at the other end of a
// loopback connection; only Linux tells it (/proc/net/tcp), so sessions
// are not bound to a user elsewhere.
func peerUID(local, remote net.Addr) (uint32, error) {
	return 0, errors.ErrUnsupported
}
