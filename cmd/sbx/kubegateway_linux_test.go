package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/handoff"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

// fromAddr connects to addr over network from the loopback address from
// (any 127/8 address is loopback on Linux), or returns nil when a TCP
// server reset the connection before the dial returned (it refused to
// serve it, faster than the dial could see it accepted).
func fromAddr(t *testing.T, network, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 3 * time.Second}
	if network == "udp" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(from)}
	} else {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial(network, addr)
	if network == "tcp" && errors.Is(err, syscall.ECONNRESET) {
		return nil // reset before the dial returned: not served
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(3 * time.Second))
	return c
}

// TestKubeGatewayPodServesItsAgentAlone runs sbx gateway with the command
// line of sbx kube's gateway pod (kube.MakeObjects' container command;
// its listen addresses and mounted files moved to loopback and a
// temporary directory) and tells it its agent's address as sbx kube run
// does (tellAgent, PUT /v1/clients): a client from another address (a
// pod that reached the gateway pod where NetworkPolicy is not enforced)
// gets nothing on the proxy, capture and DNS ports, and is logged; the
// agent's address is served, and its 403 names sbx kube policy allow for
// the sandbox. Red on main: the pod's command had no --allow-command, the
// gateway no /v1/clients, and the other client was served.
func TestKubeGatewayPodServesItsAgentAlone(t *testing.T) {
	dir := t.TempDir()
	ca, err := gateway.NewCA("1a2b3c4d", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	s := kube.Spec{ID: "1a2b3c4d", Namespace: "agents", Image: "busybox", GatewayImage: "sbx:test",
		Policy: []byte(`{"default":"block"}`), CACert: ca.CertPEM(), CA: caPEM, Token: token}
	objs, err := kube.MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	cmd := objs.Gateway.Spec.Containers[0].Command
	if len(cmd) < 2 || cmd[0] != "/sbx" || cmd[1] != "gateway" {
		t.Fatalf("the gateway pod runs %q, want /sbx gateway", cmd)
	}
	files := map[string][]byte{kube.KeyToken: []byte(token + "\n"), kube.KeyCA: caPEM, kube.KeyPolicy: s.Policy}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	capture, dns, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	args := append([]string(nil), cmd[2:]...)
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen":
			args[i+1] = "127.0.0.1:0"
		case "--capture":
			args[i+1] = capture
		case "--dns":
			args[i+1] = dns
		case "--api":
			args[i+1] = apiAddr
		case "--token-file", "--ca", "--policy":
			args[i+1] = filepath.Join(dir, filepath.Base(args[i+1]))
		}
	}
	g := startGatewayCmd(t, "decision log on standard output", args...)
	_, rest, _ := strings.Cut(g.errOut.String(), "proxy on ")
	proxy, _, _ := strings.Cut(rest, " ")

	if err := tellAgent(t.Context(), apiAddr, token, netip.MustParseAddr("127.0.0.2")); err != nil {
		t.Fatalf("telling the gateway its agent's address: %v", err)
	}
	ask := func(from string) string {
		c := fromAddr(t, "tcp", from, proxy)
		if c == nil {
			return ""
		}
		io.WriteString(c, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := ask("127.0.0.1"); got != "" {
		t.Errorf("another client was served by the proxy: %q", got)
	}
	{
		if c := fromAddr(t, "tcp", "127.0.0.1", capture); c != nil {
			var b bytes.Buffer
			handoff.Write(&b, netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort("192.0.2.80:80"))
			b.WriteString("GET / HTTP/1.1\r\nHost: 192.0.2.80\r\nConnection: close\r\n\r\n")
			c.Write(b.Bytes())
			if got, _ := io.ReadAll(c); len(got) > 0 {
				t.Errorf("another client was served on the capture port: %q", got)
			}
		}
	}
	{
		c := fromAddr(t, "udp", "127.0.0.1", dns)
		// A query for example.com, type A.
		c.Write([]byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(make([]byte, 512)); err == nil {
			t.Errorf("another client got a DNS answer of %d bytes", n)
		}
	}
	got := ask("127.0.0.2")
	if want := "\n  sbx kube policy allow -n agents --sandbox 1a2b3c4d blocked.test:80\n"; !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, want) {
		t.Errorf("the agent's 403:\n%s\nwant it to name %q", got, want)
	}
	for deadline := time.Now().Add(5 * time.Second); strings.Count(g.out.String(), `"client 127.0.0.1 is not this gateway's sandbox"`) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the decision log does not count a refusal of 127.0.0.1 on each of the three ports:\n%s", g.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := g.stop(t); code != 0 {
		t.Errorf("exit %d, stderr %q", code, g.errOut.String())
	}
}
