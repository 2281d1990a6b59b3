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

// TestWaitGateway: WaitGateway returns once the gateway's proxy listens,
// not before (it keeps trying while nothing listens), and fails, saying
// why, when ctx ends first.
func TestWaitGateway(t *testing.T) {
	// A port nothing listens on, for now: refused at once.
	gw := freeAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := WaitGateway(ctx, gw)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), gw.String()) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("nothing listening: got %v, want the deadline, the address and the last attempt's refusal", err)
	}

	later := listenAfter(t, gw, 200*time.Millisecond)
	if err := WaitGateway(t.Context(), gw); err != nil {
		t.Fatalf("the gateway listens after 200 ms: got %v, want nil", err)
	}
	ln := <-later
	if ln == nil {
		t.Fatal("the stand-in gateway could not listen")
	}
	defer ln.Close()
	// It returned for the stand-in's connection, not another's: the
	// connection is in the listener's queue.
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the gateway took no connection from WaitGateway: %v", err)
	}
	c.Close()
}

// freeAddr returns a loopback address whose port nothing listens on, for
// now.
func freeAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// listenAfter listens on addr once d has passed, as a gateway or shim
// that starts late, and sends the listener, or nil when it could not.
func listenAfter(t *testing.T, addr netip.AddrPort, d time.Duration) <-chan net.Listener {
	later := make(chan net.Listener, 1)
	go func() {
		time.Sleep(d)
		ln, err := net.Listen("tcp", addr.String())
		if err != nil {
			t.Error(err)
			ln = nil
		}
		later <- ln
	}()
	return later
}
