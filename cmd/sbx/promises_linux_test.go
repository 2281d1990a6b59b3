package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// Security promises tested end to end so that breaking one line of the
// code that keeps them turns a test red (scripts/mutate.sh checks that).

// TestPrivilegedCaptureEveryPort connects from a sandbox to an upstream of
// the test's own on a list of ports (ssh, smtp, https, postgres and a high
// one), none of them through the proxy: capture takes each connection to
// the gateway, which decides it (the policy allows the upstream), logs it
// as transparent and relays it, so each server's banner arrives. A port
// left out of capture is refused by the namespace's rules: its banner is
// missing and its record too.
func TestPrivilegedCaptureEveryPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	ports := []int{22, 25, 443, 5432, 40123}
	up := upstreamNamespace(t)
	for _, p := range ports {
		ln := listenIn(t, up.Name, func() (io.Closer, error) { return net.Listen("tcp", fmt.Sprintf("%s:%d", up.Addr, p)) }).(net.Listener)
		go func() { // ends when the listener is closed with the test
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "banner-%d\n", p)
				c.Close()
			}
		}()
	}
	root := busyboxRoot(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log.jsonl")
	var script strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&script, "echo \"port %d: $(busybox sleep 1 | busybox nc -w 3 %s %d)\"\n", p, up.Addr, p)
	}
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.224.0/24", "--log", logFile, "--allow-private", up.Net, "--allow", up.Addr+":*",
		"--", "sh", "-c", script.String())
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	transparent := map[int]bool{}
	for _, r := range readRecords(t, logFile) {
		if r["event"] == decisionlog.EventDecision && r["kind"] == decisionlog.KindTransparent && r["host"] == up.Addr && r["action"] == "allow" {
			port, _ := r["port"].(float64)
			transparent[int(port)] = true
		}
	}
	for _, p := range ports {
		if want := fmt.Sprintf("port %d: banner-%d", p, p); !strings.Contains(stdout, want) {
			t.Errorf("port %d: the server's banner did not arrive through capture (want %q):\n%s", p, want, stdout)
		}
		if !transparent[p] {
			t.Errorf("port %d: no transparent decision record for %s:%d", p, up.Addr, p)
		}
	}
}

// TestPrivilegedFenceHoldsTheDefaultPool runs a sandbox from a pool of its
// own (--subnet-pool outside the default pool) whose policy allows an
// upstream that lies in the default pool, private addresses and all: the
// gateway still never dials it, since the default pool is where other
// sandboxes live. The upstream must see no request, and the sandbox a
// refusal by the address guard.
func TestPrivilegedFenceHoldsTheDefaultPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	// The default pool's last /24, far from where sandboxes are given
	// their /30s (from the pool's start), and from the tests' pools.
	up := upstreamNamespaceIn(t, netip.MustParsePrefix("10.213.255.0/24"))
	root := busyboxRoot(t)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log.jsonl")
	target := "http://" + up.Addr + ":8080/"
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.216.0.0/24", "--log", logFile, "--allow-private", "10.213.0.0/16", "--allow", up.Addr+":8080",
		"--", "sh", "-c", "busybox wget -q -O- "+target+" 2>&1; echo done")
	if code != 0 || !strings.Contains(stdout, "done") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	up.mu.Lock()
	requests := len(up.remotes)
	up.mu.Unlock()
	if strings.Contains(stdout, "hello-upstream") || requests != 0 {
		t.Errorf("the gateway of a sandbox outside the default pool dialed %s in it: %q", up.Addr, stdout)
	}
	if !strings.Contains(stdout, "403") {
		t.Errorf("the sandbox was not answered 403: %q", stdout)
	}
	guarded := false
	for _, r := range readRecords(t, logFile) {
		if r["event"] == decisionlog.EventDecision && r["host"] == up.Addr && r["action"] == "block" && r["rule"] == "guard" {
			guarded = true
		}
	}
	if !guarded {
		t.Errorf("no guard decision for %s in the log", up.Addr)
	}
}
