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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = WaitGateway(ctx, gw)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), gw.String()) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("nothing listening: got %v, want the deadline, the address and the last attempt's refusal", err)
	}

	listening := make(chan struct{}, 1)
	accepted := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		ln, err := net.Listen("tcp", gw.String())
		if err != nil {
			t.Error(err)
			close(listening)
			return
		}
		defer ln.Close()
		listening <- struct{}{}
		if c, err := ln.Accept(); err == nil {
			c.Close()
			close(accepted)
		}
	}()
	if err := WaitGateway(t.Context(), gw); err != nil {
		t.Fatalf("the gateway listens after 200 ms: got %v, want nil", err)
	}
	if _, ok := <-listening; !ok {
		t.Fatal("the stand-in gateway could not listen")
	}
	// It returned for the stand-in's connection, not another's.
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Error("the gateway took no connection from WaitGateway")
	}
}
