//go:build !linux

package gateway

import (
	"errors"
	"fmt"
	"syscall"
)

// bindToDevice is Linux only (SO_BINDTODEVICE): elsewhere a socket cannot
// be bound to an interface, and asking for it is an error wrapping
// errors.ErrUnsupported.
func bindToDevice(iface string) (func(network, address string, c syscall.RawConn) error, error) {
	return nil, fmt.Errorf("binding a listener to interface %s: %w", iface, errors.ErrUnsupported)
}
