package ui

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestPeerUID: the uid of the program at the other end of a loopback
// connection is found, over IPv4 and IPv6: this test's own.
func TestPeerUID(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("no %s here: %v", addr, err)
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			uid, err := peerUID(s.LocalAddr(), s.RemoteAddr())
			if err != nil || uid != uint32(os.Getuid()) {
				t.Errorf("peerUID of %s: got %d, %v; want %d", s.RemoteAddr(), uid, err, os.Getuid())
			}
			// The table is looked up by both ends: the listening socket
			// is no one's peer.
			if uid, err := peerUID(s.LocalAddr(), ln.Addr()); err == nil {
				t.Errorf("peerUID of the listener's own address: got %d, want an error", uid)
			}
		})
	}
}

// TestPrivilegedPeerUIDOtherUser: a connection from curl run as the user
// nobody is nobody's.
func TestPrivilegedPeerUIDOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run curl as the user nobody")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl is not installed: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command("curl", "--silent", "--noproxy", "*", "--max-time", "10", "http://"+ln.Addr().String()+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if uid, err := peerUID(s.LocalAddr(), s.RemoteAddr()); err != nil || uid != 65534 {
		t.Errorf("peerUID of curl as nobody: got %d, %v; want 65534", uid, err)
	}
}

// TestPeerUIDOfAClosedEnd: a client that sent its request and closed
// before the view looked leaves an end no process holds, which the
// kernel shows as uid 0: whose it was cannot be told, and peerUID says
// so rather than answer root.
func TestPeerUIDOfAClosedEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if uid, err := peerUID(s.LocalAddr(), s.RemoteAddr()); err == nil {
		t.Errorf("peerUID of a closed end: got uid %d, want an error", uid)
	}
}
