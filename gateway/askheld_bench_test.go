package gateway

import (
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/netpolicy"
)

// BenchmarkHeldRequestsIdle holds 1000 real proxy requests at a gateway
// (one client connection each, one question each, as --default ask makes
// them) and measures what they cost while nobody answers: the process's
// CPU time over a second of waiting (cpu-ms/s; a held request should cost
// none) and the memory the held requests, their connections and
// questions take (MiB/1000), beside the memory of as many connections
// that sent nothing yet, measured in the same run (idle-MiB/1000): the
// difference is what holding adds to a connection the gateway serves
// anyway.
func BenchmarkHeldRequestsIdle(b *testing.B) {
	const n = 1000
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Hour)
	g := startGatewayWith(b, spec, nil, nil)
	var cpuWorst, memWorst, idleWorst float64
	for range b.N {
		idleWorst = max(idleWorst, idleConnsMiB(b, g.addr, n))
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conns := make([]net.Conn, 0, n)
		for i := range n {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := fmt.Fprintf(c, "GET http://held%d.test/ HTTP/1.1\r\nHost: held%d.test\r\n\r\n", i, i); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(g.srv.approvals.List()) < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d requests held after 30s", len(g.srv.approvals.List()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		memWorst = max(memWorst, (float64(after.HeapInuse+after.StackInuse)-float64(before.HeapInuse+before.StackInuse))/(1<<20))

		cpu0, t0 := cpuTime(b), time.Now()
		time.Sleep(time.Second)
		cpu1, t1 := cpuTime(b), time.Now()
		cpuWorst = max(cpuWorst, float64(cpu1-cpu0)/float64(time.Millisecond)/t1.Sub(t0).Seconds())

		for _, q := range g.srv.approvals.List() {
			g.srv.approvals.Answer(q.ID, approval.Answer{Scope: approval.ScopeOnce, By: approval.ByCLI})
		}
		for _, c := range conns {
			c.Close()
		}
		for len(g.srv.approvals.List()) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.ReportMetric(cpuWorst, "cpu-ms/s")
	b.ReportMetric(memWorst, "MiB/1000")
	b.ReportMetric(idleWorst, "idle-MiB/1000")
}

// idleConnsMiB opens n connections to addr that send nothing, waits for
// the gateway to take them, and returns the MiB they take; it closes them.
func idleConnsMiB(b *testing.B, addr string, n int) float64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // accepted and waiting for a request
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	return (float64(after.HeapInuse+after.StackInuse) - float64(before.HeapInuse+before.StackInuse)) / (1 << 20)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
