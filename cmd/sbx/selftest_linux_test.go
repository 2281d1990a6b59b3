package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	sbxrun "github.com/sbx-dev/sbx/sandbox/run"
	"github.com/sbx-dev/sbx/sandbox/selftest"
)

// selftestCaseNames are the cases sbx selftest must report, so that one
// cannot go missing unseen.
var selftestCaseNames = []string{
	"allowed target through the gateway",
	"tcp out by address",
	"tcp out by name",
	"udp out",
	"icmp echo out (ping socket)",
	"icmp echo out (raw socket)",
	"ipv6 out",
	"dns to an outside resolver over udp",
	"dns to an outside resolver over tcp",
	"the gateway's other ports",
	"another sandbox's gateway",
	"another sandbox's address",
	"the management API's socket",
	"the management API's TCP address",
	"raw sockets",
	"capabilities",
	"new namespaces",
	"allowed target through the gateway" + selftest.HostLayerSuffix,
	"tcp out by address" + selftest.HostLayerSuffix,
	"udp out" + selftest.HostLayerSuffix,
	"ipv6 out" + selftest.HostLayerSuffix,
	"dns to an outside resolver over udp" + selftest.HostLayerSuffix,
	"dns to an outside resolver over tcp" + selftest.HostLayerSuffix,
	"the gateway's other ports" + selftest.HostLayerSuffix,
	"another sandbox's gateway" + selftest.HostLayerSuffix,
	"another sandbox's address" + selftest.HostLayerSuffix,
	"the management API's TCP address" + selftest.HostLayerSuffix,
}

// selftestRun is one run of the sbx binary's selftest.
type selftestRun struct {
	stdout, stderr string
	code           int
	pid            int
}

// verdicts returns the verdict of each case in the output, by name.
func (r selftestRun) verdicts() map[string]selftest.Verdict {
	v := map[string]selftest.Verdict{}
	for _, line := range strings.Split(r.stdout, "\n") {
		word, rest, ok := strings.Cut(line, " ")
		verdict := selftest.Verdict(word)
		if !ok || verdict != selftest.Pass && verdict != selftest.Fail && verdict != selftest.Skip {
			continue
		}
		for _, name := range selftestCaseNames {
			if rest == name || strings.HasPrefix(rest, name+":") || strings.HasPrefix(rest, name+" (") {
				v[name] = verdict
			}
		}
	}
	return v
}

// sandboxIDs returns the ids of the sandboxes the run said it made.
func (r selftestRun) sandboxIDs() []string {
	var ids []string
	for _, m := range regexp.MustCompile(`probing from sandbox ([0-9a-f]{8}) .*the second sandbox ([0-9a-f]{8})`).FindAllStringSubmatch(r.stderr, -1) {
		if !slices.Contains(ids, m[2]) {
			ids = append(ids, m[2])
		}
		ids = append(ids, m[1])
	}
	return ids
}

// startSelftest starts bin selftest with args; the returned func waits
// for it. Whatever happens to the test, the process is killed and its
// outside namespace removed.
func startSelftest(t *testing.T, bin string, args ...string) (*exec.Cmd, func() selftestRun) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"selftest"}, args...)...)
	// The decision logs it keeps after a failure go into the test's
	// directory.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(ended) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-ended
		removeOutsidesOf(cmd.Process.Pid)
	})
	return cmd, func() selftestRun {
		select {
		case <-ended:
		case <-time.After(3 * time.Minute):
			cmd.Process.Kill()
			<-ended
			t.Errorf("sbx selftest %s did not end within 3 minutes", strings.Join(args, " "))
		}
		r := selftestRun{stdout: stdout.String(), stderr: stderr.String(), pid: cmd.Process.Pid}
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			r.code = ee.ExitCode()
		} else if waitErr != nil {
			t.Fatal(waitErr)
		}
		return r
	}
}

// removeOutsidesOf removes the outside namespaces that selftest process
// pid made, and says how many there were.
func removeOutsidesOf(pid int) int {
	entries, _ := os.ReadDir("/var/run/netns")
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), selftest.OutsideNetnsPrefix+strconv.Itoa(pid)+"-") {
			netns.DeleteNamed(e.Name())
			n++
		}
	}
	return n
}

// checkSelftestLeftNothing fails t when run left a namespace, veth,
// rule, state, container or image behind.
// userLogDir is where sbx run keeps a sandbox's record for sbx ps -a.
const userLogDir = sbxrun.DefaultLogDir

func checkSelftestLeftNothing(t *testing.T, run selftestRun, state string, ids ...string) {
	t.Helper()
	if n := removeOutsidesOf(run.pid); n != 0 {
		t.Errorf("%d outside namespaces left", n)
	}
	if entries, _ := os.ReadDir(state); len(entries) > 1 { // .lock stays
		t.Errorf("state left: %v", entries)
	}
	rules, _ := exec.Command("iptables-save").Output()
	netnsList, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "-o", "link").Output()
	ctrs, _ := exec.Command("ctr", "-n", "sbx", "containers", "list", "-q").Output()
	dockerCtrs, _ := exec.Command("docker", "ps", "-a", "--format", "{{.Names}}").Output()
	for _, id := range ids {
		// The selftest's sandboxes are not the user's: sbx ps -a lists
		// none of them.
		if _, err := os.Stat(filepath.Join(userLogDir, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox %s's record left in %s (sbx ps -a would list it): %v", id, userLogDir, err)
		}
		for what, out := range map[string][]byte{"iptables rules": rules, "namespaces": netnsList, "links": links, "containerd containers": ctrs, "docker containers": dockerCtrs} {
			if strings.Contains(string(out), id) {
				t.Errorf("%s of sandbox %s left:\n%s", what, id, out)
			}
		}
	}
	if images, _ := exec.Command("docker", "images", "--format", "{{.Repository}}").Output(); strings.Contains(string(images), "sbx-selftest/probe") {
		t.Errorf("a probe image left in Docker:\n%s", images)
	}
}

// TestPrivilegedSelftest runs the sbx binary's selftest, as a user
// would, with each runtime: every case of the catalogue passes, in both
// rounds (the sandbox as sbx run makes it, and with its namespace's rules
// flushed so that only the host's stand), and the exit code is 0. With
// the probed sandboxes' rules flushed on the host too, the cases that only
// those rules stop fail (the gateway's other ports, the API on a host
// address) in both rounds and the exit code is 1: selftest sees a broken
// sandbox. Each run leaves nothing behind; run by nobody it says it needs
// root; interrupted, it says so and leaves nothing either.
func TestPrivilegedSelftest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables, containerd and Docker (CI runs as root)")
	}
	bin := buildSbx(t)
	state := t.TempDir()
	common := []string{"--state-dir", state, "--subnet-pool", "10.213.228.0/24"}
	t.Cleanup(func() { runCLI(t, "gc", "--state-dir", state) })

	for _, rt := range []string{runtimeContainerd, runtimeDocker} {
		t.Run(rt, func(t *testing.T) {
			_, wait := startSelftest(t, bin, append([]string{"--runtime", rt}, common...)...)
			run := wait()
			t.Logf("sbx selftest --runtime %s: exit %d\n%s%s", rt, run.code, run.stdout, run.stderr)
			verdicts := run.verdicts()
			if run.code != 0 {
				t.Errorf("exit %d, want 0", run.code)
			}
			for _, name := range selftestCaseNames {
				if verdicts[name] != selftest.Pass {
					t.Errorf("case %q: %q, want PASS", name, verdicts[name])
				}
			}
			if want := fmt.Sprintf("selftest: %d passed, 0 failed of %d cases", len(selftestCaseNames), len(selftestCaseNames)); !strings.Contains(run.stdout, want) {
				t.Errorf("no summary %q", want)
			}
			ids := run.sandboxIDs()
			if len(ids) != 3 {
				t.Errorf("the run did not name its sandboxes:\n%s", run.stderr)
			}
			checkSelftestLeftNothing(t, run, state, ids...)

			// A broken sandbox: its rules flushed before the probe.
			_, wait = startSelftest(t, bin, append([]string{"--runtime", rt, "--test-flush-rules"}, common...)...)
			run = wait()
			t.Logf("sbx selftest --runtime %s --test-flush-rules: exit %d\n%s%s", rt, run.code, run.stdout, run.stderr)
			verdicts = run.verdicts()
			if run.code != exitFailure {
				t.Errorf("with the rules flushed: exit %d, want %d", run.code, exitFailure)
			}
			for _, name := range []string{"the gateway's other ports", "the management API's TCP address",
				"the gateway's other ports" + selftest.HostLayerSuffix, "the management API's TCP address" + selftest.HostLayerSuffix} {
				if verdicts[name] != selftest.Fail {
					t.Errorf("with the rules flushed, case %q: %q, want FAIL", name, verdicts[name])
				}
			}
			// What the rules do not decide still passes: the sandbox's
			// capabilities, seccomp and the API's socket.
			for _, name := range []string{"raw sockets", "capabilities", "new namespaces", "the management API's socket"} {
				if verdicts[name] != selftest.Pass {
					t.Errorf("with the rules flushed, case %q: %q, want PASS", name, verdicts[name])
				}
			}
			if strings.Contains(run.stdout, ": the control, ") {
				t.Errorf("a control failed with the rules flushed: the failures may not be the sandbox's")
			}
			checkSelftestLeftNothing(t, run, state, run.sandboxIDs()...)
		})
	}

	t.Run("not root", func(t *testing.T) {
		cmd := exec.Command(bin, append([]string{"selftest"}, common...)...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitSbxFailed || !strings.Contains(string(out), "needs root") {
			t.Errorf("sbx selftest as nobody: %v, %q; want exit %d saying it needs root", err, out, exitSbxFailed)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		cmd, wait := startSelftest(t, bin, common...)
		// As soon as a sandbox is being made.
		var id string
		for deadline := time.Now().Add(time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			entries, _ := os.ReadDir(state)
			for _, e := range entries {
				if e.IsDir() {
					id = e.Name()
				}
			}
		}
		cmd.Process.Signal(os.Interrupt)
		run := wait()
		t.Logf("interrupted once sandbox %s was being made: exit %d\n%s%s", id, run.code, run.stdout, run.stderr)
		switch {
		case run.code == 0:
			t.Logf("selftest ended before the interrupt came")
		case run.code != exitSbxFailed || !strings.Contains(run.stderr, "interrupted"):
			t.Errorf("interrupted: exit %d, want %d and a message saying so", run.code, exitSbxFailed)
		}
		checkSelftestLeftNothing(t, run, state, slices.DeleteFunc(append([]string{id}, run.sandboxIDs()...), func(s string) bool { return s == "" })...)
		if _, err := os.Stat(filepath.Join(state, id)); !os.IsNotExist(err) {
			t.Errorf("the interrupted sandbox's state is left: %v", err)
		}
	})
}
