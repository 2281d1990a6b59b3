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
