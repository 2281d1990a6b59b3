package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// TestPrivilegedFaultGCNeverTakesALiveSandbox starts 30 sandboxes at each
// of three spacings (10, 40 and 100 ms apart), each its own sbx run, while
// sbx gc runs in a loop, and watches them all the while: a sandbox whose
// command has said it runs keeps its state (so sbx ps lists it), no two
// recorded sandboxes hold one /30, and every command ends with its own
// exit code. gc used to decide "crashed" from what it read of the states
// and the kernel at two moments, and took live sandboxes' state.
func TestPrivilegedFaultGCNeverTakesALiveSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bin := buildSbx(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	dir := t.TempDir()
	state := filepath.Join(dir, "state")

	gcRuns, stopGC := gcLoop(t, bin, state)
	defer stopGC()

	// running holds the sandboxes whose command said it runs, with when
	// the test read that; the command then runs 4 s, and is checked only
	// in its first 2.5, so that its end is never mistaken for a loss.
	var mu sync.Mutex
	running := map[string]time.Time{}
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() { // ends when stopWatch is closed
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			var ids []string
			for id, at := range running {
				if time.Since(at) < 2500*time.Millisecond {
					ids = append(ids, id)
				}
			}
			mu.Unlock()
			for _, id := range ids {
				if _, err := os.Stat(filepath.Join(state, id, "state.json")); err != nil {
					problem("sandbox %s runs, and its state is gone: %v", id, err)
				}
			}
			checkSubnetsApart(state, problem)
		}
	}()

	n := 0
	for _, spacing := range []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond} {
		const starts = 30
		var wg sync.WaitGroup
		for range starts {
			k, want := n, 10+n%100
			n++
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(bin, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.232.0/24",
					"--log", filepath.Join(dir, fmt.Sprintf("log%d.jsonl", k)), "--",
					"sh", "-c", fmt.Sprintf("echo up $SBX_SANDBOX; sleep 4; echo done; exit %d", want))
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					problem("%v", err)
					return
				}
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					problem("%v", err)
					return
				}
				var id string
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if rest, ok := strings.CutPrefix(sc.Text(), "up "); ok {
						id = rest
						mu.Lock()
						running[id] = time.Now()
						mu.Unlock()
					}
				}
				io.Copy(io.Discard, stdout)
				err = cmd.Wait()
				mu.Lock()
				delete(running, id)
				mu.Unlock()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != want {
					problem("sandbox %q: %v, want exit %d\n%s", id, err, want, stderr.String())
				}
			}()
			time.Sleep(spacing)
		}
		// A second after the last start, sbx ps lists every sandbox that
		// said it runs.
		time.Sleep(time.Second)
		out, err := exec.Command(bin, "ps", "--state-dir", state).CombinedOutput()
		if err != nil {
			problem("sbx ps: %v\n%s", err, out)
		}
		mu.Lock()
		for id, at := range running {
			if time.Since(at) < 2500*time.Millisecond && !strings.Contains(string(out), id) {
				problems = append(problems, fmt.Sprintf("sandbox %s runs, and sbx ps does not list it:\n%s", id, out))
			}
		}
		mu.Unlock()
		wg.Wait()
	}
	close(stopWatch)
	<-watchDone
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d sandboxes started, %d gc runs beside them", n, gcRuns.Load())
	if gcRuns.Load() < 3 {
		t.Errorf("gc ran %d times; the test needs it to run throughout", gcRuns.Load())
	}
}

// checkSubnetsApart says, through problem, when two sandboxes recorded in
// state hold one subnet.
func checkSubnetsApart(state string, problem func(string, ...any)) {
	entries, _ := os.ReadDir(state)
	holder := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(state, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var st sandbox.State
		if json.Unmarshal(data, &st) != nil {
			continue
		}
		sub := st.Subnet.String()
		if other, ok := holder[sub]; ok && other != st.ID {
			problem("sandboxes %s and %s both hold %s", other, st.ID, sub)
		}
		holder[sub] = st.ID
	}
}

// TestPrivilegedFaultKillDuringStartThenGC kills sbx run (SIGKILL) at
// every 50 ms of a sandbox's start, then runs sbx gc once: nothing of the
// sandbox may be left (namespace, veth, rules, containerd's container and
// task, the task's shim, processes and cgroups, state, lease). A run
// killed while containerd started the task used to leave the shim
// running with no record, which gc did not look for.
func TestPrivilegedFaultKillDuringStartThenGC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bin := buildSbx(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	run := func(i int) *exec.Cmd {
		return exec.Command(bin, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.233.0/24",
			"--log", filepath.Join(dir, fmt.Sprintf("log%d.jsonl", i)), "--", "sh", "-c", "echo up; sleep 30")
	}

	// How long a start takes here: the kill points cover it, and 100 ms
	// past it.
	cmd := run(0)
	stdout, _ := cmd.StdoutPipe()
	begun := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(stdout).ReadString('\n')
	took := time.Since(begun)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	t.Logf("a start takes %v here", took.Round(time.Millisecond))

	points := 0
	for at := time.Duration(0); at <= took+100*time.Millisecond; at += 50 * time.Millisecond {
		points++
		cmd := run(points)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The sandbox's id, from its state directory, as soon as it has
		// one; a run killed before it records none has made nothing but
		// its lease, which is checked for apart.
		ids := map[string]bool{}
		for deadline := time.Now().Add(at); ; {
			entries, _ := os.ReadDir(state)
			for _, e := range entries {
				if sandbox.CheckID(e.Name()) == nil {
					ids[e.Name()] = true
				}
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		if out, err := exec.Command(bin, "gc", "--state-dir", state).CombinedOutput(); err != nil {
			t.Errorf("killed at %v: sbx gc: %v\n%s", at, err, out)
		}
		for id := range ids {
			for _, l := range leftOf(id) {
				t.Errorf("killed at %v, then gc: %s", at, l)
			}
			checkNothingLeft(t, id)
		}
		for _, l := range unheldLeases() {
			t.Errorf("killed at %v, then gc: %s", at, l)
		}
	}
	t.Logf("%d kill points, 50 ms apart", points)
}

// leftOf lists what containerd and the kernel keep of sandbox id's
// container: its record and task, its shim, its processes and cgroups, and
// its state.
func leftOf(id string) []string {
	left := sandboxtest.Leftovers(id, "/"+sandbox.ContainerdNamespace+"/"+id)
	for _, what := range []string{"containers", "tasks"} {
		out, _ := exec.Command("ctr", "-n", sandbox.ContainerdNamespace, what, "ls", "-q").Output()
		for _, l := range strings.Fields(string(out)) {
			if l == id {
				left = append(left, "containerd's "+what+" entry of "+id)
			}
		}
	}
	return left
}

// unheldLeases lists the sandbox leases on this machine that no process
// holds: what gc should have removed. Other sandboxes' leases are held.
func unheldLeases() []string {
	dir := filepath.Join(sandbox.RegistryDir, "leases")
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			left = append(left, "lease "+e.Name()+", held by nobody")
		}
		f.Close()
	}
	return left
}

// gcLoop runs `sbx gc --state-dir state` in a loop, each run's failure an
// error of t's, until stop is called; stop returns once the last run has
// ended. runs counts the runs so far.
func gcLoop(t *testing.T, bin, state string) (runs *atomic.Int64, stop func()) {
	t.Helper()
	runs = new(atomic.Int64)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() { // ends when quit is closed
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if out, err := exec.Command(bin, "gc", "--state-dir", state).CombinedOutput(); err != nil {
				t.Errorf("sbx gc: %v\n%s", err, out)
			}
			runs.Add(1)
		}
	}()
	var once sync.Once
	return runs, func() { once.Do(func() { close(quit); <-done }) }
}
