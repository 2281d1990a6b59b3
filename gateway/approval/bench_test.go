package approval

import (
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPendingApprovals measures the memory of 1000 pending questions,
// each with the goroutine of one held request parked on it, as the
// gateway holds them (MiB/1000q; the target is at most 20).
func BenchmarkPendingApprovals(b *testing.B) {
	const n = 1000
	var worst float64
	for range b.N {
		r := newTable(MaxPending, nil)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		woken := make(chan struct{}, n)
		ids := make([]string, n)
		for i := range n {
			q, _, err := r.join(Approval{Host: "host" + strconv.Itoa(i) + ".example", Port: 443, Kind: "connect", Method: "CONNECT",
				Client: "10.213.0.2:40000", Rule: "default", Reason: "no rule matched; the default is ask", Asked: time.Now()}, "", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = q.ID
			go func() { <-q.done; woken <- struct{}{} }()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := float64(after.HeapInuse+after.StackInuse) - float64(before.HeapInuse+before.StackInuse)
		worst = max(worst, used/(1<<20))
		for _, id := range ids {
			r.resolve(id, Answer{Scope: ScopeOnce, By: ByCLI})
		}
		for range n {
			<-woken
		}
	}
	b.ReportMetric(worst, "MiB/1000q")
}

// BenchmarkApprovalWake measures how long an answer takes to reach the
// request held on its question: from resolve to the waiter running
// (p99-ms; the target is at most 50).
func BenchmarkApprovalWake(b *testing.B) {
	r := newTable(MaxPending, nil)
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		q, _, err := r.join(Approval{Host: "h.example", Port: uint16(1 + i%60000), Asked: time.Now()}, "", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		ready, woke := make(chan struct{}), make(chan time.Time, 1)
		go func() { close(ready); <-q.done; woke <- time.Now() }()
		<-ready
		start := time.Now()
		r.resolve(q.ID, Answer{Allow: true, Scope: ScopeOnce, By: ByAPI})
		lat = append(lat, (<-woke).Sub(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}
