//go:build !linux

package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// OriginalDst is Linux only (SO_ORIGINAL_DST): elsewhere it returns an
// error wrapping errors.ErrUnsupported.
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("original destination: %w", errors.ErrUnsupported)
}
