//go:build !linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// runSelftest needs Linux: sandboxes run there only.
func runSelftest(*cobra.Command, selftestOptions) (int, error) {
	return 0, fmt.Errorf("sbx selftest: %w: sandboxes run on Linux only", errors.ErrUnsupported)
}

func runProbe(context.Context, io.Reader, io.Writer) error {
	return fmt.Errorf("the selftest probe: %w", errors.ErrUnsupported)
}

func runNetnsChild(context.Context, io.Writer, string) error {
	return fmt.Errorf("the selftest probe: %w", errors.ErrUnsupported)
}
