package main

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/sandbox/kube/podnet"
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
