package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
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

// refuseConn closes a client connection refused before any request was
// read: with status 0, at once and without a byte (a TCP reset); else
// after an answer with that status and body. It counts the refusal in the
// metrics and logs it, with kind decisionlog.KindConn, when lim lets it; reason builds
// the record's reason only then.
func (s *Server) refuseConn(c net.Conn, lim *refusalLimiter, status int, body string, reason func(client netip.Addr) string) {
	client := clientAddr(c)
	if status == 0 {
		// Not only a *net.TCPConn: a handoff.Conn forwards SetLinger.
		if tc, ok := c.(interface{ SetLinger(int) error }); ok {
			tc.SetLinger(0) // a reset: the client learns at once
		}
	} else {
		// A new connection's send buffer is empty: this does not block
		// the accept loop, and the deadline makes sure of it.
		c.SetWriteDeadline(time.Now().Add(time.Second))
		writeSimple(c, status, "", body, true, nil)
	}
	remote := c.RemoteAddr().String()
	c.Close()
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		remote = unmapAddrPort(ap).String()
	}
	s.logRefusal(lim, client, remote, status, reason)
}

// logRefusal counts a refused connection or packet from client (whose
// address is remote, ip:port) in the metrics and in the log, with kind
// decisionlog.KindConn: in a record of its own when lim lets it, which
// also counts the refusals folded since the previous record; else folded,
// and written within refusalEvery by flushRefusals, or by Close. So every
// refusal is counted in the log, in a bounded number of records. reason
// builds a record's reason only when it is written.
func (s *Server) logRefusal(lim *refusalLimiter, client netip.Addr, remote string, status int, reason func(client netip.Addr) string) {
	// Counted after it is logged (or folded), so that a count seen means
	// the refusal is in a record or will be.
	defer s.metrics.request(decisionlog.KindConn, netpolicy.Block)
	s.foldRefusal(lim, refusal{client: client, remote: remote, status: status, reason: reason})
}

// foldRefusal logs r, a refusal for the cause lim bounds, in a record of
// its own when lim lets it, else folded into a later one, as logRefusal
// says.
func (s *Server) foldRefusal(lim *refusalLimiter, r refusal) {
	now := time.Now()
	r.cap = lim.cap
	lim.mu.Lock()
	ok, folded := lim.allowLocked(now)
	if !ok {
		if folded == 1 {
			lim.since = now
		}
		lim.latest = r
		if lim.timer == nil {
			lim.timer = time.AfterFunc(refusalEvery, func() { s.flushRefusals(lim, false) })
		}
		lim.mu.Unlock()
		return
	}
	since := lim.since
	lim.mu.Unlock()
	s.emitRefusal(r, uint64(folded)+1, since)
}

// flushRefusals writes the refusals lim has folded, if any, in one record
// that names the latest of them. final is Close's: from then on lim lets
// every refusal through (a connection accepted just before Close), since
// the timer that would write a folded one is no longer armed.
func (s *Server) flushRefusals(lim *refusalLimiter, final bool) {
	lim.mu.Lock()
	if lim.timer != nil {
		lim.timer.Stop()
		lim.timer = nil
	}
	lim.closed = lim.closed || final
	n, r, since := lim.folded, lim.latest, lim.since
	lim.folded, lim.latest = 0, refusal{}
	lim.mu.Unlock()
	if n > 0 {
		s.emitRefusal(r, uint64(n), since)
	}
}

// emitRefusal writes the record of n refusals for the same cause, r the
// latest of them and since when the first was made when n > 1: r's own
// decision record when it has one, else a KindConn record.
func (s *Server) emitRefusal(r refusal, n uint64, since time.Time) {
	rec := r.rec
	if rec == nil {
		rec = &decisionlog.Record{
			ID:       strconv.FormatUint(s.connID.Add(1), 36),
			Event:    decisionlog.EventDecision,
			Client:   r.remote,
			Kind:     decisionlog.KindConn,
			Action:   string(netpolicy.Block),
			Enforced: true,
			Rule:     netpolicy.RuleGuard,
			Reason:   r.reason(r.client),
			Status:   r.status,
		}
	}
	if n > 1 {
		rec.Reason += fmt.Sprintf(" (this record counts %d refusals for the same reason since %s, the last of them this one)",
			n, since.UTC().Format(time.RFC3339Nano))
	}
	rec.Count, rec.Cap = n, r.cap
	s.emit(rec)
}

// notClientReason is the reason of a refusal of a client outside
// Config.Clients.
func notClientReason(ip netip.Addr) string {
	return "client " + ip.String() + " is not this gateway's sandbox"
}

// Refusals of whole connections are logged at most refusalBurst at once
// and then one per refusalEvery, for each cause; the refusals in between
// are folded into the next record, or into one written refusalEvery after
// the first of them. A flood therefore writes at most two records a
// second for each cause, and they count every refusal.
const (
	refusalBurst = 10
	refusalEvery = time.Second
)

// refusal is one refused connection or packet: its client, the client's
// address (ip:port), the status it was answered with (0 for a reset) and
// what builds the record's reason; or a refused request whose decision
// record, complete but for its count, is rec. cap is its limiter's.
type refusal struct {
	client netip.Addr
	remote string
	status int
	reason func(client netip.Addr) string
	rec    *decisionlog.Record
	cap    string
}

// refusalLimiter bounds the records of one cause of refused connections
// or requests (a client outside Clients, the connections cap, the tunnels
// cap): a token bucket of refusalBurst tokens, one added per
// refusalEvery. It keeps no state per
// client, so no number of client addresses can grow it, and it counts
// what it folds, with the first one's time and the latest refusal, so
// that the next record counts them. The zero value is ready (full); it is
// safe for concurrent use.
type refusalLimiter struct {
	cap     string // the per-client cap it counts for (decisionlog.CapConns, ...), "" for none; set before use
	mu      sync.Mutex
	started bool
	tokens  int
	last    time.Time   // when tokens were last added
	folded  int         // refusals not logged since the last record
	since   time.Time   // when the first of them was made
	latest  refusal     // the latest of them
	timer   *time.Timer // armed while some are folded: flushRefusals
	closed  bool        // Close flushed it: nothing is folded any more
}

// allow reports whether a refusal at now may be logged and, when it may,
// how many were folded since the previous record; when it may not, it
// folds it.
func (l *refusalLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowLocked(now)
}

// allowLocked is allow with l.mu held. When it says no, folded is the
// number of refusals folded, this one included.
func (l *refusalLimiter) allowLocked(now time.Time) (ok bool, folded int) {
	if !l.started {
		l.started, l.tokens, l.last = true, refusalBurst, now
	}
	if n := int(now.Sub(l.last) / refusalEvery); n > 0 {
		l.tokens = min(refusalBurst, l.tokens+n)
		l.last = l.last.Add(time.Duration(n) * refusalEvery)
	}
	if l.tokens == refusalBurst {
		l.last = now // a full bucket does not save up
	}
	switch {
	case l.closed:
	case l.tokens == 0:
		l.folded++
		return false, l.folded
	default:
		l.tokens--
	}
	folded = l.folded
	l.folded, l.latest = 0, refusal{}
	return true, folded
}

// listenProxy opens the proxy's listener on addr, bound to the network
// interface iface when it is not "" (see Options.ListenInterface).
func listenProxy(ctx context.Context, addr, iface string) (net.Listener, error) {
	var lc net.ListenConfig
	if iface != "" {
		ctl, err := bindToDevice(iface)
		if err != nil {
			return nil, err
		}
		lc.Control = ctl
	}
	return lc.Listen(ctx, "tcp", addr)
}
