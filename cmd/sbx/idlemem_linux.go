package main

import (
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// trimStart returns the heap that starting the sandbox freed to the
// system, then lets go of the executable's pages (trimExecutable).
func trimStart() {
	debug.FreeOSMemory()
	trimExecutable()
}

// trimExecutable lets go of this process's mappings of its own
// executable's pages: page cache, shared with every other sbx process,
// most of which starting touched and idling does not. They stay in the
// page cache, and what runs later maps them again at the cost of a minor
// fault. Only mappings that hold nothing but the file's own pages
// (cleanMappings) are let go of; relocated or written pages stay.
func trimExecutable() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return
	}
	for _, m := range cleanMappings(smaps, exe) {
		unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED)
	}
}
