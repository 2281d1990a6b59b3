package gateway

import (
	"bytes"
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/netpolicy"
)

// MaxCAValidity is the longest a sandbox's CA certificate, and so every
// leaf it mints, may be valid (docs/inspection.md).
const MaxCAValidity = 7 * 24 * time.Hour

// defaultMaxLeaves is how many leaf certificates a CA keeps. A cached leaf
// takes about 4 KiB (its DER and its parsed form), so a full cache takes
// 16 to 18 MiB, depending on the length of the names.
const defaultMaxLeaves = 4096

// clockSkew is how far in the past a certificate's validity starts, so that
// a sandbox whose clock is a little behind the host's still accepts it.
const clockSkew = time.Minute

// ticketHostPrefix starts the SessionState.Extra entry that binds a session
// ticket to the host it was issued for (see ServerConfig).
const ticketHostPrefix = "sbx-host/1:"

// CA mints the leaf certificates the gateway shows a sandbox for the hosts
// it inspects (docs/inspection.md). NewCA's private key and the leaves' key
// exist only in memory; a CA serves one sandbox and lasts no longer than
// its certificate, at most MaxCAValidity. Where the gateway runs apart
// from what starts the sandbox (sbx kube's gateway pod), the CA's key is
// handed over in a file (MarshalPEM, ParseCA, ReadCAFile); the leaves' key
// is still made where they are minted.
//
// A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certDER []byte
	certPEM []byte
	key     crypto.Signer // *ecdsa.PrivateKey for NewCA's; ParseCA's may be another

	// leafKey is the one key of every leaf, made with the CA, so minting a
	// leaf costs one signature rather than a key generation too. Sharing
	// it costs nothing a separate key would protect: whoever could read
	// one leaf key from the gateway's memory could read the CA's key.
	leafKey *ecdsa.PrivateKey

	// ticketKey encrypts the session tickets of the connections that
	// ServerConfig's configurations serve, so a ticket resumes a session
	// only with the CA (the sandbox) that issued it.
	ticketKey [32]byte

	mu        sync.Mutex
	leaves    map[string]*leafEntry // by host; in flight or minted
	lru       list.List             // of *leafEntry, most recently used first
	maxLeaves int                   // bound on len(leaves); tests lower it

	mints atomic.Int64 // leaves minted, for tests
}

// leafEntry is one host's leaf in the cache. ready is closed once cert or
// err is set; until then the entry is in flight and later callers for the
// host wait on ready rather than minting again.
type leafEntry struct {
	host  string
	elem  *list.Element // in CA.lru; nil once evicted or failed
	ready chan struct{}
	cert  *tls.Certificate
	err   error
}

// NewCA makes the CA of the sandbox id: an ECDSA P-256 key held only in
// memory and a self-signed certificate named "sbx sandbox <id> inspection
// CA" that may sign leaf certificates but no other CA (path length 0), with
// no name constraints (the hosts to inspect are arbitrary) and a random
// 128-bit serial number. The certificate is valid from a minute ago until
// validFor from now; validFor 0 means MaxCAValidity, and a negative
// validFor or one over MaxCAValidity is an error.
func NewCA(id string, validFor time.Duration) (*CA, error) {
	switch {
	case validFor == 0:
		validFor = MaxCAValidity
	case validFor < 0 || validFor > MaxCAValidity:
		return nil, fmt.Errorf("making the CA of sandbox %s: validity %v, want at most %v", id, validFor, MaxCAValidity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the CA of sandbox %s: generating its key: %w", id, err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the CA of sandbox %s: generating the leaf key: %w", id, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("making the CA of sandbox %s: %w", id, err)
	}
	now := time.Now()
	name := pkix.Name{
		Organization: []string{"sbx"},
		CommonName:   fmt.Sprintf("sbx sandbox %s inspection CA", id),
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               name,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		// SubjectKeyId is left empty: CreateCertificate derives it from
		// the key for a CA, and each leaf's AuthorityKeyId from it.
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("making the CA of sandbox %s: signing its certificate: %w", id, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("making the CA of sandbox %s: parsing its certificate: %w", id, err)
	}
	return newCA(cert, key, leafKey), nil
}

// newCA returns the CA of cert, whose private key is key, minting leaves
// with leafKey.
func newCA(cert *x509.Certificate, key crypto.Signer, leafKey *ecdsa.PrivateKey) *CA {
	ca := &CA{
		cert:      cert,
		certDER:   cert.Raw,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:       key,
		leafKey:   leafKey,
		leaves:    map[string]*leafEntry{},
		maxLeaves: defaultMaxLeaves,
	}
	rand.Read(ca.ticketKey[:]) // never fails (crypto/rand.Read)
	return ca
}

// The reasons ParseCA and ReadCAFile refuse a CA, for errors.Is.
var (
	// ErrNotCA: the PEM is not one CA certificate (basic constraints
	// CA, key usage certificate signing) and one private key.
	ErrNotCA = errors.New("not a CA certificate and its private key")
	// ErrCAKeyMismatch: the private key is not the certificate's.
	ErrCAKeyMismatch = errors.New("the private key is not the CA certificate's")
	// ErrCAValidity: the certificate expired, is not valid yet, or is
	// valid for longer than MaxCAValidity.
	ErrCAValidity = errors.New("the CA certificate's validity does not fit")
	// ErrCAFileMode: the file is readable by others or writable by
	// anyone but its owner.
	ErrCAFileMode = errors.New("the CA file is open to others")
)

// ParseCA returns the CA whose certificate and private key are in data,
// PEM-encoded in either order: a "CERTIFICATE" block and a "PRIVATE KEY"
// (PKCS #8), "EC PRIVATE KEY" (SEC 1) or "RSA PRIVATE KEY" (PKCS #1)
// block, as MarshalPEM writes them; other blocks are an error. It refuses,
// with an error wrapping ErrNotCA, ErrCAKeyMismatch or ErrCAValidity, a
// certificate that is not a CA's (basic constraints CA and key usage
// certificate signing), a key that is not the certificate's, and a
// certificate that has expired, is not valid yet, or is valid for longer
// than MaxCAValidity (and the clock skew NewCA allows), as NewCA's never
// is. The leaves' key and the session ticket key are made anew, as by
// NewCA.
func ParseCA(data []byte) (*CA, error) {
	var certs, keys []*pem.Block
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			if len(strings.TrimSpace(string(rest))) > 0 {
				return nil, fmt.Errorf("reading the CA: text that is not PEM: %w", ErrNotCA)
			}
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			certs = append(certs, b)
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
			keys = append(keys, b)
		default:
			return nil, fmt.Errorf("reading the CA: a PEM block of type %q: %w; want one CERTIFICATE and one PRIVATE KEY", b.Type, ErrNotCA)
		}
	}
	if len(certs) != 1 || len(keys) != 1 {
		return nil, fmt.Errorf("reading the CA: %d certificates and %d private keys: %w; want one CERTIFICATE and one PRIVATE KEY", len(certs), len(keys), ErrNotCA)
	}
	cert, err := x509.ParseCertificate(certs[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w (%w)", err, ErrNotCA)
	}
	name := cert.Subject.CommonName
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("reading the CA: the certificate %q is not a CA's (basic constraints CA and key usage certificate signing): %w", name, ErrNotCA)
	}
	key, err := parsePrivateKey(keys[0])
	if err != nil {
		return nil, fmt.Errorf("reading the CA's private key: %w (%w)", err, ErrNotCA)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("reading the CA: %w %q; give the key it was made with", ErrCAKeyMismatch, name)
	}
	now := time.Now()
	switch {
	case !now.Before(cert.NotAfter):
		return nil, fmt.Errorf("reading the CA: the certificate %q expired at %s: %w; make a new CA", name, cert.NotAfter.UTC().Format(time.RFC3339), ErrCAValidity)
	case now.Before(cert.NotBefore):
		return nil, fmt.Errorf("reading the CA: the certificate %q is not valid until %s: %w; check the clock", name, cert.NotBefore.UTC().Format(time.RFC3339), ErrCAValidity)
	case cert.NotAfter.Sub(cert.NotBefore) > MaxCAValidity+clockSkew:
		return nil, fmt.Errorf("reading the CA: the certificate %q is valid for %v, more than %v: %w; give a CA made for the sandbox, as sbx makes them", name, cert.NotAfter.Sub(cert.NotBefore).Round(time.Minute), MaxCAValidity, ErrCAValidity)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: generating the leaf key: %w", err)
	}
	return newCA(cert, key, leafKey), nil
}

// parsePrivateKey parses a private key block of ParseCA's.
func parsePrivateKey(b *pem.Block) (crypto.Signer, error) {
	var k any
	var err error
	switch b.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return s, nil
}

// ReadCAFile returns the CA in the file path, as ParseCA reads it. The
// file holds the CA's private key, so it must not be open to others: a
// file readable by others (mode 0o004) or writable by its group or others
// (0o022) is refused with an error wrapping ErrCAFileMode. A file readable
// by its group is taken: Kubernetes mounts a Secret's files so, owned by
// root and the pod's fsGroup, for a process of another uid to read.
func ReadCAFile(path string) (*CA, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("reading the CA: %s is not a regular file (%s): %w", path, fi.Mode().Type(), ErrNotCA)
	}
	if perm := fi.Mode().Perm(); api.OpenToOthers(fi) {
		return nil, fmt.Errorf("reading the CA: %s has mode %#o: %w (it holds the CA's private key); run chmod 600 %s", path, perm, ErrCAFileMode, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	ca, err := ParseCA(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ca, nil
}

// KeyPEM returns the CA's private key, PEM-encoded as a "PRIVATE KEY"
// block (PKCS #8). It is the key to every certificate the sandbox trusts:
// keep it where only the gateway reads it.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the CA's private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPEM returns CertPEM followed by KeyPEM: what ParseCA reads (sbx
// gateway --ca FILE).
func (ca *CA) MarshalPEM() ([]byte, error) {
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	return append(ca.CertPEM(), key...), nil
}

// randomSerial returns a random positive serial number of at most 128 bits.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("drawing a serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// CertPEM returns the CA certificate, PEM-encoded: what the sandbox trusts.
// The caller may modify the returned slice.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate returns the parsed CA certificate. It is shared; the caller
// must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns the certificate the gateway shows for host, which must be
// normalized as netpolicy.NormalizeHost does: a DNS name (no wildcard, no
// trailing dot) or an IP literal (no brackets, no zone). The certificate
// names the host as its subject alternative name (a DNS name or an IP
// address) and as its common name when that fits in 64 bytes, is for
// server authentication only, is valid from a minute ago until the CA
// expires, and has the chain [leaf, CA] with Leaf set. Every leaf of a CA
// has the same key.
//
// A leaf is minted the first time its host is asked for and then cached:
// concurrent first calls for a host mint it once and get the same
// certificate. The cache keeps the 4096 most recently used hosts and
// evicts the least recently used, so a sandbox that connects to ever new
// names costs a signature per name but no memory beyond
// the bound. The returned certificate is shared; the caller must not
// modify it.
//
// Leaf returns an error wrapping netpolicy.ErrInvalidTarget for a host that
// is not normalized, and an error when it would mint a leaf after the CA
// expired. A failed mint is not cached.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	if e, ok := ca.leaves[host]; ok {
		if e.elem != nil {
			ca.lru.MoveToFront(e.elem)
		}
		ca.mu.Unlock()
		<-e.ready
		return e.cert, e.err
	}
	// Checked before the host takes a place in the cache, so invalid
	// hosts cannot evict valid ones.
	if err := checkNormalized(host); err != nil {
		ca.mu.Unlock()
		return nil, err
	}
	e := &leafEntry{host: host, ready: make(chan struct{})}
	ca.leaves[host] = e
	e.elem = ca.lru.PushFront(e)
	for ca.lru.Len() > ca.maxLeaves {
		// An evicted entry in flight still completes: its callers hold
		// it, and only later callers mint again.
		old := ca.lru.Remove(ca.lru.Back()).(*leafEntry)
		old.elem = nil
		delete(ca.leaves, old.host)
	}
	ca.mu.Unlock()

	cert, err := ca.mint(host)

	ca.mu.Lock()
	e.cert, e.err = cert, err
	if err != nil && e.elem != nil {
		ca.lru.Remove(e.elem)
		e.elem = nil
		delete(ca.leaves, host)
	}
	close(e.ready)
	ca.mu.Unlock()
	return cert, err
}

// checkNormalized returns an error wrapping netpolicy.ErrInvalidTarget
// unless host is a host name or IP literal in normalized form.
func checkNormalized(host string) error {
	n, err := netpolicy.NormalizeHost(host)
	if err != nil {
		return fmt.Errorf("minting a certificate: %w", err)
	}
	if n != host {
		return fmt.Errorf("minting a certificate: host %q is not normalized (%q): %w", host, n, netpolicy.ErrInvalidTarget)
	}
	return nil
}

// mint makes and signs the leaf for host, a normalized host.
func (ca *CA) mint(host string) (*tls.Certificate, error) {
	now := time.Now()
	if !now.Before(ca.cert.NotAfter) {
		return nil, fmt.Errorf("minting a certificate for %s: the sandbox CA expired at %s", host, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("minting a certificate for %s: %w", host, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              ca.cert.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	// X.509 bounds a common name to 64 bytes (ub-common-name); clients
	// match the subject alternative name, so a longer host goes without.
	if len(host) <= 64 {
		tmpl.Subject.CommonName = host
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, ca.leafKey.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("minting a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("minting a certificate for %s: parsing it: %w", host, err)
	}
	ca.mints.Add(1)
	return &tls.Certificate{
		Certificate: [][]byte{der, ca.certDER},
		PrivateKey:  ca.leafKey,
		Leaf:        leaf,
	}, nil
}

// ServerConfig returns a configuration for the client side of a connection
// the gateway inspects: TLS 1.2 or later, the ALPN protocols nextProtos in
// order of preference (for example "h2", "http/1.1"; none means no ALPN),
// and Leaf(host) as the certificate whatever server name the client sent,
// so it serves an IP target, which gets no SNI, too. The gateway checks
// the server name against host, and refuses a mismatch, before it serves
// the connection. A failure to mint the leaf fails the handshake.
//
// Session tickets are encrypted with a key of the CA's and bound to host:
// a client resumes a session only with the same sandbox and the same
// host, and otherwise gets a full handshake.
//
// Each call returns a new configuration that the caller may modify.
func (ca *CA) ServerConfig(host string, nextProtos []string) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: slices.Clone(nextProtos),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf(host)
		},
	}
	cfg.SetSessionTicketKeys([][32]byte{ca.ticketKey})
	bind := []byte(ticketHostPrefix + host)
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, bind)
		return cfg.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := cfg.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return nil, err
		}
		for _, x := range ss.Extra {
			if bytes.HasPrefix(x, []byte(ticketHostPrefix)) {
				if !bytes.Equal(x, bind) {
					return nil, nil // another host's ticket: full handshake
				}
				return ss, nil
			}
		}
		return nil, nil
	}
	return cfg
}

// WriteCertFile writes CertPEM to path, mode 0644, atomically: to a
// temporary file in the same directory, then renamed over path, so a
// reader sees the old file or the whole new one. It refuses to replace a
// symbolic link or anything else that is not a regular file at path (the
// directory itself is trusted). On failure it leaves no temporary file.
func (ca *CA) WriteCertFile(path string) (retErr error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("writing the CA certificate to %s: not a regular file (%s)", path, fi.Mode().Type())
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	if _, err := f.Write(ca.certPEM); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	// rename(2) replaces a symbolic link that appeared since the Lstat
	// rather than following it, so the check above cannot be raced into
	// writing elsewhere.
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	return nil
}
