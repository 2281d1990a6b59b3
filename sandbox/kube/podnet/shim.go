package podnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/handoff"
)

// DialTimeout bounds how long the shim waits for the gateway to take a
// connection.
const DialTimeout = 10 * time.Second

// Shim serves the connections the pod's rules redirect to ln: for each, it
// reads the original destination from the pod's connection tracking
// (gateway.OriginalDst; ln must be in the namespace whose rules
// redirected), dials gateway (the gateway pod's capture port), writes a
// handoff header naming the destination, and relays both ways, passing a
// half-close on. A connection whose original destination cannot be read,
// or that was not redirected (its destination is ln's own address), is
// closed; so is one the gateway does not take within DialTimeout. Errors
// of single connections go to standard error, one line each; the shim
// logs nothing else.
//
// Each connection has two goroutines, which end when both directions
// have ended, when either side fails (both are then closed), or when ctx
// is done. Shim returns when ctx is done (nil) or when ln fails (its
// error); it closes ln, and connections still open are closed as ctx
// ends.
func Shim(ctx context.Context, ln net.Listener, gw netip.AddrPort) error {
	s := &shim{gw: gw, originalDst: gateway.OriginalDst, stderr: os.Stderr}
	return s.serve(ctx, ln)
}

// shim is Shim's state: where it reads a connection's original
// destination from, and where its errors go (tests replace both).
type shim struct {
	gw          netip.AddrPort
	originalDst func(net.Conn) (netip.AddrPort, error)
	stderr      io.Writer
}

// serve is Shim.
func (s *shim) serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				// Out of descriptors, or a connection gone before it
				// was taken: the next may do.
				s.error("accepting on %v: %v", ln.Addr(), err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return fmt.Errorf("capture shim: accepting on %v: %w", ln.Addr(), err)
		}
		go s.conn(ctx, c)
	}
}

// conn hands c over to the gateway and relays it; it returns when the
// relay ends, with both connections closed.
func (s *shim) conn(ctx context.Context, c net.Conn) {
	defer c.Close()
	dst, err := s.originalDst(c)
	if err != nil {
		s.error("reading the original destination of a connection from %v: %v", c.RemoteAddr(), err)
		return
	}
	if la, ok := c.LocalAddr().(*net.TCPAddr); ok && unmap(la.AddrPort()) == unmap(dst) {
		s.error("a connection from %v to the shim itself (%v) was not redirected; closed", c.RemoteAddr(), dst)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	var d net.Dialer
	up, err := d.DialContext(dctx, "tcp", s.gw.String())
	cancel()
	if err != nil {
		s.error("handing %v over to the gateway: %v", dst, err)
		return
	}
	defer up.Close()
	// Both are closed when ctx ends, which ends both copies.
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	var src netip.AddrPort
	if ra, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		src = ra.AddrPort()
	}
	up.SetWriteDeadline(time.Now().Add(handoff.Timeout))
	if err := handoff.Write(up, src, dst); err != nil {
		s.error("handing %v over to the gateway: %v", dst, err)
		return
	}
	up.SetWriteDeadline(time.Time{})
	relay(c, up)
}

// relay copies a to b and b to a until both directions end; a direction
// that ends with EOF half-closes its writer; one that fails closes both,
// which ends the other. The second goroutine ends with its copy.
func relay(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a)
	}()
	pipe(a, b)
	<-done
}

// pipe copies src to dst; at src's EOF it closes dst for writing (and src
// for reading); on an error it closes both.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		dst.Close()
	}
	if cr, ok := src.(interface{ CloseRead() error }); ok {
		cr.CloseRead()
	}
}

// unmap returns ap with an IPv4-mapped address as IPv4 (a dual-stack
// socket's addresses are mapped).
func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// error writes one line to the shim's standard error.
func (s *shim) error(format string, args ...any) {
	fmt.Fprintf(s.stderr, "sbx kube shim: "+format+"\n", args...)
}
