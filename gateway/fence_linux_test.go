package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// fenceNet is a sandbox-like network the test makes: a network namespace
// joined to the host by a veth pair, the host end at .1 of a /30 and the
// namespace end at .2, as sbx makes them.
type fenceNet struct {
	hostIf  string          // the host end's name
	ns      netns.NsHandle  // the namespace, unnamed: it goes with the test
	host    netip.Addr      // the host end's address (a gateway's)
	sandbox netip.Addr      // the namespace end's address
	subnet  netip.Prefix    // the /30
	handle  *netlink.Handle // netlink inside ns
}

// fencePool is where the test's /30s come from.
var fencePool = netip.MustParsePrefix("10.213.250.0/24")

// newFenceNet makes a fenceNet named after tag and the random suffix, in
// a /30 of fencePool that no interface of the host uses. Everything is
// removed when the test ends; since the namespace has no name, a test
// killed half-way leaves nothing either: the namespace, and the veth pair
// with it, go when the test process does.
func newFenceNet(t *testing.T, suffix, tag string, taken map[netip.Prefix]bool) *fenceNet {
	t.Helper()
	f := &fenceNet{hostIf: "sbxf" + suffix + tag + "h"}
	peerIf := "sbxf" + suffix + tag + "c"
	for _, name := range []string{f.hostIf, peerIf} {
		if _, err := netlink.LinkByName(name); err == nil {
			t.Fatalf("an interface named %s exists already; not touching it", name)
		}
	}
	used := hostPrefixes(t)
	var rnd [1]byte
	for try := 0; ; try++ {
		if try == 64 {
			t.Fatalf("no free /30 in %s", fencePool)
		}
		rand.Read(rnd[:])
		base := fencePool.Addr().As4()
		base[3] = rnd[0] &^ 3
		f.subnet = netip.PrefixFrom(netip.AddrFrom4(base), 30)
		if !taken[f.subnet] && !overlapsAny(f.subnet, used) {
			break
		}
	}
	taken[f.subnet] = true
	f.host = f.subnet.Addr().Next()
	f.sandbox = f.host.Next()

	// netns.New enters the namespace it makes: make it on a locked thread
	// and come back before unlocking.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, nerr := netns.New()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
	}
	runtime.UnlockOSThread()
	orig.Close()
	if nerr != nil {
		t.Fatal(nerr)
	}
	f.ns = ns
	t.Cleanup(func() { ns.Close() })
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(f.hostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	if f.handle, err = netlink.NewHandleAt(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.handle.Close)

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: f.hostIf}, PeerName: peerIf, PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("creating veth %s: %v", f.hostIf, err)
	}
	// No IPv6 on the host end: the test sends nothing it did not ask for.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+f.hostIf+"/disable_ipv6", []byte("1"), 0o644)
	hostLink, err := netlink.LinkByName(f.hostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(hostLink, addrOf(f.host, 30)); err != nil {
		t.Fatalf("address of %s: %v", f.hostIf, err)
	}
	if err := netlink.LinkSetUp(hostLink); err != nil {
		t.Fatal(err)
	}
	peer, err := f.handle.LinkByName(peerIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.handle.AddrAdd(peer, addrOf(f.sandbox, 30)); err != nil {
		t.Fatalf("address of %s: %v", peerIf, err)
	}
	if err := f.handle.LinkSetUp(peer); err != nil {
		t.Fatal(err)
	}
	return f
}

func addrOf(ip netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, 32)}}
}

// routeTo routes other's /30 from f's namespace through f's host end: f's
// sandbox can then address other's gateway, a host address.
func (f *fenceNet) routeTo(t *testing.T, other *fenceNet) {
	t.Helper()
	peer, err := f.handle.LinkByName(strings.TrimSuffix(f.hostIf, "h") + "c")
	if err != nil {
		t.Fatal(err)
	}
	dst := &net.IPNet{IP: other.subnet.Addr().AsSlice(), Mask: net.CIDRMask(30, 32)}
	if err := f.handle.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Dst: dst, Gw: f.host.AsSlice()}); err != nil {
		t.Fatalf("route to %s in %s's namespace: %v", other.subnet, f.hostIf, err)
	}
}

// dial connects to addr from inside f's namespace: the socket is made
// there on a locked thread, which then returns to the test's namespace.
func (f *fenceNet) dial(addr string) (net.Conn, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	if err := netns.Set(f.ns); err != nil {
		return nil, err
	}
	c, derr := net.DialTimeout("tcp", addr, 3*time.Second)
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
	}
	return c, derr
}

// hostPrefixes lists the IPv4 networks of the host's interfaces.
func hostPrefixes(t *testing.T) []netip.Prefix {
	t.Helper()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones).Masked())
	}
	return out
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

// probe is what a client got from the gateway for one request.
type probe struct {
	status int   // the answer's status; 0 when there was none
	n      int   // bytes read
	err    error // how the connection failed, when it did
}

// ask sends a request for a blocked host over a connection dial makes and
// reads what comes back. Whatever happens must happen at once: a read that
// times out is an error of the test, since a refused client must not hang.
func ask(t *testing.T, dial func() (net.Conn, error)) probe {
	t.Helper()
	c, err := dial()
	if err != nil {
		return probe{err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n")
	data, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection hung: %v", err)
	}
	p := probe{n: len(data), err: err}
	if resp, rerr := http.ReadResponse(bufio.NewReader(strings.NewReader(string(data))), nil); rerr == nil {
		p.status = resp.StatusCode
	}
	return p
}

// TestPrivilegedFence shows the two layers that keep a gateway to its own
// sandbox, each with the other switched off and both together: binding
// the listener to the sandbox's veth (the kernel resets what comes
// through another interface) and Clients (user space closes a connection
// from another address without a byte). A client in sandbox A gets an
// answer; a client in sandbox B, which can address A's gateway through
// its own veth, gets none from either layer; a host process gets none
// whenever Clients is set (the binding alone does not stop it). Then the guard: A's gateway
// dials neither B's gateway address (this host's own) nor B's sandbox
// (the pool), whatever the policy allows.
func TestPrivilegedFence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces and veth pairs (CI runs as root)")
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:]) // names like sbxf1a2b3cah, 12 bytes
	taken := map[netip.Prefix]bool{}
	a := newFenceNet(t, suffix, "a", taken)
	b := newFenceNet(t, suffix, "b", taken)
	b.routeTo(t, a)
	t.Logf("sandbox A: %s via %s; sandbox B: %s via %s", a.sandbox, a.hostIf, b.sandbox, b.hostIf)

	blockAll, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		iface   string
		clients []netip.Prefix
	}{
		{"both layers", a.hostIf, []netip.Prefix{netip.PrefixFrom(a.sandbox, 32)}},
		{"device binding only", a.hostIf, nil},
		{"clients only", "", []netip.Prefix{netip.PrefixFrom(a.sandbox, 32)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Start(context.Background(), Config{
				Listen:          netip.AddrPortFrom(a.host, 0).String(),
				ListenInterface: tc.iface,
				Clients:         tc.clients,
				Policy:          blockAll,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			gw := g.ProxyAddr.String()

			if p := ask(t, func() (net.Conn, error) { return a.dial(gw) }); p.status != http.StatusForbidden {
				t.Errorf("client in A: %+v, want a 403 answer", p)
			}
			// Sandbox B reaches A's gateway address through its own veth:
			// the kernel refuses it when the listener is bound to A's
			// veth, user space when Clients is set.
			p := ask(t, func() (net.Conn, error) { return b.dial(gw) })
			if p.n != 0 {
				t.Errorf("client in B: read %d bytes (status %d), want no answer at all", p.n, p.status)
			}
			if tc.iface != "" && !errors.Is(p.err, syscall.ECONNREFUSED) {
				t.Errorf("client in B, listener bound to %s: %v, want connection refused by the kernel", tc.iface, p.err)
			}
			// A host process is refused by Clients alone. The device
			// binding does not see it: Linux delivers a connection to a
			// local address as if it came through the interface that holds
			// the address, here A's veth.
			hp := ask(t, func() (net.Conn, error) { return net.DialTimeout("tcp", gw, 3*time.Second) })
			switch {
			case len(tc.clients) > 0 && hp.n != 0:
				t.Errorf("host process: read %d bytes (status %d), want no answer at all", hp.n, hp.status)
			case len(tc.clients) == 0:
				t.Logf("host process, device binding only: status %d (%v): the binding does not cover local processes", hp.status, hp.err)
			}

			// What user space refused, it logged; the kernel's refusals
			// never reach it.
			var want []string
			if tc.iface == "" {
				want = append(want, "client "+b.sandbox.String()+" is not this gateway's sandbox")
			}
			if len(tc.clients) > 0 {
				// A host process connects from the address it dials.
				want = append(want, "client "+a.host.String()+" is not this gateway's sandbox")
			}
			waitBlocked(t, g.Server, uint64(1+len(want))) // A's 403 and the refusals
			var got []string
			for _, r := range recordsOfKind(t, g.Ring, decisionlog.KindConn) {
				got = append(got, r["reason"].(string))
			}
			if !slices.Equal(got, want) {
				t.Errorf("refusals logged: %q, want %q", got, want)
			}
		})
	}

	// The guard: a policy that allows the whole private range lets A's
	// gateway reach neither B's gateway address nor B's sandbox. B's gateway
	// address is refused as this host's own even without a Fence; with one,
	// the pool is refused first. Nothing listens in B: were the guard to
	// let a dial through, it would stay within the test's namespaces.
	allowPrivate, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Allow, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		fence  []netip.Prefix
		target netip.AddrPort
		reason string
	}{
		{"B's gateway, no fence", nil, netip.AddrPortFrom(b.host, 3128), "address guard: " + b.host.String() + " is this host's own address"},
		{"B's gateway, fence", []netip.Prefix{fencePool}, netip.AddrPortFrom(b.host, 3128), "address guard: " + b.host.String() + " is in the sandbox pool"},
		{"B's sandbox, fence", []netip.Prefix{fencePool}, netip.AddrPortFrom(b.sandbox, 80), "address guard: " + b.sandbox.String() + " is in the sandbox pool"},
		{"A's own gateway, other port", nil, netip.AddrPortFrom(a.host, 22), "address guard: " + a.host.String() + " is this host's own address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Start(context.Background(), Config{
				Listen:          netip.AddrPortFrom(a.host, 0).String(),
				ListenInterface: a.hostIf,
				Clients:         []netip.Prefix{netip.PrefixFrom(a.sandbox, 32)},
				Fence:           tc.fence,
				Policy:          allowPrivate,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			c, err := a.dial(g.ProxyAddr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.target, tc.target)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderReason) != tc.reason {
				t.Errorf("CONNECT %s from A: %d %q, want 403 %q", tc.target, resp.StatusCode, resp.Header.Get(HeaderReason), tc.reason)
			}
		})
	}
}

func TestListenInterfaceMustExist(t *testing.T) {
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range []string{"sbxnosuchif0", "a-name-far-too-long-for-linux"} {
		if g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", ListenInterface: iface, Policy: p}); err == nil {
			g.Close()
			t.Errorf("ListenInterface %q: Start succeeded, want an error", iface)
		}
	}
}
