package gateway

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// refusedCount sums the count fields of the conn records in ring, and
// fails on a record without one.
func refusedCount(t *testing.T, ring *decisionlog.Ring) (sum uint64, records int) {
	t.Helper()
	for _, r := range recordsOfKind(t, ring, decisionlog.KindConn) {
		n, ok := r[decisionlog.FieldCount].(float64)
		if !ok || n < 1 {
			t.Fatalf("conn record %v: count %v, want a number of at least 1", r, r[decisionlog.FieldCount])
		}
		sum += uint64(n)
		records++
	}
	return sum, records
}

// TestEveryConnectionOverTheCapIsCounted: a flood over the per-client
// connection cap is counted in full in the log, in a bounded number of
// records: the refusals folded after the burst are written within about a
// second even when no refusal follows them (they were lost before: 304
// refused gave 10 records), and the ones still folded at Close are written
// by Close.
func TestEveryConnectionOverTheCapIsCounted(t *testing.T) {
	ring := decisionlog.NewRing(0)
	srv, addr := startWith(t, netpolicy.Spec{}, serverConfig{Log: decisionlog.NewLog("", ring), Config: Config{Limits: Limits{MaxConnsPerClient: 1}}})
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		open := srv.clients[netip.MustParseAddr("127.0.0.1")]
		srv.mu.Unlock()
		if open == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections tracked, want 1", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	refuse := func(n int) {
		t.Helper()
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}

	const flood = 304
	start := time.Now()
	refuse(flood)
	waitBlocked(t, srv, flood)
	// Written while the gateway runs, with no later refusal to carry them.
	deadline = time.Now().Add(3 * refusalEvery)
	for {
		sum, _ := refusedCount(t, ring)
		if sum == flood {
			break
		}
		if sum > flood || time.Now().After(deadline) {
			t.Fatalf("%d connections refused, the log counts %d", flood, sum)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, records := refusedCount(t, ring)
	// The burst, one a second, and one a second of folded refusals.
	if max := refusalBurst + 2*int(time.Since(start)/refusalEvery+1); records > max {
		t.Errorf("%d refusals in %v made %d records, want at most %d", flood, time.Since(start), records, max)
	}
	for _, r := range recordsOfKind(t, ring, decisionlog.KindConn) {
		if reason, _ := r["reason"].(string); r["action"] != "block" || r["rule"] != "guard" || r["status"] != 429.0 || r[decisionlog.FieldCap] != decisionlog.CapConns ||
			!strings.HasPrefix(reason, "client 127.0.0.1 has 1 connections open, the limit per client") {
			t.Errorf("record %v, want block by guard, 429, cap %s", r, decisionlog.CapConns)
		}
	}

	// A few more, folded when Close comes: Close writes them.
	const more = 5
	refuse(more)
	waitBlocked(t, srv, flood+more)
	srv.Close()
	if sum, _ := refusedCount(t, ring); sum != flood+more {
		t.Errorf("after Close: %d connections refused, the log counts %d", flood+more, sum)
	}
}

// TestRefusalRecordsCountWhatTheyStandFor: a record let through right
// after folded refusals counts them and itself, and says so in its reason;
// the others count 1.
func TestRefusalRecordsCountWhatTheyStandFor(t *testing.T) {
	ring := decisionlog.NewRing(0)
	srv, err := newServer(serverConfig{Store: netpolicy.NewStore(mustCompile(t, netpolicy.Spec{})), Log: decisionlog.NewLog("", ring)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// All within a second, which the flush of the folded ones waits for.
	lim := refusalLimiter{out: &srv.out}
	client := netip.MustParseAddr("192.0.2.7")
	for i := range refusalBurst + 3 {
		lim.log(client, "192.0.2.7:"+strings.Repeat("1", i%3+1), 0, notClientReason)
	}
	lim.mu.Lock()
	lim.last = lim.last.Add(-refusalEvery) // a token is due
	lim.mu.Unlock()
	lim.log(client, "192.0.2.7:9", 0, notClientReason)
	recs := recordsOfKind(t, ring, decisionlog.KindConn)
	if len(recs) != refusalBurst+1 {
		t.Fatalf("%d records, want %d", len(recs), refusalBurst+1)
	}
	for i, r := range recs[:refusalBurst] {
		if r["count"] != 1.0 || r["reason"] != "client 192.0.2.7 is not this gateway's sandbox" {
			t.Errorf("record %d: %v, want count 1 and the plain reason", i, r)
		}
	}
	last := recs[refusalBurst]
	if reason, _ := last["reason"].(string); last["count"] != 4.0 || last["client"] != "192.0.2.7:9" ||
		!strings.HasPrefix(reason, "client 192.0.2.7 is not this gateway's sandbox (this record counts 4 refusals for the same reason since ") {
		t.Errorf("record after the folded ones: %v, want count 4 and a reason that says so", last)
	}
}

func mustCompile(t *testing.T, spec netpolicy.Spec) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
