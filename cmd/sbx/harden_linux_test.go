package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// The tests here try, from inside `sbx run` with the default --rootfs
// host, what a command run by root could do to the host around the
// network: plant set-user-ID or file-capability binaries, make device
// nodes, read root-only files, write through read-only submounts, and
// exhaust processes or memory. Each result is checked from the host.

// buildProbe builds testdata/probe statically into dir, so that it runs
// the same on the host and in any sandbox.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	return bin
}

// sharedDir makes a directory that every user may enter (t.TempDir's
// parents are 0700), owned by uid:gid with mode, removed at the end.
func sharedDir(t *testing.T, uid, gid int, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "sbx-harden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// euidAs runs bin as uid and gid on the host and returns the effective
// uid it reports.
func euidAs(t *testing.T, bin string, uid, gid uint32) string {
	t.Helper()
	cmd := exec.Command(bin, "euid")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running %s as %d: %v\n%s", bin, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPrivilegedNoHostRoot runs sbx as root without sudo, as CI and many
// users do, and has the command try to leave the host something that
// gives root to whoever runs it. Before sbx ran commands as host root,
// the planted binary gave euid 0 to any user. Cases: a working directory
// of root's that anyone may write (the command runs as nobody), one that
// belongs to a user (it runs as that user), and --user 0 asked for (root,
// without the capabilities sbx drops).
func TestPrivilegedNoHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	bins := sharedDir(t, 0, 0, 0o755)
	probe := buildProbe(t, bins)

	// The check can fail: in such a directory a set-user-ID root binary
	// does give euid 0 to another user, and root can set a file
	// capability.
	control := filepath.Join(sharedDir(t, 0, 0, 0o755), "control")
	copyFile(t, probe, control, os.ModeSetuid|0o755)
	if got := euidAs(t, control, 1234, 1234); got != "euid=0 egid=1234" {
		t.Fatalf("a set-user-ID root binary gives %s on this host, not euid=0: the test cannot tell", got)
	}
	if out, _ := exec.Command(probe, "setcap", control).Output(); !strings.Contains(string(out), "ok") {
		t.Fatalf("root cannot set a file capability here (%s): the test cannot tell", out)
	}

	script := `./probe euid
cp ./probe ./planted && chmod 6755 ./planted && echo planted
cp ./probe ./capped && ./probe setcap ./capped
./probe mknod ./dev0
cat ./secret 2>/dev/null && echo READ-SECRET
./probe limits`
	nobody := sandbox.NobodyID
	for _, tc := range []struct {
		name         string
		owner, group int
		mode         os.FileMode
		args         []string
		wantEuid     string
	}{
		{"root's directory", 0, 0, 0o777, nil, fmt.Sprintf("euid=%d egid=%d", nobody, nobody)},
		{"user's directory", 1000, 1000, 0o755, nil, "euid=1000 egid=1000"},
		{"group 0 directory", 1000, 0, 0o775, nil, fmt.Sprintf("euid=1000 egid=%d", nobody)},
		{"--user 0", 0, 0, 0o755, []string{"--user", "0"}, "euid=0 egid=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := sharedDir(t, tc.owner, tc.group, tc.mode)
			copyFile(t, probe, filepath.Join(work, "probe"), 0o755)
			if err := os.WriteFile(filepath.Join(work, "secret"), []byte("host-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Chdir(work)
			state := t.TempDir()
			args := append([]string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.236.0/24",
				"--log", filepath.Join(state, "log.jsonl")}, tc.args...)
			stdout, stderr, code := runCLI(t, append(args, "--", "/bin/sh", "-c", script)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.wantEuid+"\n") {
				t.Errorf("the command ran as %q, want %s:\n%s", firstLine(stdout), tc.wantEuid, stdout)
			}
			// Seen from the host: nothing the sandbox left gives root.
			planted := filepath.Join(work, "planted")
			if fi, err := os.Stat(planted); err == nil {
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid == 0 && fi.Mode()&os.ModeSetuid != 0 && tc.args == nil {
					t.Errorf("the sandbox planted a set-user-ID root binary: %v", fi.Mode())
				}
				if st.Gid == 0 && fi.Mode()&os.ModeSetgid != 0 && tc.args == nil {
					t.Errorf("the sandbox planted a set-group-ID root binary: %v", fi.Mode())
				}
				got := euidAs(t, planted, 1234, 1234)
				if (strings.Contains(got, "euid=0 ") || strings.HasSuffix(got, "egid=0")) && tc.args == nil {
					t.Errorf("the planted binary gives another user %s", got)
				}
			}
			if _, err := getxattr(filepath.Join(work, "capped"), "security.capability"); err == nil {
				t.Errorf("the sandbox set a file capability on a host file")
			}
			if fi, err := os.Lstat(filepath.Join(work, "dev0")); err == nil {
				t.Errorf("the sandbox made a node on the host: %v", fi.Mode())
			}
			if tc.args == nil && (strings.Contains(stdout, "READ-SECRET") || strings.Contains(stdout, "host-secret")) {
				t.Errorf("the sandbox read a root-only host file:\n%s", stdout)
			}
			// None of the capabilities that reach the host, even for
			// root: the bounding set lacks them.
			bnd := capField(t, stdout, "CapBnd:")
			for bit, name := range map[uint]string{0: "CHOWN", 1: "DAC_OVERRIDE", 3: "FOWNER", 4: "FSETID", 6: "SETGID",
				7: "SETUID", 12: "NET_ADMIN", 13: "NET_RAW", 27: "MKNOD", 31: "SETFCAP", 21: "SYS_ADMIN"} {
				if bnd&(1<<bit) != 0 {
					t.Errorf("the command's bounding set holds CAP_%s", name)
				}
			}
			if eff := capField(t, stdout, "CapEff:"); tc.args == nil && eff != 0 {
				t.Errorf("a command that is not root holds capabilities %#x", eff)
			}
		})
	}
}

// TestPrivilegedCapAdd: --cap-add gives back one capability, and only
// one of those sbx drops.
func TestPrivilegedCapAdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	state := t.TempDir()
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.236.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--cap-add", "chown", "--", "grep", "Cap", "/proc/self/status")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if eff := capField(t, stdout, "CapEff:"); eff != 1 { // CAP_CHOWN alone
		t.Errorf("with --cap-add chown: CapEff %#x, want 0x1\n%s", eff, stdout)
	}
	for _, bad := range []string{"net_admin", "sys_admin", "nonsense"} {
		_, stderr, code := runCLI(t, "run", "--rootfs", root, "--state-dir", state, "--cap-add", bad, "--", "true")
		if code != exitUsage || !strings.Contains(stderr, "--cap-add") {
			t.Errorf("--cap-add %s: exit %d, %s", bad, code, stderr)
		}
	}
}

// TestPrivilegedReadOnlySubmounts mounts a tmpfs that anyone may write
// under the host's /etc, then has the sandbox write to it: the host's
// system directories are read-only all the way down, not only at the top.
func TestPrivilegedReadOnlySubmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount on the host (CI runs as root)")
	}
	sub := fmt.Sprintf("/etc/sbx-test-submount-%d", os.Getpid())
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Unmount(sub, syscall.MNT_DETACH)
		os.Remove(sub)
	})
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "mode=1777,size=1m"); err != nil {
		t.Fatal(err)
	}
	work := sharedDir(t, 0, 0, 0o777)
	t.Chdir(work)
	state := t.TempDir()
	script := fmt.Sprintf(`echo x > %[1]s/planted && echo SUBMOUNT-WRITABLE
grep -q " %[1]s .*ro," /proc/self/mountinfo && echo SUBMOUNT-RO
touch /etc/planted 2>/dev/null && echo ETC-WRITABLE
exit 0`, sub)
	for _, user := range []string{"", "0"} { // nobody, and root asked for
		args := []string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.237.0/24", "--log", filepath.Join(state, "log.jsonl"), "--log-append"}
		if user != "" {
			args = append(args, "--user", user)
		}
		stdout, stderr, code := runCLI(t, append(args, "--", "/bin/sh", "-c", script)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		if strings.Contains(stdout, "WRITABLE") || !strings.Contains(stdout, "SUBMOUNT-RO") {
			t.Errorf("user %q: a submount of the host's /etc is writable inside:\n%s", user, stdout)
		}
		if _, err := os.Stat(filepath.Join(sub, "planted")); err == nil {
			t.Errorf("user %q: the sandbox wrote into a submount of the host's /etc", user)
		}
	}
}

// TestPrivilegedLimits: the default limits are in force (processes,
// memory, CPU); a fork bomb inside reaches its limit while the host goes
// on starting processes; an allocation of 2 GiB over --memory is killed
// inside; /tmp is bounded.
func TestPrivilegedLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	work := sharedDir(t, 0, 0, 0o777)
	copyFile(t, buildProbe(t, t.TempDir()), filepath.Join(work, "probe"), 0o755)
	t.Chdir(work)
	state := t.TempDir()
	run := func(extra []string, script string) (string, string, int) {
		args := append([]string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.238.0/24",
			"--log", filepath.Join(state, "log.jsonl"), "--log-append"}, extra...)
		return runCLI(t, append(args, "--", "/bin/sh", "-c", script)...)
	}

	def := sandbox.DefaultLimits()
	stdout, stderr, code := run(nil, "./probe limits")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := map[string]string{
		"pids.max": strconv.Itoa(sandbox.DefaultPidsLimit),
		"memory":   strconv.FormatInt(def.Memory&^4095, 10), // the kernel keeps whole pages
		"cpu":      strconv.Itoa(int(def.CPUs * 100000)),
	}
	got := map[string]string{
		"pids.max": field(stdout, "pids.max="),
		"memory":   field(stdout, "memory.limit_in_bytes=") + field(stdout, "memory.max="),
		"cpu":      field(stdout, "cpu.cfs_quota_us=") + firstWord(field(stdout, "cpu.max=")),
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("default %s limit %q, want %s\n%s", k, got[k], want[k], stdout)
		}
	}

	// A fork bomb: the host keeps starting processes all along.
	var hostRuns, hostFailures atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := exec.Command("/bin/true").Run(); err != nil {
				hostFailures.Add(1)
			}
			hostRuns.Add(1)
		}
	}()
	stdout, stderr, code = run(nil, "./probe forkbomb")
	close(done)
	if code != 0 || !strings.Contains(stdout, "forkbomb: done") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	started, _ := strconv.Atoi(strings.TrimSuffix(firstWord(field(stdout, "forkbomb: started ")), ","))
	if started == 0 || started >= sandbox.DefaultPidsLimit || !strings.Contains(stdout, "resource temporarily unavailable") {
		t.Errorf("the fork bomb was not stopped by the pids limit:\n%s", stdout)
	}
	if ev := field(stdout, "forkbomb: pids.events "); ev == "" || ev == "max 0" {
		t.Errorf("pids.events %q: the limit was never hit", ev)
	}
	if hostFailures.Load() != 0 || hostRuns.Load() == 0 {
		t.Errorf("the host failed %d of %d process starts during the fork bomb", hostFailures.Load(), hostRuns.Load())
	}

	// 2 GiB over a 256 MiB limit: the command is killed, the host goes on.
	stdout, stderr, code = run([]string{"--memory", "256m"}, "exec ./probe alloc 2048")
	if code != 128+int(syscall.SIGKILL) || strings.Contains(stdout, "alloc: done") || strings.Contains(stdout, "alloc: 512 MiB") {
		t.Errorf("2 GiB under --memory 256m: exit %d, want %d (killed)\n%s\n%s", code, 128+int(syscall.SIGKILL), stdout, stderr)
	}

	// /tmp and HOME are filled by the command's user (nobody here): the
	// write stops at the size, with ENOSPC, not at a permission.
	for _, dir := range []string{"/tmp", "$HOME"} {
		stdout, stderr, _ = run([]string{"--tmp-size", "1m"}, "id -u; head -c 2097152 /dev/zero 2>&1 >"+dir+"/f; echo size=$(wc -c < "+dir+"/f)")
		size, _ := strconv.Atoi(field(stdout, "size="))
		if !strings.HasPrefix(stdout, "65534\n") || !strings.Contains(stdout, "No space left on device") || size < 1<<19 || size > 1<<20 {
			t.Errorf("2 MiB into %s under --tmp-size 1m as nobody: want about 1 MiB written, then No space left on device; got\n%s\n%s", dir, stdout, stderr)
		}
	}
}

// TestLimitFlags checks the parsing of sizes and the refusals of bad
// limits.
func TestLimitFlags(t *testing.T) {
	for in, want := range map[string]int64{"2g": 2 << 30, "512m": 512 << 20, "1.5GiB": 3 << 29, "4096": 4096, "64k": 64 << 10, "0": 0} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "2x", "1e30"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) succeeded", in)
		}
	}
	for in, want := range map[int64]string{2 << 30: "2g", 512 << 20: "512m", 12_000_000_000: "11.2g"} {
		if got := formatBytes(in); got != want {
			t.Errorf("formatBytes(%d) = %s, want %s", in, got, want)
		}
	}
	for _, args := range [][]string{{"--memory", "lots"}, {"--cpus", "-1"}, {"--pids-limit", "-5"}, {"--tmp-size", "0"}} {
		_, stderr, code := runCLI(t, append(append([]string{"run", "--rootfs", t.TempDir()}, args...), "--", "true")...)
		if code != exitUsage || !strings.Contains(stderr, args[0]) {
			t.Errorf("sbx run %s: exit %d, %s; want %d", strings.Join(args, " "), code, stderr, exitUsage)
		}
	}
}

// TestLogInsideWritableMount: sbx run refuses a --log path that the
// sandbox could write (the working directory, a read-write -v mount,
// through a symbolic link too), before it makes anything.
func TestLogInsideWritableMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sbx run says it needs root before it looks at --log (CI runs as root)")
	}
	work, vol, other := t.TempDir(), t.TempDir(), t.TempDir()
	os.Symlink(work, filepath.Join(other, "link"))
	t.Chdir(work)
	for _, tc := range []struct {
		log  string
		args []string
	}{
		{"decisions.jsonl", nil},
		{filepath.Join(work, "logs", "new", "d.jsonl"), nil},
		{filepath.Join(other, "link", "d.jsonl"), nil},
		{filepath.Join(vol, "d.jsonl"), []string{"-v", vol + ":/data"}},
	} {
		args := append([]string{"run", "--log", tc.log, "--state-dir", t.TempDir()}, tc.args...)
		_, stderr, code := runCLI(t, append(args, "--", "true")...)
		if code != exitSbxFailed || !strings.Contains(stderr, "which the sandbox can write") {
			t.Errorf("--log %s %v: exit %d, %s", tc.log, tc.args, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(work, "logs")); err == nil {
			t.Errorf("--log %s: sbx made directories before refusing", tc.log)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil { // after the write, which would clear set-user-ID
		t.Fatal(err)
	}
}

func getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := syscall.Getxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// field returns the rest of the first line of out that starts with
// prefix, or "".
func field(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// capField parses a capability mask line of /proc/self/status, as the
// probe prints it.
func capField(t *testing.T, out, name string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(field(out, name), 16, 64)
	if err != nil {
		t.Fatalf("no %s line in:\n%s (%v)", name, out, errors.Unwrap(err))
	}
	return v
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestPrivilegedGatewayFence: a policy that allows the whole of 10/8,
// guard exemption included, still never lets the gateway reach the host's
// own services through its own address or another host address, while an
// upstream in 10/8 that is not the host answers. The host's service,
// listening on every address, must see no connection.
func TestPrivilegedGatewayFence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	ln, err := net.Listen("tcp", ":0") // the host's service, on every address
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhost-service\n")
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	root := busyboxRoot(t)
	state := t.TempDir()
	script := fmt.Sprintf(`GW=${HTTP_PROXY#http://}; GWIP=${GW%%:*}
ask() { echo "--- $1"; printf 'GET http://%%s/ HTTP/1.1\r\nHost: %%s\r\nConnection: close\r\n\r\n' "$1" "$1" | nc $GWIP ${GW##*:}; }
ask %[2]s:8080
ask $GWIP:%[1]d
ask %[3]s:%[1]d
ask 10.213.239.5:%[1]d`, port, up.Addr, up.Host)
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.239.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--allow", "10.0.0.0/8:*", "--allow-private", "10.0.0.0/8", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	answers := strings.Split(stdout, "--- ")
	if len(answers) != 5 || !strings.Contains(answers[1], "hello-upstream") {
		t.Fatalf("the allowed upstream did not answer (the check cannot tell):\n%s", stdout)
	}
	for i, want := range []string{"is in the sandbox pool", "is this host's own address", "is in the sandbox pool"} {
		a := answers[i+2]
		if !strings.Contains(a, "403 Forbidden") || !strings.Contains(a, want) || !strings.Contains(a, "No policy reaches this address") || strings.Contains(a, "host-service") {
			t.Errorf("through the gateway to %s: want 403 %q:\n%s", firstLine(a), want, a)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's service saw %d connections from the gateway", n)
	}
}

// TestLogPathRefusals: sbx gateway (and sbx run, through the same
// gateway.Start) refuses a FIFO, a symbolic link and (as root) a file of
// another owner at the --log path, at once and naming the problem, and leaves the
// link's target alone.
func TestLogPathRefusals(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := writeFile(t, "target", "keep\n")
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	cases := map[string]string{fifo: "is a named pipe", link: "is a symbolic link"}
	if os.Geteuid() == 0 {
		other := writeFile(t, "other", "")
		os.Chown(other, 65534, 65534)
		cases[other] = "is owned by uid 65534"
	}
	for path, want := range cases {
		done := make(chan [3]any, 1)
		go func() {
			_, stderr, code := runCLI(t, "gateway", "--listen", "127.0.0.1:0", "--allow", "x.test", "--log", path)
			done <- [3]any{stderr, code}
		}()
		select {
		case r := <-done:
			if r[1].(int) == 0 || !strings.Contains(r[0].(string), want) {
				t.Errorf("--log %s: exit %d, %s; want a refusal saying %q", path, r[1], r[0], want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("--log %s: sbx gateway hangs", path)
		}
	}
	if data, _ := os.ReadFile(target); string(data) != "keep\n" {
		t.Errorf("the link's target was written: %q", data)
	}
}

// TestPrivilegedListedMeansReachable starts sbx run and, the moment sbx
// ps lists the sandbox, changes its policy by name and by id prefix: a
// listed sandbox is reachable (before, for about the time its network
// and gateway took to come up, sbx policy said "no running sandbox").
// sbx ps shows its state; sbx stop takes its name.
func TestPrivilegedListedMeansReachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	state := t.TempDir()
	name := fmt.Sprintf("listed-%d", os.Getpid())
	bin := buildSbx(t)
	for round := range 3 {
		run := exec.Command(bin, "run", "--quiet", "--name", name, "--rootfs", root, "--state-dir", state,
			"--subnet-pool", "10.213.232.0/24", "--log", filepath.Join(state, "log.jsonl"), "--log-append", "--", "sleep", "30")
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		go func() { run.Wait(); close(ended) }()
		t.Cleanup(func() { run.Process.Kill(); <-ended; runCLI(t, "gc", "--state-dir", state) })

		var line string
		for deadline := time.Now().Add(20 * time.Second); line == "" && time.Now().Before(deadline); {
			stdout, _, _ := runCLI(t, "ps", "--state-dir", state)
			for _, l := range strings.Split(stdout, "\n") {
				if strings.Contains(l, name) {
					line = l
				}
			}
		}
		if line == "" {
			t.Fatal("sbx ps never listed the sandbox")
		}
		fields := strings.Fields(line)
		id, status := fields[0], fields[2]
		if status != "starting" && status != "running" {
			t.Errorf("round %d: STATE %q in %q", round, status, line)
		}
		// At once, by name, then by a prefix of the id.
		for _, ref := range []string{name, id[:5]} {
			rule := fmt.Sprintf("r%d-%s.test", round, ref[:3])
			stdout, stderr, code := runCLI(t, "policy", "allow", "--sandbox", ref, "--state-dir", state, rule)
			if code != 0 {
				t.Fatalf("round %d, listed as %q: sbx policy allow --sandbox %s: exit %d\n%s%s", round, status, ref, code, stdout, stderr)
			}
		}
		if out, stderr, code := runCLI(t, "stop", "--state-dir", state, name); code != 0 {
			t.Fatalf("sbx stop %s: exit %d\n%s%s", name, code, out, stderr)
		}
		<-ended
	}
}

// TestUserFlag: --user is taken as asked, host root included; without it
// the run library chooses.
func TestUserFlag(t *testing.T) {
	for flag, want := range map[string]*run.User{
		"":       nil,
		"0":      {UID: 0, GID: 0, Why: run.UserAsked},
		"1000:0": {UID: 1000, GID: 0, Why: run.UserAsked},
	} {
		if got, err := userFlag(flag); err != nil || (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("userFlag(%q) = %+v, %v; want %+v", flag, got, err, want)
		}
	}
	if _, err := userFlag("me"); err == nil || !strings.Contains(err.Error(), "--user \"me\": want UID[:GID] in numbers") {
		t.Errorf("userFlag(me): got %v, want the flag's error", err)
	}
}

// TestUserNote: sbx run warns of a user that is host root or in root's
// group, and of a capability that reaches the host's files.
func TestUserNote(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		u    run.User
		caps []string
		want string
	}{
		{run.User{UID: 0, GID: 0}, nil, "--user 0"},
		{run.User{UID: 1000, GID: 0}, nil, "group 0"},
		{run.User{UID: 1000, GID: 1000}, []string{"CAP_SETFCAP"}, "--cap-add CAP_SETFCAP"},
		{run.User{UID: 1000, GID: 1000}, []string{"CAP_NET_RAW"}, ""},
	} {
		if got := userNote(tc.u, false, dir, tc.caps); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("note for %+v with %v = %q, want it to say %q", tc.u, tc.caps, got, tc.want)
		}
	}
}
