//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"time"
)

// Containerd needs Linux.
type Containerd struct{}

// ConnectContainerd needs Linux.
func ConnectContainerd(ctx context.Context, socket string) (*Containerd, error) {
	return nil, errors.ErrUnsupported
}

// ConnectContainerdToCreate needs Linux.
func ConnectContainerdToCreate(ctx context.Context, socket string) (*Containerd, error) {
	return nil, errors.ErrUnsupported
}

// PrepareCreate does nothing.
func (c *Containerd) PrepareCreate(ctx context.Context) {}

// Close does nothing.
func (c *Containerd) Close() error { return nil }

// Run needs Linux.
func (c *Containerd) Run(ctx context.Context, cs ContainerSpec, stdio Stdio, grace time.Duration) (int, error) {
	return -1, errors.ErrUnsupported
}

// Create needs Linux.
func (c *Containerd) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	return nil, errors.ErrUnsupported
}

// ContainerIDs needs Linux.
func (c *Containerd) ContainerIDs(ctx context.Context) ([]string, error) {
	return nil, errors.ErrUnsupported
}

// RemoveContainer needs Linux.
func (c *Containerd) RemoveContainer(ctx context.Context, id string) error {
	return errors.ErrUnsupported
}

// DefaultLimits are the limits a sandbox gets unless told; on this
// platform only the processes limit is known.
func DefaultLimits() Limits { return Limits{Pids: DefaultPidsLimit} }

// swapAccounted reports whether the kernel limits memory and swap
// together; on this platform it is not known to.
var swapAccounted = func() bool { return false }
