package gateway

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestPoolClosesIdledOutConnections checks that an upstream connection a
// client connection held past upstreamIdleTimeout is closed when it is
// given back (the request went elsewhere, or the client left), not kept
// in the pool with its file descriptor until a request to its address
// finds it.
func TestPoolClosesIdledOutConnections(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.1:80")
	other := netip.MustParseAddrPort("127.0.0.1:81")
	newConn := func(idle time.Duration) (*upConn, net.Conn) {
		ours, peer := net.Pipe()
		t.Cleanup(func() { ours.Close(); peer.Close() })
		return &upConn{conn: ours, addr: addr, idleSince: time.Now().Add(-idle)}, peer
	}
	closed := func(peer net.Conn, wait time.Duration) bool {
		peer.SetReadDeadline(time.Now().Add(wait))
		_, err := peer.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	pooled := func(s *Server) int {
		s.pool.mu.Lock()
		defer s.pool.mu.Unlock()
		return len(s.pool.idle[addr])
	}

	for _, tc := range []struct {
		name string
		give func(s *Server, held **upConn)
	}{
		{"a request to another address", func(s *Server, held **upConn) {
			if uc := s.takeHeld(held, other); uc != nil {
				t.Fatal("takeHeld returned a connection to another address")
			}
		}},
		{"the client connection ends", func(s *Server, held **upConn) { s.release(held) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{}
			fresh, freshPeer := newConn(time.Second)
			held := fresh
			tc.give(s, &held)
			if held != nil || pooled(s) != 1 {
				t.Fatalf("a connection idle for 1 s: held %v, %d pooled; want it in the pool", held, pooled(s))
			}
			stale, stalePeer := newConn(upstreamIdleTimeout + time.Second)
			held = stale
			tc.give(s, &held)
			if held != nil || pooled(s) != 1 {
				t.Fatalf("a connection idle past upstreamIdleTimeout: held %v, %d pooled; want it closed, not pooled", held, pooled(s))
			}
			if !closed(stalePeer, 5*time.Second) {
				t.Fatal("the idled-out connection is still open")
			}
			if closed(freshPeer, 20*time.Millisecond) {
				t.Fatal("the fresh connection was closed")
			}
		})
	}
}
