//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"io"
)

// EnsureImage needs Linux.
func (c *Containerd) EnsureImage(ctx context.Context, ref string, policy PullPolicy, progress io.Writer) (string, error) {
	return "", errors.ErrUnsupported
}

// ImportImage needs Linux.
func (c *Containerd) ImportImage(ctx context.Context, r io.Reader) ([]string, error) {
	return nil, errors.ErrUnsupported
}
