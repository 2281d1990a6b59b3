package gateway

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// keepAliveOf reads the keep-alive of the socket under c: SO_KEEPALIVE,
// TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT.
func keepAliveOf(t *testing.T, c syscall.Conn) [4]int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got [4]int
	var serr error
	opts := [4][2]int{
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT},
	}
	if err := rc.Control(func(fd uintptr) {
		for i, o := range opts {
			if got[i], err = syscall.GetsockoptInt(int(fd), o[0], o[1]); err != nil {
				serr = err
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return got
}

// wantKeepAlive is Go's default keep-alive, which every TCP connection of
// the gateway has: on, first probe after 15 s idle, then every 15 s, 9 of
// them.
var wantKeepAlive = [4]int{1, 15, 15, 9}

// TestListenersKeepAlive: the gateway's TCP listeners (the proxy's, the
// DNS stub's) hold the keep-alive of their connections, set once on the
// listening socket rather than on each connection, and the connections
// they accept have it; so has a connection the gateway dials upstream.
// Without listenerKeepAlive the listeners have none (Go sets it on each
// accepted connection instead, four system calls each).
func TestListenersKeepAlive(t *testing.T) {
	proxy, err := listenProxy(context.Background(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	pc, dns, err := listenDNS(context.Background(), "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer dns.Close()
	for name, ln := range map[string]net.Listener{"proxy": proxy, "DNS": dns} {
		if got := keepAliveOf(t, ln.(*net.TCPListener)); got != wantKeepAlive {
			t.Errorf("%s listener: keep-alive %v, want %v (on, idle, interval, count)", name, got, wantKeepAlive)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
		sc, err := ln.Accept()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := keepAliveOf(t, sc.(*net.TCPConn)); got != wantKeepAlive {
			t.Errorf("%s connection: keep-alive %v, want %v (on, idle, interval, count)", name, got, wantKeepAlive)
		}
		sc.Close()
	}

	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(p)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	up := tcpServer(t, func(c net.Conn) { c.Close() })
	c, err := srv.cfg.Dial(context.Background(), "tcp", up.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := keepAliveOf(t, c.(*net.TCPConn)); got != wantKeepAlive {
		t.Errorf("upstream connection: keep-alive %v, want %v (on, idle, interval, count)", got, wantKeepAlive)
	}
}
