package gateway

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Packet is a packet the sandbox sent that is neither TCP nor DNS, which
// its rules refused and reported (docs/capture.md).
type Packet struct {
	// Proto is "udp", "icmp", "icmpv6", "tcp" or "proto-<n>".
	Proto string
	// Src is the sandbox's end; Dst where the packet was going. Their
	// ports are 0 for a protocol without ports.
	Src, Dst netip.AddrPort
}

// Bounds of the bypass records: at most one record per protocol,
// destination and port per bypassInterval, and at most maxBypassTargets
// such targets remembered at once; packets to targets beyond them are
// counted in one record per bypassInterval with no host.
const (
	bypassInterval   = time.Second
	maxBypassTargets = 1024
	bypassIdle       = 10 * time.Second // a target this long without a packet is forgotten
)

// bypassKey is what one bypass record stands for.
type bypassKey struct {
	proto string
	dst   netip.AddrPort
}

// bypassTarget is the state of one bypassKey: when its next record may be
// written, and how many packets since its last one are not in a record yet.
type bypassTarget struct {
	next   time.Time
	last   time.Time
	folded uint64
	src    netip.AddrPort // the latest packet's source
}

// BypassLog logs the packets a sandbox's rules refused and reported
// (Packet) as bypass records (kind decisionlog.KindBypass), folding a
// flood into a bounded number of them. Start makes a gateway's
// (Gateway.Bypass); it is safe for concurrent use, and the gateway's Close
// writes what it still folds.
type BypassLog struct {
	store   *netpolicy.Store
	out     *recordOut
	owner   func(network string, client, remote netip.AddrPort) Process // the process of a packet's socket (Server.owner); nil without Config.Owner
	unknown string                                                      // without owner, why no process is named (Config.ProcessUnknown)

	mu       sync.Mutex
	targets  map[bypassKey]*bypassTarget
	overflow bypassTarget // packets to targets beyond maxBypassTargets
	timer    *time.Timer  // armed while packets wait to be counted
	closed   bool         // set by the final flush: later packets are not logged
}

// newBypassLog returns a BypassLog whose records name the version of the
// policy in store, go to out, and name the process owner finds, or why
// none is named: unknown when owner is nil.
func newBypassLog(store *netpolicy.Store, out *recordOut, owner func(network string, client, remote netip.AddrPort) Process, unknown string) *BypassLog {
	return &BypassLog{store: store, out: out, owner: owner, unknown: unknown}
}

// ReportPacket logs p, a packet the sandbox's rules refused, as a bypass
// record (kind decisionlog.KindBypass, action block, rule guard): the first packet to
// a protocol, destination and port is logged at once, and the ones that
// follow within a second are folded into the count of the next record for
// it, written when the second is over. A flood therefore writes at most
// one record a second for each of at most 1024 targets, and one for all
// the others. The gateway's Close writes what is still folded, and
// packets reported after are not logged.
func (b *BypassLog) ReportPacket(p Packet) {
	now := time.Now()
	k := bypassKey{p.Proto, unmapAddrPort(p.Dst)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if b.targets == nil {
		b.targets = map[bypassKey]*bypassTarget{}
	}
	t := b.targets[k]
	if t == nil && len(b.targets) >= maxBypassTargets {
		b.prune(now)
	}
	switch {
	case t == nil && len(b.targets) >= maxBypassTargets:
		b.overflow.folded++
		b.overflow.src, b.overflow.last = p.Src, now
		b.arm()
		b.mu.Unlock()
		return
	case t == nil:
		t = &bypassTarget{}
		b.targets[k] = t
	}
	t.src, t.last = p.Src, now
	if now.Before(t.next) {
		t.folded++
		b.arm()
		b.mu.Unlock()
		return
	}
	count := t.folded + 1
	t.folded, t.next = 0, now.Add(bypassInterval)
	b.mu.Unlock()
	b.emit(k, p.Src, count)
}

// arm makes sure a flush runs after the interval. b.mu is held.
func (b *BypassLog) arm() {
	if b.timer == nil {
		b.timer = time.AfterFunc(bypassInterval, func() { b.flush(false) })
	}
}

// prune forgets the targets idle for bypassIdle with nothing folded. b.mu
// is held.
func (b *BypassLog) prune(now time.Time) {
	for k, t := range b.targets {
		if t.folded == 0 && now.Sub(t.last) > bypassIdle {
			delete(b.targets, k)
		}
	}
}

// flush writes a record for every target whose folded packets are due
// (all of them when final: the gateway's Close), and arms the timer again
// while some wait.
func (b *BypassLog) flush(final bool) {
	type due struct {
		k     bypassKey
		src   netip.AddrPort
		count uint64
	}
	var out []due
	now := time.Now()
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.closed = b.closed || final
	waiting := false
	for k, t := range b.targets {
		if t.folded == 0 {
			continue
		}
		if !final && now.Before(t.next) {
			waiting = true
			continue
		}
		out = append(out, due{k, t.src, t.folded})
		t.folded, t.next = 0, now.Add(bypassInterval)
	}
	if b.overflow.folded > 0 {
		out = append(out, due{bypassKey{}, b.overflow.src, b.overflow.folded})
		b.overflow.folded = 0
	}
	if waiting && !final {
		b.arm()
	}
	b.prune(now)
	b.mu.Unlock()
	for _, d := range out {
		b.emit(d.k, d.src, d.count)
	}
}

// reasonManyTargets is why the record of the packets to the targets
// beyond maxBypassTargets names no process (its process_unknown).
const reasonManyTargets = "the packets of many sockets are counted together, and no process is named for them"

// process returns the process whose socket sent src's packet to k, or
// why none is named. The owner is asked of a UDP packet's socket with
// any remote (it may send anywhere), of a TCP one's with k's.
func (b *BypassLog) process(k bypassKey, src netip.AddrPort) Process {
	switch {
	case b.owner == nil:
		return Process{Unknown: b.unknown}
	case k == bypassKey{}:
		return Process{Unknown: reasonManyTargets}
	case k.proto == "udp":
		return b.owner("udp", src, netip.AddrPort{})
	case k.proto == "tcp":
		return b.owner("tcp", src, k.dst)
	}
	return Process{Unknown: "the processes of " + strings.ToUpper(k.proto) + " packets are not looked up, only those of TCP and UDP ones"}
}

// emit writes the bypass record of count packets to k from src; the zero
// k stands for the targets beyond maxBypassTargets. The record names the
// process whose socket sent the last of them, when the Owner can tell,
// else why not.
func (b *BypassLog) emit(k bypassKey, src netip.AddrPort, count uint64) {
	snap := b.store.Load()
	rec := &decisionlog.Record{
		ID:            b.out.newID(),
		Event:         decisionlog.EventDecision,
		Client:        src.String(),
		Kind:          decisionlog.KindBypass,
		Proto:         k.proto,
		Count:         count,
		Action:        string(netpolicy.Block),
		Enforced:      true,
		Rule:          netpolicy.RuleGuard,
		PolicyVersion: snap.Version(),
	}
	if k == (bypassKey{}) {
		rec.Reason = fmt.Sprintf("%d packets to more than %d other destinations were refused: only TCP and DNS leave the sandbox", count, maxBypassTargets)
	} else {
		rec.Host, rec.Port = k.dst.Addr().String(), int(k.dst.Port())
		what := strings.ToUpper(k.proto) + " to " + k.dst.Addr().String()
		if k.dst.Port() != 0 {
			what = strings.ToUpper(k.proto) + " to " + k.dst.String()
		}
		rec.Reason = what + " was refused: only TCP and DNS leave the sandbox"
	}
	setProcess(rec, b.process(k, src))
	b.out.metrics.request(decisionlog.KindBypass, netpolicy.Block)
	b.out.emit(rec)
}

// ReportPacketsLost records that reports of refused packets did not reach
// ReportPacket: count of them that the kernel dropped (its queue was
// full), or, when err is not nil, that reports stopped coming because
// reading them failed with err. Either way the log is missing bypass
// records, and says so in a dropped record (count 0 when unknown), whose
// reason names the cause. since is when the loss began, as far as known.
func (b *BypassLog) ReportPacketsLost(count uint64, since time.Time, err error) {
	reason := fmt.Sprintf("%d reports of refused packets were lost: the kernel's queue for them was full", count)
	if err != nil {
		reason = "refused packets are no longer reported, so bypass records stop here: " + err.Error()
	}
	b.out.emit(&decisionlog.Record{Event: decisionlog.EventDropped, Since: since, Count: count, Reason: reason})
}
