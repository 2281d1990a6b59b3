package main

import (
	"runtime/debug"
	"sync"
	"time"
)

// idleTrimAfter is how long after a sandbox's start sbx gives back to the
// system the heap that starting it freed.
const idleTrimAfter = 2 * time.Second

// trimIdleMemory keeps an idle sbx run small: idleTrimAfter after the
// start it calls endGC (startGC's end: GOGC set back) and returns to the
// system the heap the start freed, which the runtime's scavenger would
// otherwise give back only over minutes. (The pages of sbx's executable
// it touched count in its RSS too, but they are the page cache's, shared
// by every sbx process: not what a hundred sandboxes each cost.
// scripts/bench-rss.sh prints both.) A run that ends sooner collects
// nothing on its way out: the returned func stops the trim and calls
// endGC then.
func trimIdleMemory(endGC func()) (stop func()) {
	t := time.AfterFunc(idleTrimAfter, func() {
		endGC()
		debug.FreeOSMemory()
	})
	return func() {
		if t.Stop() {
			endGC()
		}
	}
}

// startGCPercent is the garbage collector's GOGC while a sandbox starts:
// the start allocates a few megabytes of short-lived garbage, which
// collections at the default would walk several times on the way to the
// command's start.
const startGCPercent = 800

// startGC raises GOGC to startGCPercent (unless GOGC asks for more, or
// for no collection) and returns the func that sets it back once no
// other start is under way (tests start sandboxes side by side).
func startGC() (end func()) {
	startGCState.mu.Lock()
	defer startGCState.mu.Unlock()
	if startGCState.starts == 0 {
		startGCState.prev = debug.SetGCPercent(startGCPercent)
		if p := startGCState.prev; p < 0 || p > startGCPercent {
			debug.SetGCPercent(p)
		}
	}
	startGCState.starts++
	var once sync.Once
	return func() {
		once.Do(func() {
			startGCState.mu.Lock()
			defer startGCState.mu.Unlock()
			if startGCState.starts--; startGCState.starts == 0 {
				debug.SetGCPercent(startGCState.prev)
			}
		})
	}
}

// startGCState counts the starts under way, and keeps the GOGC to set
// back when the last ends.
var startGCState struct {
	mu     sync.Mutex
	starts int
	prev   int
}
