package main

import (
	"bufio"
	"bytes"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// How long after a sandbox's start sbx gives back what starting took, and
// how often after that it lets go of its executable's pages again.
const (
	idleTrimAfter = 2 * time.Second
	idleTrimEvery = 10 * time.Second
)

// trimIdleMemory keeps an idle sbx run small: idleTrimAfter after the
// start it returns the heap the start freed to the system and lets go of
// the pages of its executable it mapped (trimStart), then lets go of
// them again every idleTrimEvery (trimExecutable): the periodic work of
// an idle gateway and its runtime (a collection every 2 minutes above
// all) maps some back, megabytes at a time where the page cache holds
// the executable in large folios. The returned func stops it.
func trimIdleMemory() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(idleTrimAfter)
		defer t.Stop()
		trim := trimStart
		for {
			select {
			case <-done:
				return
			case <-t.C:
				trim()
				trim = trimExecutable
				t.Reset(idleTrimEvery)
			}
		}
	}()
	return func() { close(done) }
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

// mapping is an address range of /proc/self/smaps.
type mapping struct{ start, end uintptr }

// cleanMappings returns the mappings in smaps (the text of
// /proc/PID/smaps) of the file at path that are private, cannot be
// written and hold no page of the process's own (Anonymous 0, no page
// copied on write or relocated): their pages are the page cache's, and
// letting go of them loses nothing. (Private_Dirty may count page cache
// pages not yet written back, of an executable just built: they are the
// file's all the same.)
func cleanMappings(smaps []byte, path string) []mapping {
	var out []mapping
	var cur mapping
	keep := false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if m, ok := mappingHeader(f); ok {
			if keep {
				out = append(out, cur)
			}
			cur = m
			keep = len(f) >= 6 && strings.Join(f[5:], " ") == path && len(f[1]) == 4 && f[1][1] == '-' && f[1][3] == 'p'
			continue
		}
		if f[0] == "Anonymous:" && (len(f) < 2 || f[1] != "0") {
			keep = false
		}
	}
	if keep {
		out = append(out, cur)
	}
	return out
}

// mappingHeader parses the fields of a mapping's first line in smaps
// ("start-end perms offset dev inode [path]").
func mappingHeader(f []string) (mapping, bool) {
	if len(f) < 5 || strings.HasSuffix(f[0], ":") {
		return mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return mapping{}, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return mapping{}, false
	}
	return mapping{uintptr(s), uintptr(e)}, true
}
