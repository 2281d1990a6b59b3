package sandbox

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestPrivilegedTransparentListenerNoKeepAlive: the connections of the
// transparent listener a capturing sandbox's gateway serves in the
// sandbox's namespace (listenInNetns) have no TCP keep-alive, which Go
// would set on each with four system calls: both ends are in the
// namespace, over its loopback, where no peer can vanish without the
// kernel ending its connections.
func TestPrivilegedTransparentListenerNoKeepAlive(t *testing.T) {
	ns, path := testNetns(t, "keepalive")
	ln, err := listenInNetns(path, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c net.Conn
	if err := inNetns(ns, func() error {
		var err error
		c, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rc, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	if on != 0 {
		t.Errorf("an accepted connection's SO_KEEPALIVE = %d, want 0", on)
	}
}
