package podnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// How WaitGateway tries: each attempt waits for an answer this long (a
// connection the network drops, say while the node's NetworkPolicy
// enforcement has not yet seen the pod, gets none), and the next one
// starts after the pause.
const (
	waitAttempt = 500 * time.Millisecond
	waitPause   = 50 * time.Millisecond
)

// WaitGateway waits until gw (the gateway pod's proxy) accepts a TCP
// connection, which it then closes, and returns nil; or until ctx is
// done, when it returns why with the last attempt's error. The agent
// pod's rules container runs it once it installed the rules, so the
// agent, which starts after it, finds its gateway serving and reachable
// from the pod, through the rules, as the agent reaches it. A connection
// that is accepted and closed is what the kubelet's TCP probes make too:
// the gateway logs nothing for it.
func WaitGateway(ctx context.Context, gw netip.AddrPort) error {
	var d net.Dialer
	var last error // the last attempt's error that ctx's end did not cause
	for {
		actx, cancel := context.WithTimeout(ctx, waitAttempt)
		c, err := d.DialContext(actx, "tcp", gw.String())
		cancel()
		if err == nil {
			return c.Close()
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the gateway pod's proxy at %v did not answer: %w (the last attempt: %v)", gw, context.Cause(ctx), last)
		case <-time.After(waitPause):
		}
	}
}

// shimPause is how long WaitShim waits between two looks at the sockets.
const shimPause = 20 * time.Millisecond

// WaitShim waits until a TCP socket listens on addr (the capture shim's
// address, 127.0.0.1 and its port) in the process's network namespace,
// the pod's, and returns nil; or until ctx is done, when it says why. The
// agent pod's rules container runs it: the shim is a native sidecar that
// the kubelet starts before it, but counts as started once its process
// runs, not once it listens, and the agent starts after the rules
// container; a connection the rules redirect while nothing listens there
// is refused. It reads the namespace's sockets (sock_diag) rather than
// connecting: a connection made to the shim directly is one the shim
// refuses and reports.
func WaitShim(ctx context.Context, addr netip.AddrPort) error {
	var last error
	for {
		ok, err := listening(addr)
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			why := "nothing listens there"
			if last != nil {
				why = fmt.Sprintf("reading the pod's sockets: %v", last)
			}
			return fmt.Errorf("the capture shim at %v did not listen: %w (%s)", addr, context.Cause(ctx), why)
		case <-time.After(shimPause):
		}
	}
}
