package main

import (
	"runtime"
	"testing"
)

func TestGatewayProcs(t *testing.T) {
	t.Cleanup(func() { runtime.SetDefaultGOMAXPROCS() })
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	want := max(1, def/2)

	t.Setenv("GOMAXPROCS", "")
	for range 2 { // a second call starts from the default again, not from half
		if got := gatewayProcs(); got != want || runtime.GOMAXPROCS(0) != want {
			t.Fatalf("gatewayProcs() = %d, GOMAXPROCS %d; want both %d (half of the default %d)", got, runtime.GOMAXPROCS(0), want, def)
		}
	}

	// A GOMAXPROCS the user chose is kept.
	runtime.GOMAXPROCS(def + 3)
	t.Setenv("GOMAXPROCS", "7")
	if got := gatewayProcs(); got != def+3 || runtime.GOMAXPROCS(0) != def+3 {
		t.Fatalf("with GOMAXPROCS set, gatewayProcs() = %d and GOMAXPROCS %d; want %d unchanged", got, runtime.GOMAXPROCS(0), def+3)
	}
}
