package main

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCleanMappings: only the executable's private mappings that cannot
// be written and hold no anonymous page are let go of; its data, another
// file's mappings and a path with a space are told apart.
func TestCleanMappings(t *testing.T) {
	const smaps = `00400000-01f53000 r-xp 00000000 fe:00 10028785                           /opt/sbx dir/sbx
Size:              28000 kB
Rss:                1088 kB
Private_Dirty:       12 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
01f53000-03e5a000 r--p 01b53000 fe:00 10028785                           /opt/sbx dir/sbx
Rss:                 320 kB
Anonymous:             0 kB
03e5a000-03e60000 r--p 03a5a000 fe:00 10028785                           /opt/sbx dir/sbx
Rss:                  24 kB
Anonymous:            24 kB
03e60000-03f15000 rw-p 03a60000 fe:00 10028785                           /opt/sbx dir/sbx
Rss:                 684 kB
Anonymous:           168 kB
03f15000-03f16000 r--s 00000000 fe:00 10028785                           /opt/sbx dir/sbx
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
Anonymous:          1024 kB
`
	got := cleanMappings([]byte(smaps), "/opt/sbx dir/sbx")
	want := []mapping{{0x00400000, 0x01f53000}, {0x01f53000, 0x03e5a000}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(mapping{})); diff != "" {
		t.Errorf("cleanMappings: got %v, want %v (-want +got):\n%s", got, want, diff)
	}
}

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
