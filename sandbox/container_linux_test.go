package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func testContainerSpec() ContainerSpec {
	return ContainerSpec{
		ID:        "1a2b3c4d",
		NetnsPath: "/var/run/netns/sbx-1a2b3c4d",
		RootFS:    "/var/lib/sbx/rootfs",
		Args:      []string{"npm", "install"},
		Env:       []string{"HTTP_PROXY=http://10.213.0.5:3128", "SBX_SANDBOX=1a2b3c4d"},
		Cwd:       "/work",
		UID:       1000,
		GID:       1000,
		Limits:    Limits{Memory: 2 << 30, CPUs: 1.5, Pids: DefaultPidsLimit},
	}
}

func TestSpecGolden(t *testing.T) {
	was := swapAccounted
	swapAccounted = func() bool { return true } // as on cgroup v2: the golden file is the same everywhere
	t.Cleanup(func() { swapAccounted = was })
	s, err := GenerateSpec(context.Background(), testContainerSpec())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "container-spec.json", string(data)+"\n")
}

func TestSpecGuarantees(t *testing.T) {
	s, err := GenerateSpec(context.Background(), testContainerSpec())
	if err != nil {
		t.Fatal(err)
	}
	caps := s.Process.Capabilities
	for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective, "permitted": caps.Permitted} {
		for _, forbidden := range append([]string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}, DroppedCapabilities...) {
			if slices.Contains(set, forbidden) {
				t.Errorf("%s capabilities hold %s", name, forbidden)
			}
		}
	}
	// A user that is not root has no capability at all (runc would give
	// it the whole set).
	if len(caps.Effective)+len(caps.Permitted)+len(caps.Ambient) != 0 {
		t.Errorf("uid %d holds capabilities %+v", s.Process.User.UID, caps)
	}
	if r := s.Linux.Resources; r == nil || r.Pids == nil || *r.Pids.Limit != DefaultPidsLimit || r.Memory == nil || *r.Memory.Limit != 2<<30 || r.CPU == nil || *r.CPU.Quota != 150000 {
		t.Errorf("resources %+v do not carry the limits", s.Linux.Resources)
	}
	if !s.Process.NoNewPrivileges {
		t.Errorf("no-new-privileges is not set")
	}
	if s.Linux.Seccomp == nil || len(s.Linux.Seccomp.Syscalls) == 0 {
		t.Errorf("no seccomp profile")
	}
	if !s.Root.Readonly || s.Root.Path != "/var/lib/sbx/rootfs" {
		t.Errorf("root %+v, want the rootfs read-only", s.Root)
	}
	joined := false
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == "network" && ns.Path == "/var/run/netns/sbx-1a2b3c4d" {
			joined = true
		}
	}
	if !joined {
		t.Errorf("the container does not join the sandbox's network namespace: %+v", s.Linux.Namespaces)
	}
}

// TestSpecCapabilities: CapAdd gives back a dropped capability, as an
// ambient one for a user that is not root; root keeps only
// BaseCapabilities and what CapAdd names.
func TestSpecCapabilities(t *testing.T) {
	cs := testContainerSpec()
	cs.CapAdd = []string{"CAP_CHOWN"}
	s, err := GenerateSpec(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Process.Capabilities; !slices.Equal(c.Ambient, cs.CapAdd) || !slices.Equal(c.Effective, cs.CapAdd) || !slices.Contains(c.Bounding, "CAP_CHOWN") {
		t.Errorf("uid 1000 with CapAdd CAP_CHOWN: %+v", c)
	}
	cs.UID, cs.GID, cs.CapAdd = 0, 0, nil
	if s, err = GenerateSpec(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if c := s.Process.Capabilities; !slices.Equal(c.Effective, BaseCapabilities) || !slices.Equal(c.Bounding, BaseCapabilities) || len(c.Ambient) != 0 {
		t.Errorf("root: %+v, want only %v", c, BaseCapabilities)
	}
	if s.Process.User.UID != 0 {
		t.Errorf("uid %d, want 0 as asked", s.Process.User.UID)
	}
}

// TestSpecInit: with an init, the init is PID 1, mounted read-only where
// no root filesystem is written to, and runs the command as its child,
// signalling its process group; without one the command is PID 1.
func TestSpecInit(t *testing.T) {
	cs := testContainerSpec()
	cs.Init = "/usr/bin/tini-static"
	s, err := GenerateSpec(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]string{InitPath, "-g", "--"}, cs.Args...); !slices.Equal(s.Process.Args, want) {
		t.Errorf("args %q, want %q", s.Process.Args, want)
	}
	found := false
	for _, m := range s.Mounts {
		if m.Destination == InitPath {
			found = m.Source == cs.Init && m.Type == "bind" && slices.Contains(m.Options, "ro")
		}
	}
	if !found {
		t.Errorf("no read-only bind mount of %s at %s: %+v", cs.Init, InitPath, s.Mounts)
	}
	if !strings.HasPrefix(InitPath, "/dev/") {
		t.Errorf("InitPath %s is not on runc's /dev tmpfs", InitPath)
	}
	s, err = GenerateSpec(context.Background(), testContainerSpec())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Args, testContainerSpec().Args) {
		t.Errorf("without an init: args %q", s.Process.Args)
	}
}

// busyboxRootfs builds a minimal root filesystem from Debian's
// busybox-static.
func busyboxRootfs(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"sh", "cat", "grep", "echo", "true"} {
		os.Symlink("busybox", filepath.Join(root, "bin", cmd))
	}
	os.Chmod(root, 0o755)
	return root
}

// TestPrivilegedContainer runs busybox in a sandbox: it joins the
// sandbox's network namespace, holds neither CAP_NET_ADMIN nor CAP_NET_RAW,
// runs under seccomp, and its exit code comes back.
func TestPrivilegedContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctx := context.Background()
	cd, id, names := containerInNamespace(t, true)
	spec := ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, RootFS: busyboxRootfs(t),
		Args: []string{"sh", "-c", "grep -E '^(CapEff|CapBnd|Seccomp|NoNewPrivs):' /proc/self/status; exit 7"}}
	var out, errOut bytes.Buffer
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := cd.Run(runCtx, spec, Stdio{Out: &out, Err: &errOut}, time.Second)
	if err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, errOut.String())
	}
	if code != 7 {
		t.Errorf("exit code %d, want 7 (stderr %q)", code, errOut.String())
	}
	status := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, ":")
		status[k] = strings.TrimSpace(v)
	}
	for _, k := range []string{"CapEff", "CapBnd"} {
		bits, err := strconv.ParseUint(status[k], 16, 64)
		if err != nil {
			t.Fatalf("%s = %q: %v\n%s", k, status[k], err, out.String())
		}
		const netAdmin, netRaw = 1 << 12, 1 << 13
		if bits&(netAdmin|netRaw) != 0 {
			t.Errorf("%s = %s holds CAP_NET_ADMIN or CAP_NET_RAW", k, status[k])
		}
	}
	if status["Seccomp"] != "2" || status["NoNewPrivs"] != "1" {
		t.Errorf("Seccomp %q, NoNewPrivs %q; want 2 and 1", status["Seccomp"], status["NoNewPrivs"])
	}

	// A file that cannot be executed exits 126, one that does not exist
	// 127, as in a shell.
	os.WriteFile(filepath.Join(spec.RootFS, "not-executable"), []byte("data"), 0o644)
	spec.Args = []string{"/not-executable"}
	if code, err := cd.Run(runCtx, spec, Stdio{}, time.Second); err != nil || code != ExitCannotExecute {
		t.Errorf("a file that is not executable: exit %d, %v; want %d", code, err, ExitCannotExecute)
	}
	spec.Args = []string{"/bin/no-such-command"}
	if code, err := cd.Run(runCtx, spec, Stdio{}, time.Second); err != nil || code != ExitNotFound {
		t.Errorf("a missing command: exit %d, %v; want %d", code, err, ExitNotFound)
	}
	ids, err := cd.ContainerIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ids, id) {
		t.Errorf("container %s left after Run", id)
	}
}

// testSubnet reserves a /30 of DefaultPool for the test, registered
// machine-wide as held by this process, so that no sandbox (and no other
// test) gets it meanwhile; it is released when the test ends.
func testSubnet(t *testing.T) Subnet {
	t.Helper()
	id, _ := NewID()
	pid, start, err := ThisProcess()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sub, err := Reserve(dir, DefaultPool, State{ID: id, PID: pid, PIDStart: start})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir, id) })
	return sub
}

// containerInNamespace connects to containerd and makes the network
// namespace of a new sandbox id: empty, or set up with a /30 of its own
// when withNetwork. The container of that id and the network are removed
// when the test ends.
func containerInNamespace(t *testing.T, withNetwork bool) (*Containerd, string, Names) {
	t.Helper()
	ctx := context.Background()
	cd, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := NewID()
	names, _ := NamesFor(id)
	t.Cleanup(func() {
		cd.RemoveContainer(ctx, id)
		TeardownNetwork(ctx, names)
		cd.Close()
	})
	if !withNetwork {
		err = CreateNamespace(names)
	} else {
		err = SetupNetwork(ctx, NetPlan{Names: names, Subnet: testSubnet(t), GatewayPort: 3128})
	}
	if err != nil {
		t.Fatal(err)
	}
	return cd, id, names
}

// TestPrivilegedLongRun runs a command for longer than cleanup may take
// (deleteTimeout, 30 s; 1 s here): its end is waited for without a
// deadline (Run used to wait under the cleanup's timeout, so every command
// running longer than 30 s failed with "context deadline exceeded" and its
// container was left). The container is created in a namespace made by
// CreateNamespace alone.
func TestPrivilegedLongRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctx := context.Background()
	cd, id, names := containerInNamespace(t, false)
	defer func(d time.Duration) { deleteTimeout = d }(deleteTimeout)
	deleteTimeout = time.Second
	root := busyboxRootfs(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	spec := ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, RootFS: root,
		Args: []string{"sh", "-c", "sleep 3; echo done"}}
	var out, errOut bytes.Buffer
	code, err := cd.Run(ctx, spec, Stdio{Out: &out, Err: &errOut}, time.Second)
	if err != nil || code != 0 || strings.TrimSpace(out.String()) != "done" {
		t.Errorf("a 3 s command: exit %d, %v, output %q (stderr %q); want 0 and done", code, err, out.String(), errOut.String())
	}
	if ids, _ := cd.ContainerIDs(ctx); slices.Contains(ids, id) {
		t.Errorf("container %s left after Run", id)
	}
}

// readSpy records whether it was read.
type readSpy struct{ read atomic.Bool }

func (r *readSpy) Read(p []byte) (int, error) {
	r.read.Store(true)
	return copy(p, "input\n"), io.EOF
}

// TestPrivilegedTaskLifecycle: a created task reads none of its standard
// input until Run starts the command (a sandbox that fails to start loses
// none of it), Delete without Run leaves nothing, and Exited tells
// whether Run saw the command end.
func TestPrivilegedTaskLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctx := context.Background()
	cd, id, names := containerInNamespace(t, false)
	spec := ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, RootFS: busyboxRootfs(t), Args: []string{"cat"}}

	spy := &readSpy{}
	task, err := cd.create(ctx, spec, Stdio{In: spy})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // time for containerd to start copying, were it allowed
	if spy.read.Load() {
		t.Errorf("standard input was read before the command started")
	}
	if err := task.Delete(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := cd.ContainerIDs(ctx); slices.Contains(ids, id) {
		t.Fatalf("container %s left after Delete without Run", id)
	}
	if spy.read.Load() {
		t.Errorf("standard input was read although the command never started")
	}

	var out bytes.Buffer
	task, err = cd.create(ctx, spec, Stdio{In: strings.NewReader("hello\n"), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer task.Delete()
	if task.Exited() {
		t.Errorf("Exited before Run")
	}
	code, err := task.Run(ctx, time.Second)
	if err != nil || code != 0 || !task.Exited() {
		t.Errorf("Run: exit %d, %v, Exited %v; want 0, nil, true", code, err, task.Exited())
	}
	if err := task.Delete(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\n" {
		t.Errorf("the command read %q, want the input", out.String())
	}
}

// TestSpecImageUser: an image's own user is kept when asked and not
// root, but never with root's group, primary or supplementary; an image
// user that is root is replaced.
func TestSpecImageUser(t *testing.T) {
	cs := testContainerSpec()
	cs.Image, cs.KeepImageUser, cs.UID, cs.GID = "example.test/x:1", true, NobodyID, NobodyID
	for _, tc := range []struct {
		image, want specs.User
	}{
		{specs.User{UID: 1001, GID: 0, AdditionalGids: []uint32{0, 5}}, specs.User{UID: 1001, GID: NobodyID, AdditionalGids: []uint32{5}}},
		{specs.User{UID: 1001, GID: 1001}, specs.User{UID: 1001, GID: 1001}},
		{specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0}}, specs.User{UID: NobodyID, GID: NobodyID}},
	} {
		s := &specs.Spec{Process: &specs.Process{User: tc.image}}
		if err := withUser(cs)(context.Background(), nil, nil, s); err != nil {
			t.Fatal(err)
		}
		if got := s.Process.User; got.UID != tc.want.UID || got.GID != tc.want.GID || !slices.Equal(got.AdditionalGids, tc.want.AdditionalGids) {
			t.Errorf("image user %+v: got %+v, want %+v", tc.image, got, tc.want)
		}
	}
}

// TestPrivilegedPrepareCreate: the container of a Create after
// PrepareCreate is made under the lease PrepareCreate asked for, and the
// lease is gone once the container is deleted; a lease no Create took is
// deleted by Close.
func TestPrivilegedPrepareCreate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctx := context.Background()
	cd, id, names := containerInNamespace(t, false)
	spec := ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, RootFS: busyboxRootfs(t), Args: []string{"true"}}

	cd.PrepareCreate(ctx)
	lease := peekLease(t, cd)
	if !leaseExists(t, cd, lease) {
		t.Fatalf("lease %s of PrepareCreate: not in containerd", lease)
	}
	task, err := cd.create(ctx, spec, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	defer task.Delete()
	if task.leaseGone == nil {
		t.Errorf("the container was not made under PrepareCreate's lease")
	}
	if code, err := task.Run(ctx, time.Second); err != nil || code != 0 {
		t.Errorf("Run: exit %d, %v; want 0, nil", code, err)
	}
	if err := task.Delete(); err != nil {
		t.Fatal(err)
	}
	if leaseExists(t, cd, lease) {
		t.Errorf("lease %s: still in containerd after Delete", lease)
	}

	other, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	other.PrepareCreate(ctx)
	lease = peekLease(t, other)
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if leaseExists(t, cd, lease) {
		t.Errorf("lease %s of a PrepareCreate no Create took: still in containerd after Close", lease)
	}

	// ConnectContainerdToCreate asks for the lease while it connects.
	third, err := ConnectContainerdToCreate(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	lease = peekLease(t, third)
	if !leaseExists(t, cd, lease) {
		t.Errorf("lease %s of ConnectContainerdToCreate: not in containerd", lease)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if leaseExists(t, cd, lease) {
		t.Errorf("lease %s of ConnectContainerdToCreate: still in containerd after Close", lease)
	}
}

// peekLease waits for the lease PrepareCreate asked cd for and returns
// its id, leaving it for the next Create.
func peekLease(t *testing.T, cd *Containerd) string {
	t.Helper()
	id, ok := cd.takeLease()
	if !ok {
		t.Fatal("PrepareCreate made no lease")
	}
	ch := make(chan aheadLease, 1)
	ch <- aheadLease{id: id}
	cd.ahead = ch
	return id
}

// leaseExists reports whether containerd has the lease id.
func leaseExists(t *testing.T, cd *Containerd, id string) bool {
	t.Helper()
	ls, err := cd.client.LeasesService().List(namespaces.WithNamespace(context.Background(), ContainerdNamespace), "id=="+id)
	if err != nil {
		t.Fatal(err)
	}
	return len(ls) > 0
}
