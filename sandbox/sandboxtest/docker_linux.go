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

	"github.com/moby/moby/client"
)

// Dockerd is a dockerd of the test's own: its own socket, data root, exec
// root, pid file and (empty) configuration file, its containers' cgroups
// under a parent of its own, over a private containerd (StartContainerd),
// with no iptables rule, no bridge and no forwarding; killing and
// restarting it touches nothing of the machine's Docker.
type Dockerd struct {
	// Host is where it listens: unix:///path.
	Host string
	// Containerd is the containerd it runs its containers with.
	Containerd *Containerd
	// CgroupParent is the parent of its containers' cgroups (cgroupfs:
	// /CgroupParent/<container id> in each hierarchy).
	CgroupParent string
	dir          string
	args         []string
	cmd          *exec.Cmd
	exited       chan struct{}
	log          string
}

// StartDockerd starts a private dockerd (it needs root), with live-restore
// or not, stopped and cleaned up when the test ends: every process of its
// containers killed, their cgroups removed, its mounts unmounted, its
// directory and its containerd's removed.
func StartDockerd(t *testing.T, liveRestore bool) *Dockerd {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd is not installed")
	}
	ctd := StartContainerd(t, "moby")
	// A short directory: the socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "sbxdkd")
	if err != nil {
		t.Fatal(err)
	}
	d := &Dockerd{Host: "unix://" + filepath.Join(dir, "docker.sock"), Containerd: ctd,
		CgroupParent: "/sbxtest-" + filepath.Base(dir), dir: dir, log: filepath.Join(dir, "dockerd.log")}
	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.args = []string{"--host", d.Host, "--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "--config-file", config, "--containerd", ctd.Socket,
		"--cgroup-parent", d.CgroupParent, "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
		"--bridge=none", "--userland-proxy=false"}
	if liveRestore {
		d.args = append(d.args, "--live-restore")
	}
	t.Cleanup(func() { d.cleanup(t) })
	d.Start(t)
	return d
}

// Start starts the daemon and waits until it answers.
func (d *Dockerd) Start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command("dockerd", d.args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.exited = make(chan struct{})
	// Ends when the daemon does.
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(d.cmd, d.exited)
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := d.answers()
		if err == nil {
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("the test's dockerd ended: %v\n%s", err, d.logTail(40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's dockerd does not answer: %v\n%s", err, d.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *Dockerd) answers() error {
	c, err := client.New(client.WithHost(d.Host))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Ping(ctx, client.PingOptions{})
	return err
}

// Client returns a client of the daemon, closed when the test ends.
func (d *Dockerd) Client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.WithHost(d.Host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Stop sends the daemon sig and waits for its end (a dockerd without
// live-restore stops its containers first, which may take their stop
// timeout).
func (d *Dockerd) Stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(40 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("the test's dockerd did not end within 40 s of %v", sig)
	}
	d.cmd = nil
}

// Running reports whether the daemon was started and not stopped.
func (d *Dockerd) Running() bool { return d.cmd != nil }

func (d *Dockerd) logTail(n int) string {
	data, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanup kills the daemon and whatever it left, without it: the shims of
// its containerd and what runs under them and in its containers' cgroups,
// its mounts and its directory. Its containerd's cleanup runs after.
func (d *Dockerd) cleanup(t *testing.T) {
	d.Stop(t, syscall.SIGKILL)
	for _, p := range Shims(d.Containerd.Socket) {
		id := flagValue(cmdline(p), "-id")
		t.Logf("cleanup: killing what the test's dockerd left of container %.12s", id)
		killTree(p)
		KillCgroup(t, d.CgroupParent+"/"+id)
	}
	// Containers whose shim is gone may still have processes.
	for _, dir := range cgroupDirs(d.CgroupParent) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				KillCgroup(t, d.CgroupParent+"/"+e.Name())
			}
		}
	}
	KillCgroup(t, d.CgroupParent)
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], d.dir+"/") {
				mounts = append(mounts, f[4])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	if t.Failed() {
		t.Logf("the test's dockerd said:\n%s", d.logTail(40))
	}
	os.RemoveAll(d.dir)
}

// zombie reports whether process p has ended but is not reaped.
func zombie(p int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// Leftovers lists what of the daemon's containers runs or exists, found
// without Docker or containerd: the shims of its containerd, the
// processes in its containers' cgroups (the commands, runc init) and those
// cgroups' directories. The daemon runs only the test's containers: once
// they are all removed, nothing is left.
func (d *Dockerd) Leftovers() []string {
	var left []string
	for _, p := range Shims(d.Containerd.Socket) {
		// containerd's clean-up after a dead shim (shim ... delete) runs
		// runc delete and ends: it serves no container.
		if args := cmdline(p); len(args) > 0 && args[len(args)-1] != "delete" {
			left = append(left, fmt.Sprintf("shim %d %q", p, args))
		}
	}
	for _, p := range pids() {
		if zombie(p) {
			continue // killed, not yet reaped by its new parent: it runs no more
		}
		f, err := os.Open("/proc/" + strconv.Itoa(p) + "/cgroup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// hierarchy:controllers:path
			if parts := strings.SplitN(sc.Text(), ":", 3); len(parts) == 3 && strings.HasPrefix(parts[2], d.CgroupParent+"/") {
				left = append(left, fmt.Sprintf("process %d %q in cgroup %s", p, cmdline(p), parts[2]))
				break
			}
		}
		f.Close()
	}
	for _, dir := range cgroupDirs(d.CgroupParent) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				left = append(left, "cgroup "+filepath.Join(dir, e.Name()))
			}
		}
	}
	return left
}
