package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func TestOwnerAlive(t *testing.T) {
	pid, start, err := ThisProcess()
	if err != nil {
		t.Fatal(err)
	}
	if !OwnerAlive(State{PID: pid, PIDStart: start}) {
		t.Errorf("this process is not alive")
	}
	if OwnerAlive(State{PID: pid, PIDStart: start + 1}) {
		t.Errorf("a reused pid (other start time) counts as alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if OwnerAlive(State{PID: cmd.Process.Pid}) {
		t.Errorf("a finished process counts as alive")
	}
}

// TestPrivilegedGC leaves the network and state of a sandbox whose owner
// is gone (as after kill -9 of sbx run) beside a live one, and expects GC
// to remove the first whole and to keep the second.
func TestPrivilegedGC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces, veths and iptables rules (CI runs as root)")
	}
	// GC looks at every sbx-named object on the machine: sandboxes that
	// run meanwhile, with state elsewhere (real ones in /run/sbx, or other
	// tests'), are registered, and must be left alone.
	ctx := context.Background()
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid, start, _ := ThisProcess()
	type sb struct {
		st  State
		sub Subnet
	}
	idDead, _ := NewID()
	idLive, _ := NewID()
	// Their subnets are held for the test machine-wide (testSubnet), so
	// that nothing else gets them while these are up.
	for _, s := range []sb{
		{State{ID: idDead, PID: dead.Process.Pid}, testSubnet(t)},
		{State{ID: idLive, PID: pid, PIDStart: start}, testSubnet(t)},
	} {
		names, _ := NamesFor(s.st.ID)
		t.Cleanup(func() { TeardownNetwork(ctx, names) })
		sub := s.sub
		s.st.Subnet = sub.Prefix
		if err := writeState(dir, s.st); err != nil {
			t.Fatal(err)
		}
		if err := SetupNetwork(ctx, NetPlan{Names: names, Subnet: sub, GatewayPort: 3128}); err != nil {
			t.Fatal(err)
		}
	}
	// Two more, recorded in another state directory and registered: one
	// whose owner lives (it must be left alone), one whose owner is gone
	// (a leftover, whose state there GC removes too).
	elsewhere := t.TempDir()
	idOtherLive, _ := NewID()
	idOtherDead, _ := NewID()
	for _, st := range []State{{ID: idOtherLive, PID: pid, PIDStart: start}, {ID: idOtherDead, PID: dead.Process.Pid}} {
		t.Cleanup(func() { Release(elsewhere, st.ID) })
		if err := writeState(elsewhere, st); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(RegistryDir, st.ID+".json"), registered{st, elsewhere}); err != nil {
			t.Fatal(err)
		}
	}
	// The live one has a namespace, which GC finds by its name.
	otherNames, _ := NamesFor(idOtherLive)
	t.Cleanup(func() { TeardownNetwork(ctx, otherNames) })
	if err := CreateNamespace(otherNames); err != nil {
		t.Fatal(err)
	}
	left, err := Leftovers(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(left, idOtherLive) || !slices.Contains(left, idOtherDead) {
		t.Errorf("Leftovers = %v: want %s (registered elsewhere, owner gone) and not %s (registered elsewhere, owner alive)", left, idOtherDead, idOtherLive)
	}
	left, err = Leftovers(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(left, idDead) || slices.Contains(left, idLive) {
		t.Fatalf("Leftovers = %v, want %s and not %s", left, idDead, idLive)
	}
	cleaned, err := GC(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cleaned, idDead) || slices.Contains(cleaned, idLive) {
		t.Errorf("GC cleaned %v, want %s and not %s", cleaned, idDead, idLive)
	}
	deadNames, _ := NamesFor(idDead)
	assertNetworkGone(t, deadNames)
	if _, err := Load(dir, idDead); err == nil {
		t.Errorf("the dead sandbox's state is left")
	}
	liveNames, _ := NamesFor(idLive)
	if _, err := os.Stat("/var/run/netns/" + liveNames.Netns); err != nil {
		t.Errorf("GC removed the live sandbox's namespace: %v", err)
	}
	if _, err := Load(dir, idLive); err != nil {
		t.Errorf("GC removed the live sandbox's state: %v", err)
	}
	if _, err := Load(elsewhere, idOtherLive); err != nil {
		t.Errorf("GC removed the state of a live sandbox of another state directory: %v", err)
	}
	if _, err := os.Stat("/var/run/netns/" + otherNames.Netns); err != nil {
		t.Errorf("GC removed the namespace of a live sandbox of another state directory: %v", err)
	}
	if _, err := Load(elsewhere, idOtherDead); err == nil {
		t.Errorf("GC left the state of a dead sandbox of another state directory")
	}
}
