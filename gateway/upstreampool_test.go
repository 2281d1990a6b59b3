package gateway

import (
	"bufio"
	"net"
	"net/netip"
	"strings"
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

	for _, tc := range []struct {
		name string
		give func(p *upstreamPool, held **upConn)
	}{
		{"a request to another address", func(p *upstreamPool, held **upConn) {
			if uc := p.takeHeld(held, other); uc != nil {
				t.Fatal("takeHeld returned a connection to another address")
			}
		}},
		{"the client connection ends", func(p *upstreamPool, held **upConn) { p.release(held) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &upstreamPool{}
			fresh, freshPeer := newConn(time.Second)
			held := fresh
			tc.give(p, &held)
			if held != nil || p.idleCount(addr) != 1 {
				t.Fatalf("a connection idle for 1 s: held %v, %d pooled; want it in the pool", held, p.idleCount(addr))
			}
			stale, stalePeer := newConn(upstreamIdleTimeout + time.Second)
			held = stale
			tc.give(p, &held)
			if held != nil || p.idleCount(addr) != 1 {
				t.Fatalf("a connection idle past upstreamIdleTimeout: held %v, %d pooled; want it closed, not pooled", held, p.idleCount(addr))
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

// TestPoolHandsOutOnlyTheCheckedAddress checks the pool's operations on
// the type itself: a connection comes back only for the IP and port it
// was kept under (the ones the guard passed), done keeps only a reusable
// exchange's connection, and a closed pool keeps nothing.
func TestPoolHandsOutOnlyTheCheckedAddress(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.1:80")
	newConn := func(addr netip.AddrPort) *upConn {
		ours, peer := net.Pipe()
		t.Cleanup(func() { ours.Close(); peer.Close() })
		return &upConn{conn: ours, br: bufio.NewReader(ours), addr: addr, idleSince: time.Now()}
	}
	for _, tc := range []struct {
		name string
		run  func(p *upstreamPool, uc *upConn) *upConn // returns what get(addr) finds after
	}{
		{"put, get", func(p *upstreamPool, uc *upConn) *upConn { p.put(uc); return uc }},
		{"another port", func(p *upstreamPool, uc *upConn) *upConn {
			p.put(newConn(netip.MustParseAddrPort("127.0.0.1:81")))
			return nil
		}},
		{"another IP", func(p *upstreamPool, uc *upConn) *upConn {
			p.put(newConn(netip.MustParseAddrPort("127.0.0.2:80")))
			return nil
		}},
		{"done, reusable, then released", func(p *upstreamPool, uc *upConn) *upConn {
			uc.head.ProtoMinor = 1
			var held *upConn
			p.done(&held, uc, true)
			if held != uc {
				t.Errorf("done with a reusable exchange: held %v, want the connection", held)
			}
			p.release(&held)
			return uc
		}},
		{"done, not reusable", func(p *upstreamPool, uc *upConn) *upConn {
			uc.head.ProtoMinor = 1
			var held *upConn
			p.done(&held, uc, false)
			p.release(&held)
			return nil
		}},
		{"done, upstream asked to close", func(p *upstreamPool, uc *upConn) *upConn {
			uc.head.ProtoMinor, uc.head.Close = 1, true
			var held *upConn
			p.done(&held, uc, true)
			p.release(&held)
			return nil
		}},
		{"put after close", func(p *upstreamPool, uc *upConn) *upConn { p.close(); p.put(uc); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &upstreamPool{}
			want := tc.run(p, newConn(addr))
			if got := p.get(addr); got != want {
				t.Errorf("get(%s) = %p, want %p", addr, got, want)
			}
		})
	}
}

// idleCount returns how many idle connections to addr p keeps.
func (p *upstreamPool) idleCount(addr netip.AddrPort) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[addr])
}

// A kept upstream connection does not keep the memory of a large head
// (up to maxResponseHeadBytes, which an upstream that echoes the
// sandbox's request back makes as large as the sandbox likes): thousands
// of kept connections would hold a MiB each. A small head's memory is
// kept for the next.
func TestPoolDropsALargeHead(t *testing.T) {
	for _, size := range []int{keepHeadBytes / 4, maxResponseHeadBytes / 2} {
		ours, peer := net.Pipe()
		t.Cleanup(func() { ours.Close(); peer.Close() })
		uc := &upConn{conn: ours, br: bufio.NewReader(ours), addr: netip.MustParseAddrPort("127.0.0.1:80")}
		rh := "HTTP/1.1 200 OK\r\nX-Echo: " + strings.Repeat("a", size-40) + "\r\nContent-Length: 0\r\n\r\n"
		if err := readResponseHead(bufio.NewReaderSize(strings.NewReader(rh), 4096), &uc.head, 0); err != nil {
			t.Fatal(err)
		}
		var p upstreamPool
		var held *upConn
		p.done(&held, uc, true)
		if held != uc {
			t.Fatalf("a %d-byte head: the connection was not kept", size)
		}
		kept := cap(held.head.buf) > 0
		if want := size <= keepHeadBytes; kept != want {
			t.Errorf("a %d-byte head: its memory kept %v (%d bytes), want %v", size, kept, cap(held.head.buf), want)
		}
	}
}
