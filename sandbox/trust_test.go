package sandbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"
)

// TestTrustEnv: the trust's variables come first, so the command's own
// win, and the command's JAVA_TOOL_OPTIONS is kept after the truststore's.
func TestTrustEnv(t *testing.T) {
	tr := &Trust{CertPEM: []byte("ca"), Java: true}
	env := tr.withEnv([]string{"A=1", "JAVA_TOOL_OPTIONS=-Xmx1g", "SSL_CERT_FILE=/mine.pem"})
	var java []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
			java = append(java, v)
		}
	}
	if len(java) != 1 || !strings.HasPrefix(java[0], "-Djavax.net.ssl.trustStore="+TrustDir) || !strings.HasSuffix(java[0], " -Xmx1g") {
		t.Errorf("JAVA_TOOL_OPTIONS: got %q, want one value, the truststore's options then -Xmx1g", java)
	}
	mine := slices.Index(env, "SSL_CERT_FILE=/mine.pem")
	ours := slices.Index(env, "SSL_CERT_FILE="+TrustDir+"/bundle.pem")
	if mine < 0 || ours < 0 || ours > mine || !slices.Contains(env, "A=1") {
		t.Errorf("got %q, want ours first and the command's own after (the last one wins)", env)
	}
	// Without a truststore the command's JAVA_TOOL_OPTIONS stays as it is.
	if env := (&Trust{CertPEM: []byte("ca")}).withEnv([]string{"JAVA_TOOL_OPTIONS=-Xmx1g"}); !slices.Contains(env, "JAVA_TOOL_OPTIONS=-Xmx1g") {
		t.Errorf("without a truststore: got %q", env)
	}
}

// selfSigned returns a new self-signed certificate, PEM-encoded, and the
// certificate.
func selfSigned(t *testing.T, name string) ([]byte, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), c
}

// TestWriteTrust: the CA, the bundle (the roots, then the CA) and the
// Java truststore (the CA first, then the roots) are written, and the
// directory and the bundles bound over are mounted read-only.
func TestWriteTrust(t *testing.T) {
	caPEM, ca := selfSigned(t, "sbx test CA")
	rootPEM, root := selfSigned(t, "a root")
	for _, started := range []bool{false, true} {
		dir := t.TempDir()
		trust := &Trust{CertPEM: caPEM, Roots: rootPEM, Replace: []string{"/etc/ssl/cert.pem"}, Java: true}
		if started {
			trust.StartJava() // the truststore made before, as run.PrepareStart does
		}
		checkWrittenTrust(t, dir, trust, caPEM, rootPEM, ca, root)
	}
	// Without Java, no truststore.
	dir := t.TempDir()
	_, done, err := writeTrust(dir, &Trust{CertPEM: caPEM, Roots: rootPEM})
	if err != nil || <-done != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "trust", "truststore.p12")); !os.IsNotExist(err) {
		t.Errorf("without Java: truststore.p12 is there (%v)", err)
	}
}

// checkWrittenTrust writes trust into dir and checks its files and mounts.
func checkWrittenTrust(t *testing.T, dir string, trust *Trust, caPEM, rootPEM []byte, ca, root *x509.Certificate) {
	t.Helper()
	mounts, done, err := writeTrust(dir, trust)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(dir, "trust", "bundle.pem"))
	if !strings.HasPrefix(string(bundle), string(rootPEM)) || !strings.HasSuffix(string(bundle), string(caPEM)) {
		t.Errorf("bundle.pem: got %q, want the roots then the CA", bundle)
	}
	ts, err := os.ReadFile(filepath.Join(dir, "trust", "truststore.p12"))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pkcs12.DecodeTrustStore(ts, TrustStorePassword)
	if err != nil || len(certs) != 2 || !certs[0].Equal(ca) || !certs[1].Equal(root) {
		t.Errorf("truststore.p12: got %d certificates (%v), want the CA then the root", len(certs), err)
	}
	if len(mounts) != 2 || mounts[0].Destination != TrustDir || mounts[1].Destination != "/etc/ssl/cert.pem" || !slices.Contains(mounts[1].Options, "ro") {
		t.Errorf("mounts: got %+v", mounts)
	}
}
