package gateway

import (
	"bufio"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	maxIdlePerUpstream  = 64               // idle connections kept per upstream address
	upstreamIdleTimeout = 90 * time.Second // an idle connection older than this is closed
)

// upConn is a connection to an upstream address that passed the guard.
type upConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	rd        *deadlineReader // the reader under br; its idle is adjustable
	writeDL   time.Time       // the write deadline set last
	addr      netip.AddrPort
	idleSince time.Time
	head      responseHead // the last response head read, its memory reused
	quiet     *quietCheck  // whether the upstream sent anything since (reusable)
}

// newUpConn wraps nc, a new connection to addr, whose reads time out after
// idle without a byte.
func newUpConn(nc net.Conn, addr netip.AddrPort, idle time.Duration) *upConn {
	rd := &deadlineReader{r: nc, c: nc, idle: idle}
	return &upConn{conn: nc, rd: rd, br: bufio.NewReaderSize(rd, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10), addr: addr, quiet: newQuietCheck(nc)}
}

func (uc *upConn) Close() error { return uc.conn.Close() }

// upstreamPool keeps upstream connections for reuse: idle ones by
// address, shared by all client connections, and through done, takeHeld
// and release the one a client connection holds between its requests.
// Connections are keyed by the IP that was checked, so reusing one never
// reaches another address than the guard passed.
type upstreamPool struct {
	mu     sync.Mutex
	idle   map[netip.AddrPort][]*upConn
	closed bool
}

// idledOut reports whether uc has been idle for upstreamIdleTimeout or
// longer: such a connection is closed, not reused.
func (p *upstreamPool) idledOut(uc *upConn) bool {
	return time.Since(uc.idleSince) >= upstreamIdleTimeout
}

// get returns the most recently used idle connection to addr, or nil.
func (p *upstreamPool) get(addr netip.AddrPort) *upConn {
	for {
		p.mu.Lock()
		list := p.idle[addr]
		if len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		uc := list[len(list)-1]
		p.idle[addr] = list[:len(list)-1]
		p.mu.Unlock()
		if p.reusable(uc) {
			return uc
		}
		uc.Close()
	}
}

// reusable reports whether uc, kept idle, may carry another request: it
// has not idled out, and the upstream sent nothing since its last answer
// nor ended it (quietConn).
func (p *upstreamPool) reusable(uc *upConn) bool {
	return !p.idledOut(uc) && uc.br.Buffered() == 0 && uc.quiet.quietConn()
}

// put keeps uc, idle since uc.idleSince, for reuse, or closes it when it
// has idled out already (a client connection can hold one longer than
// upstreamIdleTimeout) or the pool is full or closed.
func (p *upstreamPool) put(uc *upConn) {
	if p.idledOut(uc) {
		uc.Close()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[uc.addr]) >= maxIdlePerUpstream {
		uc.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[netip.AddrPort][]*upConn{}
	}
	p.idle[uc.addr] = append(p.idle[uc.addr], uc)
}

// close closes every idle connection; later puts close theirs.
func (p *upstreamPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, list := range p.idle {
		for _, uc := range list {
			uc.Close()
		}
	}
	p.idle = nil
}

// done keeps uc in *held, for the client connection's next request, when
// the exchange left it reusable: the response body, framed by its length
// or chunked, was read to its end, the request body was sent whole, and
// neither side asked to close; otherwise it closes uc. Bytes the upstream
// sent past the answer are caught when it is taken again (reusable). A client's
// requests mostly go to one upstream, and holding its connection spares
// them the pool's lock. What *held held before goes to the pool.
func (p *upstreamPool) done(held **upConn, uc *upConn, reusable bool) {
	if !reusable || uc.head.Close || uc.head.ProtoMinor < 1 {
		uc.Close()
		return
	}
	uc.head.shrink()
	uc.idleSince = time.Now()
	if *held != nil {
		p.put(*held)
	}
	*held = uc
}

// takeHeld returns the connection *held when it goes to addr and is
// reusable, and empties *held; a connection to another address goes to
// the pool, which closes it when it idled out.
func (p *upstreamPool) takeHeld(held **upConn, addr netip.AddrPort) *upConn {
	uc := *held
	if uc == nil {
		return nil
	}
	*held = nil
	switch {
	case uc.addr != addr:
		p.put(uc)
	case p.reusable(uc):
		return uc
	default:
		uc.Close()
	}
	return nil
}

// release gives the connection *held back to the pool when the client
// connection that held it ends, or turns into a tunnel.
func (p *upstreamPool) release(held **upConn) {
	if *held != nil {
		p.put(*held)
		*held = nil
	}
}
