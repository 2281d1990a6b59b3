package sandbox

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"
	"software.sslmate.com/src/go-pkcs12"
)

// TrustDir is where a sandbox finds the certificates of its Trust: the
// CA alone (ca.pem), the bundle of the host's roots and the CA
// (bundle.pem), and the Java truststore (truststore.p12) when there is one.
const TrustDir = "/run/sbx-ca"

// TrustStorePassword is the password of Trust.TrustStore, which guards
// nothing (every certificate in it is public): Java asks for one.
const TrustStorePassword = "changeit"

// Trust is a certificate authority the command is to trust besides the
// roots it trusts already: the gateway's TLS inspection CA (docs/inspection.md)
// . The CA is added, never put in the roots' place.
type Trust struct {
	// CertPEM is the CA's certificate, PEM-encoded.
	CertPEM []byte
	// Roots are the certificates (PEM) the CA is added to in bundle.pem:
	// the host's system bundle.
	Roots []byte
	// Replace are files of the container's filesystem that hold a system
	// bundle, over which bundle.pem is bound, read-only, so that a client
	// that reads the usual path trusts the CA too. Only paths that exist
	// there may be listed.
	Replace []string
	// Java asks for a PKCS#12 truststore of Roots and the CA (password
	// TrustStorePassword), truststore.p12, which JAVA_TOOL_OPTIONS points
	// Java at: Java trusts what its truststore holds and nothing else.
	// Start makes it while the network and the container are made (it
	// takes some milliseconds of CPU), unless StartJava began it before,
	// and starts the command once it is there.
	Java bool

	// javaStore, set by StartJava, gives the truststore once made.
	javaStore func() ([]byte, error)
}

// StartJava begins making the Java truststore (when Java asks for one) in
// the background, for a caller that has the Trust before it starts the
// sandbox: the milliseconds of CPU it takes then go beside the caller's
// waits (containerd's answers) rather than beside the container's
// creation, which needs the CPU. Start takes what it made. CertPEM, Roots
// and Java must not change after it.
func (t *Trust) StartJava() {
	if !t.Java || t.javaStore != nil {
		return
	}
	roots, ca := t.Roots, t.CertPEM
	t.javaStore = sync.OnceValues(func() ([]byte, error) { return javaTrustStore(roots, ca) })
	go t.javaStore()
}

// trustEnv returns the variables that point TLS clients at the trust
// directory: OpenSSL (curl, git, Python's ssl and urllib, Ruby) and Go
// read SSL_CERT_FILE; Node adds NODE_EXTRA_CA_CERTS to its own roots;
// requests, pip, Deno and the AWS tools read their own variables. java
// is JAVA_TOOL_OPTIONS's value before (its own options, kept after ours).
func (t *Trust) trustEnv(java string) []string {
	bundle := TrustDir + "/bundle.pem"
	env := []string{
		"SSL_CERT_FILE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + TrustDir + "/ca.pem",
		"REQUESTS_CA_BUNDLE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"PIP_CERT=" + bundle,
		"DENO_CERT=" + bundle,
		"AWS_CA_BUNDLE=" + bundle,
	}
	if t.Java {
		opts := "-Djavax.net.ssl.trustStore=" + TrustDir + "/truststore.p12 -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword
		if java != "" {
			opts += " " + java
		}
		env = append(env, "JAVA_TOOL_OPTIONS="+opts)
	}
	return env
}

// withEnv returns env with the trust's variables before it, so that the
// command's own win; a JAVA_TOOL_OPTIONS of env goes into ours, after the
// truststore's options, rather than replacing them.
func (t *Trust) withEnv(env []string) []string {
	java := ""
	own := make([]string, 0, len(env))
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok && t.Java {
			java = v
			continue
		}
		own = append(own, kv)
	}
	return append(t.trustEnv(java), own...)
}

// writeTrust writes t's files into dir/trust (and the CA as dir/ca.pem,
// where the user finds it) and returns the mounts that show them to the
// container. The Java truststore, when t asks for one, is written by a
// goroutine whose error javaDone gives, once: the directory is mounted
// whole, so the file is seen however late it comes, as long as it is
// there before the command starts.
func writeTrust(dir string, t *Trust) (mounts []specs.Mount, javaDone <-chan error, err error) {
	tdir := filepath.Join(dir, "trust")
	if err := os.Mkdir(tdir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("writing the sandbox's CA: %w", err)
	}
	bundle := append(append([]byte(nil), t.Roots...), '\n')
	bundle = append(bundle, t.CertPEM...)
	for name, data := range map[string][]byte{"ca.pem": t.CertPEM, "bundle.pem": bundle} {
		if err := os.WriteFile(filepath.Join(tdir, name), data, 0o644); err != nil {
			return nil, nil, fmt.Errorf("writing the sandbox's CA: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), t.CertPEM, 0o644); err != nil {
		return nil, nil, fmt.Errorf("writing the sandbox's CA: %w", err)
	}
	done := make(chan error, 1)
	if t.Java {
		t.StartJava()
		store := t.javaStore
		go func() {
			ts, err := store()
			if err == nil {
				err = os.WriteFile(filepath.Join(tdir, "truststore.p12"), ts, 0o644)
			}
			if err != nil {
				err = fmt.Errorf("writing the sandbox's Java truststore: %w", err)
			}
			done <- err
		}()
	} else {
		done <- nil
	}
	ro := []string{"rbind", "ro", "nosuid", "nodev", "noexec"}
	mounts = []specs.Mount{{Destination: TrustDir, Source: tdir, Type: "bind", Options: ro}}
	for _, p := range t.Replace {
		mounts = append(mounts, specs.Mount{Destination: p, Source: filepath.Join(tdir, "bundle.pem"), Type: "bind", Options: ro})
	}
	return mounts, done, nil
}

// javaTrustStore returns a PKCS#12 truststore of the CA (caPEM) and the
// PEM roots, the CA first.
func javaTrustStore(roots, caPEM []byte) ([]byte, error) {
	var certs []*x509.Certificate
	for _, pemData := range [][]byte{caPEM, roots} {
		for rest := pemData; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			if c, err := x509.ParseCertificate(b.Bytes); err == nil {
				certs = append(certs, c)
			}
		}
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certificate in the CA or the roots")
	}
	return pkcs12.Modern.EncodeTrustStore(certs, TrustStorePassword)
}

// Env returns env with the variables that point TLS clients at TrustDir
// before it (the command's own win): for containers sbx does not start
// itself, such as sbx kube's agent pods, which mount the CA and the
// bundle there.
func (t *Trust) Env(env []string) []string { return t.withEnv(env) }
