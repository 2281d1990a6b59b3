package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// recordOut is where the records of refusals and of refused packets go:
// their ids come from the server's one counter of record ids, they are
// written to its decision log (none when log is nil) and counted in its
// metrics.
type recordOut struct {
	ids     *atomic.Uint64
	log     *decisionlog.Log
	metrics *Metrics
}

// newID returns the id of a new record.
func (o *recordOut) newID() string { return strconv.FormatUint(o.ids.Add(1), 36) }

// emit writes rec to the decision log, if there is one.
func (o *recordOut) emit(rec *decisionlog.Record) {
	if o.log != nil {
		o.log.Emit(rec)
	}
}

// refusals are the rate bounds of the records of refused connections and
// tunnels, one per cause.
type refusals struct {
	notClients  refusalLimiter // clients outside Config.Clients
	overCap     refusalLimiter // connections over Limits.MaxConnsPerClient
	overTunnels refusalLimiter // tunnels over Limits.MaxTunnelsPerClient (capcount.go)
}

// init makes r write its records to out.
func (r *refusals) init(out *recordOut) {
	r.notClients.out, r.overCap.out, r.overTunnels.out = out, out, out
	r.overCap.cap, r.overTunnels.cap = decisionlog.CapConns, decisionlog.CapTunnels
}

// flush writes what every cause folded, for the server's Close: from then
// on every refusal is logged at once.
func (r *refusals) flush() {
	r.notClients.flush(true)
	r.overCap.flush(true)
	r.overTunnels.flush(true)
}

// refuseConn closes a client connection refused, for l's cause, before
// any request was read: with status 0, at once and without a byte (a TCP
// reset); else after an answer with that status and body. It counts the
// refusal in the metrics and logs it, with kind decisionlog.KindConn,
// when l lets it; reason builds the record's reason only then.
func (l *refusalLimiter) refuseConn(c net.Conn, status int, body string, reason func(client netip.Addr) string) {
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
	l.log(client, remote, status, reason)
}

// log counts a refused connection or packet from client (whose address
// is remote, ip:port) in the metrics and in the log, with kind
// decisionlog.KindConn: in a record of its own when l lets it, which also
// counts the refusals folded since the previous record; else folded, and
// written within refusalEvery by flush, or by the server's Close. So every
// refusal is counted in the log, in a bounded number of records. reason
// builds a record's reason only when it is written.
func (l *refusalLimiter) log(client netip.Addr, remote string, status int, reason func(client netip.Addr) string) {
	// Counted after it is logged (or folded), so that a count seen means
	// the refusal is in a record or will be.
	defer l.out.metrics.request(decisionlog.KindConn, netpolicy.Block)
	l.fold(refusal{client: client, remote: remote, status: status, reason: reason})
}

// fold logs r, a refusal for l's cause, in a record of its own when l
// lets it, else folded into a later one, as log says.
func (l *refusalLimiter) fold(r refusal) {
	now := time.Now()
	r.cap = l.cap
	l.mu.Lock()
	ok, folded := l.allowLocked(now)
	if !ok {
		if folded == 1 {
			l.since = now
		}
		l.latest = r
		if l.timer == nil {
			l.timer = time.AfterFunc(refusalEvery, func() { l.flush(false) })
		}
		l.mu.Unlock()
		return
	}
	since := l.since
	l.mu.Unlock()
	l.emit(r, uint64(folded)+1, since)
}

// flush writes the refusals l has folded, if any, in one record that
// names the latest of them. final is the server's Close's: from then on l
// lets every refusal through (a connection accepted just before Close),
// since the timer that would write a folded one is no longer armed.
func (l *refusalLimiter) flush(final bool) {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.closed = l.closed || final
	n, r, since := l.folded, l.latest, l.since
	l.folded, l.latest = 0, refusal{}
	l.mu.Unlock()
	if n > 0 {
		l.emit(r, uint64(n), since)
	}
}

// emit writes the record of n refusals for l's cause, r the latest of
// them and since when the first was made when n > 1: r's own decision
// record when it has one, else a KindConn record.
func (l *refusalLimiter) emit(r refusal, n uint64, since time.Time) {
	rec := r.rec
	if rec == nil {
		rec = &decisionlog.Record{
			ID:       l.out.newID(),
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
	l.out.emit(rec)
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

// refusalLimiter logs the refusals of one cause of refused connections
// or requests (a client outside Clients, the connections cap, the tunnels
// cap), in records it bounds with a token bucket of refusalBurst tokens,
// one added per refusalEvery. It keeps no state per client, so no number
// of client addresses can grow it, and it counts what it folds, with the
// first one's time and the latest refusal, so that the next record counts
// them. The zero value with out set is ready (full); it is safe for
// concurrent use.
type refusalLimiter struct {
	cap     string     // the per-client cap it counts for (decisionlog.CapConns, ...), "" for none; set before use
	out     *recordOut // where its records go; set before use
	mu      sync.Mutex
	started bool
	tokens  int
	last    time.Time   // when tokens were last added
	folded  int         // refusals not logged since the last record
	since   time.Time   // when the first of them was made
	latest  refusal     // the latest of them
	timer   *time.Timer // armed while some are folded: flush
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
