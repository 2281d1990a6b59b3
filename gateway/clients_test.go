package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub/dnsstubtest"
	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/netpolicy"
)

// dialFrom connects to addr over network from the loopback address from
// (127.0.0.2 is loopback on Linux too, with no set-up), or skips where
// the system has only 127.0.0.1.
func dialFrom(t *testing.T, network, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 3 * time.Second}
	if network == "udp" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(from)}
	} else {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial(network, addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Skipf("this system cannot send from %s: %v", from, err)
	}
	if errors.Is(err, syscall.ECONNRESET) {
		// The gateway's reset came before the dial returned: a loaded
		// machine can take that long.
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(3 * time.Second))
	return c
}

// proxyAnswer sends a proxy request from from and returns what came back
// before the connection ended: nothing when the gateway refused the
// client.
func proxyAnswer(t *testing.T, from, addr string) string {
	t.Helper()
	c := dialFrom(t, "tcp", from, addr)
	if c == nil {
		return "" // reset before the dial returned: not served
	}
	io.WriteString(c, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(c)
	return string(b)
}

// captureAnswer hands a connection to blocked.test:80 over to the capture
// listener at addr from from, as a capture shim does, and returns what
// came back.
func captureAnswer(t *testing.T, from, addr string) string {
	t.Helper()
	c := dialFrom(t, "tcp", from, addr)
	if c == nil {
		return "" // reset before the dial returned: not served
	}
	var b bytes.Buffer
	handoff.Write(&b, netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort("192.0.2.80:80"))
	b.WriteString("GET / HTTP/1.1\r\nHost: 192.0.2.80\r\nConnection: close\r\n\r\n")
	c.Write(b.Bytes())
	out, _ := io.ReadAll(c)
	return string(out)
}

// dnsAnswered sends a DNS query from from to addr over UDP and reports
// whether an answer came within a second.
func dnsAnswered(t *testing.T, from, addr string) bool {
	t.Helper()
	c := dialFrom(t, "udp", from, addr)
	c.Write(dnsstubtest.Query{Name: "blocked.test.", Type: dnsmessage.TypeA}.Pack(t, 7))
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 4096))
	return err == nil
}

// TestSetClientsRefusesOtherAddresses: once told its sandbox's address
// through the management API (PUT /v1/clients, as sbx kube tells its
// gateway pod the agent pod's), the gateway serves that address alone on
// its proxy, capture and DNS ports: another client (a pod the
// NetworkPolicy should have kept out) is refused without a byte and
// logged, and its connection opened before is closed. Red without
// SetClients' check (Config.Clients fixed at Start): 127.0.0.1 is served.
func TestSetClientsRefusesOtherAddresses(t *testing.T) {
	capLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := startAPIWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *Config) {
		c.DNS = "127.0.0.1:0"
		c.Transparent, c.OriginalDst = handoff.Listener(capLn), handoff.Dst
	})
	proxy, capture, dns := a.g.ProxyAddr.String(), capLn.Addr().String(), a.g.DNSAddr.String()
	const other, agent = "127.0.0.1", "127.0.0.2"

	// Before: anyone that reaches it is served.
	if got := proxyAnswer(t, other, proxy); !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("before any clients were set, %s got %q from the proxy, want a 403", other, got)
	}
	kept := dialFrom(t, "tcp", other, proxy)
	kept.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(kept, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
	br := bufio.NewReader(kept)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a kept-alive connection from %s: %v", other, err)
	}
	io.Copy(io.Discard, resp.Body)

	c := apiClientOf(t, a, a.token)
	set, err := c.SetClients(context.Background(), []netip.Prefix{netip.MustParsePrefix(agent + "/32")})
	if err != nil {
		t.Fatalf("PUT /v1/clients: %v", err)
	}
	if diff := cmp.Diff([]string{agent + "/32"}, set.Clients); diff != "" {
		t.Errorf("PUT /v1/clients answered (-want +got):\n%s", diff)
	}
	if got, err := c.Clients(context.Background()); err != nil || !cmp.Equal(got.Clients, []string{agent + "/32"}) {
		t.Errorf("GET /v1/clients: %v, %v; want [%s/32]", got, err, agent)
	}

	// The connection opened before is closed.
	io.WriteString(kept, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
	if n, _ := io.Copy(io.Discard, br); n != 0 {
		t.Errorf("the connection %s opened before read %d bytes more after the clients were set, want it closed", other, n)
	}
	for _, tc := range []struct {
		port string
		ask  func(from string) (served bool, got string)
	}{
		{"proxy", func(from string) (bool, string) {
			got := proxyAnswer(t, from, proxy)
			return got != "", got
		}},
		{"capture", func(from string) (bool, string) {
			got := captureAnswer(t, from, capture)
			return got != "", got
		}},
		{"DNS", func(from string) (bool, string) { return dnsAnswered(t, from, dns), "" }},
	} {
		if served, got := tc.ask(other); served {
			t.Errorf("%s: %s, not the sandbox's address, was served: %q", tc.port, other, got)
		}
		if served, _ := tc.ask(agent); !served {
			t.Errorf("%s: the sandbox's address %s was not served", tc.port, agent)
		}
	}
	waitBlocked(t, a.g.Server, 3)
	refused := 0
	for _, r := range recordsOfKind(t, a.g.Ring, decisionlog.KindConn) {
		if r["reason"] == "client "+other+" is not this gateway's sandbox" && r["rule"] == "guard" && r["action"] == "block" {
			refused++
		}
	}
	if refused < 3 {
		t.Errorf("%d records of refusals of %s, want one for each port: %v", refused, other, ringRecords(t, a.g.Ring))
	}
}

// TestSetClientsChecks: a body that is not a list of networks is refused
// with 400 and changes nothing.
func TestSetClientsChecks(t *testing.T) {
	a := startAPI(t, netpolicy.Spec{}, nil)
	for _, body := range []string{`{}`, `{"clients": ["not-an-ip"]}`, `{"clients": "10.0.0.1"}`, `[`} {
		var eb api.ErrorBody
		if resp := a.call(t, "PUT", "/v1/clients", body, nil, &eb); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("PUT /v1/clients %s: status %d, want 400", body, resp.StatusCode)
		}
	}
	if got := a.g.Server.Clients(); len(got) != 0 {
		t.Errorf("after refused bodies the clients are %v, want none (every client)", got)
	}
	var out api.Clients
	if resp := a.call(t, "PUT", "/v1/clients", `{"clients": ["10.244.0.7"]}`, nil, &out); resp.StatusCode != http.StatusOK ||
		!cmp.Equal(out.Clients, []string{"10.244.0.7/32"}) {
		t.Errorf("PUT /v1/clients with an address alone: %d %v, want 200 [10.244.0.7/32]", resp.StatusCode, out.Clients)
	}
}

// TestAllowCommandInBlockText: a 403's help names Config.AllowCommand
// (sbx kube's gateway pod: sbx kube policy allow), else sbx policy allow.
func TestAllowCommandInBlockText(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{AllowCommand: "sbx kube policy allow -n agents --sandbox 1a2b3c4d"}, "\n  sbx kube policy allow -n agents --sandbox 1a2b3c4d blocked.test:80\n"},
		{Config{Sandbox: "1a2b3c4d"}, "\n  sbx policy allow --sandbox 1a2b3c4d blocked.test:80\n"},
		{Config{}, "\n  sbx policy allow --api ADDR --token-file FILE blocked.test:80\n"},
	} {
		p, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
		if err != nil {
			t.Fatal(err)
		}
		tc.cfg.Listen, tc.cfg.Policy = "127.0.0.1:0", p
		g, err := Start(context.Background(), tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := proxyAnswer(t, "127.0.0.1", g.ProxyAddr.String())
		g.Close()
		if !strings.Contains(got, tc.want) {
			t.Errorf("with %+v the 403 says\n%s\nwant it to hold %q", tc.cfg, got, tc.want)
		}
	}
}
