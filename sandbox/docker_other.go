//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"io"
)

// ErrDockerStopped is what Wait returns when dockerd stopped the
// command's container (Linux only).
var ErrDockerStopped = errors.New("dockerd stopped the container")

// Docker needs Linux: a sandbox's network namespace is Linux's.
type Docker struct{}

// ConnectDocker needs Linux.
func ConnectDocker(ctx context.Context, host string) (*Docker, error) {
	return nil, errors.ErrUnsupported
}

// Close does nothing.
func (d *Docker) Close() error { return nil }

// MakeNamespace needs Linux.
func (d *Docker) MakeNamespace(ctx context.Context, cs ContainerSpec) error {
	return errors.ErrUnsupported
}

// Create needs Linux.
func (d *Docker) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	return nil, errors.ErrUnsupported
}

// ContainerIDs needs Linux.
func (d *Docker) ContainerIDs(ctx context.Context) ([]string, error) {
	return nil, errors.ErrUnsupported
}

// RemoveContainer needs Linux.
func (d *Docker) RemoveContainer(ctx context.Context, id string) error {
	return errors.ErrUnsupported
}

// EnsureImage needs Linux.
func (d *Docker) EnsureImage(ctx context.Context, ref string, policy PullPolicy, progress io.Writer) (string, error) {
	return "", errors.ErrUnsupported
}
