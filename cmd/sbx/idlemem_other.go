//go:build !linux

package main

import "runtime/debug"

// trimStart returns the heap that starting the sandbox freed to the
// system.
func trimStart() { debug.FreeOSMemory() }

// trimExecutable does nothing where /proc/self/smaps is not.
func trimExecutable() {}
