package gateway

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// bypassRecords returns the bypass records logged so far and the packets
// they count.
func bypassRecords(t *testing.T, g *testGateway) (recs []map[string]any, packets uint64) {
	t.Helper()
	for _, r := range g.records(t) {
		if r["kind"] == decisionlog.KindBypass {
			recs = append(recs, r)
			packets += uint64(r["count"].(float64))
		}
	}
	return recs, packets
}

func TestBypassRecordsFoldAFlood(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Block}, nil)
	src := netip.MustParseAddrPort("10.213.0.2:40000")
	dst := netip.MustParseAddrPort("192.0.2.1:9999")
	start := time.Now()
	const n = 100_000
	for range n {
		g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: src, Dst: dst})
	}
	// One more target meanwhile: it gets a record of its own at once.
	g.srv.bypass.ReportPacket(Packet{Proto: "icmp", Src: netip.AddrPortFrom(src.Addr(), 0), Dst: netip.MustParseAddrPort("192.0.2.7:0")})
	elapsed := time.Since(start)
	recs, _ := bypassRecords(t, g)
	if len(recs) != 2 || recs[0]["count"] != 1.0 || recs[0]["proto"] != "udp" || recs[0]["host"] != "192.0.2.1" || recs[0]["port"] != 9999.0 ||
		recs[1]["proto"] != "icmp" || recs[1]["host"] != "192.0.2.7" || recs[1]["port"] != 0.0 {
		t.Fatalf("records during the flood: %v", recs)
	}
	// The folded packets are counted once their second is over.
	time.Sleep(bypassInterval + 200*time.Millisecond)
	recs, packets := bypassRecords(t, g)
	if packets != n+1 {
		t.Errorf("the records count %d packets, want %d", packets, n+1)
	}
	if max := 2 + 2*int(elapsed/bypassInterval+2); len(recs) > max {
		t.Errorf("%d records for a flood to one target, want at most %d", len(recs), max)
	}
	for _, r := range recs {
		if r["action"] != "block" || r["rule"] != netpolicy.RuleGuard || r["enforced"] != true || r["client"] != src.String() && r["proto"] == "udp" {
			t.Errorf("bypass record: %v", r)
		}
	}
}

func TestBypassRecordsAreBoundedAcrossTargets(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Block}, nil)
	src := netip.MustParseAddrPort("10.213.0.2:40000")
	const n = 3 * maxBypassTargets
	for i := range n {
		g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: src, Dst: netip.MustParseAddrPort(fmt.Sprintf("192.0.2.1:%d", 1000+i))})
	}
	recs, packets := bypassRecords(t, g)
	if len(recs) != maxBypassTargets {
		t.Errorf("%d records at once for %d targets, want %d", len(recs), n, maxBypassTargets)
	}
	g.srv.bypass.flush(false)
	recs, packets = bypassRecords(t, g)
	if packets != n || len(recs) != maxBypassTargets+1 {
		t.Errorf("%d records counting %d packets, want %d counting %d", len(recs), packets, maxBypassTargets+1, n)
	}
	last := recs[len(recs)-1]
	if last["host"] != "" || last["count"] != float64(n-maxBypassTargets) {
		t.Errorf("the record of the targets beyond the bound: %v", last)
	}
}

func TestBypassAfterCloseIsNotLogged(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Block}, nil)
	p := Packet{Proto: "udp", Src: netip.MustParseAddrPort("10.213.0.2:1"), Dst: netip.MustParseAddrPort("192.0.2.1:53")}
	g.srv.bypass.ReportPacket(p)
	g.srv.bypass.ReportPacket(p) // folded
	g.srv.bypass.flush(true)     // what Close does: writes the folded one
	g.srv.bypass.ReportPacket(p)
	recs, packets := bypassRecords(t, g)
	if len(recs) != 2 || packets != 2 {
		t.Errorf("%d records counting %d packets, want 2 counting 2", len(recs), packets)
	}
}

// TestFaultPacketsLostAreRecorded: refused packets' reports that never reached
// the gateway leave a dropped record naming why, so the log says it is
// missing bypass records instead of going quiet.
func TestFaultPacketsLostAreRecorded(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Block}, nil)
	since := time.Now().Add(-time.Second)
	g.srv.bypass.ReportPacketsLost(7, since, nil)
	g.srv.bypass.ReportPacketsLost(0, since, fmt.Errorf("reading NFLOG group 7: bad file descriptor"))
	var dropped []map[string]any
	for _, r := range g.records(t) {
		if r["event"] == decisionlog.EventDropped {
			dropped = append(dropped, r)
		}
	}
	if len(dropped) != 2 || dropped[0]["count"] != 7.0 || dropped[1]["count"] != 0.0 {
		t.Fatalf("dropped records: %v; want counts 7 and 0", dropped)
	}
	for i, want := range []string{"7 reports of refused packets were lost", "no longer reported, so bypass records stop here: reading NFLOG group 7: bad file descriptor"} {
		if r, _ := dropped[i]["reason"].(string); !strings.Contains(r, want) {
			t.Errorf("reason %q, want it to hold %q", r, want)
		}
	}
}

// TestBypassLogNamesTheProcessOfUDPPackets: a BypassLog alone, as the
// server makes it: its records take their ids from the server's counter
// and the version of the policy in its store, and name the process that
// owns a UDP packet's socket; a packet of another protocol has no socket
// to ask about.
func TestBypassLogNamesTheProcessOfUDPPackets(t *testing.T) {
	ring := decisionlog.NewRing(0)
	log := decisionlog.NewLog("", ring)
	defer log.Close()
	var ids atomic.Uint64
	ids.Store(35)
	store := netpolicy.NewStore(mustCompile(t, netpolicy.Spec{}))
	var asked []string
	b := newBypassLog(store, &recordOut{ids: &ids, log: log, metrics: newMetrics()}, func(network string, client, remote netip.AddrPort) Process {
		asked = append(asked, network+" "+client.String()+" "+remote.String())
		return Process{PID: 7, Comm: "dig", Exe: "/usr/bin/dig"}
	})
	b.ReportPacket(Packet{Proto: "udp", Src: netip.MustParseAddrPort("10.213.0.2:5000"), Dst: netip.MustParseAddrPort("192.0.2.1:53")})
	b.ReportPacket(Packet{Proto: "icmp", Src: netip.MustParseAddrPort("10.213.0.2:0"), Dst: netip.MustParseAddrPort("192.0.2.1:0")})
	recs := recordsOfKind(t, ring, decisionlog.KindBypass)
	if len(recs) != 2 {
		t.Fatalf("got %d bypass records, want 2", len(recs))
	}
	if r := recs[0]; r["id"] != "10" || r["policy_version"] != 1.0 || r["pid"] != 7.0 || r["comm"] != "dig" || r["exe"] != "/usr/bin/dig" || r["client"] != "10.213.0.2:5000" {
		t.Errorf("UDP record %v: want id 10 (36 in base 36), policy version 1, the process pid 7 dig, client 10.213.0.2:5000", r)
	}
	if r := recs[1]; r["id"] != "11" || r["pid"] != nil || r["comm"] != nil {
		t.Errorf("ICMP record %v: want id 11 and no process", r)
	}
	if got, want := strings.Join(asked, ","), "udp 10.213.0.2:5000 invalid AddrPort"; got != want {
		t.Errorf("owner asked %q, want %q", got, want)
	}
}
