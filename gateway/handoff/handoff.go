// Package handoff carries a captured connection's original destination
// from the process that captured it to the gateway, on a connection of its
// own: a one-line header in the PROXY protocol, version 1
// (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt), written
// before the connection's first byte.
//
// sbx kube uses it between the capture shim in a sandbox's agent pod,
// which accepts the connections the pod's rules redirect and reads their
// original destination from connection tracking, and the gateway in the
// sandbox's gateway pod, where that connection tracking is not. The header
// says where the connection was going; the gateway decides on that as on
// any captured connection. A client that writes a header of its own only
// asks for a destination it could have dialled directly, so the header is
// not trusted for anything else: the source address in it is ignored.
package handoff

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxHeader is the longest version 1 header, "\r\n" included.
const maxHeader = 107

// Timeout bounds how long Dst waits for a connection's header: the whole
// header, however it is paced.
const Timeout = 5 * time.Second

// readTimeout is Timeout; tests shorten it.
var readTimeout = Timeout

// Write writes the header for a connection from src to dst.
func Write(w io.Writer, src, dst netip.AddrPort) error {
	src, dst = netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	proto := "TCP4"
	if dst.Addr().Is6() {
		proto = "TCP6"
	}
	if src.Addr().Is6() != dst.Addr().Is6() || !src.IsValid() {
		// The header names one family; the source is not used.
		if dst.Addr().Is6() {
			src = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
		} else {
			src = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
		}
	}
	if !dst.IsValid() || dst.Addr().Zone() != "" {
		return fmt.Errorf("handoff: invalid destination %v", dst)
	}
	_, err := fmt.Fprintf(w, "PROXY %s %s %s %d %d\r\n", proto, src.Addr(), dst.Addr(), src.Port(), dst.Port())
	return err
}

// Read reads a header from br and returns the destination it names. It
// reads no further than the header's end, and never more than the longest
// header (107 bytes) whether or not a line ends there. It refuses a header
// that is not exactly "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n" with both
// addresses of the family named, without zones or IPv4-mapped forms, and
// ports in decimal without leading zeros (the destination's not 0): the
// source, though ignored, must be well formed too.
func Read(br *bufio.Reader) (netip.AddrPort, error) {
	var line []byte
	for len(line) < maxHeader {
		b, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return netip.AddrPort{}, fmt.Errorf("handoff header: %w", err)
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
	}
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("handoff header: not a PROXY protocol v1 line of at most %d bytes", maxHeader)
	}
	f := strings.Split(s, " ")
	if len(f) != 6 || f[0] != "PROXY" || f[1] != "TCP4" && f[1] != "TCP6" {
		return netip.AddrPort{}, fmt.Errorf("handoff header %q: want PROXY TCP4|TCP6 SRC DST SPORT DPORT", s)
	}
	if _, ok := parseAddr(f[2], f[1]); !ok {
		return netip.AddrPort{}, fmt.Errorf("handoff header %q: bad source address", s)
	}
	if _, ok := parsePort(f[4]); !ok {
		return netip.AddrPort{}, fmt.Errorf("handoff header %q: bad source port", s)
	}
	dst, ok := parseAddr(f[3], f[1])
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("handoff header %q: bad destination address", s)
	}
	port, ok := parsePort(f[5])
	if !ok || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("handoff header %q: bad destination port", s)
	}
	return netip.AddrPortFrom(dst, port), nil
}

// parseAddr parses an address of a header whose protocol is proto (TCP4
// or TCP6): of that family, without a zone, not IPv4-mapped.
func parseAddr(s, proto string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4() != (proto == "TCP4") || a.Is4In6() {
		return netip.Addr{}, false
	}
	return a, true
}

// parsePort parses a port of a header: decimal, 0 to 65535, without a sign
// or leading zeros.
func parsePort(s string) (uint16, bool) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || s != strconv.FormatUint(p, 10) {
		return 0, false
	}
	return uint16(p), true
}

// Conn is a connection accepted by Listener. Its header is read by Dst,
// on the goroutine serving it; reads start after the header.
//
// Besides net.Conn's methods it forwards to the connection underneath
// (a *net.TCPConn) those a relay type-asserts for: CloseWrite and
// CloseRead (half-close), SetLinger (a reset), SyscallConn (the socket's
// TCP state) and ReadFrom (writes, which splice where the kernel can). It
// has no WriteTo: reads go through the buffer that holds what followed
// the header, never around it.
type Conn struct {
	net.Conn
	br   *bufio.Reader
	once sync.Once
	dst  netip.AddrPort
	err  error
}

func (c *Conn) Read(p []byte) (int, error) {
	if _, err := c.Dst(); err != nil {
		return 0, err
	}
	return c.br.Read(p)
}

// ErrUnsupported is returned by Conn's forwarding methods when the
// connection underneath lacks the method (it is not a *net.TCPConn).
var ErrUnsupported = fmt.Errorf("handoff: the connection underneath cannot do it: %w", errors.ErrUnsupported)

// CloseWrite shuts down the writing side of the connection underneath.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return ErrUnsupported
}

// CloseRead shuts down the reading side of the connection underneath;
// what the buffer holds may still be read.
func (c *Conn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return ErrUnsupported
}

// SetLinger sets SO_LINGER on the connection underneath (0: Close sends a
// reset).
func (c *Conn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return ErrUnsupported
}

// SyscallConn returns the raw connection underneath, for socket options
// and state (syscall.Conn). Reading from it would bypass the buffer.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, ErrUnsupported
}

// ReadFrom writes what r holds to the connection (io.ReaderFrom), through
// the connection underneath's ReadFrom when it has one, so that a
// *net.TCPConn splices from another.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// Dst reads the header, within Timeout, the first time it is called and
// returns the destination it names.
func (c *Conn) Dst() (netip.AddrPort, error) {
	c.once.Do(func() {
		c.Conn.SetReadDeadline(time.Now().Add(readTimeout))
		c.dst, c.err = Read(c.br)
		c.Conn.SetReadDeadline(time.Time{})
	})
	return c.dst, c.err
}

// Dst returns the destination of a connection that Listener accepted: a
// gateway's Config.OriginalDst.
func Dst(c net.Conn) (netip.AddrPort, error) {
	if hc, ok := c.(*Conn); ok {
		return hc.Dst()
	}
	return netip.AddrPort{}, errors.New("handoff: not a connection from handoff.Listener")
}

// Listener returns a listener whose Accept returns ln's connections as
// *Conn, for Dst to read their headers.
func Listener(ln net.Listener) net.Listener { return &listener{ln} }

type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, br: bufio.NewReaderSize(c, 4096)}, nil
}
