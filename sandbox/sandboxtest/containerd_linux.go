package sandboxtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

// Containerd is a containerd of the test's own: its own socket, root,
// state directory and configuration, without the CRI plugin, so that
// killing and restarting it touches nothing of the machine's.
type Containerd struct {
	// Socket is where it listens.
	Socket string
	dir    string
	config string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// StartContainerd starts a private containerd (it needs root), stopped
// and cleaned up when the test ends: its shims and everything under them
// killed, with every process in their containers' cgroups (namespace ns),
// those cgroups removed, its mounts unmounted, its directory removed.
func StartContainerd(t *testing.T, ns string) *Containerd {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed")
	}
	// A short directory: the socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "sbxctd")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{Socket: filepath.Join(dir, "containerd.sock"), dir: dir,
		config: filepath.Join(dir, "config.toml"), log: filepath.Join(dir, "containerd.log")}
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
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, c.Socket+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(c.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cleanup(t, ns) })
	c.Start(t)
	return c
}

// Start starts the daemon and waits until it answers.
func (c *Containerd) Start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c.cmd = exec.Command("containerd", "--config", c.config)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.exited = make(chan struct{})
	// Ends when the daemon does.
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(c.cmd, c.exited)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.answers(); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the test's containerd does not answer: %v\n%s", err, c.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Containerd) answers() error {
	cl, err := containerd.New(c.Socket, containerd.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cl.Version(ctx)
	return err
}

// Stop sends the daemon sig and waits for its end.
func (c *Containerd) Stop(t *testing.T, sig syscall.Signal) {
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

// Running reports whether the daemon was started and not stopped.
func (c *Containerd) Running() bool { return c.cmd != nil }

func (c *Containerd) logTail(n int) string {
	data, _ := os.ReadFile(c.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanup removes whatever the daemon left, without it: its shims and
// what runs under them and in their containers' cgroups, its mounts and
// its directory.
func (c *Containerd) cleanup(t *testing.T, ns string) {
	c.Stop(t, syscall.SIGTERM)
	for _, p := range Shims(c.Socket) {
		id := flagValue(cmdline(p), "-id")
		t.Logf("cleanup: killing what the test's containerd left of container %s", id)
		killTree(p)
		KillCgroup(t, "/"+ns+"/"+id)
	}
	// The shims' sockets, which their SIGKILL leaves, are named in their
	// bundles.
	addrs, _ := filepath.Glob(filepath.Join(c.dir, "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	for _, a := range addrs {
		if data, err := os.ReadFile(a); err == nil {
			if sock, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "unix://"); ok {
				os.Remove(sock)
			}
		}
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
	if t.Failed() {
		t.Logf("the test's containerd said:\n%s", c.logTail(40))
	}
	os.RemoveAll(c.dir)
}

func cmdline(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

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

func isShim(args []string) bool {
	return len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim")
}

// Shims lists the shims of the containerd listening at socket.
func Shims(socket string) []int {
	var out []int
	for _, p := range pids() {
		if args := cmdline(p); isShim(args) && flagValue(args, "-address") == socket {
			out = append(out, p)
		}
	}
	return out
}

// killTree kills pid and every process below it.
func killTree(root int) {
	tree := map[int]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, p := range pids() {
			data, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err != nil {
				continue
			}
			f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
			if ppid, _ := strconv.Atoi(f[1]); tree[ppid] && !tree[p] {
				tree[p], grew = true, true
			}
		}
	}
	for p := range tree {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// cgroupDirs lists the directories of cgroup path under /sys/fs/cgroup.
func cgroupDirs(path string) []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + path)
	if _, err := os.Stat("/sys/fs/cgroup" + path + "/cgroup.procs"); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup"+path)
	}
	return dirs
}

// KillCgroup kills every process in cgroup path (say /sbx/<id>) and
// removes its directories.
func KillCgroup(t *testing.T, path string) {
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range cgroupDirs(path) {
		for {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			procs := strings.Fields(string(data))
			for _, p := range procs {
				n, _ := strconv.Atoi(p)
				syscall.Kill(n, syscall.SIGKILL)
			}
			if err := syscall.Rmdir(d); err == nil || err == syscall.ENOENT {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cannot empty cgroup %s: %s", d, procs)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Leftovers lists what of container id runs or exists, found without the
// runtime: its shim, processes in its cgroup (path, say /sbx/<id>), in any
// hierarchy (the command, runc init), and its cgroup directories.
func Leftovers(id, path string) []string {
	var left []string
	for _, p := range pids() {
		args := cmdline(p)
		if isShim(args) && flagValue(args, "-id") == id {
			left = append(left, fmt.Sprintf("shim %d %q", p, args))
			continue
		}
		f, err := os.Open("/proc/" + strconv.Itoa(p) + "/cgroup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// hierarchy:controllers:path
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) == 3 && (parts[2] == path || strings.HasPrefix(parts[2], path+"/")) {
				left = append(left, fmt.Sprintf("process %d %q in cgroup %s", p, args, parts[2]))
				break
			}
		}
		f.Close()
	}
	for _, d := range cgroupDirs(path) {
		left = append(left, "cgroup "+d)
	}
	return left
}
