package main

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/sandbox/kube/podnet"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// inNewNetns runs fn on a thread in a new, unnamed network namespace,
// which goes when fn returns; fn gets the namespace.
func inNewNetns(t *testing.T, fn func(ns netns.NsHandle)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			t.Error(err)
			return
		}
		defer orig.Close()
		ns, err := netns.New() // the thread is in it from here
		if err != nil {
			runtime.UnlockOSThread()
			t.Error(err)
			return
		}
		defer ns.Close()
		defer func() {
			// A thread that cannot return stays locked, and ends
			// with its goroutine.
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
		}()
		fn(ns)
	}()
	<-done
}

// podTables returns the sbx-pod tables in ns, by family.
func podTables(t *testing.T, ns netns.NsHandle) []nftables.TableFamily {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var fams []nftables.TableFamily
	for _, tb := range tables {
		if tb.Name == podnet.TableName {
			fams = append(fams, tb.Family)
		}
	}
	return fams
}

// TestPrivilegedKubePodRules runs sbx kube pod-rules in namespaces of its
// own: it installs the pod's two tables and says so in one line; with
// --skip-for-test it installs nothing and warns.
func TestPrivilegedKubePodRules(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and nftables rules (CI runs as root)")
	}
	inNewNetns(t, func(ns netns.NsHandle) {
		stdout, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7")
		if code != 0 || stderr != "" {
			t.Errorf("pod-rules: exit %d, stderr %q; want 0 and nothing", code, stderr)
		}
		if lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); len(lines) != 1 ||
			!strings.HasPrefix(lines[0], "sbx kube pod-rules: installed: TCP to 10.244.0.7:3128 (proxy)") {
			t.Errorf("pod-rules: got stdout %q, want one line saying what it installed", stdout)
		}
		if got := podTables(t, ns); len(got) != 2 {
			t.Errorf("pod-rules: got %s tables of families %v, want 2 (ip, ip6)", podnet.TableName, got)
		}
	})
	inNewNetns(t, func(ns netns.NsHandle) {
		stdout, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7", "--skip-for-test")
		if code != 0 || stdout != "" {
			t.Errorf("pod-rules --skip-for-test: exit %d, stdout %q; want 0 and nothing", code, stdout)
		}
		if !strings.Contains(stderr, "WARNING: --skip-for-test: NO RULES INSTALLED") {
			t.Errorf("pod-rules --skip-for-test: got stderr %q, want the warning", stderr)
		}
		if got := podTables(t, ns); len(got) != 0 {
			t.Errorf("pod-rules --skip-for-test: got %s tables of families %v, want none", podnet.TableName, got)
		}
	})
}

// TestPrivilegedKubePodRulesWaitGateway: with --wait-gateway, sbx kube
// pod-rules returns only once the gateway's proxy port takes a
// connection through the rules it installed, and fails, saying why, when
// none does in time: the agent pod's agent starts after it, so never
// before its gateway serves.
func TestPrivilegedKubePodRulesWaitGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and nftables rules (CI runs as root)")
	}
	inNewNetns(t, func(ns netns.NsHandle) {
		// The gateway's address on the namespace's loopback stands in
		// for the gateway pod.
		sandboxtest.LoopbackUp(t, ns, netip.MustParseAddr("10.244.0.7"))
		_, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7", "--wait-gateway", "300ms")
		if code != 1 || !strings.Contains(stderr, "10.244.0.7:3128 did not answer") || !strings.Contains(stderr, "the agent does not start without its gateway") {
			t.Errorf("no gateway: got exit %d, stderr %q; want 1 and why", code, stderr)
		}
		ln, err := net.Listen("tcp", "10.244.0.7:3128")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{})
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
				close(accepted)
			}
		}()
		stdout, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7", "--wait-gateway", "10s")
		if code != 0 || stderr != "" || !strings.Contains(stdout, "installed") {
			t.Errorf("the gateway listening: got exit %d, stdout %q, stderr %q; want 0 once it answered", code, stdout, stderr)
		}
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Error("the gateway took no connection from pod-rules")
		}
	})
}

// TestPrivilegedKubePodRulesWaitShim: with --wait-shim, sbx kube
// pod-rules returns only once a socket listens on the capture shim's
// address in its namespace, and fails, saying why, when none does in
// time. The shim is a native sidecar the kubelet starts before the rules
// container, and counts as started once its process runs: this wait is
// what keeps the agent, which starts after the rules container, from
// finding nothing listening where the rules send its connections.
func TestPrivilegedKubePodRulesWaitShim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and nftables rules (CI runs as root)")
	}
	inNewNetns(t, func(ns netns.NsHandle) {
		sandboxtest.LoopbackUp(t, ns)
		_, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7", "--wait-shim", "300ms")
		if code != 1 || !strings.Contains(stderr, "the capture shim at 127.0.0.1:15001 did not listen") || !strings.Contains(stderr, "the agent does not start before its capture shim listens") {
			t.Errorf("no shim: got exit %d, stderr %q; want 1 and why", code, stderr)
		}
		// The thread is in the namespace: so is the listener.
		ln, err := net.Listen("tcp", "127.0.0.1:15001")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		stdout, stderr, code := runKubePodCLI(t.Context(), "pod-rules", "--gateway", "10.244.0.7", "--wait-shim", "10s")
		if code != 0 || stderr != "" || !strings.Contains(stdout, "installed") {
			t.Errorf("the shim listening: got exit %d, stdout %q, stderr %q; want 0", code, stdout, stderr)
		}
	})
}
