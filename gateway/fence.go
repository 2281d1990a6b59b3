package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// The fence keeps a gateway to its own sandbox, both ways:
//
//   - inbound, only its sandbox may use it: Start's ListenInterface binds
//     the listener to the sandbox's host-side veth, so that the kernel
//     resets connections that arrive through any other interface (another
//     sandbox's veth, a bridge, the LAN), and Config.Clients closes, in
//     user space, a connection from any address outside the sandbox's.
//     Only Clients stops a process on the host itself: Linux delivers a
//     local connection to the gateway's address as if it had come through
//     the interface that holds the address;
//   - outbound, it never dials the host or another sandbox: besides its
//     own listening addresses, the addresses in Config.Fence (the sandbox
//     pool) and this host's own addresses are refused by the address guard
//     always, whatever allow_private and IP/CIDR allow rules say.

// Guard classes of the fence, for reasons "address guard: <ip> is <class>"
// (docs/gateway.md).
const (
	classGateway  = "the gateway itself"
	classPool     = "in the sandbox pool"
	classHostAddr = "this host's own address"
	classHostErr  = "possibly this host's own address (its interfaces could not be listed)"
)

// fenceClass returns the class of the part of the address guard that no
// policy lifts, or "" when ap is outside it: the gateway's own listening
// addresses (with their port; an unspecified address is every address),
// the Fence networks, and this host's own addresses but loopback. Loopback
// is the policy's to allow (allow_private 127.0.0.0/8, used by tests and
// by whoever means to reach a service on the host), as it always was:
// a policy that allows it asks for the host's services, where one that
// allows 10.0.0.0/8 does not.
func (s *Server) fenceClass(ap netip.AddrPort) string {
	if s.isOwnAddr(ap) {
		return classGateway
	}
	ip := ap.Addr().Unmap()
	for _, p := range s.fence {
		if p.Contains(ip) {
			return classPool
		}
	}
	if ip.IsLoopback() {
		return ""
	}
	own, err := s.hostAddrs.has(ip)
	switch {
	case err != nil:
		return classHostErr
	case own:
		return classHostAddr
	}
	return ""
}

// fenceDecision is the guard's block decision for ap in class.
func fenceDecision(ap netip.AddrPort, class string) *netpolicy.Decision {
	what := ap.Addr().String()
	if class == classGateway {
		what = ap.String()
	}
	return &netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleGuard,
		Reason: "address guard: " + what + " is " + class}
}

// isFenced reports whether a guard's reason is one of fenceDecision's,
// which no policy can lift.
func isFenced(reason string) bool {
	for _, class := range []string{classGateway, classPool, classHostAddr, classHostErr} {
		if strings.HasSuffix(reason, " is "+class) {
			return true
		}
	}
	return false
}

// hostAddrTTL is how long the list of this host's addresses is trusted
// before it is read again, on demand: an address added to an interface is
// refused at the latest this long after.
const hostAddrTTL = time.Second

// hostAddrs caches this host's interface addresses, read again on demand
// once they are hostAddrTTL old, so that a dial costs a map lookup and at
// most one listing a second. It is safe for concurrent use.
type hostAddrs struct {
	list   func() ([]netip.Addr, error) // net.InterfaceAddrs, unmapped
	logger func(err error)              // told when listing fails

	mu  sync.Mutex // held by the one caller that lists
	cur atomic.Pointer[hostAddrSet]
}

// hostAddrSet is one listing of the host's addresses. err is the listing's
// error; addrs is then the previous listing's, or nil when there was none.
type hostAddrSet struct {
	expires time.Time
	addrs   map[netip.Addr]struct{}
	err     error
}

// has reports whether ip is one of this host's addresses. It returns an
// error only when the addresses could never be listed; the caller refuses
// then (fail closed). A failed listing after a good one keeps the good one.
func (h *hostAddrs) has(ip netip.Addr) (bool, error) {
	set := h.cur.Load()
	if set == nil || time.Now().After(set.expires) {
		set = h.refresh()
	}
	if set.addrs == nil && set.err != nil {
		return false, set.err
	}
	_, ok := set.addrs[ip]
	return ok, nil
}

// refresh lists the host's addresses, unless another caller just did.
func (h *hostAddrs) refresh() *hostAddrSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.cur.Load()
	if prev != nil && time.Now().Before(prev.expires) {
		return prev // listed while this caller waited
	}
	addrs, err := h.list()
	next := &hostAddrSet{expires: time.Now().Add(hostAddrTTL), err: err}
	if err != nil {
		if prev != nil {
			next.addrs = prev.addrs
		}
		if h.logger != nil {
			h.logger(err)
		}
	} else {
		next.addrs = make(map[netip.Addr]struct{}, len(addrs))
		for _, a := range addrs {
			next.addrs[a.Unmap().WithZone("")] = struct{}{}
		}
	}
	h.cur.Store(next)
	return next
}

// interfaceAddrs lists the addresses of every interface of this host.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this host's addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, addr.Unmap())
		}
	}
	return out, nil
}

// normalizePrefixes returns ps masked, and IPv4-mapped ones (of /96 or
// longer) as the IPv4 prefixes they stand for, as netpolicy reads CIDRs:
// addresses are compared unmapped. An invalid prefix is an error, never
// dropped: an empty Clients would serve everyone.
func normalizePrefixes(field string, ps []netip.Prefix) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			return nil, fmt.Errorf("gateway: Config.%s holds an invalid prefix", field)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// isClient reports whether Config.Clients, or what SetClients set since,
// lets ip use the proxy.
func (s *Server) isClient(ip netip.Addr) bool {
	nets := *s.clientNets.Load()
	if len(nets) == 0 {
		return true
	}
	for _, p := range nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// listenProxy opens the proxy's listener on addr, bound to the network
// interface iface when it is not "" (see Options.ListenInterface).
func listenProxy(ctx context.Context, addr, iface string) (net.Listener, error) {
	lc, err := listenConfig(iface)
	if err != nil {
		return nil, err
	}
	return lc.Listen(ctx, "tcp", addr)
}

// listenConfig returns the ListenConfig of the gateway's own listening
// sockets (the proxy's; the DNS stub's UDP socket and TCP listener):
// bound to the network interface iface when it is not "" (see
// Options.ListenInterface), and with the keep-alive of their TCP
// connections set on the listening socket, where the system has its
// connections inherit it (listenerKeepAlive), rather than by four system
// calls on each connection accepted (net.ListenConfig's default).
func listenConfig(iface string) (net.ListenConfig, error) {
	var lc net.ListenConfig
	var bind func(network, address string, c syscall.RawConn) error
	if iface != "" {
		var err error
		if bind, err = bindToDevice(iface); err != nil {
			return lc, err
		}
	}
	if !keepAliveInherited {
		lc.Control = bind
		return lc, nil
	}
	lc.KeepAlive = -1 // each connection has its listener's
	lc.Control = func(network, address string, c syscall.RawConn) error {
		if bind != nil {
			if err := bind(network, address, c); err != nil {
				return err
			}
		}
		return listenerKeepAlive(network, c)
	}
	return lc, nil
}
