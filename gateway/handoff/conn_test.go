package handoff

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestConnForwards: a Conn reads what followed the header, and forwards
// CloseWrite, SetLinger, SyscallConn and ReadFrom to a TCP connection
// underneath; over a connection without them, they fail with
// errors.ErrUnsupported.
func TestConnForwards(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hl := Listener(ln)
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	dst := netip.MustParseAddrPort("192.0.2.1:443")
	var b strings.Builder
	Write(&b, netip.MustParseAddrPort(client.LocalAddr().String()), dst)
	io.WriteString(client, b.String()+"first")
	client.(*net.TCPConn).CloseWrite()

	nc, err := hl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := nc.(*Conn)
	if got, err := Dst(c); err != nil || got != dst {
		t.Fatalf("Dst: got %v, %v; want %v", got, err, dst)
	}
	if got, err := io.ReadAll(c); err != nil || string(got) != "first" {
		t.Errorf("read after the header: got %q, %v; want %q", got, err, "first")
	}
	if _, err := c.SyscallConn(); err != nil {
		t.Errorf("SyscallConn: %v", err)
	}
	if err := c.SetLinger(5); err != nil {
		t.Errorf("SetLinger: %v", err)
	}
	if n, err := c.ReadFrom(strings.NewReader("answer")); n != 6 || err != nil {
		t.Errorf("ReadFrom: got %d, %v; want 6, nil", n, err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Errorf("CloseWrite: %v", err)
	}
	if got, err := io.ReadAll(client); err != nil || string(got) != "answer" {
		t.Errorf("the client read %q, %v; want %q and the end (CloseWrite)", got, err, "answer")
	}

	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	pc := &Conn{Conn: p1}
	for name, err := range map[string]error{"CloseWrite": pc.CloseWrite(), "CloseRead": pc.CloseRead(), "SetLinger": pc.SetLinger(0)} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s over a pipe: got %v, want errors.ErrUnsupported", name, err)
		}
	}
	if _, err := pc.SyscallConn(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SyscallConn over a pipe: got %v, want errors.ErrUnsupported", err)
	}
}
