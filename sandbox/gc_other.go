//go:build !linux

package sandbox

import (
	"context"
	"errors"
)

// OwnerAlive needs Linux's /proc.
func OwnerAlive(st State) bool { return false }

// Owner needs Linux's /proc.
func Owner() (pid int, start uint64, err error) { return 0, 0, errors.ErrUnsupported }

// Leftovers needs Linux.
func Leftovers(stateDir string) ([]string, error) { return nil, errors.ErrUnsupported }

// GC needs Linux.
func GC(ctx context.Context, stateDir string) ([]string, error) { return nil, errors.ErrUnsupported }
