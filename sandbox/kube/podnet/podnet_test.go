package podnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/handoff"
)

func TestRulesCheck(t *testing.T) {
	gw := netip.MustParseAddr("10.244.0.7")
	mod := func(f func(*Rules)) Rules {
		r := DefaultRules(gw)
		f(&r)
		return r
	}
	tests := []struct {
		name  string
		rules Rules
		ok    bool
	}{
		{"defaults", DefaultRules(gw), true},
		{"IPv4-mapped gateway", DefaultRules(netip.MustParseAddr("::ffff:10.244.0.7")), true},
		{"no gateway", DefaultRules(netip.Addr{}), false},
		{"IPv6 gateway", DefaultRules(netip.MustParseAddr("fd00::7")), false},
		{"unspecified gateway", DefaultRules(netip.IPv4Unspecified()), false},
		{"loopback gateway", DefaultRules(netip.MustParseAddr("127.0.0.1")), false},
		{"shim as root", mod(func(r *Rules) { r.ShimUID = 0 }), false},
		{"no shim port", mod(func(r *Rules) { r.ShimPort = 0 }), false},
		{"no proxy port", mod(func(r *Rules) { r.ProxyPort = 0 }), false},
		{"no capture port", mod(func(r *Rules) { r.CapturePort = 0 }), false},
		{"no DNS port", mod(func(r *Rules) { r.DNSPort = 0 }), false},
		{"capture port is the proxy's", mod(func(r *Rules) { r.CapturePort = r.ProxyPort }), false},
		{"capture port is the DNS port", mod(func(r *Rules) { r.CapturePort = r.DNSPort }), false},
	}
	for _, tt := range tests {
		err := tt.rules.check()
		if tt.ok && err != nil {
			t.Errorf("%s: got %v, want no error", tt.name, err)
		}
		if !tt.ok && !errors.Is(err, ErrInvalidRules) {
			t.Errorf("%s: got %v, want ErrInvalidRules", tt.name, err)
		}
		if !tt.ok {
			// Install checks before it touches anything: no root needed.
			if err := Install(tt.rules); !errors.Is(err, ErrInvalidRules) {
				t.Errorf("%s: Install got %v, want ErrInvalidRules", tt.name, err)
			}
		}
	}
}

func TestRulesString(t *testing.T) {
	got := DefaultRules(netip.MustParseAddr("10.244.0.7")).String()
	for _, want := range []string{"10.244.0.7:3128 (proxy)", "10.244.0.7:5353 (DNS", "127.0.0.1:15001", "uid 15001", "10.244.0.7:15002", "IPv6", "nothing in but"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to name %q", got, want)
		}
	}
}

// lockedBuffer is a strings.Builder safe for the shim's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShimClosesUnredirected: a connection whose original destination is
// the shim's own address (it was not redirected), or whose original
// destination cannot be read, is closed with a line on standard error
// saying which, and the gateway never hears of it; one whose original
// destination is elsewhere (the control) is handed to the gateway with
// that destination and no line.
func TestShimClosesUnredirected(t *testing.T) {
	errNoEntry := errors.New("original destination: no such conntrack entry")
	elsewhere := netip.MustParseAddrPort("203.0.113.7:80")
	tests := []struct {
		name string
		// dst returns the original destination the shim reads for a
		// connection to self.
		dst func(self netip.AddrPort) (netip.AddrPort, error)
		// wantStderr is what the one line on standard error holds
		// (given the shim's address and the client's), or "" for no
		// line.
		wantStderr func(self, client netip.AddrPort) string
		wantHanded netip.AddrPort
	}{
		{
			name: "not redirected",
			dst:  func(self netip.AddrPort) (netip.AddrPort, error) { return self, nil },
			wantStderr: func(self, client netip.AddrPort) string {
				return fmt.Sprintf("a connection from %v to the shim itself (%v) was not redirected; closed", client, self)
			},
		},
		{
			name: "not redirected, IPv4-mapped",
			dst: func(self netip.AddrPort) (netip.AddrPort, error) {
				return netip.AddrPortFrom(netip.AddrFrom16(self.Addr().As16()), self.Port()), nil
			},
			wantStderr: func(self, client netip.AddrPort) string {
				return fmt.Sprintf("a connection from %v to the shim itself (%v) was not redirected; closed", client, netip.AddrPortFrom(netip.AddrFrom16(self.Addr().As16()), self.Port()))
			},
		},
		{
			name: "original destination unreadable",
			dst:  func(netip.AddrPort) (netip.AddrPort, error) { return netip.AddrPort{}, errNoEntry },
			wantStderr: func(_, client netip.AddrPort) string {
				return fmt.Sprintf("reading the original destination of a connection from %v: %v", client, errNoEntry)
			},
		},
		{
			name:       "redirected (control)",
			dst:        func(netip.AddrPort) (netip.AddrPort, error) { return elsewhere, nil },
			wantHanded: elsewhere,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gwLn, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer gwLn.Close()
			handed := make(chan netip.AddrPort, 4)
			go func() {
				for {
					c, err := gwLn.Accept()
					if err != nil {
						return
					}
					c.SetDeadline(time.Now().Add(5 * time.Second))
					dst, _ := handoff.Read(bufio.NewReader(c))
					handed <- dst
					c.Close()
				}
			}()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			self := netip.MustParseAddrPort(ln.Addr().String())
			var stderr lockedBuffer
			s := &shim{gw: netip.MustParseAddrPort(gwLn.Addr().String()), stderr: &stderr,
				originalDst: func(net.Conn) (netip.AddrPort, error) { return tt.dst(self) }}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.serve(ctx, ln) }()

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
			b, err := io.ReadAll(c)
			var ne net.Error
			if len(b) != 0 || errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("got %q, error %v; want the connection closed at once", b, err)
			}
			if tt.wantHanded.IsValid() {
				select {
				case dst := <-handed:
					if dst != tt.wantHanded {
						t.Errorf("the gateway was handed %v, want %v", dst, tt.wantHanded)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("the gateway was handed nothing within 5s, want %v", tt.wantHanded)
				}
			} else {
				select {
				case dst := <-handed:
					t.Errorf("the gateway was handed a connection (destination %v), want none", dst)
				default:
				}
			}

			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Shim after its context ended: got %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Shim did not return within 5s of its context ending")
			}
			// The line is written before the connection is closed.
			got, want := stderr.String(), ""
			if tt.wantStderr != nil {
				want = "sbx kube shim: " + tt.wantStderr(self, netip.MustParseAddrPort(c.LocalAddr().String())) + "\n"
			}
			if got != want {
				t.Errorf("stderr: got %q, want %q", got, want)
			}
		})
	}
}

// TestRelayHalfClose: each side's end of writing reaches the other, while
// the other direction goes on; relay returns when both are done.
func TestRelayHalfClose(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	client, down := pair() // the agent and the shim's accepted side
	up, server := pair()   // the shim's side to the gateway, and the gateway
	done := make(chan struct{})
	go func() { relay(down, up); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)

	io.WriteString(client, "request")
	client.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "request" {
		t.Fatalf("the gateway read %q, %v; want %q then EOF", got, err, "request")
	}
	// The answer still goes the other way after the request's end.
	io.WriteString(server, "answer")
	server.(*net.TCPConn).CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("the agent read %q, %v; want %q then EOF", got, err, "answer")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not return within 5s of both directions ending")
	}
}
