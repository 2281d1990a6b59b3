package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Resolver turns host names into addresses: static answers first (the
// --resolve flag), then the system resolver. It is safe for concurrent use.
type Resolver struct {
	// System is the resolver used for names without a static answer; nil
	// means net.DefaultResolver.
	System *net.Resolver

	mu     sync.RWMutex
	static map[string][]netip.Addr

	// lookupNetIP replaces System's LookupNetIP in tests.
	lookupNetIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ServerResolver returns a net.Resolver that asks the DNS server at addr
// (ip:port; port 53 when missing) for every name, over UDP or TCP as Go's
// resolver chooses, instead of the servers in /etc/resolv.conf. The
// server's address is not checked by the address guard: it is the
// host's choice, not the sandbox's.
func ServerResolver(addr string) (*net.Resolver, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		ip, perr := netip.ParseAddr(addr)
		if perr != nil {
			return nil, fmt.Errorf("DNS server %q is not an IP or ip:port; write e.g. 192.0.2.53 or 192.0.2.53:5353", addr)
		}
		addr = netip.AddrPortFrom(ip, 53).String()
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}, nil
}

// AddStatic makes host resolve to ip, before any lookup. The host is
// normalized as the policy normalizes it.
func (r *Resolver) AddStatic(host string, ip netip.Addr) error {
	h, err := netpolicy.NormalizeHost(host)
	if err != nil {
		return err
	}
	if !ip.IsValid() {
		return fmt.Errorf("static answer for %s: invalid address", h)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.static == nil {
		r.static = map[string][]netip.Addr{}
	}
	r.static[h] = append(r.static[h], ip.Unmap())
	return nil
}

// mayBeIPLiteral reports whether s may be an address netip.ParseAddr
// takes: IPv6 holds a colon, IPv4 ends in a digit. A name that is not
// costs no ParseAddr, whose error allocates.
func mayBeIPLiteral(s string) bool {
	return strings.IndexByte(s, ':') >= 0 || s != "" && isDigit(s[len(s)-1])
}

// ErrNotHostIP is what a StaticError wraps for a value that is not of the
// form HOST=IP.
var ErrNotHostIP = errors.New("want HOST=IP")

// A StaticError is ParseStatic's error: Value is not a static answer.
type StaticError struct {
	// Value is the value given to ParseStatic.
	Value string
	// Err says what is wrong: ErrNotHostIP, or what is wrong with its
	// IP address or its host.
	Err error
}

func (e *StaticError) Error() string {
	if errors.Is(e.Err, ErrNotHostIP) {
		return fmt.Sprintf("static answer %q: %v, e.g. api.test=203.0.113.7", e.Value, e.Err)
	}
	return fmt.Sprintf("static answer %q: %v", e.Value, e.Err)
}

func (e *StaticError) Unwrap() error { return e.Err }

// ParseStatic parses a static answer, HOST=IP, for Resolver.AddStatic.
// Its error is a *StaticError.
func ParseStatic(v string) (host string, ip netip.Addr, err error) {
	host, ipStr, ok := strings.Cut(v, "=")
	if !ok || host == "" || ipStr == "" {
		return "", netip.Addr{}, &StaticError{Value: v, Err: ErrNotHostIP}
	}
	ip, err = netip.ParseAddr(strings.Trim(ipStr, "[]"))
	if err != nil {
		return "", netip.Addr{}, &StaticError{Value: v, Err: fmt.Errorf("%q is not an IP address", ipStr)}
	}
	if _, err := netpolicy.NormalizeHost(host); err != nil {
		return "", netip.Addr{}, &StaticError{Value: v, Err: err}
	}
	return host, ip, nil
}

// Lookup returns the addresses of a normalized host: itself when it is an
// IP literal, its static answers when it has some, else what the system
// resolver says for it as a fully qualified name, so that no search domain
// is ever appended. IPv4-mapped answers are unmapped.
func (r *Resolver) Lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return r.lookup(ctx, host, 0)
}

// lookup is Lookup with a timeout (0 for none) on the system resolver
// only: IP literals and static answers need no timer.
func (r *Resolver) lookup(ctx context.Context, host string, timeout time.Duration) ([]netip.Addr, error) {
	if addrs, ok := r.known(host); ok {
		return addrs, nil
	}
	sys := r.System
	if sys == nil {
		sys = net.DefaultResolver
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	lookup := sys.LookupNetIP
	if r.lookupNetIP != nil {
		lookup = r.lookupNetIP
	}
	addrs, err := lookup(ctx, "ip", host+".")
	if err != nil {
		return nil, err
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// known returns the addresses host resolves to without a lookup: an IP
// literal's, or the static answer (AddStatic); ok is false for a name
// only a resolver can answer.
func (r *Resolver) known(host string) (addrs []netip.Addr, ok bool) {
	if mayBeIPLiteral(host) {
		if ip, err := netip.ParseAddr(host); err == nil {
			return []netip.Addr{ip.Unmap()}, true
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	addrs = r.static[host]
	return addrs, len(addrs) > 0
}

// resolveChecked resolves t's normalized host and applies the address guard
// to every address: it returns the addresses that passed, in the
// resolver's order, or the guard's block decision when none did, and then
// sets rec.Addrs to the addresses the policy's guard refused (see
// decisionlog.Record.Addrs). The fence (fenceClass: its own listening
// addresses, Config.Fence, this host's own addresses) is refused always,
// allow_private or not, and is not in rec.Addrs.
func (s *Server) resolveChecked(ctx context.Context, p *netpolicy.Policy, t netpolicy.Target, rec *decisionlog.Record) ([]netip.Addr, *netpolicy.Decision, error) {
	addrs, err := s.resolver.lookup(ctx, t.Host, s.limits.DNSTimeout)
	if err != nil {
		return nil, nil, err
	}
	return s.guardAddrs(p, t, rec, addrs)
}

// guardAddrs is resolveChecked once t's host resolved to addrs.
func (s *Server) guardAddrs(p *netpolicy.Policy, t netpolicy.Target, rec *decisionlog.Record, addrs []netip.Addr) ([]netip.Addr, *netpolicy.Decision, error) {
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("no address for %s", t.Host)
	}
	// ok is addrs itself until an address is refused (addrs may be the
	// resolver's own slice: it is never written).
	var ok []netip.Addr
	var first *netpolicy.Decision
	var guarded []byte // the addresses GuardAddr refused, for rec.Addrs
	nguarded := 0
	for i, ip := range addrs {
		refused := false
		if class := s.fenceClass(netip.AddrPortFrom(ip, t.Port)); class != "" {
			if first == nil {
				first = fenceDecision(netip.AddrPortFrom(ip, t.Port), class)
			}
			refused = true
		} else if d, r := p.GuardAddr(ip, t); r {
			if first == nil {
				// A copy: &d itself would move d to the heap on every
				// address, refused or not.
				refusal := d
				first = &refusal
			}
			refused = true
			if nguarded < decisionlog.MaxAddrs {
				if nguarded++; nguarded > 1 {
					guarded = append(guarded, ',')
				}
				guarded = ip.Unmap().AppendTo(guarded)
			}
		}
		switch {
		case refused && ok == nil:
			ok = append(make([]netip.Addr, 0, len(addrs)), addrs[:i]...)
		case !refused && ok != nil:
			ok = append(ok, ip)
		}
	}
	if ok == nil {
		ok = addrs
	}
	if len(ok) == 0 {
		rec.Addrs = string(guarded)
		return nil, first, nil
	}
	return ok, nil, nil
}

// isOwnAddr reports whether ap is an address the gateway listens on. A
// listener on an unspecified address owns its port on every address.
func (s *Server) isOwnAddr(ap netip.AddrPort) bool {
	if ap.Addr().IsUnspecified() {
		return true // a dial to 0.0.0.0 or :: reaches this host's listeners
	}
	addrs := s.ownAddrs.Load()
	if addrs == nil {
		return false
	}
	for _, own := range *addrs {
		if own.Port() == ap.Port() && (own.Addr() == ap.Addr() || own.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// dialChecked is the upstream transport's dialer: it connects only to IP
// literals, the addresses resolveChecked passed, and never resolves.
func (s *Server) dialChecked(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("refusing to dial %q: only checked IP addresses are dialed", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, s.limits.DialTimeout)
	defer cancel()
	return s.cfg.Dial(ctx, network, addr)
}

// dialFirst connects to the first of addrs that answers on port, within
// Limits.DialTimeout for them all. Each is an IP address, dialed as
// dialChecked dials, under dialFirst's own deadline: a second one per
// address, never the earlier, would only cost a timer.
func (s *Server) dialFirst(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.limits.DialTimeout)
	defer cancel()
	var errs []error
	for _, ip := range addrs {
		c, err := s.cfg.Dial(ctx, "tcp", netip.AddrPortFrom(ip, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, decisionlog.Combine(errs...)
}

// upstreamStatus maps an upstream error to the status of docs/gateway.md (HTTP forward): a DNS
// failure is 502 whatever its cause; a dial or response timeout is 504;
// anything else (refused, reset) is 502.
func upstreamStatus(err error, resolving bool) int {
	if resolving {
		return 502
	}
	if isTimeout(err) {
		return 504
	}
	return 502
}
