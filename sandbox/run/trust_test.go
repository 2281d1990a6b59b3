package run

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNewInspection: the sandbox trusts the host's roots and the CA, never
// the CA instead of them; the bundles bound over are those the sandbox's
// filesystem has; Java gets a truststore (sandbox.TestWriteTrust shows
// what it holds).
func TestNewInspection(t *testing.T) {
	roots, err := hostRoots()
	if err != nil {
		t.Skipf("this host has no bundle of roots: %v", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc/ssl/certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt"), []byte("x"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "etc/ssl/cert.pem")) // a link is not followed out of the root
	in, err := newInspection(trustTarget{dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.trust.Replace, []string{"/etc/ssl/certs/ca-certificates.crt"}) {
		t.Errorf("bound over %v, want the one regular bundle of the root directory", in.trust.Replace)
	}
	if string(in.trust.Roots) != string(roots) || !strings.Contains(string(in.trust.CertPEM), "BEGIN CERTIFICATE") {
		t.Error("the trust does not hold the host's roots and the CA")
	}
	if !in.trust.Java {
		t.Error("the trust asks for no Java truststore")
	}
	if in, err := newInspection(trustTarget{}, nil); err != nil || len(in.trust.Replace) != 0 {
		t.Errorf("an image: got %v, %v; want no bundle bound over (sbx cannot see its files)", in.trust.Replace, err)
	}
}

// TestPrepareStart: the CA PrepareStart makes goes to one sandbox, with
// its Java truststore under way; the next gets a CA of its own.
func TestPrepareStart(t *testing.T) {
	if _, err := hostRoots(); err != nil {
		t.Skipf("this host has no bundle of roots: %v", err)
	}
	PrepareStart()
	first, err := newInspection(trustTarget{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := newInspection(trustTarget{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.ca == second.ca || bytes.Equal(first.trust.CertPEM, second.trust.CertPEM) {
		t.Fatal("two sandboxes got one CA")
	}
	for _, in := range []*inspection{first, second} {
		if !in.trust.Java || !bytes.Equal(in.trust.CertPEM, in.ca.CertPEM()) {
			t.Errorf("the trust does not hold its sandbox's CA, or asks for no truststore")
		}
	}
}

// BenchmarkNewInspection is what TLS inspection adds to every sbx run's
// start before the sandbox is made: a CA and the host's roots (the Java
// truststore is made while the sandbox is).
func BenchmarkNewInspection(b *testing.B) {
	for b.Loop() {
		if _, err := newInspection(trustTarget{host: true}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
