package gateway

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestSetCARenewed: a gateway given a renewed CA (sbx kube controller's
// renewal, read again by sbx gateway --ca) serves new inspected tunnels
// with leaves of the new certificate, valid past the old one's end, and
// a client that trusts only the old certificate (read before the
// renewal) still verifies them: same name and key.
func TestSetCARenewed(t *testing.T) {
	s := newInspectSetup(t, netpolicy.Enforce, nil, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow})
	renewed, err := s.ca.Renew(2 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.Certificate().NotAfter.After(s.ca.Certificate().NotAfter) {
		t.Fatalf("renewed until %v, not after the old %v", renewed.Certificate().NotAfter, s.ca.Certificate().NotAfter)
	}
	leafEnd := func() time.Time {
		t.Helper()
		resp, err := s.client(t, false).Get(s.url("example.com", "/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		leaf := resp.TLS.PeerCertificates[0]
		for _, ca := range []*CA{s.ca, renewed} {
			pool := x509.NewCertPool()
			pool.AddCert(ca.Certificate())
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"}); err != nil {
				t.Errorf("the leaf does not verify with the CA valid until %v: %v", ca.Certificate().NotAfter, err)
			}
		}
		return leaf.NotAfter
	}
	if end := leafEnd(); !end.Equal(s.ca.Certificate().NotAfter) {
		t.Fatalf("before SetCA the leaf ends at %v, want the first CA's end %v", end, s.ca.Certificate().NotAfter)
	}
	if err := s.g.srv.SetCA(renewed); err != nil {
		t.Fatal(err)
	}
	s.client(t, false).Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	if end := leafEnd(); !end.Equal(renewed.Certificate().NotAfter) {
		t.Errorf("after SetCA the leaf ends at %v, want the renewed CA's end %v", end, renewed.Certificate().NotAfter)
	}
	if err := s.g.srv.SetCA(nil); !errors.Is(err, ErrNoCA) {
		t.Errorf("SetCA(nil): %v, want ErrNoCA", err)
	}
	if _, err := s.ca.Renew(MaxCAValidity + time.Hour); err == nil {
		t.Error("Renew past MaxCAValidity: no error")
	}
}
