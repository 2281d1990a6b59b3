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
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	targets := make(chan string, 8)
	serveUpstream := func(c net.Conn) {
		defer c.Close()
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
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveUpstream(c)
		}
	}()
	lfd, err := listen(&unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	relayAt := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
	up := netip.MustParseAddrPort(ln.Addr().String())
	r := newRelay(sockaddr(up))
	if withWork {
		if r.work, err = newWork(up, logPath); err != nil {
			t.Fatal(err)
		}
	}
	go r.serve(lfd) // runs until the test binary exits

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
