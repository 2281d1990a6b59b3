package main

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/sbx-dev/sbx/sandbox/run"
)

// caLifetime is how long an inspection CA is valid (sbx gateway's too):
// the most docs/inspection.md allows.
const caLifetime = run.CALifetime

// upstreamRoots returns the host's roots and the certificates of the PEM
// file path, which --upstream-ca names.
func upstreamRoots(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: reading the host's roots: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it; give the CA that signs your upstreams, PEM-encoded", path)
	}
	return pool, nil
}
