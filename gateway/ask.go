package gateway

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// hold settles d, the verdict on t of the request that rec records, under
// snap, through the approvals (approval.Registry.Ask): a verdict other
// than ask is returned as it is, and an ask is held on its question until
// the answer. When c is not nil, the request is c's, which nothing else
// reads meanwhile: its client hanging up ends the wait too
// (watchClient), and its write deadline is renewed after the answer,
// which may have outlasted it. A request whose ctx ends ends the wait
// with a block.
func (s *Server) hold(ctx context.Context, c *conn, rec *decisionlog.Record, snap *netpolicy.Snapshot, t netpolicy.Target, d netpolicy.Decision) netpolicy.Decision {
	d, held := s.approvals.Ask(ctx, rec, snap, t, d)
	if held == nil {
		return d
	}
	if c != nil && c.br != nil {
		// ctx is the listener's: the wait ends when the client hangs up.
		var stop func()
		ctx, stop = watchClient(ctx, c)
		defer stop()
	}
	d, answered := held.Wait(ctx)
	if answered && c != nil {
		c.extendWriteDeadline(s.limits.IdleConnTimeout)
	}
	return d
}

// approvalGateway is what the approvals need of the gateway: resolving
// and guarding a name before it is asked about, and the decision log.
type approvalGateway struct{ s *Server }

// Guard returns the address guard's refusal of t's host, if any, when
// its addresses are known without a lookup (an IP literal, a static
// answer): what the guard refuses is refused, not asked. A name only a
// resolver answers is asked about first, and resolved and guarded after
// an allow, as any allowed request's: resolving it before would send the
// sandbox's chosen name to a real resolver, data in it and all, before
// anyone allowed it (docs/gateway.md).
func (g approvalGateway) Guard(_ context.Context, p *netpolicy.Policy, t netpolicy.Target, rec *decisionlog.Record) *netpolicy.Decision {
	addrs, ok := g.s.resolver.known(t.Host)
	if !ok {
		return nil
	}
	_, guard, _ := g.s.guardAddrs(p, t, rec, addrs)
	return guard
}

// Emit logs an approval record.
func (g approvalGateway) Emit(rec *decisionlog.Record) { g.s.emit(rec) }

// halfCloseGrace is how soon after a hold starts the end of its client's
// stream is taken for a half-close that came with the request, not for
// the client leaving. Reading cannot tell a client that closed its
// connection from one that only shut down its sending side and waits
// for the answer, as printf ... | nc does at once; a client that leaves
// does so while it waits, later.
const halfCloseGrace = 500 * time.Millisecond

// watchClient returns a context that ends with ctx or when c's client
// hangs up, and the func that ends the watch, which the caller must call
// before it reads c again. While the watch lasts, a goroutine peeks at c
// for its client's next bytes: a read that fails (the client closed or
// reset the connection) cancels the context, but for the end of the
// stream within halfCloseGrace, which ends the watch. The bytes it reads stay in
// c.br, unread, for the request's reader: pipelined requests, a body, a
// tunnel's first bytes. Once c.br is full it can read no more without
// taking them, and the watch ends without cancelling: a client that sent
// that much past its request's head is not watched. stop wakes the
// goroutine's read with a deadline in the past, waits for it to return
// (its only end, besides a failed read and a full buffer), and puts back
// the read deadline c had.
func watchClient(ctx context.Context, c *conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	c.Conn.SetReadDeadline(time.Time{}) // c.readDL keeps the deadline to put back
	start := time.Now()
	go func() {
		defer close(done)
		for n := c.br.Buffered(); n < c.br.Size(); n = c.br.Buffered() {
			_, err := c.br.Peek(n + 1)
			switch {
			case err == nil:
				continue
			case errors.Is(err, io.EOF) && time.Since(start) < halfCloseGrace:
				// The client ended its sending side with its request
				// (printf ... | nc): it waits for the answer.
			case !isTimeout(err):
				cancel()
			}
			return
		}
	}()
	return ctx, func() {
		c.Conn.SetReadDeadline(time.Now())
		<-done
		c.Conn.SetReadDeadline(c.readDL)
		cancel()
	}
}
