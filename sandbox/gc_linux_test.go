package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
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

// TestPrivilegedGCLeavesALeasedSandbox: a sandbox whose lease is held is
// never collected, whatever its recorded owner looks like (here a process
// that is gone, as a start can look to a gc that reads its state at the
// wrong moment); once nobody holds the lease, it is.
func TestPrivilegedGCLeavesALeasedSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces (CI runs as root)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	id, lease, err := newLeasedID()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := NamesFor(id)
	t.Cleanup(func() { TeardownNetwork(ctx, names); Release(dir, id); lease.Release() })
	if err := writeState(dir, State{ID: id, PID: dead.Process.Pid, Subnet: testSubnet(t).Prefix}); err != nil {
		t.Fatal(err)
	}
	if err := CreateNamespace(names); err != nil {
		t.Fatal(err)
	}
	cleaned, err := GC(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(cleaned, id) {
		t.Fatalf("GC cleaned %s, whose lease is held", id)
	}
	if _, err := Load(dir, id); err != nil {
		t.Errorf("the state of the leased sandbox: %v", err)
	}
	if _, err := os.Stat("/var/run/netns/" + names.Netns); err != nil {
		t.Errorf("the namespace of the leased sandbox: %v", err)
	}
	lease.Drop() // as its holder's death lets it go
	cleaned, err = GC(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cleaned, id) {
		t.Errorf("GC cleaned %v, want %s once its lease is free", cleaned, id)
	}
	assertNetworkGone(t, names)
	if ids, _ := leasedIDs(); slices.Contains(ids, id) {
		t.Errorf("the lease file of %s is left", id)
	}
}

// TestPrivilegedGCReapsAnOrphanShim leaves what a run killed while
// containerd started its task can leave: a shim of the sandbox's id in
// sbx's containerd namespace (here a stand-in with a shim's command line,
// and a child, as a shim has runc's) in a cgroup sbx/<id>, with no record
// in containerd, no state, no network. GC finds it by the shim alone and
// kills it, its child and its cgroup.
func TestPrivilegedGCReapsAnOrphanShim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for containerd and cgroups (CI runs as root)")
	}
	ctx := context.Background()
	cd, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close()
	id, _ := NewID()
	// bash's exec -a names the process as containerd names a shim; the
	// "; :" keeps sh from exec'ing sleep, which stays its child.
	shim := exec.Command("bash", "-c", `exec -a /usr/bin/containerd-shim-runc-v2 sh -c 'sleep 300; :' -namespace `+ContainerdNamespace+` -id `+id+` -address `+DefaultContainerdSocket)
	if err := shim.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { shim.Wait(); close(exited) }() // ends when the stand-in is killed
	t.Cleanup(func() { shim.Process.Kill(); <-exited })
	cg := "/" + ContainerdNamespace + "/" + id
	for _, root := range cgroupDirs("/") {
		d := filepath.Join(root, cg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	if len(cgroupDirs(cg)) == 0 {
		t.Fatal("no cgroup hierarchy to make the orphan's cgroup in")
	}
	for deadline := time.Now().Add(5 * time.Second); len(findShims(id, ContainerdNamespace, "")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in shim does not show")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cleaned, err := GC(ctx, t.TempDir(), cd)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cleaned, id) {
		t.Errorf("GC cleaned %v, want %s (its orphan shim)", cleaned, id)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the orphan shim of %s still runs after GC", id)
	}
	if left := cgroupDirs(cg); len(left) > 0 {
		t.Errorf("cgroups of %s left: %v", id, left)
	}
}
