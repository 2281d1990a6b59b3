package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
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
	// The flood's first packet is logged at once, the ICMP one too; the
	// folded ones once a second, so while the loop runs when it takes
	// that long (under -race on a loaded machine).
	var udp, icmp []map[string]any
	for _, r := range recs {
		if r["proto"] == "icmp" {
			icmp = append(icmp, r)
		} else {
			udp = append(udp, r)
		}
	}
	if len(udp) == 0 || len(udp) > 1+int(elapsed/bypassInterval) || udp[0]["count"] != 1.0 || udp[0]["proto"] != "udp" || udp[0]["host"] != "192.0.2.1" || udp[0]["port"] != 9999.0 ||
		len(icmp) != 1 || icmp[0]["host"] != "192.0.2.7" || icmp[0]["port"] != 0.0 {
		t.Fatalf("records during the flood (%v): %v", elapsed, recs)
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
	start := time.Now()
	for i := range n {
		g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: src, Dst: netip.MustParseAddrPort(fmt.Sprintf("192.0.2.1:%d", 1000+i))})
	}
	elapsed := time.Since(start)
	// The records of the targets beyond the bound, with no host, come
	// once a second, the first while the loop still runs when it takes
	// that long (under -race on a loaded machine).
	split := func() (targets, beyond int, beyondPackets float64) {
		recs, _ := bypassRecords(t, g)
		for _, r := range recs {
			if r["host"] == "" {
				beyond++
				beyondPackets += r["count"].(float64)
			} else {
				targets++
			}
		}
		return targets, beyond, beyondPackets
	}
	if targets, _, _ := split(); targets != maxBypassTargets {
		t.Errorf("%d records of a target at once for %d targets, want %d", targets, n, maxBypassTargets)
	}
	g.srv.bypass.flush(false)
	targets, beyond, beyondPackets := split()
	if most := 1 + int(elapsed/bypassInterval); targets != maxBypassTargets || beyond == 0 || beyond > most || beyondPackets != n-maxBypassTargets {
		t.Errorf("%d records of a target and %d of those beyond, counting %v packets; want %d, and 1 to %d (one a second), counting %d",
			targets, beyond, beyondPackets, maxBypassTargets, most, n-maxBypassTargets)
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
// owns a UDP packet's socket; a packet of another protocol but TCP has
// no socket to ask about, and its record says so.
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
	}, "")
	b.ReportPacket(Packet{Proto: "udp", Src: netip.MustParseAddrPort("10.213.0.2:5000"), Dst: netip.MustParseAddrPort("192.0.2.1:53")})
	b.ReportPacket(Packet{Proto: "icmp", Src: netip.MustParseAddrPort("10.213.0.2:0"), Dst: netip.MustParseAddrPort("192.0.2.1:0")})
	recs := recordsOfKind(t, ring, decisionlog.KindBypass)
	if len(recs) != 2 {
		t.Fatalf("got %d bypass records, want 2", len(recs))
	}
	if r := recs[0]; r["id"] != "10" || r["policy_version"] != 1.0 || r["pid"] != 7.0 || r["comm"] != "dig" || r["exe"] != "/usr/bin/dig" || r["client"] != "10.213.0.2:5000" {
		t.Errorf("UDP record %v: want id 10 (36 in base 36), policy version 1, the process pid 7 dig, client 10.213.0.2:5000", r)
	}
	if r := recs[1]; r["id"] != "11" || r["pid"] != nil || r["comm"] != nil || r["process_unknown"] != "the processes of ICMP packets are not looked up, only those of TCP and UDP ones" {
		t.Errorf("ICMP record %v: want id 11, no process, and a process_unknown saying ICMP packets' are not looked up", r)
	}
	if got, want := strings.Join(asked, ","), "udp 10.213.0.2:5000 invalid AddrPort"; got != want {
		t.Errorf("owner asked %q, want %q", got, want)
	}
}

// TestBypassRecordsSayWhyNoProcess: sbx run's gateway, whose Owner
// looks each socket up (sandbox.Owners), writes in a bypass record that
// names no process why not, as Owner said it: a process that sent one
// datagram and exited before its report was read left no socket to find.
// A TCP packet's socket is asked for with the packet's destination, and
// the record of the packets beyond maxBypassTargets, many sockets', names
// none. A gateway without an Owner says Config.ProcessUnknown in them
// all.
func TestBypassRecordsSayWhyNoProcess(t *testing.T) {
	const gone = "no socket has these addresses any more: its process closed it or ended"
	var mu sync.Mutex
	var asked []string
	owner := func(network string, client, remote netip.AddrPort) Process {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, network+" "+client.String()+" "+remote.String())
		if client.Port() == 5000 {
			return Process{PID: 7, Comm: "dig", Exe: "/usr/bin/dig"}
		}
		return Process{Unknown: gone}
	}
	g := startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) { c.Owner = owner })
	ap := netip.MustParseAddrPort
	g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: ap("10.213.0.2:5000"), Dst: ap("192.0.2.1:53")})
	g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: ap("10.213.0.2:5001"), Dst: ap("192.0.2.1:54")})
	g.srv.bypass.ReportPacket(Packet{Proto: "tcp", Src: ap("10.213.0.2:5002"), Dst: ap("192.0.2.1:9")})
	for i := range maxBypassTargets {
		g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: ap("10.213.0.2:6000"), Dst: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), uint16(1000+i))})
	}
	g.srv.bypass.flush(true)
	recs, _ := bypassRecords(t, g)
	if len(recs) != maxBypassTargets+1 { // the last 3 packets' targets are beyond the bound
		t.Fatalf("got %d bypass records, want %d", len(recs), maxBypassTargets+1)
	}
	for i, want := range []struct {
		pid     any
		unknown any
	}{{7.0, nil}, {nil, gone}, {nil, gone}} {
		if r := recs[i]; r["pid"] != want.pid || r["process_unknown"] != want.unknown {
			t.Errorf("record %d %v: got pid %v, process_unknown %v; want %v, %v", i, r, r["pid"], r["process_unknown"], want.pid, want.unknown)
		}
	}
	if r := recs[len(recs)-1]; r["host"] != "" || r["pid"] != nil || r["process_unknown"] != reasonManyTargets {
		t.Errorf("the record of the targets beyond the bound %v: want no host, no pid, process_unknown %q", r, reasonManyTargets)
	}
	mu.Lock()
	if got, want := strings.Join(asked[:3], ","), "udp 10.213.0.2:5000 invalid AddrPort,udp 10.213.0.2:5001 invalid AddrPort,tcp 10.213.0.2:5002 192.0.2.1:9"; got != want {
		t.Errorf("Owner asked %q, want %q", got, want)
	}
	mu.Unlock()

	const why = "the agent runs elsewhere"
	g = startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) { c.ProcessUnknown = why })
	g.srv.bypass.ReportPacket(Packet{Proto: "udp", Src: ap("10.213.0.2:5000"), Dst: ap("192.0.2.1:53")})
	g.srv.bypass.ReportPacket(Packet{Proto: "icmp", Src: ap("10.213.0.2:0"), Dst: ap("192.0.2.1:0")})
	recs, _ = bypassRecords(t, g)
	if len(recs) != 2 || recs[0]["process_unknown"] != why || recs[1]["process_unknown"] != why {
		t.Errorf("records of a gateway without an Owner %v: want process_unknown %q in each", recs, why)
	}
}

// TestRecordsSayWhyNoProcess: a request's and a DNS query's records
// say why no process is named, as Owner said it; once Owner names one,
// they name it and say nothing of why not.
func TestRecordsSayWhyNoProcess(t *testing.T) {
	const shared = "several processes in the sandbox hold the socket"
	var named atomic.Bool
	st := startDNS(t, stubPolicy(), nil, func(c *serverConfig) {
		c.Owner = func(network string, client, remote netip.AddrPort) Process {
			if named.Load() {
				return Process{PID: 9, Comm: "curl", Exe: "/usr/bin/curl"}
			}
			return Process{Unknown: shared}
		}
	})
	queryA(t, st, false, "api.test.")
	named.Store(true)
	queryA(t, st, false, "api.test.")
	recs := recordsOfKind(t, st.ring, decisionlog.KindDNS)
	if len(recs) != 2 || recs[0]["pid"] != nil || recs[0]["process_unknown"] != shared || recs[1]["pid"] != 9.0 || recs[1]["process_unknown"] != nil {
		t.Errorf("dns records %v: want the first with process_unknown %q and no pid, the second with pid 9 and no process_unknown", recs, shared)
	}

	g := startGatewayWith(t, netpolicy.Spec{Default: netpolicy.Block}, nil, func(c *serverConfig) {
		c.Owner = func(network string, client, remote netip.AddrPort) Process { return Process{Unknown: shared} }
	})
	conn, br := dialRaw(t, g.addr)
	fmt.Fprint(conn, "GET http://blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET http://blocked.test/: %v %v, want 403", resp, err)
	}
	if r := g.lastDecision(t); r["pid"] != nil || r["process_unknown"] != shared {
		t.Errorf("request record %v: want process_unknown %q and no pid", r, shared)
	}
}
