package run

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

// CALifetime is how long a sandbox's inspection CA is valid: the most
// docs/inspection.md allows. A sandbox that runs longer gets certificates
// its clients refuse, which the close records say.
const CALifetime = 7 * 24 * time.Hour

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
// given to trust it (docs/inspection.md): the host's roots with the CA
// added (never instead of them), bound over the system bundles the
// sandbox's filesystem has, and, for Java, a truststore of the same.
// upstream, if not nil, are the roots upstreams are verified against.
func newInspection(target trustTarget, upstream *x509.CertPool) (*inspection, error) {
	roots, err := hostRoots()
	if err != nil {
		return nil, err
	}
	ca, err := gateway.NewCA("", CALifetime)
	if err != nil {
		return nil, fmt.Errorf("making the sandbox's inspection CA: %w", err)
	}
	in := &inspection{ca: ca, trust: &sandbox.Trust{CertPEM: ca.CertPEM(), Roots: roots}, upstreamRoots: upstream}
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
	return in, nil
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
