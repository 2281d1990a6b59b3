//go:build linux

package main

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRelaysKeepAliveRequests: requests on one connection reach the
// upstream in origin form, each answer comes back whole, and an answer
// not framed by Content-Length ends the connection. With -work, each
// request's decision record is in the log before the request reaches
// the upstream, and each answered one has a close record.
func TestRelaysKeepAliveRequests(t *testing.T) {
	for _, work := range []bool{false, true} {
		t.Run(map[bool]string{false: "relay", true: "work"}[work], func(t *testing.T) { testRelay(t, work) })
	}
}

func testRelay(t *testing.T, withWork bool) {
	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	targets := make(chan string, 8)
	up := upstream(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			target := strings.Fields(line)[1]
			if withWork {
				b, _ := os.ReadFile(logPath)
				if !strings.Contains(string(b), `"event":"decision"`) || !strings.Contains(string(b), `"path":"`+strings.SplitN(target, "?", 2)[0]+`"`) {
					target = "reached the upstream before its record was in the log: " + target + "; the log: " + string(b)
				}
			}
			targets <- target
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if l == "\r\n" {
					break
				}
			}
			if i == 2 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
				continue
			}
			body := strings.Repeat("x", 100000*i+5) // the second spans reads
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
	})
	if !withWork {
		logPath = ""
	}
	relayAt := startRelay(t, up, logPath)

	c, err := net.Dial("tcp4", relayAt.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i, path := range []string{"/a", "/b?q=1", "/c"} {
		io.WriteString(c, "GET http://"+up.String()+path+" HTTP/1.1\r\nHost: "+up.String()+"\r\n\r\n")
		select {
		case got := <-targets:
			if got != path {
				t.Fatalf("request %d reached the upstream as %q, want %q", i, got, path)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d did not reach the upstream", i)
		}
		if i == 2 {
			break
		}
		n := -1
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			if v, ok := strings.CutPrefix(l, "Content-Length: "); ok {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if l == "\r\n" {
				break
			}
		}
		if want := 100000*i + 5; n != want {
			t.Fatalf("answer %d: Content-Length %d, want %d", i, n, want)
		}
		if _, err := io.ReadFull(br, make([]byte, n)); err != nil {
			t.Fatalf("answer %d's body: %v", i, err)
		}
	}
	if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
		t.Fatalf("after a chunked answer: read %q, %v; want the connection ended with nothing relayed", b, err)
	}
	if withWork {
		// The close records of /a and /b go out with the next commit:
		// one more request, on a new connection, makes one.
		c2, err := net.Dial("tcp4", relayAt.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		io.WriteString(c2, "GET http://"+up.String()+"/d HTTP/1.1\r\nHost: "+up.String()+"\r\n\r\n")
		select {
		case got := <-targets:
			if got != "/d" {
				t.Fatalf("request /d reached the upstream as %q", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("request /d did not reach the upstream")
		}
		b, _ := os.ReadFile(logPath)
		if n := strings.Count(string(b), `"event":"close"`); n != 2 {
			t.Errorf("the log has %d close records, want 2 (the answers of /a and /b):\n%s", n, b)
		}
	}
}

// TestWorkSendsNothingBeforeTheCommit: with -work, a request read is
// held until the write of its record, whatever event asks its upstream
// to be flushed before that, and a write that fails sends nothing.
func TestWorkSendsNothingBeforeTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		fails     bool
	}{
		{"written", filepath.Join(t.TempDir(), "decisions.jsonl"), false},
		{"write fails", "/dev/full", true}, // every write: ENOSPC
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := netip.MustParseAddrPort("127.0.0.1:8080")
			r := newRelay(sockaddr(up))
			w, err := newWork(up, tc.log)
			if err != nil {
				t.Fatal(err)
			}
			defer w.f.Close()
			r.work = w
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			c := &side{fd: -1, client: true, id: "1"}
			u := &side{fd: fds[0], body: -1}
			c.peer, u.peer = u, c
			r.sides[u.fd] = u
			c.in = []byte("GET http://127.0.0.1:8080/x?q=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
			if !r.requests(c) {
				t.Fatal("requests refused an allowed request")
			}
			r.flush(u) // as the upstream's EPOLLOUT in the same wake would
			buf := make([]byte, 4096)
			if n, err := unix.Read(fds[1], buf); err != unix.EAGAIN {
				t.Fatalf("before the commit the upstream got %q (%v), want nothing", buf[:max(n, 0)], err)
			}
			err = w.commit(r)
			n, rerr := unix.Read(fds[1], buf)
			if tc.fails {
				if err == nil {
					t.Error("commit to a full disk: no error")
				}
				if rerr != unix.EAGAIN {
					t.Errorf("the upstream got %q though its record was not written", buf[:max(n, 0)])
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rerr != nil || !strings.HasPrefix(string(buf[:n]), "GET /x?q=1 HTTP/1.1\r\n") {
				t.Fatalf("after the commit the upstream got %q (%v), want the request in origin form", buf[:max(n, 0)], rerr)
			}
			b, _ := os.ReadFile(tc.log)
			if !strings.Contains(string(b), `"event":"decision"`) || !strings.Contains(string(b), `"path":"/x"`) {
				t.Errorf("the log after the commit: %s; want the request's decision record, without its query", b)
			}
		})
	}
}

// startRelay serves a relay to up on a port of loopback, with -work
// logPath when it is not empty, and returns its address. It runs until
// the test binary exits.
func startRelay(t *testing.T, up netip.AddrPort, logPath string) netip.AddrPort {
	t.Helper()
	lfd, err := listen(&unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(sockaddr(up))
	if logPath != "" {
		if r.work, err = newWork(up, logPath); err != nil {
			t.Fatal(err)
		}
	}
	go r.serve(lfd)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
}

// TestRelayEndsWithTheUpstream: an upstream that answers and closes at
// once gets its answer relayed and the client's connection closed.
func TestRelayEndsWithTheUpstream(t *testing.T) {
	up := upstream(t, func(c net.Conn) {
		// At once, before the request: the relay has not read the
		// connection yet, so the answer and the end come to it in one
		// event.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye")
	})
	relayAt := startRelay(t, up, "")
	for i := range 40 {
		c, err := net.Dial("tcp4", relayAt.String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		// No request: one unread at the relay's close would reset the
		// connection.
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || !strings.HasSuffix(string(b), "\r\n\r\nbye") {
			t.Fatalf("connection %d: read %q, %v; want the answer, then the end", i, b, err)
		}
	}
}

// upstream serves each connection to a port of loopback with serve, in a
// goroutine of its own, closing it when serve returns, until the test
// ends, and returns the port's address.
func upstream(t *testing.T, serve func(net.Conn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}
