//go:build !linux

package podnet

import (
	"errors"
	"fmt"
)

// TableName is the name of Install's tables, one IPv4 (family ip) and one
// IPv6 (family ip6).
const TableName = "sbx-pod"

// Install is Linux only (nftables): elsewhere it returns an error wrapping
// errors.ErrUnsupported.
func Install(r Rules) error {
	if err := r.check(); err != nil {
		return err
	}
	return fmt.Errorf("installing the pod's rules: nftables is Linux only; install them in a Linux pod: %w", errors.ErrUnsupported)
}
