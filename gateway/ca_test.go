package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/netpolicy"
)

// caForTest returns a CA for the test, failing it on error.
func caForTest(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("t1a2b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// caTestPool returns a pool holding only ca's certificate, parsed back from
// CertPEM as the sandbox would read it.
func caTestPool(t testing.TB, ca *CA) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM holds no certificate")
	}
	return pool
}

func TestCACertificate(t *testing.T) {
	before := time.Now()
	ca, err := NewCA("a1b2c3", 0)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	c := ca.Certificate()
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA %v, BasicConstraintsValid %v; want true, true", c.IsCA, c.BasicConstraintsValid)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("MaxPathLen %d, MaxPathLenZero %v; want 0, true", c.MaxPathLen, c.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; c.KeyUsage != want {
		t.Errorf("KeyUsage %v, want %v", c.KeyUsage, want)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want an ECDSA P-256 key", c.PublicKey)
	}
	if c.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("signature algorithm %v, want %v", c.SignatureAlgorithm, x509.ECDSAWithSHA256)
	}
	if got, want := c.Subject.CommonName, "sbx sandbox a1b2c3 inspection CA"; got != want {
		t.Errorf("common name %q, want %q", got, want)
	}
	if !bytes.Equal(c.RawSubject, c.RawIssuer) {
		t.Errorf("issuer %v, want the subject %v (self-signed)", c.Issuer, c.Subject)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("self-signature: %v", err)
	}
	if len(c.PermittedDNSDomains)+len(c.ExcludedDNSDomains)+len(c.PermittedIPRanges)+len(c.ExcludedIPRanges) != 0 {
		t.Errorf("name constraints present, want none")
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
		t.Errorf("serial %v, want positive and at most 128 bits", c.SerialNumber)
	}
	if c.NotBefore.After(before.Add(-time.Minute+time.Second)) || c.NotBefore.Before(before.Add(-2*time.Minute)) {
		t.Errorf("not before %v, want a minute before %v", c.NotBefore, before)
	}
	if c.NotAfter.After(after.Add(MaxCAValidity)) || c.NotAfter.Before(before.Add(MaxCAValidity-time.Second)) {
		t.Errorf("not after %v, want 7 days after %v", c.NotAfter, before)
	}
	if len(c.SubjectKeyId) == 0 {
		t.Errorf("no subject key id")
	}

	// The PEM is one certificate, the same one.
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("CertPEM is not one CERTIFICATE block")
	}
	if !bytes.Equal(block.Bytes, c.Raw) {
		t.Errorf("CertPEM holds another certificate than Certificate")
	}
	pemCopy := ca.CertPEM()
	pemCopy[0] = 'X'
	if ca.CertPEM()[0] == 'X' {
		t.Errorf("modifying CertPEM's result changed the CA's")
	}

	other, err := NewCA("a1b2c3", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if other.Certificate().SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Errorf("two CAs have serial %v", c.SerialNumber)
	}
	if other.Certificate().PublicKey.(*ecdsa.PublicKey).Equal(c.PublicKey) {
		t.Errorf("two CAs have the same key")
	}
}

func TestCAValidity(t *testing.T) {
	tests := []struct {
		validFor time.Duration
		want     time.Duration // from now; 0 for an error
	}{
		{0, MaxCAValidity},
		{time.Hour, time.Hour},
		{MaxCAValidity, MaxCAValidity},
		{MaxCAValidity + time.Second, 0},
		{8 * 24 * time.Hour, 0},
		{-time.Hour, 0},
	}
	for _, tt := range tests {
		now := time.Now()
		ca, err := NewCA("v1", tt.validFor)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("NewCA(%v) succeeded, want an error", tt.validFor)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewCA(%v): %v", tt.validFor, err)
			continue
		}
		c := ca.Certificate()
		if got := c.NotAfter.Sub(now); got < tt.want-time.Second || got > tt.want+time.Second {
			t.Errorf("NewCA(%v): valid for %v from now, want %v", tt.validFor, got, tt.want)
		}
		if got := c.NotAfter.Sub(c.NotBefore); got > MaxCAValidity+time.Minute+time.Second {
			t.Errorf("NewCA(%v): validity period %v, want at most %v and a minute", tt.validFor, got, MaxCAValidity)
		}
	}
}

func TestCALeafVerifies(t *testing.T) {
	ca := caForTest(t)
	pool := caTestPool(t, ca)
	tests := []struct {
		host     string
		verifyAs string // the name or IP a client checks
		wantOK   bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "API.example.com", true}, // clients compare case-insensitively
		{"api.example.com", "other.example.com", false},
		{"api.example.com", "example.com", false},
		{"api.example.com", "x.api.example.com", false},
		{"localhost", "localhost", true},
		{"under_score.example", "under_score.example", true},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", true},
		{"a" + strings.Repeat(".abcdefghij", 20) + ".example", "a" + strings.Repeat(".abcdefghij", 20) + ".example", true},
		{"192.0.2.7", "192.0.2.7", true},
		{"192.0.2.7", "192.0.2.8", false},
		{"2001:db8::1", "2001:db8::1", true},
		{"2001:db8::1", "2001:db8::2", false},
	}
	for _, tt := range tests {
		leaf, err := ca.Leaf(tt.host)
		if err != nil {
			t.Errorf("Leaf(%q): %v", tt.host, err)
			continue
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{
			DNSName:   tt.verifyAs,
			Roots:     pool,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if gotOK := err == nil; gotOK != tt.wantOK {
			t.Errorf("leaf for %q verified as %q: got error %v, want success %v", tt.host, tt.verifyAs, err, tt.wantOK)
		}
	}
}

func TestCALeafProperties(t *testing.T) {
	ca := caForTest(t)
	long := "a" + strings.Repeat(".abcdefghij", 20) + ".example"
	tests := []struct {
		host    string
		wantCN  string
		wantDNS []string
		wantIPs []string
	}{
		{"api.example.com", "api.example.com", []string{"api.example.com"}, nil},
		{"192.0.2.7", "192.0.2.7", nil, []string{"192.0.2.7"}},
		{"2001:db8::1", "2001:db8::1", nil, []string{"2001:db8::1"}},
		{long, "", []string{long}, nil}, // over 64 bytes: no common name
	}
	for _, tt := range tests {
		before := time.Now()
		tc, err := ca.Leaf(tt.host)
		if err != nil {
			t.Errorf("Leaf(%q): %v", tt.host, err)
			continue
		}
		c := tc.Leaf
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		got := []any{c.Subject.CommonName, c.DNSNames, ips}
		want := []any{tt.wantCN, tt.wantDNS, tt.wantIPs}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Leaf(%q) common name, DNS names, IPs (-want +got):\n%s", tt.host, diff)
		}
		if diff := cmp.Diff([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, c.ExtKeyUsage); diff != "" {
			t.Errorf("Leaf(%q) ExtKeyUsage (-want +got):\n%s", tt.host, diff)
		}
		if c.IsCA {
			t.Errorf("Leaf(%q) is a CA", tt.host)
		}
		if !c.NotAfter.Equal(ca.Certificate().NotAfter) {
			t.Errorf("Leaf(%q) not after %v, want the CA's %v", tt.host, c.NotAfter, ca.Certificate().NotAfter)
		}
		if c.NotBefore.After(before.Add(-time.Minute+time.Second)) || c.NotBefore.Before(before.Add(-2*time.Minute)) {
			t.Errorf("Leaf(%q) not before %v, want a minute before %v", tt.host, c.NotBefore, before)
		}
		if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
			t.Errorf("Leaf(%q) serial %v, want positive and at most 128 bits", tt.host, c.SerialNumber)
		}
		if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
			t.Errorf("Leaf(%q) public key %T, want ECDSA P-256", tt.host, c.PublicKey)
		}
		if !bytes.Equal(c.AuthorityKeyId, ca.Certificate().SubjectKeyId) {
			t.Errorf("Leaf(%q) authority key id %x, want the CA's %x", tt.host, c.AuthorityKeyId, ca.Certificate().SubjectKeyId)
		}
		if len(tc.Certificate) != 2 || !bytes.Equal(tc.Certificate[0], c.Raw) || !bytes.Equal(tc.Certificate[1], ca.Certificate().Raw) {
			t.Errorf("Leaf(%q) chain is not [leaf, CA]", tt.host)
		}
		if key, ok := tc.PrivateKey.(*ecdsa.PrivateKey); !ok || !key.PublicKey.Equal(c.PublicKey) {
			t.Errorf("Leaf(%q) private key does not match the certificate", tt.host)
		}
	}
	a, _ := ca.Leaf("a.example")
	b, _ := ca.Leaf("b.example")
	if a.Leaf.SerialNumber.Cmp(b.Leaf.SerialNumber) == 0 {
		t.Errorf("two leaves have serial %v", a.Leaf.SerialNumber)
	}
	if !a.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(b.Leaf.PublicKey) {
		t.Errorf("two leaves of one CA have different keys, want the CA's one leaf key")
	}
}

func TestCALeafRefusesHostsNotNormalized(t *testing.T) {
	ca := caForTest(t)
	for _, host := range []string{
		"",
		"API.example.com",
		"api.example.com.",
		"*.example.com",
		"[2001:db8::1]",
		"fe80::1%eth0",
		"::ffff:192.0.2.7",
		"2001:DB8::1",
		"a..example",
		"bad host",
		"127.1",
	} {
		if _, err := ca.Leaf(host); !errors.Is(err, netpolicy.ErrInvalidTarget) {
			t.Errorf("Leaf(%q): got error %v, want one wrapping netpolicy.ErrInvalidTarget", host, err)
		}
	}
	if n := ca.mints.Load(); n != 0 {
		t.Errorf("%d leaves minted, want 0", n)
	}
	ca.mu.Lock()
	n := len(ca.leaves)
	ca.mu.Unlock()
	if n != 0 {
		t.Errorf("%d hosts in the cache, want 0", n)
	}
}

func TestCALeafAfterExpiry(t *testing.T) {
	ca, err := NewCA("e1", time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if _, err := ca.Leaf("api.example.com"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Leaf of an expired CA: got error %v, want one saying it expired", err)
	}
	ca.mu.Lock()
	n := len(ca.leaves)
	ca.mu.Unlock()
	if n != 0 {
		t.Errorf("a failed mint left %d hosts in the cache, want 0", n)
	}
}

func TestCALeafCached(t *testing.T) {
	ca := caForTest(t)
	a1, err := ca.Leaf("a.example")
	if err != nil {
		t.Fatal(err)
	}
	ip1, err := ca.Leaf("192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := ca.Leaf("a.example")
	ip2, _ := ca.Leaf("192.0.2.1")
	if a1 != a2 || ip1 != ip2 {
		t.Errorf("a second Leaf for a host returned another certificate, want the cached one")
	}
	if n := ca.mints.Load(); n != 2 {
		t.Errorf("got %d mints, want 2", n)
	}
}

func TestCALeafConcurrentMintsOnce(t *testing.T) {
	ca := caForTest(t)
	const goroutines = 50
	hosts := []string{"one.example", "two.example", "192.0.2.9"}
	got := make([][]*tls.Certificate, len(hosts))
	for i := range got {
		got[i] = make([]*tls.Certificate, goroutines)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		for h, host := range hosts {
			wg.Add(1)
			// Ends after its one Leaf call.
			go func() {
				defer wg.Done()
				<-start
				c, err := ca.Leaf(host)
				if err != nil {
					t.Error(err)
				}
				got[h][g] = c
			}()
		}
	}
	close(start)
	wg.Wait()
	for h, host := range hosts {
		for g := range goroutines {
			if got[h][g] == nil || got[h][g] != got[h][0] {
				t.Errorf("goroutine %d got another certificate for %s than goroutine 0", g, host)
				break
			}
		}
	}
	if n := ca.mints.Load(); n != int64(len(hosts)) {
		t.Errorf("got %d mints for %d hosts asked by %d goroutines each, want %d", n, len(hosts), goroutines, len(hosts))
	}
}

func TestCALeafCacheBounded(t *testing.T) {
	ca := caForTest(t)
	const bound, hosts = 64, 5000
	ca.maxLeaves = bound
	first, err := ca.Leaf("h0.example")
	if err != nil {
		t.Fatal(err)
	}
	keep, err := ca.Leaf("keep.example")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < hosts; i++ {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.example", i)); err != nil {
			t.Fatal(err)
		}
		// Used as often as new hosts come, keep.example is never the
		// least recently used and stays.
		if c, _ := ca.Leaf("keep.example"); c != keep {
			t.Fatalf("after %d hosts keep.example was minted again, want it kept as recently used", i)
		}
		ca.mu.Lock()
		n, l := len(ca.leaves), ca.lru.Len()
		ca.mu.Unlock()
		if n > bound || l != n {
			t.Fatalf("after %d hosts the cache has %d hosts and %d in its list, want at most %d in both", i, n, l, bound)
		}
	}
	if n := ca.mints.Load(); n != hosts+1 {
		t.Errorf("got %d mints, want %d", n, hosts+1)
	}
	// The most recent hosts are cached, the first was evicted.
	last, _ := ca.Leaf(fmt.Sprintf("h%d.example", hosts-1))
	if n := ca.mints.Load(); n != hosts+1 {
		t.Errorf("the last host was minted again (%d mints), want it cached", n)
	}
	again, err := ca.Leaf("h0.example")
	if err != nil {
		t.Fatal(err)
	}
	if again == first || ca.mints.Load() != hosts+2 {
		t.Errorf("the first host was still cached after %d others, want it evicted", hosts)
	}
	if last == nil {
		t.Errorf("no certificate for the last host")
	}
}

// caTestServe serves ln with cfg, one handshake at a time: each accepted
// connection shakes hands, writes "ok" and closes. It returns when ln is
// closed, which the test's cleanup does.
func caTestServe(t *testing.T, cfg *tls.Config) net.Addr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	// Ends when ln is closed.
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, cfg)
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			if tc.Handshake() == nil {
				io.WriteString(tc, "ok")
			}
			tc.Close()
		}
	}()
	return ln.Addr()
}

// caTestDial shakes hands with addr using cfg, reads to the end (so a TLS 1.3
// client receives its session tickets) and returns the connection state.
func caTestDial(addr net.Addr, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr.String(), cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
		return tls.ConnectionState{}, fmt.Errorf("read %q, %v; want ok", b, err)
	}
	return c.ConnectionState(), nil
}

func TestCAServerConfigHandshake(t *testing.T) {
	ca := caForTest(t)
	pool := caTestPool(t, ca)
	tests := []struct {
		name       string
		host       string   // ServerConfig's
		serverName string   // the client's SNI and name to verify
		verifyIP   string   // for an IP target: no SNI, verify this IP
		serverALPN []string // ServerConfig's
		clientALPN []string
		maxVersion uint16
		wantProto  string
		wantErr    bool
	}{
		{name: "h2", host: "api.example.com", serverName: "api.example.com", serverALPN: []string{"h2", "http/1.1"}, clientALPN: []string{"h2", "http/1.1"}, wantProto: "h2"},
		{name: "http1", host: "api.example.com", serverName: "api.example.com", serverALPN: []string{"h2", "http/1.1"}, clientALPN: []string{"http/1.1"}, wantProto: "http/1.1"},
		{name: "no ALPN", host: "api.example.com", serverName: "api.example.com", serverALPN: []string{"h2", "http/1.1"}, wantProto: ""},
		{name: "TLS 1.2", host: "api.example.com", serverName: "api.example.com", serverALPN: []string{"h2", "http/1.1"}, clientALPN: []string{"h2"}, maxVersion: tls.VersionTLS12, wantProto: "h2"},
		{name: "IP target, no SNI", host: "127.0.0.1", verifyIP: "127.0.0.1", serverALPN: []string{"h2", "http/1.1"}, clientALPN: []string{"h2", "http/1.1"}, wantProto: "h2"},
		{name: "TLS 1.1 refused", host: "api.example.com", serverName: "api.example.com", maxVersion: tls.VersionTLS11, wantErr: true},
		{name: "SNI is another host", host: "api.example.com", serverName: "other.example.com", wantErr: true},
		{name: "invalid host", host: "API.example.com", serverName: "api.example.com", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := caTestServe(t, ca.ServerConfig(tt.host, tt.serverALPN))
			cfg := &tls.Config{
				RootCAs:    pool,
				ServerName: tt.serverName,
				NextProtos: tt.clientALPN,
				MinVersion: tls.VersionTLS10,
				MaxVersion: tt.maxVersion,
			}
			if tt.verifyIP != "" {
				// A client dialing an IP sends no SNI and checks the IP.
				cfg.ServerName = tt.verifyIP
			}
			st, err := caTestDial(addr, cfg)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("handshake succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.NegotiatedProtocol != tt.wantProto {
				t.Errorf("negotiated %q, want %q", st.NegotiatedProtocol, tt.wantProto)
			}
			if got := st.PeerCertificates[0]; !got.Equal(caTestLeaf(t, ca, tt.host).Leaf) {
				t.Errorf("server showed %v, want the CA's leaf for %s", got.Subject, tt.host)
			}
		})
	}
}

func caTestLeaf(t *testing.T, ca *CA, host string) *tls.Certificate {
	t.Helper()
	c, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCAServerConfigHTTP(t *testing.T) {
	ca := caForTest(t)
	pool := caTestPool(t, ca)
	tests := []struct {
		host      string
		http2     bool
		wantProto string
	}{
		{"api.example.com", true, "HTTP/2.0"},
		{"api.example.com", false, "HTTP/1.1"},
		{"127.0.0.1", true, "HTTP/2.0"},
		{"127.0.0.1", false, "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.host, tt.wantProto), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{
				TLSConfig: ca.ServerConfig(tt.host, []string{"h2", "http/1.1"}),
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(w, "%s %s %s", r.Proto, r.Method, r.URL.Path)
				}),
			}
			done := make(chan struct{})
			// Ends when srv is closed, at the end of the test.
			go func() {
				defer close(done)
				srv.ServeTLS(ln, "", "")
			}()
			t.Cleanup(func() { srv.Close(); <-done })

			protos := new(http.Protocols)
			protos.SetHTTP1(!tt.http2)
			protos.SetHTTP2(tt.http2)
			tr := &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool},
				Protocols:       protos,
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, ln.Addr().String())
				},
			}
			defer tr.CloseIdleConnections()
			url := "https://" + net.JoinHostPort(tt.host, "443") + "/p"
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != tt.wantProto {
				t.Errorf("response protocol %s, want %s", resp.Proto, tt.wantProto)
			}
			if want := tt.wantProto + " GET /p"; string(body) != want {
				t.Errorf("got body %q, want %q", body, want)
			}
		})
	}
}

func TestCAServerConfigSessionTickets(t *testing.T) {
	ca := caForTest(t)
	otherCA := caForTest(t)
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			first := caTestServe(t, ca.ServerConfig("a.example", nil))
			tests := []struct {
				name       string
				addr       net.Addr
				wantResume bool
			}{
				{"same CA and host", caTestServe(t, ca.ServerConfig("a.example", nil)), true},
				{"same CA, another host", caTestServe(t, ca.ServerConfig("b.example", nil)), false},
				{"another CA, same host", caTestServe(t, otherCA.ServerConfig("a.example", nil)), false},
			}
			for _, tt := range tests {
				// The client's session cache is keyed by server name, so
				// a real client offers a.example's ticket only to a
				// server it takes for a.example; here it offers it to
				// whichever server it dials, skipping verification,
				// which is not what is under test.
				cfg := &tls.Config{
					ServerName:         "a.example",
					InsecureSkipVerify: true,
					ClientSessionCache: tls.NewLRUClientSessionCache(4),
					MinVersion:         version,
					MaxVersion:         version,
				}
				st, err := caTestDial(first, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if st.DidResume {
					t.Fatalf("%s: the first connection resumed a session", tt.name)
				}
				st, err = caTestDial(tt.addr, cfg)
				if err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				if st.DidResume != tt.wantResume {
					t.Errorf("%s: got resumed %v, want %v", tt.name, st.DidResume, tt.wantResume)
				}
			}
		})
	}
}

func TestCAServerConfigCopiesProtos(t *testing.T) {
	ca := caForTest(t)
	protos := []string{"h2", "http/1.1"}
	cfg := ca.ServerConfig("a.example", protos)
	protos[0] = "changed"
	if diff := cmp.Diff([]string{"h2", "http/1.1"}, cfg.NextProtos); diff != "" {
		t.Errorf("NextProtos after the caller changed its slice (-want +got):\n%s", diff)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x, want %x", cfg.MinVersion, tls.VersionTLS12)
	}
}

func TestCAWriteCertFile(t *testing.T) {
	ca := caForTest(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.pem")

	check := func(t *testing.T) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != 0o644 {
			t.Errorf("mode %v, want %v", got, os.FileMode(0o644))
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, ca.CertPEM()) {
			t.Errorf("file holds %q, want CertPEM", b)
		}
	}
	if err := ca.WriteCertFile(path); err != nil {
		t.Fatal(err)
	}
	check(t)

	// Replaces a file there, whatever its mode.
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCertFile(path); err != nil {
		t.Fatal(err)
	}
	check(t)

	// Refuses a symbolic link, and leaves its target alone.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pem")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCertFile(link); err == nil {
		t.Errorf("WriteCertFile to a symbolic link succeeded, want an error")
	}
	if b, _ := os.ReadFile(target); string(b) != "target" {
		t.Errorf("the link's target holds %q, want it unchanged", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced, want it left")
	}
	// A dangling link too.
	dangling := filepath.Join(dir, "dangling.pem")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCertFile(dangling); err == nil {
		t.Errorf("WriteCertFile to a dangling symbolic link succeeded, want an error")
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created")
	}
	// A directory.
	if err := ca.WriteCertFile(dir); err == nil {
		t.Errorf("WriteCertFile to a directory succeeded, want an error")
	}
	// A missing directory.
	if err := ca.WriteCertFile(filepath.Join(dir, "missing", "ca.pem")); err == nil {
		t.Errorf("WriteCertFile into a missing directory succeeded, want an error")
	}

	// No temporary file is left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"ca.pem", "dangling.pem", "link.pem", "target"}, names); diff != "" {
		t.Errorf("directory entries (-want +got):\n%s", diff)
	}
}

func BenchmarkCALeafCached(b *testing.B) {
	ca := caForTest(b)
	if _, err := ca.Leaf("api.example.com"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.Leaf("api.example.com"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCALeafMint(b *testing.B) {
	ca := caForTest(b)
	hosts := make([]string, 1024)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example.com", i)
	}
	ca.maxLeaves = 1 // every host is new to the cache
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := ca.Leaf(hosts[i%len(hosts)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
