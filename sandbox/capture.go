package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// GatewayCapture is what a sandbox started with Spec.Capture hands its
// gateway, which must serve all of it (docs/capture.md).
type GatewayCapture struct {
	// DNS is where the DNS stub must listen (UDP and TCP): the host end's
	// address and Capture.DNSPort. The rules send every query there.
	DNS netip.AddrPort
	// Transparent listens on the namespace's loopback for the TCP
	// connections the rules redirect; the gateway serves it and closes it
	// (the sandbox's Close closes it too, after the gateway).
	Transparent net.Listener
	// Packets reports the packets the rules refuse; the gateway reads it
	// with Run. The sandbox's Close closes it before the gateway's, once
	// Run has read every report left in it.
	Packets *PacketLog
	// Owners tells which of the sandbox's processes owns a socket. The
	// sandbox's Close closes it after the gateway.
	Owners *Owners
}

// writeResolvConf writes the resolv.conf of a sandbox whose DNS stub
// answers at dns (port 53 there reaches it) into dir, and returns its
// path.
func writeResolvConf(dir string, dns netip.Addr) (string, error) {
	path := filepath.Join(dir, "resolv.conf")
	body := fmt.Sprintf("# Written by sbx: the gateway's DNS stub answers here; every query\n# to port 53, whatever the address, goes to it.\nnameserver %s\n", dns)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		return "", fmt.Errorf("writing the sandbox's resolv.conf: %w", err)
	}
	return path, nil
}
