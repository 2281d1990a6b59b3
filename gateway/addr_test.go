package gateway

import (
	"net"
	"net/netip"
	"testing"
)

// stubAddrConn is a net.Conn whose peer and local addresses are set.
type stubAddrConn struct {
	net.Conn
	remote, local net.Addr
}

func (c stubAddrConn) RemoteAddr() net.Addr { return c.remote }
func (c stubAddrConn) LocalAddr() net.Addr  { return c.local }

// TestRemoteAddrPortAsParsed: a connection's peer read from its
// *net.TCPAddr is what formatting that address and parsing it back gave,
// for every form of address the kernel hands out, and the zero AddrPort
// for an address that is no IP's.
func TestRemoteAddrPortAsParsed(t *testing.T) {
	addrs := []net.Addr{
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40000},             // 16-byte, v4-mapped
		&net.TCPAddr{IP: net.IP{10, 0, 0, 2}, Port: 40000},               // 4-byte
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},          // v6
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 53, Zone: "eth0"}, // v6 with a zone
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 1},       // mapped, as text
		&net.TCPAddr{Port: 80},                             // no IP
		&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}, // not TCP: parsed
		&net.UnixAddr{Name: "/run/x.sock", Net: "unix"},    // no IP
		pipeAddr{}, // net.Pipe's
	}
	for _, a := range addrs {
		var want netip.AddrPort
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			want = unmapAddrPort(ap)
		}
		c := stubAddrConn{remote: a, local: a}
		if got := remoteAddrPort(c); got != want {
			t.Errorf("remoteAddrPort of %s (%T) = %v, want %v", a, a, got, want)
		}
		if got := clientAddr(c); got != want.Addr() {
			t.Errorf("clientAddr of %s (%T) = %v, want %v", a, a, got, want.Addr())
		}
		if got := addrPortOf(c.LocalAddr()); got != want {
			t.Errorf("addrPortOf %s (%T) = %v, want %v", a, a, got, want)
		}
	}
	if got := addrPortOf(nil); got.IsValid() {
		t.Errorf("addrPortOf(nil) = %v, want the zero AddrPort", got)
	}
}

// pipeAddr is an address with no IP, as net.Pipe's.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestClientAddrAllocates: a TCP client's address is read without a
// string: the accept loop, the count of a client's connections and its
// release each take it.
func TestClientAddrAllocates(t *testing.T) {
	c := &stubAddrConn{remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40000}}
	if n := testing.AllocsPerRun(100, func() { clientAddr(c) }); n != 0 {
		t.Errorf("clientAddr allocated %v times, want 0", n)
	}
}
