package decisionlog

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

const (
	ringDefaultCapacity = 10_000 // records a Ring keeps when NewRing is given no capacity
	ringDefaultLimit    = 1_000  // records Since returns when given no limit
	ringMaxLimit        = 10_000 // records Since returns at most
	ringSubscriberLag   = 1_024  // lines a subscriber may fall behind before it is cut off
	ringSlabSize        = 64 << 10
)

// ErrLagged is returned by Subscription.Err when the subscriber fell more
// than 1024 lines behind and was cut off. The client should subscribe again
// with since set to the last seq it received.
var ErrLagged = errors.New("decision log subscriber fell behind")

// Ring is a Sink that keeps the last records of a Log in memory for the
// management API (docs/api.md): pages of them with Since, and a live feed
// with Subscribe. Make one with NewRing. It is safe for concurrent use and
// starts no goroutines.
//
// The lines a Ring hands out (from Since, Subscribe and Subscription.C) are
// the encoded records, each ending in '\n'. They are shared by every reader
// and must not be modified.
type Ring struct {
	mu      sync.Mutex
	entries []ringEntry // a circular buffer of len capacity
	start   int         // index of the oldest entry
	n       int         // entries in use
	slab    []byte      // where the next lines are copied; see keep
	subs    map[*Subscription]struct{}
	closed  bool
}

type ringEntry struct {
	seq  uint64
	line []byte
}

// NewRing returns a Ring that keeps the last capacity records, 10 000 when
// capacity <= 0.
func NewRing(capacity int) *Ring {
	if capacity <= 0 {
		capacity = ringDefaultCapacity
	}
	return &Ring{
		entries: make([]ringEntry, capacity),
		subs:    map[*Subscription]struct{}{},
	}
}

// WriteRecord keeps a copy of line as the record numbered seq, dropping the
// oldest record when the ring is full, and sends it to every subscriber.
// It never blocks on a subscriber: one whose channel is full is cut off
// with ErrLagged. Seqs must increase; an older or repeated seq is refused.
func (r *Ring) WriteRecord(seq uint64, line []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("writing decision ring: %w", ErrSinkClosed)
	}
	if r.n > 0 {
		if last := r.at(r.n - 1).seq; seq <= last {
			return fmt.Errorf("decision ring: seq %d after seq %d", seq, last)
		}
	}
	e := ringEntry{seq: seq, line: r.keep(line)}
	if r.n < len(r.entries) {
		r.entries[(r.start+r.n)%len(r.entries)] = e
		r.n++
	} else {
		r.entries[r.start] = e
		r.start = (r.start + 1) % len(r.entries)
	}
	for sub := range r.subs {
		if seq <= sub.since {
			continue
		}
		select {
		case sub.ch <- e.line:
		default:
			r.end(sub, ErrLagged)
		}
	}
	return nil
}

// keep returns a copy of line that nothing will write to again. Lines are
// copied into shared slabs of 64 KiB, so keeping a record costs an
// allocation only every few hundred records; a slab is freed once no
// entry or reader holds a line in it.
func (r *Ring) keep(line []byte) []byte {
	if len(line) > cap(r.slab)-len(r.slab) {
		if len(line) > ringSlabSize/4 {
			return append([]byte(nil), line...)
		}
		r.slab = make([]byte, 0, ringSlabSize)
	}
	i := len(r.slab)
	r.slab = append(r.slab, line...)
	return r.slab[i:len(r.slab):len(r.slab)]
}

// at returns the i-th oldest entry. r.mu is held.
func (r *Ring) at(i int) *ringEntry {
	return &r.entries[(r.start+i)%len(r.entries)]
}

// after returns the index of the oldest entry with a seq above since, or
// r.n when there is none. r.mu is held.
func (r *Ring) after(since uint64) int {
	return sort.Search(r.n, func(i int) bool { return r.at(i).seq > since })
}

// Since returns, oldest first, at most limit of the records with a seq
// above since (limit 1000 when <= 0, and never more than 10 000), and the
// seq to pass as since for the next page: the seq of the last line
// returned, or since itself when there is none. Records the ring has
// already dropped are absent; a caller that must know can compare seqs.
func (r *Ring) Since(since uint64, limit int) (lines [][]byte, next uint64) {
	if limit <= 0 {
		limit = ringDefaultLimit
	}
	limit = min(limit, ringMaxLimit)
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.after(since)
	m := min(r.n-i, limit)
	if m == 0 {
		return nil, since
	}
	lines = make([][]byte, m)
	for k := range lines {
		lines[k] = r.at(i + k).line
	}
	return lines, r.at(i + m - 1).seq
}

// Subscription is a live feed of a Ring's records; make one with
// Ring.Subscribe.
//
// The goroutine that subscribes owns the Subscription: it receives from C
// promptly and calls Close when it no longer wants records (a client went
// away). The Ring never blocks on C: when more than 1024 lines wait in it,
// the Ring closes C and Err returns ErrLagged. C is also closed when the
// Ring is closed (Err returns ErrSinkClosed) and by Close (Err returns
// nil). Lines already in C can still be received after it is closed.
type Subscription struct {
	// C receives, in seq order until it is closed, every record written to
	// the Ring after the backlog Subscribe returned (only those with a seq
	// above Subscribe's since).
	C <-chan []byte

	ring  *Ring
	ch    chan []byte
	since uint64
	err   error // why ch was closed; guarded by ring.mu
	done  bool  // ch is closed; guarded by ring.mu
}

// Subscribe returns the records with a seq above since that the ring still
// holds (oldest first, at most the ring's capacity), and a Subscription
// whose C receives every later record with a seq above since, with no gap
// and no repeat between the two. The caller must Close the Subscription.
func (r *Ring) Subscribe(since uint64) (backlog [][]byte, sub *Subscription) {
	ch := make(chan []byte, ringSubscriberLag)
	sub = &Subscription{C: ch, ring: r, ch: ch, since: since}
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.after(since)
	if m := r.n - i; m > 0 {
		backlog = make([][]byte, m)
		for k := range backlog {
			backlog[k] = r.at(i + k).line
		}
	}
	if r.closed {
		sub.err, sub.done = ErrSinkClosed, true
		close(ch)
		return backlog, sub
	}
	r.subs[sub] = struct{}{}
	return backlog, sub
}

// end removes sub from r and closes its channel with err. r.mu is held.
func (r *Ring) end(sub *Subscription, err error) {
	if sub.done {
		return
	}
	delete(r.subs, sub)
	sub.err, sub.done = err, true
	close(sub.ch)
}

// Close unsubscribes: the Ring sends no more lines and C is closed. It is
// safe to call more than once and from any goroutine.
func (s *Subscription) Close() {
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	s.ring.end(s, nil)
}

// Err returns why C was closed: ErrLagged when the subscriber fell behind,
// ErrSinkClosed when the Ring was closed, and nil while C is open or after
// Close.
func (s *Subscription) Err() error {
	s.ring.mu.Lock()
	defer s.ring.mu.Unlock()
	return s.err
}

// Flush does nothing: a Ring holds no buffer.
func (r *Ring) Flush() error { return nil }

// Close ends every subscription with ErrSinkClosed and refuses later
// writes. The records it holds stay readable with Since and Subscribe.
func (r *Ring) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for sub := range r.subs {
		r.end(sub, ErrSinkClosed)
	}
	return nil
}
