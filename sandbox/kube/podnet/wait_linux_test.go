package podnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestWaitShim: WaitShim returns once a socket listens on the shim's
// address, not before: a listener on another address of the same port
// does not count, nor does a port nothing listens on; and it fails,
// saying why, when ctx ends first.
func TestWaitShim(t *testing.T) {
	shim := freeAddr(t)
	// The same port on another loopback address is not the shim's.
	other, err := net.Listen("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), shim.Port()).String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = WaitShim(ctx, shim)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), shim.String()) || !strings.Contains(err.Error(), "nothing listens there") {
		t.Errorf("nothing listening: got %v, want the deadline, the address and why", err)
	}

	later := listenAfter(t, shim, 200*time.Millisecond)
	if err := WaitShim(t.Context(), shim); err != nil {
		t.Fatalf("the shim listens after 200 ms: got %v, want nil", err)
	}
	ln := <-later
	if ln == nil {
		t.Fatal("the stand-in shim could not listen")
	}
	ln.Close()
}
