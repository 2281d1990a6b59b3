package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub"
	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// freeAddr returns a loopback host:port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dialCapture connects to a --capture listener and writes the handoff
// header naming dst, as sbx kube's capture shim does.
func dialCapture(t *testing.T, capture string, dst netip.AddrPort) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", capture)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := handoff.Write(c, netip.MustParseAddrPort(c.LocalAddr().String()), dst); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGatewayPod runs sbx gateway as sbx kube's gateway pod runs it, on
// loopback: --capture takes a handed-over connection to an allowed
// upstream, by IP and by the fake address --dns gave for a name, and
// relays it; --dns answers over UDP and over TCP; a TLS connection to an
// inspected host through --capture is terminated with the CA of --ca,
// whose certificate --ca-cert writes; and --log - writes the decision
// records, and nothing else, to standard output as they are made.
func TestGatewayPod(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain "+r.Host) }))
	t.Cleanup(plain.Close)
	plainAP := netip.MustParseAddrPort(plain.Listener.Addr().String())
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "inspected "+r.URL.Path) }))
	t.Cleanup(tlsUp.Close)
	tlsAP := netip.MustParseAddrPort(tlsUp.Listener.Addr().String())

	dir := t.TempDir()
	ca, err := gateway.NewCA("pod", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil { // the Secret mount's 0440 shape is api.TestOpenToOthersSecretMount's
		t.Fatal(err)
	}
	upstreamCA := filepath.Join(dir, "upstream.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsUp.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	caCert := filepath.Join(dir, "ca.crt")
	capture, dnsAddr := freeAddr(t), freeAddr(t)

	g := startGatewayCmd(t, "decision log on standard output", "--listen", "127.0.0.1:0",
		"--capture", capture, "--dns", dnsAddr, "--ca", caFile, "--ca-cert", caCert, "--log", "-",
		"--allow-private", "127.0.0.0/8", "--allow", "127.0.0.1:"+strconv.Itoa(int(plainAP.Port())),
		"--allow", "api.test:"+strconv.Itoa(int(plainAP.Port())), "--resolve", "api.test=127.0.0.1",
		"--allow", "example.com:"+strconv.Itoa(int(tlsAP.Port())), "--inspect", "example.com:"+strconv.Itoa(int(tlsAP.Port())), "--resolve", "example.com=127.0.0.1", "--upstream-ca", upstreamCA,
		"--process-unknown", kube.ProcessUnknown)
	for _, want := range []string{"handed-over connections on " + capture, "DNS on " + dnsAddr} {
		if !strings.Contains(g.errOut.String(), want) {
			t.Errorf("standard error lacks %q:\n%s", want, g.errOut.String())
		}
	}

	get := func(t *testing.T, c net.Conn, host string) string {
		t.Helper()
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("through --capture: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("through --capture: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}

	t.Run("capture", func(t *testing.T) {
		c := dialCapture(t, capture, plainAP)
		if got, want := get(t, c, plainAP.String()), "plain "+plainAP.String(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})

	var fake netip.Addr
	t.Run("dns", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, dnsAddr)
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			addrs, err := r.LookupNetIP(ctx, "ip4", "api.test")
			cancel()
			if err != nil || len(addrs) != 1 || !dnsstub.FakeIPRange().Contains(addrs[0]) {
				t.Errorf("api.test over %s: got %v, %v; want one address in %v", network, addrs, err, dnsstub.FakeIPRange())
				continue
			}
			fake = addrs[0]
		}
	})
	t.Run("capture by name", func(t *testing.T) {
		if !fake.IsValid() {
			t.Skip("no address from --dns")
		}
		c := dialCapture(t, capture, netip.AddrPortFrom(fake, plainAP.Port()))
		host := "api.test:" + strconv.Itoa(int(plainAP.Port()))
		if got, want := get(t, c, host), "plain "+host; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})

	t.Run("tls", func(t *testing.T) {
		written, err := os.ReadFile(caCert)
		if err != nil || !bytes.Equal(written, ca.CertPEM()) {
			t.Errorf("--ca-cert wrote %q, %v; want the --ca certificate", written, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.CertPEM())
		c := tls.Client(dialCapture(t, capture, tlsAP), &tls.Config{ServerName: "example.com", RootCAs: pool})
		if err := c.Handshake(); err != nil {
			t.Fatalf("TLS through --capture, verified with the --ca certificate: %v", err)
		}
		if got, want := get(t, c, "example.com:"+strconv.Itoa(int(tlsAP.Port()))), "inspected /x"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})

	// Standard output is the decision log, every record as it is made.
	want := map[string]bool{"127.0.0.1": false, "api.test": false, "example.com": false}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.SplitAfter(g.out.String(), "\n") {
			if line == "" {
				continue
			}
			var r decisionlog.Record
			if err := decisionlog.Decode([]byte(line), &r); err != nil || !strings.HasSuffix(line, "\n") {
				if strings.HasSuffix(line, "\n") {
					t.Fatalf("standard output holds %q, not a decision record: %v", line, err)
				}
				continue // being written
			}
			if r.Event == decisionlog.EventDecision && r.Action == "allow" && (r.Kind == decisionlog.KindTransparent || r.Kind == decisionlog.KindHTTPS) {
				if _, ok := want[r.Host]; ok {
					want[r.Host] = true
				}
			}
		}
		if !want["127.0.0.1"] || !want["api.test"] || !want["example.com"] {
			if time.Now().After(deadline) {
				t.Fatalf("allow records on standard output: %v; want all; got:\n%s", want, g.out.String())
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		break
	}
	if code := g.stop(t); code != 0 {
		t.Errorf("exit %d, stderr %q", code, g.errOut.String())
	}
	var jsonLine map[string]any
	unknown := 0
	for _, line := range strings.Split(strings.TrimSuffix(g.out.String(), "\n"), "\n") {
		if err := json.Unmarshal([]byte(line), &jsonLine); err != nil {
			t.Errorf("standard output line %q is not JSON: %v", line, err)
		}
		// Every record of a client says why it names no process.
		if jsonLine["event"] == "decision" || jsonLine["event"] == "close" {
			if jsonLine["process_unknown"] != kube.ProcessUnknown {
				t.Errorf("record %s: process_unknown %q, want %q", line, jsonLine["process_unknown"], kube.ProcessUnknown)
			}
			unknown++
		}
	}
	if unknown == 0 {
		t.Errorf("no decision or close record on standard output:\n%s", g.out.String())
	}
}
