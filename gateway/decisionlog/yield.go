package decisionlog

import _ "unsafe" // for go:linkname

// yield lets the goroutines ready to run on this goroutine's P (the
// processor of the Go scheduler) run first, and goes on after them: at
// once when there are none. It is the runtime's goyield, which puts the
// goroutine at the end of its P's run queue, where runtime.Gosched puts
// it on the global queue and wakes an idle P to take it: on a gateway
// that keeps one of its two Ps busy, that woke a thread (a futex call)
// for every batch of commits and moved the leader to it, and the
// thread that yielded, finding nothing left to run, went to sleep (a
// futex call and a context switch each), 7% of the gateway's CPU time
// on the HTTP forward path (docs/performance.md). The goroutines a
// commit waits for are those the network poller made ready on its P,
// which is what the local run queue holds.
//
// runtime.goyield is one of the runtime functions the Go team keeps
// for go:linkname from outside the standard library, its signature
// fixed (go.dev/issue/67401; gVisor uses it).
//
//go:linkname yield runtime.goyield
func yield()
