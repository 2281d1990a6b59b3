package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestOwnersHelper is a process with sockets, started inside a test
// namespace by the Owners tests; on its own it skips. SBX_OWNERS_HELPER
// lists what to open, space-separated:
//
//	listen=ADDR        a TCP listener; it accepts one connection and says "accepted"
//	dial=LOCAL>REMOTE  a TCP connection from LOCAL
//	udp=ADDR           an unconnected UDP socket bound to ADDR
//	udpconn=LOCAL>REMOTE  a UDP socket bound to LOCAL and connected to REMOTE
//
// It says "ready" once all are open, and holds them until its standard
// input closes. With SBX_OWNERS_TITLE it first gives itself that title,
// as node's process.title and setproctitle do: its comm (prctl
// PR_SET_NAME, cut to 15 bytes) and its command line (argv overwritten).
func TestOwnersHelper(t *testing.T) {
	spec := os.Getenv("SBX_OWNERS_HELPER")
	if spec == "" {
		t.Skip("runs only inside a test namespace, started by the Owners tests")
	}
	if title := os.Getenv("SBX_OWNERS_TITLE"); title != "" {
		setTitle(t, title)
	}
	var keep []io.Closer
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(s)
	}
	for _, item := range strings.Fields(spec) {
		kind, arg, _ := strings.Cut(item, "=")
		local, remote, _ := strings.Cut(arg, ">")
		switch kind {
		case "listen":
			ln, err := net.Listen("tcp", local)
			if err != nil {
				t.Fatal(err)
			}
			keep = append(keep, ln)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					say("accept: " + err.Error())
					return
				}
				mu.Lock()
				keep = append(keep, c)
				mu.Unlock()
				say("accepted")
			}()
		case "dial":
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(local))}
			c, err := d.Dial("tcp", remote)
			if err != nil {
				t.Fatal(err)
			}
			keep = append(keep, c)
		case "udp":
			c, err := net.ListenPacket("udp", local)
			if err != nil {
				t.Fatal(err)
			}
			keep = append(keep, c)
		case "udpconn":
			c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(local)), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(remote)))
			if err != nil {
				t.Fatal(err)
			}
			keep = append(keep, c)
		default:
			t.Fatalf("unknown item %q", item)
		}
	}
	say("ready")
	io.Copy(io.Discard, os.Stdin)
	mu.Lock()
	defer mu.Unlock()
	for _, c := range keep {
		c.Close()
	}
}

// setTitle sets the process's comm to title and overwrites its argv (the
// memory os.Args points into, one NUL-separated block) with it. The comm
// is the main thread's, written through /proc/self/comm: prctl
// PR_SET_NAME names only the calling thread, and a test runs on whichever
// thread its goroutine got (the title then missed /proc/PID/comm, once in
// a full run).
func setTitle(t *testing.T, title string) {
	if err := os.WriteFile("/proc/self/comm", []byte(title), 0); err != nil {
		t.Fatal(err)
	}
	start := unsafe.StringData(os.Args[0])
	size := 0
	for _, a := range os.Args {
		if unsafe.StringData(a) != (*byte)(unsafe.Add(unsafe.Pointer(start), size)) {
			t.Fatal("argv is not one block")
		}
		size += len(a) + 1
	}
	area := unsafe.Slice(start, size)
	clear(area[copy(area[:size-1], title):])
}

// helper is a TestOwnersHelper process.
type helper struct {
	pid   int
	lines chan string
	stdin io.Writer // its standard input, closed by stop
	stop  func()
}

// startHelper starts TestOwnersHelper in the namespace called name with
// spec, waits until it is ready, and stops it when t ends.
func startHelper(t testing.TB, name, spec string) *helper {
	t.Helper()
	return startHelperFiles(t, name, spec)
}

// startHelperFiles is startHelper handing the helper files as well.
func startHelperFiles(t testing.TB, name, spec string, files ...*os.File) *helper {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", name, os.Args[0], "-test.run=^TestOwnersHelper$")
	cmd.Env = append(os.Environ(), "SBX_OWNERS_HELPER="+spec)
	cmd.ExtraFiles = files
	return startHelperCmd(t, cmd)
}

// startHelperCmd starts cmd, a TestOwnersHelper or a program that says
// "ready" as one does and runs until its standard input closes, waits
// until it is ready, and stops it when t ends.
func startHelperCmd(t testing.TB, cmd *exec.Cmd) *helper {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{pid: cmd.Process.Pid, lines: make(chan string, 16), stdin: stdin}
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			stdin.Close()
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(h.stop)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			h.lines <- s.Text()
		}
		close(h.lines)
	}()
	h.await(t, "ready")
	return h
}

// await waits for the helper to say want.
func (h *helper) await(t testing.TB, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper %d ended before saying %q", h.pid, want)
			}
			if line == want {
				return
			}
			if !strings.HasPrefix(line, "=== RUN") {
				t.Logf("helper %d: %s", h.pid, line)
			}
		case <-timeout:
			t.Fatalf("helper %d did not say %q within 10 s", h.pid, want)
		}
	}
}

// ownersNetns makes a test namespace with a server and a client process
// (TestOwnersHelper) in it, each with the same sockets every time:
//
//	server: TCP listener 127.0.0.1:7001 and the connection it accepted
//	        from 127.0.0.1:7002, UDP unconnected on 127.0.0.1:7003,
//	        TCP listener [::]:7006 (dual-stack) and the connection it
//	        accepted from 127.0.0.1:7007 (an IPv6 socket, IPv4-mapped)
//	client: TCP 127.0.0.1:7002 -> 127.0.0.1:7001, UDP 127.0.0.1:7004
//	        connected to 127.0.0.2:53, UDP unconnected on [::]:7005,
//	        TCP 127.0.0.1:7007 -> 127.0.0.1:7006
func ownersNetns(t testing.TB, name string) (path string, server, client *helper) {
	t.Helper()
	ns, path := testNetns(t, name)
	ns.Close()
	nsName := filepath.Base(path)
	server = startHelper(t, nsName, "listen=127.0.0.1:7001 udp=127.0.0.1:7003 listen=[::]:7006")
	client = startHelper(t, nsName, "dial=127.0.0.1:7002>127.0.0.1:7001 udpconn=127.0.0.1:7004>127.0.0.2:53 udp=[::]:7005 dial=127.0.0.1:7007>127.0.0.1:7006")
	server.await(t, "accepted")
	server.await(t, "accepted")
	return path, server, client
}

// TestPrivilegedOwners starts two processes with TCP and UDP sockets in a
// namespace, and the same two with the same sockets in a second one, and
// expects each lookup to name the process of the first namespace that
// holds the socket, and no process at all for a tuple that is not there,
// even where the other namespace has it.
func TestPrivilegedOwners(t *testing.T) {
	path, server, client := ownersNetns(t, "owners")
	_, _, client2 := ownersNetns(t, "owners2") // the same tuples in another namespace
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	comm := filepath.Base(exe)
	if len(comm) > 15 {
		comm = comm[:15]
	}

	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ap := netip.MustParseAddrPort
	none := netip.AddrPort{}
	tests := []struct {
		name          string
		proto         string
		local, remote netip.AddrPort
		want          *helper // nil: not found
		why           error   // when not found: the error it wraps, or nil for any
	}{
		{"tcp client", "tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7001"), client, nil},
		{"tcp accepted", "tcp", ap("127.0.0.1:7001"), ap("127.0.0.1:7002"), server, nil},
		{"tcp client, local only", "tcp", ap("127.0.0.1:7002"), none, client, nil},
		{"tcp listener and accepted, local only", "tcp", ap("127.0.0.1:7001"), none, server, nil},
		{"tcp, IPv4-mapped", "tcp", ap("[::ffff:127.0.0.1]:7002"), ap("[::ffff:127.0.0.1]:7001"), client, nil},
		{"tcp accepted by a dual-stack listener", "tcp", ap("127.0.0.1:7006"), ap("127.0.0.1:7007"), server, nil},
		{"tcp dual-stack listener and accepted, local only", "tcp", ap("127.0.0.1:7006"), none, server, nil},
		{"tcp dual-stack listener, IPv6 local", "tcp", ap("[::1]:7006"), none, server, nil},
		{"tcp, wrong remote port", "tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7009"), nil, ErrNoSocket},
		{"tcp, listener's port, unknown remote", "tcp", ap("127.0.0.1:7001"), ap("127.0.0.1:7999"), nil, ErrNoSocket},
		{"tcp, wrong local address", "tcp", ap("127.0.0.3:7002"), ap("127.0.0.1:7001"), nil, ErrNoSocket},
		{"tcp, no such port", "tcp", ap("127.0.0.1:7999"), none, nil, ErrNoSocket},
		{"tcp tuple of a udp socket", "tcp", ap("127.0.0.1:7003"), none, nil, ErrNoSocket},
		{"udp unconnected, any remote", "udp", ap("127.0.0.1:7003"), ap("192.0.2.9:53"), server, nil},
		{"udp unconnected, local only", "udp", ap("127.0.0.1:7003"), none, server, nil},
		{"udp connected", "udp", ap("127.0.0.1:7004"), ap("127.0.0.2:53"), client, nil},
		{"udp connected, another remote", "udp", ap("127.0.0.1:7004"), ap("127.0.0.3:53"), nil, ErrNoSocket},
		{"udp on [::], IPv4 local", "udp", ap("127.0.0.1:7005"), ap("192.0.2.9:53"), client, nil},
		{"udp on [::], IPv6 local", "udp", ap("[::1]:7005"), ap("[2001:db8::9]:53"), client, nil},
		{"udp, no such port", "udp", ap("127.0.0.1:7999"), ap("192.0.2.9:53"), nil, ErrNoSocket},
		{"udp, families differ", "udp", ap("127.0.0.1:7003"), ap("[2001:db8::9]:53"), nil, ErrNoSocket},
		{"unknown protocol", "sctp", ap("127.0.0.1:7002"), none, nil, nil},
		{"no local address", "tcp", none, ap("127.0.0.1:7001"), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := o.Lookup(tt.proto, tt.local, tt.remote)
			if tt.want == nil {
				switch {
				case err == nil:
					t.Errorf("Lookup(%s, %v, %v) = %+v, want not found", tt.proto, tt.local, tt.remote, p)
				case tt.why != nil && !errors.Is(err, tt.why):
					t.Errorf("Lookup(%s, %v, %v): got error %q, want %q", tt.proto, tt.local, tt.remote, err, tt.why)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%s, %v, %v): %v, want pid %d", tt.proto, tt.local, tt.remote, err, tt.want.pid)
			}
			if p.PID == client2.pid {
				t.Fatalf("Lookup(%s, %v, %v) = pid %d, the process in the other namespace", tt.proto, tt.local, tt.remote, p.PID)
			}
			if want := (Process{PID: tt.want.pid, Comm: comm, Exe: exe}); p != want {
				t.Errorf("Lookup(%s, %v, %v) = %+v, want %+v", tt.proto, tt.local, tt.remote, p, want)
			}
		})
	}

	// Lookups from several goroutines at once (run with -race), each
	// switching the process found last.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				q, want := tests[0], client
				if (i+j)%2 == 1 {
					q, want = tests[1], server
				}
				if p, err := o.Lookup(q.proto, q.local, q.remote); err != nil || p.PID != want.pid {
					t.Errorf("concurrent Lookup(%s, %v, %v) = %+v, %v, want pid %d", q.proto, q.local, q.remote, p, err, want.pid)
					return
				}
			}
		})
	}
	wg.Wait()

	// Once the client is gone, its tuples are nobody's here, though the
	// other namespace's client still has them.
	client.stop()
	for _, q := range []struct {
		proto         string
		local, remote netip.AddrPort
	}{
		{"tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7001")},
		{"udp", ap("127.0.0.1:7004"), ap("127.0.0.2:53")},
	} {
		if p, err := o.Lookup(q.proto, q.local, q.remote); !errors.Is(err, ErrNoSocket) {
			t.Errorf("after the client ended, Lookup(%s, %v, %v) = %+v, %v; want %q", q.proto, q.local, q.remote, p, err, ErrNoSocket)
		}
	}
	// The server's side of the closed connection may linger (CLOSE_WAIT)
	// and is still the server's.
	if p, err := o.Lookup("udp", ap("127.0.0.1:7003"), none); err != nil || p.PID != server.pid {
		t.Errorf("Lookup(udp, 127.0.0.1:7003) = %+v, %v, want pid %d", p, err, server.pid)
	}

	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if p, err := o.Lookup("udp", ap("127.0.0.1:7003"), none); err == nil {
		t.Errorf("Lookup after Close = %+v, want not found", p)
	}
	if _, err := NewOwners("/var/run/netns/sbxtest-missing"); err == nil {
		t.Error("NewOwners of a missing namespace: nil error")
	}
}

// TestPrivilegedOwnersShared checks that sockets of one tuple held by
// two processes are given to neither: two UDP sockets on one port
// (SO_REUSEPORT), made in the namespace by this test process (which is
// not in it) and handed to helpers in it.
func TestPrivilegedOwnersShared(t *testing.T) {
	ns, path := testNetns(t, "ownersshared")
	var fds [2]int
	for i := range fds {
		fds[i] = -1
		err := inNetns(ns, func() error {
			var err error
			fds[i], err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if fds[i] >= 0 {
				unix.Close(fds[i])
			}
		})
		if err := unix.SetsockoptInt(fds[i], unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fds[i], &unix.SockaddrInet4{Port: 7101, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
	}
	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	local := netip.MustParseAddrPort("127.0.0.1:7101")
	if p, err := o.Lookup("udp", local, netip.AddrPort{}); !errors.Is(err, ErrNoHolder) {
		t.Errorf("sockets held only outside the namespace: Lookup = %+v, %v; want %q", p, err, ErrNoHolder)
	}
	h0 := startHelperWithFile(t, filepath.Base(path), fds[0])
	h1 := startHelperWithFile(t, filepath.Base(path), fds[1])
	if p, err := o.Lookup("udp", local, netip.AddrPort{}); !errors.Is(err, ErrSharedSocket) {
		t.Errorf("two sockets of one tuple in two processes: Lookup = %+v, %v; want %q", p, err, ErrSharedSocket)
	}
	// Once the second socket is gone, the tuple is the first helper's.
	h1.stop()
	unix.Close(fds[1])
	fds[1] = -1
	if p, err := o.Lookup("udp", local, netip.AddrPort{}); err != nil || p.PID != h0.pid {
		t.Errorf("one socket left: Lookup = %+v, %v, want pid %d", p, err, h0.pid)
	}
}

// startHelperWithFile starts TestOwnersHelper with no sockets of its own
// in the namespace called name, handing it a copy of fd.
func startHelperWithFile(t testing.TB, name string, fd int) *helper {
	t.Helper()
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "socket")
	defer f.Close()
	return startHelperFiles(t, name, " ", f)
}

// BenchmarkOwnersLookup measures Lookup in a throwaway namespace with a
// few processes: "tcp" for a connection with its whole tuple (the common
// case: the gateway names the sandbox's connections), "udp" for a socket
// found by its port, "miss" for a tuple nobody has, and "cold" for a
// finder that knows no process yet (it lists /proc). It reports the
// median and 99th percentile.
func BenchmarkOwnersLookup(b *testing.B) {
	path, _, client := ownersNetns(b, "ownersbench")
	for range 3 {
		cmd := exec.Command("ip", "netns", "exec", filepath.Base(path), "/bin/busybox", "sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Skipf("no busybox for the extra processes: %v", err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	ap := netip.MustParseAddrPort
	for _, bb := range []struct {
		name          string
		proto         string
		local, remote netip.AddrPort
		found, cold   bool
	}{
		{"tcp", "tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7001"), true, false},
		{"udp", "udp", ap("127.0.0.1:7004"), ap("127.0.0.2:53"), true, false},
		{"miss", "tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7009"), false, false},
		{"cold", "tcp", ap("127.0.0.1:7002"), ap("127.0.0.1:7001"), true, true},
	} {
		b.Run(bb.name, func(b *testing.B) {
			o, err := NewOwners(path)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			var times []time.Duration
			for b.Loop() {
				if bb.cold {
					o.mu.Lock()
					o.members, o.listed = nil, -1
					o.mu.Unlock()
				}
				start := time.Now()
				p, err := o.Lookup(bb.proto, bb.local, bb.remote)
				times = append(times, time.Since(start))
				if found := err == nil; found != bb.found || found && p.PID != client.pid {
					b.Fatalf("Lookup = %+v, %v", p, err)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// TestDiagSockMatches checks, without root, which sockets a lookup
// weighs: by local port and address (a socket on the unspecified address
// takes any of its family, and "::" IPv4 too unless IPv6-only), and by
// remote, which an unconnected UDP socket matches whatever it is.
func TestDiagSockMatches(t *testing.T) {
	a := netip.MustParseAddr
	ap := netip.MustParseAddrPort
	v4 := func(src string, sport uint16, dst string, dport uint16) diagSock {
		return diagSock{family: unix.AF_INET, src: a(src), sport: sport, dst: a(dst), dport: dport, inode: 1}
	}
	v6 := func(src string, sport uint16, dst string, dport uint16, v6only bool) diagSock {
		return diagSock{family: unix.AF_INET6, src: a(src).Unmap(), sport: sport, dst: a(dst).Unmap(), dport: dport, inode: 1, v6only: v6only}
	}
	none := netip.AddrPort{}
	tests := []struct {
		name          string
		s             diagSock
		proto         uint8
		local, remote netip.AddrPort
		want          bool
	}{
		{"connected tcp", v4("10.0.0.2", 5000, "10.0.0.1", 3128), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), ap("10.0.0.1:3128"), true},
		{"other port", v4("10.0.0.2", 5001, "10.0.0.1", 3128), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), ap("10.0.0.1:3128"), false},
		{"other local address", v4("10.0.0.3", 5000, "10.0.0.1", 3128), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), none, false},
		{"other remote", v4("10.0.0.2", 5000, "10.0.0.1", 3128), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), ap("10.0.0.1:80"), false},
		{"tcp listener, remote given", v4("0.0.0.0", 5000, "0.0.0.0", 0), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), ap("10.0.0.1:80"), false},
		{"tcp listener, local only", v4("0.0.0.0", 5000, "0.0.0.0", 0), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), none, true},
		{"unconnected udp", v4("0.0.0.0", 5000, "0.0.0.0", 0), unix.IPPROTO_UDP, ap("10.0.0.2:5000"), ap("8.8.8.8:53"), true},
		{"connected udp, other remote", v4("10.0.0.2", 5000, "8.8.4.4", 53), unix.IPPROTO_UDP, ap("10.0.0.2:5000"), ap("8.8.8.8:53"), false},
		{"no inode", diagSock{family: unix.AF_INET, src: a("10.0.0.2"), sport: 5000}, unix.IPPROTO_UDP, ap("10.0.0.2:5000"), none, false},
		{"dual-stack on ::, IPv4", v6("::", 5000, "::", 0, false), unix.IPPROTO_UDP, ap("10.0.0.2:5000"), ap("8.8.8.8:53"), true},
		{"IPv6-only on ::, IPv4", v6("::", 5000, "::", 0, true), unix.IPPROTO_UDP, ap("10.0.0.2:5000"), ap("8.8.8.8:53"), false},
		{"IPv6-only on ::, IPv6", v6("::", 5000, "::", 0, true), unix.IPPROTO_UDP, ap("[fd00::2]:5000"), ap("[2001:db8::1]:53"), true},
		{"IPv6 on mapped 0.0.0.0, IPv6", v6("::ffff:0.0.0.0", 5000, "::", 0, false), unix.IPPROTO_UDP, ap("[fd00::2]:5000"), none, false},
		{"IPv6 socket, mapped, connected", v6("::ffff:10.0.0.2", 5000, "::ffff:10.0.0.1", 3128, false), unix.IPPROTO_TCP, ap("10.0.0.2:5000"), ap("10.0.0.1:3128"), true},
		{"IPv6 socket on another IPv6 address", v6("fd00::3", 5000, "::", 0, false), unix.IPPROTO_UDP, ap("10.0.0.2:5000"), none, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.matches(tt.proto, tt.local, tt.remote); got != tt.want {
				t.Errorf("%+v.matches(%v, %v) = %v, want %v", tt.s, tt.local, tt.remote, got, tt.want)
			}
		})
	}
}

// TestPrivilegedOwnersNames: a process is named by its program (argv[0]
// when that names its executable, else the executable's base name), not
// by a title it gave itself: the test's helper titled "npm install
// is-odd", node with that process.title (as npm sets it), and the helper
// run through a link called sbx-alias-helper, which names it.
func TestPrivilegedOwnersNames(t *testing.T) {
	ns, path := testNetns(t, "ownersnames")
	ns.Close()
	nsName := filepath.Base(path)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	alias := filepath.Join(t.TempDir(), "sbx-alias-helper")
	if err := os.Symlink(exe, alias); err != nil {
		t.Fatal(err)
	}
	const title = "npm install is-odd"
	helperCmd := func(prog, port, title string) *exec.Cmd {
		cmd := exec.Command("ip", "netns", "exec", nsName, prog, "-test.run=^TestOwnersHelper$")
		cmd.Env = append(os.Environ(), "SBX_OWNERS_HELPER=udpconn=127.0.0.1:"+port+">127.0.0.2:53", "SBX_OWNERS_TITLE="+title)
		return cmd
	}
	tests := []struct {
		name     string
		cmd      func(t *testing.T) *exec.Cmd
		port     string
		comm     string // the name wanted
		exe      string
		titleSet bool // the process titled itself: its comm says so
	}{
		{"titled helper", func(*testing.T) *exec.Cmd { return helperCmd(exe, "7301", title) }, "7301", filepath.Base(exe), exe, true},
		{"helper through a link", func(*testing.T) *exec.Cmd { return helperCmd(alias, "7302", "") }, "7302", "sbx-alias-helper", exe, false},
		{"node with a process.title", func(t *testing.T) *exec.Cmd {
			if _, err := exec.LookPath("node"); err != nil {
				t.Skip("node is not installed")
			}
			js := `const s = require("dgram").createSocket("udp4");
s.bind(7303, "127.0.0.1", () => s.connect(53, "127.0.0.2", () => {
	process.title = ` + strconv.Quote(title) + `;
	console.log("ready");
	process.stdin.resume();
	process.stdin.on("end", () => process.exit(0));
}));`
			return exec.Command("ip", "netns", "exec", nsName, "node", "-e", js)
		}, "7303", "node", "", true},
	}
	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startHelperCmd(t, tt.cmd(t))
			if tt.titleSet {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", h.pid))
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.pid))
				if got := strings.TrimSpace(string(comm)); got != title[:15] || !strings.HasPrefix(string(cmdline), title+"\x00") {
					t.Fatalf("the process did not title itself: comm %q, cmdline %q", comm, cmdline)
				}
			}
			wantExe := tt.exe
			if wantExe == "" {
				wantExe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", h.pid))
			}
			local := netip.MustParseAddrPort("127.0.0.1:" + tt.port)
			p, err := o.Lookup("udp", local, netip.MustParseAddrPort("127.0.0.2:53"))
			if want := (Process{PID: h.pid, Comm: tt.comm, Exe: wantExe}); err != nil || p != want {
				t.Errorf("Lookup(udp, %v) = %+v, %v; want %+v", local, p, err, want)
			}
		})
	}
}

// TestPrivilegedOwnersForked: a UDP socket that a Python process made
// and its forked child sends on is held by both, so it is nobody's;
// once the parent closes its copy, it is the child's.
func TestPrivilegedOwnersForked(t *testing.T) {
	const py = `
import os, signal, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 7401))
s.connect(("127.0.0.2", 53))
child = os.fork()
if child == 0:
    while True:
        try:
            s.send(b"x")
        except ConnectionRefusedError:
            pass  # the port unreachable that answered the last one
        time.sleep(0.05)
print("ready", flush=True)
print("child", child, flush=True)
sys.stdin.readline()
s.close()
print("closed", flush=True)
sys.stdin.read()
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
`
	path, h, child := forkingPython(t, "ownersforked", py)
	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	local, remote := netip.MustParseAddrPort("127.0.0.1:7401"), netip.MustParseAddrPort("127.0.0.2:53")
	if p, err := o.Lookup("udp", local, remote); !errors.Is(err, ErrSharedSocket) {
		t.Errorf("a socket parent (pid %d) and child (pid %d) hold: Lookup = %+v, %v; want %q", h.pid, child, p, err, ErrSharedSocket)
	}
	io.WriteString(h.stdin, "close\n")
	h.await(t, "closed")
	if p, err := o.Lookup("udp", local, remote); err != nil || p.PID != child {
		t.Errorf("once the parent closed it: Lookup = %+v, %v, want the child, pid %d", p, err, child)
	}
}

// forkingPython runs py, a Python program that forks and prints "ready"
// and then "child PID", in a network namespace of its own named after
// name, and returns the namespace's path, the program and its child's
// pid. It skips t without python3.
func forkingPython(t *testing.T, name, py string) (path string, h *helper, child int) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	ns, path := testNetns(t, name)
	ns.Close()
	h = startHelperCmd(t, exec.Command("ip", "netns", "exec", filepath.Base(path), "python3", "-c", py))
	select {
	case line := <-h.lines:
		if _, err := fmt.Sscanf(line, "child %d", &child); err != nil {
			t.Fatalf("python said %q, want its child's pid", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("python did not name its child")
	}
	return path, h, child
}

// TestPrivilegedOwnersSharedForAMoment: a UDP socket that a Python
// process holds, and its forked child holds too until it execs (the
// exec closes the socket, close-on-exec as Python makes sockets), is the
// parent's once the child has exec'd: a lookup that finds it shared
// looks again, and the child execs while the lookup waits (o.wait, which
// tells it to). While that lookup waits, a lookup of another socket, a
// helper's alone, goes on: the wait holds no lock.
func TestPrivilegedOwnersSharedForAMoment(t *testing.T) {
	const py = `
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 7501))
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.read(r, 1)
    os.execv("/bin/true", ["true"])
print("ready", flush=True)
print("child", child, flush=True)
sys.stdin.readline()
os.write(w, b"x")
os.waitpid(child, 0)
print("execed", flush=True)
sys.stdin.read()
`
	path, h, child := forkingPython(t, "ownersmoment", py)
	nsName := filepath.Base(path)
	other := startHelper(t, nsName, "udp=127.0.0.1:7502")
	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ap := netip.MustParseAddrPort

	waits := 0
	o.wait = func(time.Duration) {
		waits++
		if waits > 1 {
			return
		}
		done := make(chan error, 1)
		go func() {
			p, err := o.Lookup("udp", ap("127.0.0.1:7502"), netip.AddrPort{})
			if err == nil && p.PID != other.pid {
				err = fmt.Errorf("got pid %d, want %d", p.PID, other.pid)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a lookup while another waited for a shared socket: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("a lookup waited 10 s for another that waited for a shared socket to be one process's: the wait holds the lock")
		}
		io.WriteString(h.stdin, "exec\n")
		h.await(t, "execed")
	}
	p, err := o.Lookup("udp", ap("127.0.0.1:7501"), netip.AddrPort{})
	if err != nil || p.PID != h.pid {
		t.Errorf("a socket the parent (pid %d) holds alone once its child (pid %d) has exec'd: Lookup = %+v, %v; want the parent", h.pid, child, p, err)
	}
	if waits != 1 {
		t.Errorf("the lookup waited %d times for the shared socket, want 1", waits)
	}
}

// TestPrivilegedOwnersSenderExited: a process sends one UDP datagram,
// which the namespace's rules refuse and report (NFLOG, as capture's
// do), and exits at once; by the time its report is read the process
// and its socket are gone, and the lookup of the report's source says
// so: ErrNoSocket, the process_unknown of sbx run's bypass record.
func TestPrivilegedOwnersSenderExited(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	ns, path := testNetns(t, "ownersexited")
	addLink(t, ns, "sbxtest0", "192.0.2.1/24")
	runIn(t, ns, "iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "NFLOG", "--nflog-group=7", "--nflog-size=128")
	runIn(t, ns, "iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "REJECT")
	l, err := OpenPacketLog(path, testNFLOGGroup)
	if err != nil {
		t.Fatal(err)
	}
	var c collector
	runLog(t, l, c.add)
	o, err := NewOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()

	const py = `
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.2", 5353))
except PermissionError:
    pass
`
	cmd := exec.Command("ip", "netns", "exec", filepath.Base(path), "python3", "-c", py)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	dst := netip.MustParseAddrPort("192.0.2.2:5353")
	p, ok := c.wait(func(p Packet) bool { return p.Proto == "udp" && p.Dst == dst })
	if !ok {
		t.Fatalf("the datagram to %v was not reported", dst)
	}
	if got, err := o.Lookup("udp", p.Src, netip.AddrPort{}); !errors.Is(err, ErrNoSocket) {
		t.Errorf("Lookup(udp, %v) of a process that exited = %+v, %v; want %q", p.Src, got, err, ErrNoSocket)
	}
}

// TestProgramName names processes started with various argv[0] (and one
// that retitles itself) by what process reads of them: argv[0]'s base
// name only when argv[0], looked up in the process's root (in the
// executable's directory when it has no slash), is the executable.
func TestProgramName(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.Link(exe, prog); err != nil { // another file system: a copy
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(prog, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("prog", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		argv0, title, want string
	}{
		{prog, "", "prog"},
		{"prog", "", "prog"},
		{"alias", "", "alias"},                     // a link by the executable, as python3 by python3.11
		{filepath.Join(dir, "alias"), "", "alias"}, // the same, by its path
		{"npm install is-odd", "", "prog"},         // no such file
		{"/bin/sh", "", "prog"},                    // another file
		{"./alias", "", "prog"},                    // relative to a working directory
		{"-bash", "", "prog"},                      // a login shell's
		{"", "", "prog"},
		{prog, "npm install is-odd", "prog"},         // retitled
		{prog, filepath.Join(dir, "alias"), "alias"}, // retitled by a name of itself
	} {
		cmd := &exec.Cmd{Path: prog, Args: []string{tt.argv0, "-test.run=^TestOwnersHelper$"}, Stderr: os.Stderr,
			Env: append(os.Environ(), "SBX_OWNERS_HELPER= ", "SBX_OWNERS_TITLE="+tt.title)}
		h := startHelperCmd(t, cmd)
		fd, err := unix.Open(fmt.Sprintf("/proc/%d", h.pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		o := &Owners{argv: make([]byte, unix.PathMax), exe: make([]byte, unix.PathMax), link: make([]byte, 64)}
		p, ok := o.process(procDir{pid: h.pid, fd: fd})
		unix.Close(fd)
		if want := (Process{PID: h.pid, Comm: tt.want, Exe: prog}); !ok || p != want {
			t.Errorf("argv[0] %q, title %q: got %+v, %v; want %+v", tt.argv0, tt.title, p, ok, want)
		}
		h.stop()
	}
}
