package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
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
	// The stand-in runs as root an executable of root's named as a shim
	// is (busybox, told by its argv[0] to be sh); the "; :" keeps sh from
	// exec'ing sleep, which stays its child.
	bin := filepath.Join(t.TempDir(), "containerd-shim-runc-v2")
	if data, err := os.ReadFile("/usr/bin/busybox"); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	shim := &exec.Cmd{Path: bin, Args: []string{"sh", "-c", "sleep 300; :", "-namespace", ContainerdNamespace, "-id", id, "-address", DefaultContainerdSocket}}
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

// A process that names itself a shim, as any local user can: the fake
// shim, run as nobody, with a unix socket bound in its own directory that
// it then swaps for a link to a directory of root's.
func init() {
	sock := os.Getenv("SBX_TEST_FAKE_SHIM_SOCKET")
	if sock == "" {
		return
	}
	if _, err := net.Listen("unix", sock); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	d := filepath.Dir(sock)
	if err := os.Rename(d, d+".moved"); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if err := os.Symlink(os.Getenv("SBX_TEST_FAKE_SHIM_TARGET"), d); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("ok\n")
	select {}
}

// TestPrivilegedGCLeavesAFakeShimAlone plays a second local user: a
// process of nobody's whose command line names it a shim of sbx's
// namespace (and the host's containerd), listening on a socket whose
// directory it has since swapped for a link to a directory of root's. gc
// must neither take it for a shim (kill it) nor remove, as root, the
// file of root's that the socket's old path now leads to; nor must the
// teardown's kill of a container with that id. Both did, before shims were
// told by their owner and executable, and sockets removed only where root
// alone writes.
func TestPrivilegedGCLeavesAFakeShimAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as nobody and to run gc (CI runs as root)")
	}
	ctx := context.Background()
	base, err := os.MkdirTemp("", "sbx-fakeshim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	protected := filepath.Join(base, "protected")
	victim := filepath.Join(protected, "victim")
	if err := os.Mkdir(protected, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(base, "a", "d")
	os.MkdirAll(own, 0o755)
	os.Chown(filepath.Dir(own), 65534, 65534)
	os.Chown(own, 65534, 65534)
	bin := filepath.Join(filepath.Dir(own), "containerd-shim-runc-v2")
	data, _ := os.ReadFile(os.Args[0])
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(bin, 65534, 65534)
	id, _ := NewID()
	fake := &exec.Cmd{Path: bin, Args: []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", ContainerdNamespace, "-id", id, "-address", DefaultContainerdSocket},
		Env:         []string{"SBX_TEST_FAKE_SHIM_SOCKET=" + filepath.Join(own, "victim"), "SBX_TEST_FAKE_SHIM_TARGET=" + protected},
		SysProcAttr: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}}
	out, err := fake.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { fake.Process.Kill(); <-exited })
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "ok\n" {
		t.Fatalf("the fake shim said %q", l)
	}
	go func() { fake.Wait(); close(exited) }() // ends when the fake is killed

	if slices.Contains(orphanCandidates(ContainerdNamespace), id) {
		t.Errorf("orphanCandidates takes nobody's process named a shim for one")
	}
	cd, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close()
	if _, err := GC(ctx, t.TempDir(), cd); err != nil {
		t.Fatal(err)
	}
	// The teardown's kill of a container with that id.
	killWithoutRuntime(id, "/"+ContainerdNamespace+"/"+id, DefaultContainerdSocket)
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("root's file behind the fake shim's socket path: %v (removed as root through the link)", err)
	}
	select {
	case <-exited:
		t.Errorf("the fake shim was killed")
	default:
	}
}

// TestPrivilegedRemoveShimSocket: a killed shim's socket is removed where
// root alone writes, and nothing is removed through a link on the path
// it was bound at, in a directory another user can write, or that is not
// a socket.
func TestPrivilegedRemoveShimSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: sockets are removed only from root's directories (CI runs as root)")
	}
	base := t.TempDir()
	bind := func(p string) {
		t.Helper()
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
	}
	// Root's directory: removed.
	ok := filepath.Join(base, "s")
	os.Mkdir(ok, 0o700)
	bind(filepath.Join(ok, "shim.sock"))
	if err := removeShimSocket(filepath.Join(ok, "shim.sock")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ok, "shim.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket in root's directory is left: %v", err)
	}
	// A link where a directory was: the file of root's behind it stays.
	protected := filepath.Join(base, "protected")
	os.Mkdir(protected, 0o755)
	victim := filepath.Join(protected, "victim")
	os.WriteFile(victim, nil, 0o600)
	os.Symlink(protected, filepath.Join(base, "link"))
	removeShimSocket(filepath.Join(base, "link", "victim"))
	// Another user's directory, and a directory others may write.
	for _, mode := range []os.FileMode{0o755, 0o777} {
		d := filepath.Join(base, fmt.Sprintf("d%o", mode))
		os.Mkdir(d, mode)
		os.Chmod(d, mode)
		if mode == 0o755 {
			os.Chown(d, 65534, 65534)
		}
		bind(filepath.Join(d, "shim.sock"))
		removeShimSocket(filepath.Join(d, "shim.sock"))
		if _, err := os.Lstat(filepath.Join(d, "shim.sock")); err != nil {
			t.Errorf("the socket in %s (mode %o) was removed: %v", d, mode, err)
		}
	}
	// Not a socket.
	removeShimSocket(victim)
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("root's file %s was removed: %v", victim, err)
	}
}
