package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
)

// systemBundles are where Linux distributions keep the bundle of trusted
// roots: Debian and Ubuntu, Fedora and RHEL, openSUSE, Alpine, and the
// extracted RHEL one.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
}

// caLifetime is how long a sandbox's inspection CA is valid: the most
// docs/inspection.md allows. A sandbox that runs longer gets certificates its
// clients refuse, which the close records say.
const caLifetime = 7 * 24 * time.Hour

// inspection is what TLS inspection needs: the gateway's CA, the trust
// the sandbox gets, and the roots upstreams are verified against.
type inspection struct {
	ca            *gateway.CA
	trust         *sandbox.Trust
	upstreamRoots *x509.CertPool // nil: the host's
}

// trustTarget says whose filesystem the sandbox sees, for the system
// bundles to bind the trusted bundle over: the host's own, a root
// directory, or an image's (which sbx cannot see before it runs, so only
// the variables point at the bundle there).
type trustTarget struct {
	host bool
	dir  string // with host false: a root directory, or "" for an image
}

// newInspection makes a CA for one sandbox and what its command must be
// given to trust it (docs/inspection.md): the host's roots with the CA added
// (never instead of them), bound over the system bundles the sandbox's
// filesystem has, and, for Java, a truststore of the same. upstreamCA, if
// set, is a PEM file of roots to trust upstream besides the host's.
func newInspection(target trustTarget, upstreamCA string) (*inspection, error) {
	roots, err := hostRoots()
	if err != nil {
		return nil, err
	}
	ca, err := gateway.NewCA("", caLifetime)
	if err != nil {
		return nil, fmt.Errorf("making the sandbox's inspection CA: %w", err)
	}
	in := &inspection{ca: ca, trust: &sandbox.Trust{CertPEM: ca.CertPEM(), Roots: roots}}
	for _, p := range systemBundles {
		switch {
		case target.host:
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				in.trust.Replace = append(in.trust.Replace, p)
			}
		case target.dir != "":
			// Lstat: a link in the user's root directory is not followed
			// out of it.
			if fi, err := os.Lstat(filepath.Join(target.dir, p)); err == nil && fi.Mode().IsRegular() {
				in.trust.Replace = append(in.trust.Replace, p)
			}
		}
	}
	in.trust.Java = true
	if upstreamCA != "" {
		if in.upstreamRoots, err = upstreamRoots(upstreamCA); err != nil {
			return nil, err
		}
	}
	return in, nil
}

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

// hostRoots reads the host's system bundle, the first of systemBundles
// that exists.
func hostRoots() ([]byte, error) {
	for _, p := range systemBundles {
		data, err := os.ReadFile(p)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading the host's trusted roots: %w", err)
		}
	}
	return nil, fmt.Errorf("no bundle of trusted roots on this host (looked for %s); install ca-certificates, which TLS inspection adds the sandbox's CA to", systemBundles[0])
}
