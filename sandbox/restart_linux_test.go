package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testContainerd is a containerd of the test's own: its own socket, root,
// state directory and configuration, without the CRI plugin, so that
// killing and restarting it touches nothing of the machine's.
type testContainerd struct {
	dir, socket, config string
	cmd                 *exec.Cmd
	exited              chan struct{}
	log                 *os.File
}

// startTestContainerd starts a private containerd, stopped and cleaned up
// (its shims killed, its mounts unmounted, its directory removed) when
// the test ends.
func startTestContainerd(t *testing.T) *testContainerd {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed")
	}
	// A short directory: the socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "sbxctd")
	if err != nil {
		t.Fatal(err)
	}
	c := &testContainerd{dir: dir, socket: filepath.Join(dir, "containerd.sock"), config: filepath.Join(dir, "config.toml")}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket, c.socket+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(c.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.log, err = os.Create(filepath.Join(dir, "containerd.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cleanup(t) })
	c.start(t)
	return c
}

// start starts the daemon and waits until its socket answers.
func (c *testContainerd) start(t *testing.T) {
	t.Helper()
	c.cmd = exec.Command("containerd", "--config", c.config)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(c.cmd, c.exited)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cd, err := ConnectContainerd(context.Background(), c.socket)
		if err == nil {
			cd.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's containerd does not answer: %v\n%s", err, c.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends the daemon sig and waits for its end.
func (c *testContainerd) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
		t.Errorf("the test's containerd did not end within 20 s of %v", sig)
	}
	c.cmd = nil
}

func (c *testContainerd) running() bool { return c.cmd != nil }

func (c *testContainerd) logTail() string {
	data, _ := os.ReadFile(c.log.Name())
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// connect connects to the daemon; the client is closed when the test
// ends.
func (c *testContainerd) connect(t *testing.T) *Containerd {
	t.Helper()
	cd, err := ConnectContainerd(context.Background(), c.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.Close() })
	return cd
}

// cleanup removes whatever the daemon left: its containers (through it,
// started again if need be), then the daemon, its shims, its mounts and
// its directory.
func (c *testContainerd) cleanup(t *testing.T) {
	ctx := context.Background()
	if !c.running() {
		c.start(t)
	}
	if cd, err := ConnectContainerd(ctx, c.socket); err == nil {
		ids, _ := cd.ContainerIDs(ctx)
		for _, id := range ids {
			if err := cd.RemoveContainer(ctx, id); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		cd.Close()
	}
	c.stop(t, syscall.SIGTERM)
	for _, p := range shimsOf(c.socket) {
		id := argAfter(cmdlineArgs(p), "-id")
		t.Logf("cleanup: killing the shim of %s left by the test's containerd", id)
		killWithoutRuntime(id, "/"+ContainerdNamespace+"/"+id, c.socket)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], c.dir+"/") {
				mounts = append(mounts, f[4])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	c.log.Close()
	if t.Failed() {
		data, _ := os.ReadFile(c.log.Name())
		t.Logf("the test's containerd said:\n%s", lastLines(string(data), 40))
	}
	os.RemoveAll(c.dir)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cmdlineArgs returns the arguments of process pid.
func cmdlineArgs(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// pids lists the processes of the machine.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var ps []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// shimsOf lists the shims of the containerd listening at socket, read
// from their command lines.
func shimsOf(socket string) []int {
	var out []int
	for _, p := range pids() {
		args := cmdlineArgs(p)
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && argAfter(args, "-address") == socket {
			out = append(out, p)
		}
	}
	return out
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// leftovers lists what of container id runs or exists, found without
// the runtime: processes in one of its cgroups (the command, runc init),
// its shim, and its cgroup directories.
func leftovers(id string) []string {
	var left []string
	cg := "/" + ContainerdNamespace + "/" + id
	for _, p := range pids() {
		args := cmdlineArgs(p)
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && argAfter(args, "-id") == id {
			left = append(left, fmt.Sprintf("shim %d %q", p, args))
			continue
		}
		f, err := os.Open("/proc/" + strconv.Itoa(p) + "/cgroup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if _, path, _ := strings.Cut(sc.Text()[strings.Index(sc.Text(), ":")+1:], ":"); path == cg || strings.HasPrefix(path, cg+"/") {
				left = append(left, fmt.Sprintf("process %d %q in cgroup %s", p, args, path))
				break
			}
		}
		f.Close()
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + cg)
	if d := "/sys/fs/cgroup" + cg; fileExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		left = append(left, "cgroup "+d)
	}
	return left
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// restartSpec is a Spec for a busybox sandbox on the test's containerd cd
// running script.
func restartSpec(t *testing.T, cd *Containerd, script string, out *lockedBuilder) Spec {
	t.Helper()
	tr := testRuntime{name: "containerd", rt: cd, root: func(t *testing.T, cs *ContainerSpec) {
		root := busyboxRootfs(t)
		os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
		cs.RootFS = root
	}}
	return startSpec(t, tr, &fakeGateway{}, script, out)
}

// shortRuntimeBounds makes sbx give up on an unreachable runtime, and on
// a deletion, within seconds, for the test.
func shortRuntimeBounds(t *testing.T, lost, del time.Duration) {
	wasLost, wasDel := runtimeLostAfter, deleteTimeout
	runtimeLostAfter, deleteTimeout = lost, del
	t.Cleanup(func() { runtimeLostAfter, deleteTimeout = wasLost, wasDel })
}

// TestPrivilegedRuntimeRestart: a sandbox survives a restart of its
// containerd, whether the daemon ends cleanly (SIGTERM) or is killed
// (SIGKILL): sbx reconnects, the command runs on with its network, and its
// exit code comes back; nothing is left after Close.
func TestPrivilegedRuntimeRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx := context.Background()
			ctd := startTestContainerd(t)
			cd := ctd.connect(t)
			var out lockedBuilder
			// The command's network is checked after the restart: the
			// gateway still answers.
			spec := restartSpec(t, cd, `sleep 3; GW=${HTTP_PROXY#http://}; nc ${GW%:*} ${GW##*:} </dev/null; exit 7`, &out)
			s, err := Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			time.Sleep(500 * time.Millisecond)
			ctd.stop(t, sig)
			time.Sleep(300 * time.Millisecond)
			ctd.start(t)
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			code, err := s.Wait(waitCtx)
			if err != nil || code != 7 {
				t.Errorf("Wait after containerd's restart on %v = %d, %v; want 7, nil", sig, code, err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if !strings.Contains(out.String(), "gateway-ok") {
				t.Errorf("output %q: the command lost its network across the restart", out.String())
			}
			assertSandboxGone(t, cd, spec.StateDir, s.ID)
			if left := leftovers(s.ID); len(left) > 0 {
				t.Errorf("left after Close:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestPrivilegedRuntimeLost: when containerd is killed and does not come
// back, sbx gives up after runtimeLostAfter: Wait fails with
// ErrRuntimeLost only once the command is killed (no process of the
// container is left, nor its shim), and Close leaves nothing of the
// sandbox, containerd still gone.
func TestPrivilegedRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()
	ctd := startTestContainerd(t)
	cd := ctd.connect(t)
	var out lockedBuilder
	spec := restartSpec(t, cd, `trap '' TERM; sleep 60; exit 7`, &out)
	s, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	time.Sleep(300 * time.Millisecond)
	if left := leftovers(s.ID); len(left) == 0 {
		t.Fatalf("no process of the running sandbox found: the test cannot see the command")
	}
	ctd.stop(t, syscall.SIGKILL)
	began := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := s.Wait(waitCtx)
	took := time.Since(began)
	if !errors.Is(err, ErrRuntimeLost) {
		t.Errorf("Wait with containerd gone = %d, %v; want ErrRuntimeLost", code, err)
	}
	if took > 20*time.Second {
		t.Errorf("Wait took %v to give up, want about runtimeLostAfter (%v)", took, runtimeLostAfter)
	}
	if left := leftovers(s.ID); len(left) > 0 {
		t.Errorf("the command outlived the Wait that reported its loss:\n%s", strings.Join(left, "\n"))
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close with containerd gone: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("Close with containerd gone did not end within a minute")
	}
	n, _ := NamesFor(s.ID)
	assertNetworkGone(t, n)
	if left := leftovers(s.ID); len(left) > 0 {
		t.Errorf("left after Close:\n%s", strings.Join(left, "\n"))
	}
	if _, err := Load(spec.StateDir, s.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("state of %s left: %v", s.ID, err)
	}
}

// TestPrivilegedRuntimeKilledDuringStart: containerd killed at points
// along a sandbox's start: the start either fails and leaves nothing (no
// shim, no runc init, no cgroup, no namespace), or succeeds and then the
// sandbox ends either way without a process left.
func TestPrivilegedRuntimeKilledDuringStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()
	ctd := startTestContainerd(t)
	var failed, started int
	for i, delay := range []time.Duration{0, 10, 20, 30, 40, 50, 60, 80, 100, 120, 150, 200} {
		delay *= time.Millisecond
		if !ctd.running() {
			ctd.start(t)
		}
		cd, err := ConnectContainerd(ctx, ctd.socket)
		if err != nil {
			t.Fatal(err)
		}
		var out lockedBuilder
		spec := restartSpec(t, cd, `sleep 60`, &out)
		rec := &idRecorder{Runtime: cd}
		spec.Runtime = rec
		res := make(chan struct {
			s   *Sandbox
			err error
		}, 1)
		go func() {
			s, err := Start(ctx, spec)
			res <- struct {
				s   *Sandbox
				err error
			}{s, err}
		}()
		time.Sleep(delay)
		ctd.stop(t, syscall.SIGKILL)
		var r struct {
			s   *Sandbox
			err error
		}
		select {
		case r = <-res:
		case <-time.After(time.Minute):
			t.Fatalf("try %d (%v): Start did not end within a minute of containerd's death", i, delay)
		}
		id := rec.id.Load()
		if r.err != nil {
			failed++
		} else {
			started++
			code, err := r.s.Wait(ctx)
			t.Logf("try %d (%v): started, then Wait = %d, %v", i, delay, code, err)
			if err := r.s.Close(); err != nil {
				t.Logf("try %d: Close: %v", i, err)
			}
		}
		if id == nil {
			t.Logf("try %d (%v): Start failed before creating a container: %v", i, delay, r.err)
		} else if left := leftovers(*id); len(left) > 0 {
			t.Errorf("try %d (%v, start error %v): left:\n%s", i, delay, r.err, strings.Join(left, "\n"))
			killWithoutRuntime(*id, "/"+ContainerdNamespace+"/"+*id, "")
		}
		cd.Close()
	}
	t.Logf("containerd killed during %d starts: %d failed, %d started", failed+started, failed, started)
}

// idRecorder is a Runtime that records the id of the container it
// creates.
type idRecorder struct {
	Runtime
	id atomic.Pointer[string]
}

func (r *idRecorder) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	r.id.Store(&cs.ID)
	return r.Runtime.Create(ctx, cs, stdio)
}
