package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestTrimExecutable: after trimExecutable the test binary maps far fewer
// of its own pages, and the code it let go of still runs (it is mapped
// again from the page cache).
func TestTrimExecutable(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(debug.SetGCPercent(100)) // touch some code
	before := exeRss(t, exe)
	trimExecutable()
	after := exeRss(t, exe)
	t.Logf("resident pages of %s: %d kB before, %d kB after", exe, before, after)
	if before < 1024 || after > before/2 {
		t.Errorf("the test binary's resident pages: got %d kB after trimExecutable, %d kB before; want at most half", after, before)
	}
	if got := strconv.Itoa(42); got != "42" { // code from the pages let go of
		t.Errorf("strconv.Itoa(42) after trimExecutable: got %q, want %q", got, "42")
	}
}

// exeRss is the resident kB of the mappings of exe in /proc/self/smaps.
func exeRss(t *testing.T, exe string) int {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if _, ok := mappingHeader(f); ok {
			in = len(f) >= 6 && strings.Join(f[5:], " ") == exe
			continue
		}
		if in && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			total += n
		}
	}
	return total
}
