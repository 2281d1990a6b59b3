package main

import (
	"runtime/debug"
	"testing"
)

// TestStartGC: GOGC is raised while starts are under way, and set back
// to what it was when the last of them ends, whatever their order.
func TestStartGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	endA := startGC()
	endB := startGC()
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Errorf("GOGC during two starts: got %d, want %d", got, startGCPercent)
	}
	endA()
	endA()
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Errorf("GOGC after the first start ended (twice): got %d, want %d", got, startGCPercent)
	}
	endB()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after both ended: got %d, want 100", got)
	}
	debug.SetGCPercent(1000)
	endC := startGC()
	if got := debug.SetGCPercent(1000); got != 1000 {
		t.Errorf("GOGC during a start with GOGC=1000: got %d, want 1000", got)
	}
	endC()
}

// TestTrimIdleMemoryEndsGC: a run that ends before the trim sets GOGC
// back (startGC's end) when it stops the trim, once, and not before.
func TestTrimIdleMemoryEndsGC(t *testing.T) {
	ended := 0
	stop := trimIdleMemory(func() { ended++ })
	if ended != 0 {
		t.Fatalf("GOGC set back before the trim or the run's end (%d)", ended)
	}
	stop()
	if ended != 1 {
		t.Errorf("after the run's end: startGC's end called %d times, want once", ended)
	}
}
