package decisionlog

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ringLine is the line the ring tests write for seq.
func ringLine(seq uint64) []byte {
	return []byte(`{"seq":` + strconv.FormatUint(seq, 10) + "}\n")
}

// ringFill writes the records from..to (inclusive) to r.
func ringFill(t testing.TB, r *Ring, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if err := r.WriteRecord(seq, ringLine(seq)); err != nil {
			t.Fatal(err)
		}
	}
}

// ringSeqs returns the seqs of lines.
func ringSeqs(t testing.TB, lines [][]byte) []uint64 {
	t.Helper()
	seqs := []uint64{}
	for _, line := range lines {
		seqs = append(seqs, dlSeq(t, line))
	}
	return seqs
}

// ringRange returns from..to (inclusive); empty when to < from.
func ringRange(from, to uint64) []uint64 {
	seqs := []uint64{}
	for seq := from; seq <= to; seq++ {
		seqs = append(seqs, seq)
	}
	return seqs
}

func TestRingSince(t *testing.T) {
	r := NewRing(5)
	ringFill(t, r, 1, 12) // wraps twice; 8..12 remain
	tests := []struct {
		since    uint64
		limit    int
		want     []uint64
		wantNext uint64
	}{
		{since: 0, limit: 2, want: []uint64{8, 9}, wantNext: 9},
		{since: 9, limit: 2, want: []uint64{10, 11}, wantNext: 11},
		{since: 11, limit: 2, want: []uint64{12}, wantNext: 12},
		{since: 12, limit: 2, want: []uint64{}, wantNext: 12},
		{since: 100, limit: 2, want: []uint64{}, wantNext: 100},
		{since: 0, limit: 0, want: []uint64{8, 9, 10, 11, 12}, wantNext: 12},
		{since: 7, limit: 10, want: []uint64{8, 9, 10, 11, 12}, wantNext: 12},
		{since: 8, limit: -1, want: []uint64{9, 10, 11, 12}, wantNext: 12},
		{since: 3, limit: 1, want: []uint64{8}, wantNext: 8},
	}
	for _, tt := range tests {
		lines, next := r.Since(tt.since, tt.limit)
		if diff := cmp.Diff(tt.want, ringSeqs(t, lines)); diff != "" {
			t.Errorf("Since(%d, %d) seqs (-want +got):\n%s", tt.since, tt.limit, diff)
		}
		if next != tt.wantNext {
			t.Errorf("Since(%d, %d): got next %d, want %d", tt.since, tt.limit, next, tt.wantNext)
		}
	}
}

func TestRingSinceEmpty(t *testing.T) {
	lines, next := NewRing(3).Since(5, 10)
	if len(lines) != 0 || next != 5 {
		t.Errorf("Since on an empty ring: got %d lines, next %d, want 0 lines, next 5", len(lines), next)
	}
}

// TestRingPaging pages through a small ring while it is written, around
// and around, as the management API's clients do.
func TestRingPaging(t *testing.T) {
	r := NewRing(10)
	var got []uint64
	var since, written uint64
	for written < 100 {
		ringFill(t, r, written+1, written+7)
		written += 7
		for {
			lines, next := r.Since(since, 4)
			if len(lines) == 0 {
				if next != since {
					t.Fatalf("empty page after %d: got next %d, want %d", since, next, since)
				}
				break
			}
			seqs := ringSeqs(t, lines)
			if next != seqs[len(seqs)-1] {
				t.Fatalf("page after %d: got next %d, want the last seq %d", since, next, seqs[len(seqs)-1])
			}
			got = append(got, seqs...)
			since = next
		}
	}
	if diff := cmp.Diff(ringRange(1, written), got); diff != "" {
		t.Errorf("paged seqs (-want +got):\n%s", diff)
	}
}

func TestRingSinceLimits(t *testing.T) {
	r := NewRing(20000)
	ringFill(t, r, 1, 15000)
	tests := []struct {
		limit    int
		wantLen  int
		wantNext uint64
	}{
		{limit: 0, wantLen: 1000, wantNext: 1000},
		{limit: -5, wantLen: 1000, wantNext: 1000},
		{limit: 10, wantLen: 10, wantNext: 10},
		{limit: 10000, wantLen: 10000, wantNext: 10000},
		{limit: 50000, wantLen: 10000, wantNext: 10000},
	}
	for _, tt := range tests {
		lines, next := r.Since(0, tt.limit)
		if len(lines) != tt.wantLen || next != tt.wantNext {
			t.Errorf("Since(0, %d): got %d lines, next %d, want %d lines, next %d", tt.limit, len(lines), next, tt.wantLen, tt.wantNext)
		}
	}
}

func TestNewRingDefaultCapacity(t *testing.T) {
	for _, capacity := range []int{0, -1} {
		r := NewRing(capacity)
		ringFill(t, r, 1, 10001)
		lines, _ := r.Since(0, 1)
		if got := dlSeq(t, lines[0]); got != 2 {
			t.Errorf("NewRing(%d) after 10001 records: got oldest seq %d, want 2", capacity, got)
		}
	}
}

// TestRingCopiesLines checks that the ring keeps its own copy: a Log
// reuses the line's memory for the next record.
func TestRingCopiesLines(t *testing.T) {
	r := NewRing(4)
	buf := []byte(`{"seq":1}` + "\n")
	if err := r.WriteRecord(1, buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXX")
	lines, _ := r.Since(0, 0)
	if got, want := string(lines[0]), `{"seq":1}`+"\n"; got != want {
		t.Errorf("line after the writer reused its buffer: got %q, want %q", got, want)
	}
	big := make([]byte, ringSlabSize) // too big for a slab
	big[0] = 'x'
	if err := r.WriteRecord(2, big); err != nil {
		t.Fatal(err)
	}
	big[0] = 'y'
	lines, _ = r.Since(1, 0)
	if len(lines[0]) != ringSlabSize || lines[0][0] != 'x' {
		t.Errorf("big line: got %d bytes starting %q, want %d starting 'x'", len(lines[0]), lines[0][0], ringSlabSize)
	}
}

func TestRingRefusesOldSeq(t *testing.T) {
	r := NewRing(4)
	ringFill(t, r, 1, 3)
	for _, seq := range []uint64{3, 2} {
		if err := r.WriteRecord(seq, ringLine(seq)); err == nil {
			t.Errorf("WriteRecord(%d) after 3: got nil error, want one", seq)
		}
	}
	lines, _ := r.Since(0, 0)
	if diff := cmp.Diff([]uint64{1, 2, 3}, ringSeqs(t, lines)); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
}

// ringReceive returns the lines waiting in sub.C and whether C is closed.
func ringReceive(sub *Subscription) (lines [][]byte, closed bool) {
	for {
		select {
		case line, ok := <-sub.C:
			if !ok {
				return lines, true
			}
			lines = append(lines, line)
		default:
			return lines, false
		}
	}
}

func TestRingSubscribe(t *testing.T) {
	r := NewRing(100)
	ringFill(t, r, 1, 5)
	backlog, sub := r.Subscribe(2)
	if diff := cmp.Diff([]uint64{3, 4, 5}, ringSeqs(t, backlog)); diff != "" {
		t.Errorf("backlog (-want +got):\n%s", diff)
	}
	ringFill(t, r, 6, 7)
	live, closed := ringReceive(sub)
	if diff := cmp.Diff([]uint64{6, 7}, ringSeqs(t, live)); diff != "" || closed {
		t.Errorf("live records (-want +got):\n%s\nclosed: got %v, want false", diff, closed)
	}
	sub.Close()
	sub.Close() // twice is fine
	ringFill(t, r, 8, 8)
	if live, closed := ringReceive(sub); len(live) != 0 || !closed {
		t.Errorf("after Close: got %d lines, closed %v, want 0 lines, closed", len(live), closed)
	}
	if err := sub.Err(); err != nil {
		t.Errorf("Err after Close: got %v, want nil", err)
	}
}

// TestRingSubscribeAhead subscribes after a seq the ring has not reached:
// the records up to it are not sent.
func TestRingSubscribeAhead(t *testing.T) {
	r := NewRing(100)
	ringFill(t, r, 1, 5)
	backlog, sub := r.Subscribe(10)
	defer sub.Close()
	if len(backlog) != 0 {
		t.Errorf("backlog: got %d lines, want 0", len(backlog))
	}
	ringFill(t, r, 6, 12)
	live, _ := ringReceive(sub)
	if diff := cmp.Diff([]uint64{11, 12}, ringSeqs(t, live)); diff != "" {
		t.Errorf("live records (-want +got):\n%s", diff)
	}
}

// TestRingSubscribeConcurrent follows a Log that many goroutines write to
// and checks that the backlog and the live records together hold every
// record once, in order. A subscriber cut off for lagging subscribes again
// after its last seq, as an API client would.
func TestRingSubscribeConcurrent(t *testing.T) {
	const goroutines, each = 8, 2000
	const total = goroutines * each
	ring := NewRing(total + 1)
	l := NewLog("sb", ring)
	defer l.Close()
	emitted := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				l.Emit(&Record{Event: EventDecision, Host: "example.com"})
			}
		})
	}
	go func() { wg.Wait(); close(emitted) }() // ends when every emitter has

	var last uint64
	lags := 0
	take := func(line []byte) {
		t.Helper()
		if seq := dlSeq(t, line); seq != last+1 {
			t.Fatalf("got seq %d after %d, want %d", seq, last, last+1)
		}
		last++
	}
	backlog, sub := ring.Subscribe(0)
	firstBacklog := len(backlog)
	for _, line := range backlog {
		take(line)
	}
	for last < total {
		var line []byte
		var ok bool
		select {
		case line, ok = <-sub.C:
		case <-emitted:
			// Every record is in the ring: what is missing must be in C.
			select {
			case line, ok = <-sub.C:
			default:
				t.Fatalf("all records emitted and C is empty, got up to seq %d of %d", last, total)
			}
		}
		if !ok {
			if err := sub.Err(); !errors.Is(err, ErrLagged) {
				t.Fatalf("C closed: got Err %v, want ErrLagged", err)
			}
			lags++
			backlog, sub = ring.Subscribe(last)
			for _, line := range backlog {
				take(line)
			}
			continue
		}
		take(line)
	}
	sub.Close()
	t.Logf("backlog of the first subscription: %d records; subscribed again after lagging: %d times", firstBacklog, lags)
	if err := l.Err(); err != nil {
		t.Errorf("log Err: got %v, want nil", err)
	}
}

// TestRingLaggingSubscriber checks that a subscriber that reads nothing
// cannot block the log: it is cut off after 1024 lines.
func TestRingLaggingSubscriber(t *testing.T) {
	ring := NewRing(0)
	l := NewLog("sb", ring)
	defer l.Close()
	_, sub := ring.Subscribe(0)
	for range 5000 {
		l.Emit(&Record{Event: EventDecision}) // must return although nobody reads
	}
	if err := l.Err(); err != nil {
		t.Errorf("log Err: got %v, want nil (a lagging reader is not a sink error)", err)
	}
	lines, closed := ringReceive(sub)
	if !closed {
		t.Fatalf("C of a lagging subscriber: got open, want closed")
	}
	if diff := cmp.Diff(ringRange(1, ringSubscriberLag), ringSeqs(t, lines)); diff != "" {
		t.Errorf("lines a lagging subscriber got (-want +got):\n%s", diff)
	}
	if err := sub.Err(); !errors.Is(err, ErrLagged) {
		t.Errorf("Err: got %v, want ErrLagged", err)
	}
	sub.Close() // after the cut-off: a no-op that keeps the reason
	if err := sub.Err(); !errors.Is(err, ErrLagged) {
		t.Errorf("Err after Close: got %v, want ErrLagged", err)
	}
	backlog, sub2 := ring.Subscribe(ringSubscriberLag)
	defer sub2.Close()
	if diff := cmp.Diff(ringRange(ringSubscriberLag+1, 5000), ringSeqs(t, backlog)); diff != "" {
		t.Errorf("backlog after subscribing again (-want +got):\n%s", diff)
	}
}

func TestRingClose(t *testing.T) {
	r := NewRing(10)
	ringFill(t, r, 1, 3)
	_, sub := r.Subscribe(0)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, closed := ringReceive(sub); !closed {
		t.Errorf("C after the ring closed: got open, want closed")
	}
	if err := sub.Err(); !errors.Is(err, ErrSinkClosed) {
		t.Errorf("Err after the ring closed: got %v, want ErrSinkClosed", err)
	}
	if err := r.WriteRecord(4, ringLine(4)); !errors.Is(err, ErrSinkClosed) {
		t.Errorf("WriteRecord after Close: got %v, want ErrSinkClosed", err)
	}
	lines, next := r.Since(1, 0)
	if diff := cmp.Diff([]uint64{2, 3}, ringSeqs(t, lines)); diff != "" || next != 3 {
		t.Errorf("Since after Close (-want +got):\n%s\nnext: got %d, want 3", diff, next)
	}
	backlog, sub2 := r.Subscribe(2)
	if diff := cmp.Diff([]uint64{3}, ringSeqs(t, backlog)); diff != "" {
		t.Errorf("Subscribe after Close: backlog (-want +got):\n%s", diff)
	}
	if _, closed := ringReceive(sub2); !closed || !errors.Is(sub2.Err(), ErrSinkClosed) {
		t.Errorf("Subscribe after Close: got closed %v, Err %v, want closed, ErrSinkClosed", closed, sub2.Err())
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func BenchmarkRingWriteRecord(b *testing.B) {
	r := NewRing(0)
	line := (&Record{Event: EventDecision, Host: "example.com"}).AppendJSON(nil)
	line = append(line, '\n')
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		r.WriteRecord(seq, line)
	}
}
