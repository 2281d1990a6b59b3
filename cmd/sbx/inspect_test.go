package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpstreamRoots: --upstream-ca adds the certificates of a PEM file to
// the host's roots, and a file without one is refused, saying so.
func TestUpstreamRoots(t *testing.T) {
	dir := t.TempDir()
	none := filepath.Join(dir, "none.pem")
	os.WriteFile(none, []byte("x"), 0o644)
	if _, err := upstreamRoots(none); err == nil || !strings.Contains(err.Error(), "--upstream-ca "+none+": no PEM certificate") {
		t.Errorf("--upstream-ca of a file with no certificate: got %v", err)
	}
	if _, err := upstreamRoots(filepath.Join(dir, "missing.pem")); err == nil || !strings.HasPrefix(err.Error(), "--upstream-ca: ") {
		t.Errorf("--upstream-ca of a missing file: got %v", err)
	}
}
