package sandbox

import (
	"slices"
	"testing"
	"time"
)

// fakeSettleClock is a settleClock whose Sleep moves its time on at once.
type fakeSettleClock struct{ now time.Time }

func (c *fakeSettleClock) Now() time.Time        { return c.now }
func (c *fakeSettleClock) Sleep(d time.Duration) { c.now = c.now.Add(d) }

// TestSettleShimsWaitsForLateShims pins the shim-settle wait of
// killWithoutRuntime: shims are looked for until none has shown up for
// 500 ms, so that a shim a dying runtime's start process forks a moment
// after the first look is killed too, however late within that time, and
// the look goes on 500 ms past the last shim found; the deadline ends it
// even while shims keep showing up. Without the wait (one look), the
// late shims are missed.
func TestSettleShimsWaitsForLateShims(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		appear   map[time.Duration][]int // after start: the shims find returns then (once)
		deadline time.Duration
		want     []int         // the shims killed, in order
		minEnd   time.Duration // settleShims returns no sooner (after start)
		maxEnd   time.Duration // nor later
	}{
		{"none", nil, 10 * time.Second, nil, 500 * time.Millisecond, 520 * time.Millisecond},
		{"at once", map[time.Duration][]int{0: {10}}, 10 * time.Second, []int{10}, 500 * time.Millisecond, 520 * time.Millisecond},
		{"just under the settle time", map[time.Duration][]int{480 * time.Millisecond: {11}}, 10 * time.Second, []int{11}, 980 * time.Millisecond, 1000 * time.Millisecond},
		{"each late after the last", map[time.Duration][]int{
			0: {12}, 460 * time.Millisecond: {13}, 920 * time.Millisecond: {14, 15},
		}, 10 * time.Second, []int{12, 13, 14, 15}, 1420 * time.Millisecond, 1440 * time.Millisecond},
		{"until the deadline", func() map[time.Duration][]int {
			m := map[time.Duration][]int{}
			for d := time.Duration(0); d < 5*time.Second; d += 100 * time.Millisecond {
				m[d] = []int{int(d / time.Millisecond)}
			}
			return m
		}(), time.Second, []int{0, 100, 200, 300, 400, 500, 600, 700, 800, 900}, time.Second, 1020 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeSettleClock{now: start}
			left := map[time.Duration][]int{}
			for d, shims := range tc.appear {
				left[d] = shims
			}
			find := func() []int {
				var found []int
				var due []time.Duration
				for d := range left {
					if !start.Add(d).After(clock.now) {
						due = append(due, d)
					}
				}
				slices.Sort(due)
				for _, d := range due {
					found = append(found, left[d]...)
					delete(left, d)
				}
				return found
			}
			var killed []int
			settleShims(find, func(shim int) { killed = append(killed, shim) }, start.Add(tc.deadline), clock)
			if !slices.Equal(killed, tc.want) {
				t.Errorf("killed %v, want %v", killed, tc.want)
			}
			if end := clock.now.Sub(start); end < tc.minEnd || end > tc.maxEnd {
				t.Errorf("returned after %v, want between %v and %v", end, tc.minEnd, tc.maxEnd)
			}
		})
	}
}
