package selftest

import "testing"

// TestSelftestCountersPerRound: a server counts what comes while the
// probe runs apart from the rest (the controls), and a new round starts
// from nothing, so that one round's hits are never another's.
func TestSelftestCountersPerRound(t *testing.T) {
	var e outside
	h := e.counter()
	h.hit() // a control
	e.probing.Store(true)
	h.hit() // the probe
	e.probing.Store(false)
	if probing, all := h.counts(); probing != 1 || all != 2 {
		t.Errorf("counts() = %d, %d; want 1 while probing, 2 in all", probing, all)
	}
	e.resetCounts()
	if probing, all := h.counts(); probing != 0 || all != 0 {
		t.Errorf("after resetCounts, counts() = %d, %d; want 0, 0", probing, all)
	}
}
