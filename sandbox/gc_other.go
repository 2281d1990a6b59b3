//go:build !linux

package sandbox

import (
	"context"
	"errors"
)

// OwnerAlive needs Linux's /proc.
func OwnerAlive(st State) bool { return false }

// ThisProcess needs Linux's /proc.
func ThisProcess() (pid int, start uint64, err error) { return 0, 0, errors.ErrUnsupported }

// ContainerRuntime is what garbage collection needs of a container runtime.
type ContainerRuntime interface {
	ContainerIDs(ctx context.Context) ([]string, error)
	RemoveContainer(ctx context.Context, id string) error
}

// Leftovers needs Linux.
func Leftovers(ctx context.Context, stateDir string, rt ContainerRuntime) ([]string, error) {
	return nil, errors.ErrUnsupported
}

// GC needs Linux.
func GC(ctx context.Context, stateDir string, rt ContainerRuntime) ([]string, error) {
	return nil, errors.ErrUnsupported
}
