package run

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
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

// caMaterial is what a sandbox's inspection needs that depends on nothing
// of its Spec: its own CA, and the trust of the host's roots with it
// added, whose Java truststore is being made (sandbox.Trust.StartJava).
type caMaterial struct {
	ca    *gateway.CA
	trust *sandbox.Trust
}

// newCAMaterial reads the host's roots and makes a CA, and starts the Java
// truststore of both.
func newCAMaterial() (caMaterial, error) {
	roots, err := hostRoots()
	if err != nil {
		return caMaterial{}, err
	}
	ca, err := gateway.NewCA("", CALifetime)
	if err != nil {
		return caMaterial{}, fmt.Errorf("making the sandbox's inspection CA: %w", err)
	}
	trust := &sandbox.Trust{CertPEM: ca.CertPEM(), Roots: roots, Java: true}
	trust.StartJava()
	return caMaterial{ca: ca, trust: trust}, nil
}

// ahead is the CA material PrepareStart makes for the next Start.
var ahead struct {
	mu       sync.Mutex
	material func() (caMaterial, error) // nil: none
}

// PrepareStart makes, in the background, what the next Start of this
// process needs that depends on nothing of its Spec: the sandbox's own
// inspection CA, the trust of the host's roots with it, and their Java
// truststore (some milliseconds of CPU). A program that starts one
// sandbox calls it first (sbx run does, before it connects to the
// runtime), so that the work goes beside its waits for the runtime rather
// than beside the container's creation. Start takes what it made once:
// no two sandboxes share a CA.
func PrepareStart() {
	f := sync.OnceValues(newCAMaterial)
	go f()
	ahead.mu.Lock()
	ahead.material = f
	ahead.mu.Unlock()
}

// takeCAMaterial returns what PrepareStart made, once, or new material
// when there is none.
func takeCAMaterial() (caMaterial, error) {
	ahead.mu.Lock()
	f := ahead.material
	ahead.material = nil
	ahead.mu.Unlock()
	if f == nil {
		return newCAMaterial()
	}
	return f()
}

// newInspection makes a CA for one sandbox (or takes PrepareStart's) and
// what its command must be given to trust it (docs/inspection.md): the
// host's roots with the CA added (never instead of them), bound over the
// system bundles the sandbox's filesystem has, and, for Java, a
// truststore of the same. upstream, if not nil, are the roots upstreams
// are verified against.
func newInspection(target trustTarget, upstream *x509.CertPool) (*inspection, error) {
	m, err := takeCAMaterial()
	if err != nil {
		return nil, err
	}
	in := &inspection{ca: m.ca, trust: m.trust, upstreamRoots: upstream}
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
