//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
)

// PacketLog needs Linux's nfnetlink_log.
type PacketLog struct{}

// OpenPacketLog needs Linux's nfnetlink_log: it returns an error wrapping
// errors.ErrUnsupported.
func OpenPacketLog(nsPath string, group uint16) (*PacketLog, error) {
	return nil, fmt.Errorf("NFLOG reports need Linux: %w", errors.ErrUnsupported)
}

// Run returns an error wrapping errors.ErrUnsupported.
func (l *PacketLog) Run(fn func(Packet)) error {
	return fmt.Errorf("NFLOG reports need Linux: %w", errors.ErrUnsupported)
}

// Lost returns 0.
func (l *PacketLog) Lost() uint64 { return 0 }

// Close does nothing.
func (l *PacketLog) Close() error { return nil }
