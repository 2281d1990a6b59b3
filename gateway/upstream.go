package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"
)

// The gateway talks HTTP/1.1 to upstreams itself rather than through
// net/http.Transport: a round trip then runs on the client's goroutine,
// without the transport's read and write loop goroutines and the hand-offs
// between them, which cost more than everything else on the proxy's path.

// roundTrip sends out to addr, on an idle connection when there is one:
// the one *held kept from the client connection's last request when it
// goes to addr, else one from the pool. It reads the response head. The
// caller relays the body and then gives the connection back with pool.done. A
// request without a body that fails on a reused connection (which the
// upstream may have closed meanwhile) is tried once more on a new one. ctx
// ends the wait for the response head.
func (s *Server) roundTrip(ctx context.Context, w *upstreamWatch, held **upConn, out *upstreamRequest, addr netip.AddrPort) (*responseHead, *upConn, error) {
	for attempt := 0; ; attempt++ {
		uc, reused := s.pool.takeHeld(held, addr), true
		if uc == nil {
			uc = s.pool.get(addr)
		}
		if uc == nil {
			reused = false
			nc, err := s.dialChecked(ctx, "tcp", addr.String())
			if err != nil {
				return nil, nil, err
			}
			uc = newUpConn(nc, addr, s.limits.IdleConnTimeout)
		}
		resp, err := s.exchange(ctx, w, uc, out)
		if err == nil {
			return resp, uc, nil
		}
		uc.Close()
		if !reused || attempt > 0 || out.hasBody() || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

// exchange writes out on uc and reads the response head into uc.head,
// skipping up to max1xxResponses informational responses other than 101.
// w closes uc if ctx ends meanwhile.
func (s *Server) exchange(ctx context.Context, w *upstreamWatch, uc *upConn, out *upstreamRequest) (*responseHead, error) {
	w.begin(ctx, uc)
	defer w.end()
	// The write deadline stays when the exchange is over: the next one on
	// this connection sets it again when it went stale.
	if now := time.Now(); staleDeadline(uc.writeDL, now, s.limits.IdleConnTimeout) {
		uc.writeDL = now.Add(s.limits.IdleConnTimeout)
		uc.conn.SetWriteDeadline(uc.writeDL)
	}
	out.writeHead(uc.bw)
	var err error
	if out.hasBody() {
		// The head goes first, as net/http sends it: the body may be slow
		// to come from the client.
		if err = uc.bw.Flush(); err == nil {
			err = out.writeBody(uc.bw)
		}
	}
	if err == nil {
		err = uc.bw.Flush()
	}
	if err != nil {
		return nil, err
	}
	uc.rd.idle = s.limits.ResponseTimeout
	for skipped := 0; ; skipped++ {
		if err := readResponseHead(uc.br, &uc.head, maxResponseHeadBytes); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if uc.head.Status >= 200 || uc.head.Status == http.StatusSwitchingProtocols {
			uc.rd.idle = s.limits.IdleConnTimeout // for the body
			return &uc.head, nil
		}
		if skipped == max1xxResponses {
			return nil, badResponse("more than %d informational responses", max1xxResponses)
		}
	}
}

// upstreamWatch closes the upstream connection that an exchange of a
// client connection waits on when the client's context ends. A client
// connection keeps one for its life, so that its context holds one
// context.AfterFunc for the connection instead of taking one (a lock and
// two allocations) for every request; stop releases it when the
// connection ends.
type upstreamWatch struct {
	ctx    context.Context
	stopFn func() bool
	cur    atomic.Pointer[upConn]
}

// begin makes uc the connection to close when ctx ends. When ctx has
// ended already, it closes uc itself.
func (w *upstreamWatch) begin(ctx context.Context, uc *upConn) {
	if w.stopFn == nil || w.ctx != ctx {
		w.stop()
		w.ctx = ctx
		w.stopFn = context.AfterFunc(ctx, func() {
			if uc := w.cur.Load(); uc != nil {
				uc.Close()
			}
		})
	}
	w.cur.Store(uc)
	if ctx.Err() != nil {
		uc.Close() // the AfterFunc may have run before uc was stored
	}
}

// end forgets the connection begin stored.
func (w *upstreamWatch) end() { w.cur.Store(nil) }

// stop releases the AfterFunc; begin makes a new one if called again.
func (w *upstreamWatch) stop() {
	if w.stopFn != nil {
		w.stopFn()
		w.stopFn, w.ctx = nil, nil
	}
}

// upgradeStream is the raw stream of an upgraded upstream connection: the
// bytes already buffered, then the connection.
type upgradeStream struct {
	uc *upConn
}

func (u upgradeStream) Read(p []byte) (int, error)  { return u.uc.br.Read(p) }
func (u upgradeStream) Write(p []byte) (int, error) { return u.uc.conn.Write(p) }
func (u upgradeStream) Close() error                { return u.uc.Close() }

var _ io.ReadWriteCloser = upgradeStream{}

// isTimeout reports whether err is a deadline or timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}
