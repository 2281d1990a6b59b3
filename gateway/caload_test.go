package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// caPEM returns a self-signed certificate made from tmpl (its validity,
// basic constraints and key usage; the rest is filled in) and its key, as
// PEM blocks.
func caPEM(t *testing.T, tmpl x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(1)
	tmpl.Subject = pkix.Name{CommonName: "test CA"}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestParseCA: ParseCA takes back what MarshalPEM wrote (and a CA made
// elsewhere with an SEC 1 key, in either order), and the CA it returns
// mints leaves that verify with the original certificate; it refuses what
// is not one CA certificate with its own key, valid now for at most
// MaxCAValidity.
func TestParseCA(t *testing.T) {
	orig := caForTest(t)
	both, err := orig.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCA(both)
	if err != nil {
		t.Fatalf("ParseCA(MarshalPEM()): %v", err)
	}
	if got, want := string(ca.CertPEM()), string(orig.CertPEM()); got != want {
		t.Errorf("CertPEM after ParseCA: got %q, want %q", got, want)
	}
	leaf, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: caTestPool(t, orig)}); err != nil {
		t.Errorf("a leaf of the parsed CA does not verify with the original's certificate: %v", err)
	}
	again, err := ca.MarshalPEM()
	if err != nil || string(again) != string(both) {
		t.Errorf("MarshalPEM of the parsed CA: got %q, %v; want what was parsed", again, err)
	}

	now := time.Now()
	caTmpl := x509.Certificate{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign}
	goodCert, goodKey := caPEM(t, caTmpl)
	_, otherKey := caPEM(t, caTmpl)
	leafTmpl := caTmpl
	leafTmpl.IsCA, leafTmpl.KeyUsage = false, x509.KeyUsageDigitalSignature
	leafCert, leafKey := caPEM(t, leafTmpl)
	noSignTmpl := caTmpl
	noSignTmpl.KeyUsage = x509.KeyUsageDigitalSignature
	noSignCert, noSignKey := caPEM(t, noSignTmpl)
	expiredTmpl := caTmpl
	expiredTmpl.NotBefore, expiredTmpl.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour)
	expiredCert, expiredKey := caPEM(t, expiredTmpl)
	futureTmpl := caTmpl
	futureTmpl.NotBefore = now.Add(time.Hour)
	futureTmpl.NotAfter = now.Add(2 * time.Hour)
	futureCert, futureKey := caPEM(t, futureTmpl)
	longTmpl := caTmpl
	longTmpl.NotAfter = now.Add(365 * 24 * time.Hour)
	longCert, longKey := caPEM(t, longTmpl)
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
		want error // nil: taken
	}{
		{"made elsewhere, key first", cat(goodKey, goodCert), nil},
		{"certificate only", goodCert, ErrNotCA},
		{"key only", goodKey, ErrNotCA},
		{"two certificates", cat(goodCert, goodCert, goodKey), ErrNotCA},
		{"not PEM", []byte("hello\n"), ErrNotCA},
		{"trailing text", cat(goodCert, goodKey, []byte("junk")), ErrNotCA},
		{"another block", cat(goodCert, goodKey, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}})), ErrNotCA},
		{"a leaf", cat(leafCert, leafKey), ErrNotCA},
		{"a CA that may not sign certificates", cat(noSignCert, noSignKey), ErrNotCA},
		{"another key", cat(goodCert, otherKey), ErrCAKeyMismatch},
		{"expired", cat(expiredCert, expiredKey), ErrCAValidity},
		{"not valid yet", cat(futureCert, futureKey), ErrCAValidity},
		{"valid for a year", cat(longCert, longKey), ErrCAValidity},
	}
	for _, tt := range tests {
		_, err := ParseCA(tt.data)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: got %v, want the CA taken", tt.name, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("%s: got %v, want an error wrapping %q", tt.name, err, tt.want)
		}
	}
}

// TestReadCAFile: the CA file is refused when others could read it or
// anyone but its owner could write it; readable by its group (as
// Kubernetes mounts a Secret for a pod's fsGroup) it is taken.
func TestReadCAFile(t *testing.T) {
	data, err := caForTest(t).MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		mode os.FileMode
		want error
	}{
		{0o600, nil},
		{0o400, nil},
		{0o440, ErrCAFileMode}, // a host's; the Secret mount's shape is api.TestOpenToOthersSecretMount's
		{0o640, ErrCAFileMode},
		{0o644, ErrCAFileMode},
		{0o604, ErrCAFileMode},
		{0o660, ErrCAFileMode},
		{0o602, ErrCAFileMode},
	} {
		path := filepath.Join(dir, "ca-"+tt.mode.String())
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tt.mode); err != nil {
			t.Fatal(err)
		}
		ca, err := ReadCAFile(path)
		switch {
		case tt.want == nil && (err != nil || ca == nil):
			t.Errorf("mode %#o: got %v, want the CA", tt.mode, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("mode %#o: got %v, want an error wrapping %q", tt.mode, err, tt.want)
		}
	}
	if _, err := ReadCAFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: got %v, want os.ErrNotExist", err)
	}
	if _, err := ReadCAFile(dir); err == nil {
		t.Errorf("a directory: got no error")
	}
}
