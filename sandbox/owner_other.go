//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
)

// Owners needs Linux's sock_diag and procfs.
type Owners struct{}

// NewOwners needs Linux's sock_diag and procfs: it returns an error
// wrapping errors.ErrUnsupported.
func NewOwners(nsPath string) (*Owners, error) {
	return nil, fmt.Errorf("finding sockets' processes needs Linux: %w", errors.ErrUnsupported)
}

// Lookup returns an error wrapping errors.ErrUnsupported.
func (o *Owners) Lookup(proto string, local, remote netip.AddrPort) (Process, error) {
	return Process{}, fmt.Errorf("finding a socket's process needs Linux: %w", errors.ErrUnsupported)
}

// Close does nothing.
func (o *Owners) Close() error { return nil }
