package sandboxtest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NamedNetns makes the network namespace name, with lo up, for t alone:
// it is removed when t ends, and before it is made, should a crashed run
// have left one of that name. It skips t unless run as root.
func NamedNetns(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (CI runs as root)")
	}
	netns.DeleteNamed(name)
	ns, err := newNamed(name)
	if err != nil {
		t.Fatalf("creating network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting network namespace %s: %v", name, err)
		}
	})
	LoopbackUp(t, ns)
	return ns
}

// newNamed makes the network namespace name from a thread that returns
// to the test's namespace after.
func newNamed(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		// The thread is in the wrong namespace: it must run nothing
		// else (it dies with the lock held).
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", serr))
	}
	return ns, err
}

// LoopbackUp sets lo up in ns and gives it addrs, each as a host address
// (/32 or /128), so that a test can listen where a pod's or a gateway's
// address would be.
func LoopbackUp(t testing.TB, ns netns.NsHandle, addrs ...netip.Addr) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
		if err := h.AddrAdd(lo, &netlink.Addr{IPNet: ipn}); err != nil {
			t.Fatalf("adding %v to lo: %v", a, err)
		}
	}
}
