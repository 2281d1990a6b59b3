package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrNoCA is SetCA's error for a gateway started without a CA (Config.CA
// nil): it inspects nothing, and a CA given later would not change that.
var ErrNoCA = errors.New("the gateway was started without a CA")

// SetCA makes ca the CA that inspected tunnels opened from now on are
// served with, in place of Config.CA or the last SetCA's: sbx kube's
// gateway pod takes its renewed CA this way (sbx gateway --ca re-reads
// its file). Tunnels already open keep the certificate they were shown.
// ca must still be valid; a gateway started without a CA refuses it
// (ErrNoCA), as it refuses nil.
func (s *Server) SetCA(ca *CA) error {
	if ca == nil || s.ca.Load() == nil {
		return ErrNoCA
	}
	if !time.Now().Before(ca.cert.NotAfter) {
		return ErrCAValidity
	}
	s.ca.Store(ca)
	return nil
}

// CA returns the CA inspected tunnels are served with now: Config.CA or
// SetCA's; nil for a gateway without one.
func (s *Server) CA() *CA { return s.ca.Load() }

// Renew returns the CA with a new certificate of the same name and key,
// valid from a minute ago until validFor from now (0: MaxCAValidity),
// and a new serial number: what sbx kube controller writes into a
// sandbox's Secret before its CA expires. Its leaves chain to either
// certificate, so a client that read the old one keeps verifying them
// until the old one expires, and one that reads the new one afterwards.
// The leaf key and the session ticket key are new.
func (ca *CA) Renew(validFor time.Duration) (*CA, error) {
	switch {
	case validFor == 0:
		validFor = MaxCAValidity
	case validFor < 0 || validFor > MaxCAValidity:
		return nil, fmt.Errorf("renewing the CA: validity %v, want at most %v", validFor, MaxCAValidity)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("renewing the CA: %w", err)
	}
	now := time.Now()
	old := ca.cert
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               old.Subject,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              old.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          old.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, ca.key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("renewing the CA: signing its certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("renewing the CA: parsing its certificate: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("renewing the CA: generating the leaf key: %w", err)
	}
	return newCA(cert, ca.key, leafKey), nil
}
