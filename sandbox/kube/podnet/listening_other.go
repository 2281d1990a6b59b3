//go:build !linux

package podnet

import (
	"errors"
	"fmt"
	"net/netip"
)

// listening is Linux only (sock_diag): elsewhere it returns an error
// wrapping errors.ErrUnsupported.
func listening(netip.AddrPort) (bool, error) {
	return false, fmt.Errorf("finding a listening socket: sock_diag is Linux only: %w", errors.ErrUnsupported)
}
