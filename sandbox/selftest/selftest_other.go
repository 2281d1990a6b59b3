//go:build !linux

package selftest

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Run needs Linux: sandboxes run there only.
func Run(context.Context, Options, io.Writer) (Summary, error) {
	return Summary{}, fmt.Errorf("selftest: %w: sandboxes run on Linux only", errors.ErrUnsupported)
}

// RunProbe needs Linux: the probe runs in a sandbox.
func RunProbe(context.Context, io.Reader, io.Writer) error {
	return fmt.Errorf("the selftest probe: %w", errors.ErrUnsupported)
}

// RunNetnsChild needs Linux: the probe runs in a sandbox.
func RunNetnsChild(context.Context, io.Writer, string) error {
	return fmt.Errorf("the selftest probe: %w", errors.ErrUnsupported)
}
