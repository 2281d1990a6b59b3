package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway"
)

// setCA records the CAs sbx gateway --ca's reload gives the gateway.
type setCA struct{ got []*gateway.CA }

func (s *setCA) SetCA(ca *gateway.CA) error {
	s.got = append(s.got, ca)
	return nil
}

// TestGatewayCAFileReread: sbx gateway --ca reads its file again (sbx
// kube controller renews a sandbox's CA by writing its Secret, which the
// kubelet puts in the gateway pod's file): a file that holds another CA
// becomes the gateway's; one unchanged changes nothing; one that is no CA
// keeps the running CA and says why once.
func TestGatewayCAFileReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca-key.pem")
	write := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	first, err := gateway.NewCA("1a2b3c4d", 0)
	if err != nil {
		t.Fatal(err)
	}
	firstPEM, _ := first.MarshalPEM()
	write(firstPEM)
	r := caReload{path: path, last: firstPEM}
	s := &setCA{}
	var out, errOut strings.Builder
	r.check(s, &out, &errOut)
	if len(s.got) != 0 {
		t.Fatalf("an unchanged file: SetCA called %d times", len(s.got))
	}
	renewed, err := first.Renew(0)
	if err != nil {
		t.Fatal(err)
	}
	renewedPEM, _ := renewed.MarshalPEM()
	write(renewedPEM)
	r.check(s, &out, &errOut)
	if len(s.got) != 1 || !s.got[0].Certificate().Equal(renewed.Certificate()) {
		t.Fatalf("a renewed CA in the file: SetCA got %v, want the renewed CA", s.got)
	}
	if !strings.Contains(out.String(), "CA renewed from "+path) {
		t.Errorf("output %q: want it to say the CA was renewed", out.String())
	}
	write([]byte("not a CA"))
	r.check(s, &out, &errOut)
	r.check(s, &out, &errOut)
	if len(s.got) != 1 {
		t.Errorf("a file that is no CA: SetCA called again")
	}
	if n := strings.Count(errOut.String(), "the running CA stays"); n != 1 {
		t.Errorf("stderr %q: want one line saying the running CA stays", errOut.String())
	}
}
