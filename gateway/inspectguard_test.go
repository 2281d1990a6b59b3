package gateway

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestInspectedIPRefusedByGuardRecord: a request inside an inspected
// tunnel to an IP literal that the address guard refuses (the tunnel is
// decided by DecideTunnel, which does not guard addresses; the request by
// Verdict, which does) is refused 403 by rule guard, and its record is
// the one the gateway wrote before the pipeline: the tunnel's host, no
// addrs field.
func TestInspectedIPRefusedByGuardRecord(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	g, _, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "0.0.0.0/4", Ports: []netpolicy.Port{443}, Inspect: true, Action: netpolicy.Allow}, nil)
	proxy, _ := url.Parse("http://" + g.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 10 * time.Second}
	resp, err := c.Get("https://10.9.9.9/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %d, want 403", resp.StatusCode)
	}
	rec := g.lastDecision(t)
	if rec["kind"] != decisionlog.KindHTTPS || rec["rule"] != netpolicy.RuleGuard {
		t.Fatalf("last decision %v: want kind https, rule guard", rec)
	}
	if a, ok := rec["addrs"]; ok {
		t.Errorf("record of the inspected request: got addrs %v, want none (as before the pipeline)", a)
	}
}
