package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestGuardRefusalNamesAddrs: a decision the address guard refused lists,
// in addrs, every address it refused that a policy can exempt, in the
// resolver's order, whatever the kind (plain HTTP, CONNECT, a request in
// an inspected tunnel, an IP target); the fence's refusals, which no
// policy lifts, list none.
func TestGuardRefusalNamesAddrs(t *testing.T) {
	up := echoUpstream(t)
	port := portOf(t, up)
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
		{ID: "lab", Host: "lab.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Allow},
		{ID: "inspected", Host: "inspected.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Allow, Inspect: true},
		{ID: "any", Host: "0.0.0.0/0", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Allow}, // exempts no special range
	}}, map[string]string{"lab.test": "127.0.0.1", "inspected.test": "127.0.0.3"}, func(c *serverConfig) {
		c.CA = ca
		for name, ip := range map[string]string{"lab.test": "127.0.0.2", "gw.test": "127.0.0.1"} {
			if err := c.Resolver.AddStatic(name, netip.MustParseAddr(ip)); err != nil {
				t.Fatal(err)
			}
		}
	})
	_, gwPort, _ := net.SplitHostPort(g.addr)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	proxy, _ := url.Parse("http://" + g.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	tests := []struct {
		name, url, kind, addrs string
	}{
		{"name over plain HTTP", fmt.Sprintf("http://lab.test:%d/", port), decisionlog.KindHTTP, "127.0.0.1,127.0.0.2"},
		{"name by CONNECT", fmt.Sprintf("https://lab.test:%d/", port), decisionlog.KindConnect, "127.0.0.1,127.0.0.2"},
		{"request in an inspected tunnel", fmt.Sprintf("https://inspected.test:%d/", port), decisionlog.KindHTTPS, "127.0.0.3"},
		{"IP target", fmt.Sprintf("http://127.0.0.1:%d/", port), decisionlog.KindHTTP, "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Get(tt.url)
			if err == nil {
				resp.Body.Close()
			}
			rec := g.lastDecision(t)
			reason, _ := rec[decisionlog.FieldReason].(string)
			if rec[decisionlog.FieldRule] != netpolicy.RuleGuard || rec[decisionlog.FieldKind] != tt.kind || !strings.HasPrefix(reason, decisionlog.ReasonGuard) {
				t.Fatalf("got %v, want a %s decision by the address guard", rec, tt.kind)
			}
			if got := rec[decisionlog.FieldAddrs]; got != tt.addrs {
				t.Errorf("addrs: got %v, want %q", got, tt.addrs)
			}
		})
	}

	// The fence: the gateway's own address, allow_private or not.
	if _, err := g.store.Replace(netpolicy.Spec{Default: netpolicy.Block, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Rules: []netpolicy.Rule{{ID: "gw", Host: "gw.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Allow}}}, 0); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get("http://gw.test:" + gwPort + "/")
	if err == nil {
		resp.Body.Close()
	}
	rec := g.lastDecision(t)
	if reason, _ := rec[decisionlog.FieldReason].(string); rec[decisionlog.FieldRule] != netpolicy.RuleGuard || !strings.HasSuffix(reason, classGateway) {
		t.Fatalf("got %v, want a refusal of the gateway itself", rec)
	}
	if got, ok := rec[decisionlog.FieldAddrs]; ok {
		t.Errorf("the fence's refusal: got addrs %v, want none (no policy lifts it)", got)
	}
}

// TestCARejectedIsTheLogsPrefix: the close error of a client that refused
// the sbx CA starts with what readers of the log look for.
func TestCARejectedIsTheLogsPrefix(t *testing.T) {
	if reasonCARejected != decisionlog.ErrorCARejected {
		t.Errorf("reasonCARejected is %q, decisionlog.ErrorCARejected %q: readers of the log would not recognize it", reasonCARejected, decisionlog.ErrorCARejected)
	}
}
