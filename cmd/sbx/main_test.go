package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps what the tests' sandboxes leave (each one's record,
// decision log and journal under logRoot) out of the machine's
// /var/lib/sbx/sandboxes: in-process runs and the binaries buildSbx
// makes both use a directory of the test run's own, removed at its end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sbx-test-sandboxes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
