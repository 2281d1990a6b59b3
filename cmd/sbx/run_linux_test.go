package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/sandbox"
)

// busyboxRoot builds a root filesystem from Debian's busybox-static.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sh", "nc", "printf", "cat", "grep", "echo"} {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	return root
}

// upstream is an HTTP server made by upstreamNamespace: Addr:8080 in a
// network namespace of the test's own, reached through a veth whose host
// end is Host, in the /30 Net.
type upstream struct {
	Host, Addr, Net string
	// Name is the network namespace, where listenIn opens more services.
	Name string
	// remotes counts the HTTP server's requests by client address.
	mu      sync.Mutex
	remotes map[string]int
}

// requestsFrom returns how many requests the HTTP server had from clients
// whose address is not the host end's: from anything but a gateway.
func (u *upstream) requestsFromElsewhere() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for ip, c := range u.remotes {
		if ip != u.Host {
			n += c
		}
	}
	return n
}

// upstreamNamespace starts an HTTP server on port 8080 inside a network
// namespace made for the test, reachable from the host through a veth
// pair. Its names and its /30 (in 10.214.0.0/16, clear of every host
// address) are random, so that test runs at the same time never meet; it
// is removed when the test ends.
func upstreamNamespace(t *testing.T) *upstream {
	t.Helper()
	return upstreamNamespaceIn(t, netip.MustParsePrefix("10.214.0.0/16"))
}

// upstreamNamespaceIn is upstreamNamespace with its /30 taken from pool,
// a /16 or longer prefix.
func upstreamNamespaceIn(t *testing.T, pool netip.Prefix) *upstream {
	t.Helper()
	var rnd [3]byte
	rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	name, veth := "sbxtest-up-"+tag, "sbxtu"+tag
	subnet := freeTestSubnet(t, pool)
	up := &upstream{Host: subnet.Addr().Next().String(), Addr: subnet.Addr().Next().Next().String(), Net: subnet.String(),
		Name: name, remotes: map[string]int{}}
	hostCIDR, nsCIDR, listen := up.Host+"/30", up.Addr+"/30", up.Addr+":8080"
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(veth); err == nil {
			netlink.LinkDel(l)
		}
		netns.DeleteNamed(name)
	})
	for _, args := range [][]string{
		{"netns", "add", name},
		{"link", "add", veth, "type", "veth", "peer", "name", veth + "p"},
		{"link", "set", veth + "p", "netns", name},
		{"addr", "add", hostCIDR, "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", name, "addr", "add", nsCIDR, "dev", veth + "p"},
		{"-n", name, "link", "set", veth + "p", "up"},
		{"-n", name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ln := listenIn(t, name, func() (io.Closer, error) { return net.Listen("tcp", listen) }).(net.Listener)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		up.mu.Lock()
		up.remotes[host]++
		up.mu.Unlock()
		io.WriteString(w, "hello-upstream\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return up
}

// freeTestSubnet picks a random /30 of pool that overlaps no address of
// this host's interfaces.
// listenIn runs open (a net.Listen or net.ListenPacket) on a thread
// switched into the network namespace name: the socket it makes stays
// there whatever thread serves it. It is closed when the test ends.
func listenIn(t *testing.T, name string, open func() (io.Closer, error)) io.Closer {
	t.Helper()
	runtime.LockOSThread()
	orig, _ := netns.Get()
	ns, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	netns.Set(ns)
	c, lerr := open()
	if err := netns.Set(orig); err != nil {
		panic(err)
	}
	runtime.UnlockOSThread()
	ns.Close()
	orig.Close()
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func freeTestSubnet(t *testing.T, pool netip.Prefix) netip.Prefix {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		var b [2]byte
		rand.Read(b[:])
		// A random /30 of pool: its random bits below the pool's.
		base, r := pool.Masked().Addr().As4(), uint32(b[0])<<8|uint32(b[1])
		n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		n |= r & (1<<(32-pool.Bits()) - 1) &^ 3
		a := [4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		p := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		clear := true
		for _, ha := range addrs {
			if n, ok := ha.(*net.IPNet); ok {
				if hp, err := netip.ParsePrefix(n.String()); err == nil && hp.Masked().Overlaps(p) {
					clear = false
				}
			}
		}
		if clear {
			return p
		}
	}
	t.Fatal("no free /30 for a test upstream")
	return netip.Prefix{}
}

// TestPrivilegedRun runs sbx run end to end: a busybox sandbox asks the
// gateway for an allowed and a blocked host, both served by an upstream in
// a namespace of the test's own; the allowed one answers, the blocked one
// gets 403 with X-Sbx-Decision; the exit code comes back; nothing is left.
func TestPrivilegedRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	_, stderr, _ := runEndToEnd(t, "10.213.240.0/24", "--rootfs", busyboxRoot(t))
	for _, want := range []string{"allow", "block", "decision log of sandbox"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	id := sandboxIDIn(t, stderr)
	checkNothingLeft(t, id)
}

// sandboxIDIn returns the id of the sandbox whose decision log sbx run
// named in stderr.
func sandboxIDIn(t *testing.T, stderr string) string {
	t.Helper()
	const say = "decision log of sandbox "
	i := strings.Index(stderr, say)
	if i < 0 {
		t.Fatalf("sbx run did not name its sandbox:\n%s", stderr)
	}
	id, _, _ := strings.Cut(stderr[i+len(say):], ":")
	return id
}

// checkNothingLeft checks that no namespace, veth or iptables rule of
// sandbox id is left. It looks at id's objects only: other sandboxes may
// run on the machine meanwhile (other tests, a user's).
func checkNothingLeft(t *testing.T, id string) {
	t.Helper()
	names, err := sandbox.NamesFor(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/netns/" + names.Netns); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace %s left (%v)", names.Netns, err)
	}
	if _, err := netlink.LinkByName(names.HostVeth); err == nil {
		t.Errorf("veth %s left", names.HostVeth)
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		rules, _ := exec.Command(cmd, "-S").Output()
		if strings.Contains(string(rules), names.Comment) {
			t.Errorf("%s rules of %s left:\n%s", cmd, id, rules)
		}
	}
}

// runEndToEnd runs sbx run with flags (the runtime and root), taking its /30 from pool: the
// command asks the gateway for an allowed and a blocked host, both served
// by an upstream in a namespace of the test's own, and tries the upstream
// directly. The allowed one answers, the blocked one gets 403 with
// X-Sbx-Decision, the direct try fails, the exit code comes back, the log
// holds the two decisions, and no state is left. It returns what sbx
// printed and the test's directory.
func runEndToEnd(t *testing.T, pool string, flags ...string) (stdout, stderr, dir string) {
	t.Helper()
	up := upstreamNamespace(t)
	dir = t.TempDir()
	logFile := filepath.Join(dir, "decisions.jsonl")
	script := `GW=${HTTP_PROXY#http://}
ask() { printf 'GET http://%s:8080/ HTTP/1.1\r\nHost: %s:8080\r\nConnection: close\r\n\r\n' "$1" "$1" | nc ${GW%:*} ${GW##*:}; }
ask allowed.test
ask blocked.test
printf 'GET / HTTP/1.0\r\nHost: %s:8080\r\n\r\n' ` + up.Addr + ` | nc -w 2 ` + up.Addr + ` 8080 | grep -q hello-upstream && echo DIRECT-REACHED
exit 7`
	args := append([]string{"run"}, flags...)
	stdout, stderr, code := runCLI(t, append(args, "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", pool, "--log", logFile,
		"--allow", "allowed.test:8080", "--resolve", "allowed.test="+up.Addr, "--resolve", "blocked.test="+up.Addr,
		"--allow-private", up.Net, "--", "sh", "-c", script)...)
	if code != 7 {
		t.Errorf("exit %d, want 7\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "hello-upstream") {
		t.Errorf("the allowed request got no answer from the upstream:\n%s\n%s", stdout, stderr)
	}
	if !strings.Contains(stdout, "403 Forbidden") || !strings.Contains(stdout, "X-Sbx-Decision: block") {
		t.Errorf("the blocked request did not get 403 with X-Sbx-Decision:\n%s", stdout)
	}
	if strings.Contains(stdout, "DIRECT-REACHED") || up.requestsFromElsewhere() != 0 {
		t.Errorf("the sandbox reached the upstream without the gateway")
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	// The two through the proxy, and the direct one, captured and blocked
	// as its IP.
	if n := strings.Count(string(data), `"event":"decision"`); n != 3 || !strings.Contains(string(data), `"kind":"transparent","method":"GET","host":"`+up.Addr+`","port":8080,"path":"/","action":"block"`) {
		t.Errorf("%d decision records, want 3 with the direct request captured:\n%s", n, data)
	}
	// Nothing of the sandbox is left.
	if entries, _ := os.ReadDir(filepath.Join(dir, "state")); len(entries) > 1 { // .lock stays
		t.Errorf("state left: %v", entries)
	}
	return stdout, stderr, dir
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run"}, exitUsage, "no command given"},
		{[]string{"run", "--allow", "*.", "--rootfs", t.TempDir(), "--", "true"}, exitUsage, "--allow"},
		{[]string{"run", "--rootfs", "/no/such/dir", "--", "true"}, exitSbxFailed, "not a directory"},
		{[]string{"run", "--user", "bob", "--rootfs", t.TempDir(), "--", "true"}, exitUsage, "UID[:GID]"},
		{[]string{"run", "--runtime", "docker", "--", "true"}, exitUsage, "give --image REF"},
		{[]string{"run", "--runtime", "docker", "--rootfs", t.TempDir(), "--", "true"}, exitUsage, "runs images from its store only"},
		{[]string{"run", "--runtime", "podman", "--", "true"}, exitUsage, "want containerd or docker"},
		{[]string{"run", "--image", "docker.io/library/x:1", "--rootfs", t.TempDir(), "--", "true"}, exitUsage, "give one of them"},
		{[]string{"run", "-v", "nonsense", "--rootfs", t.TempDir(), "--", "true"}, exitUsage, "SRC:DST"},
	}
	if os.Geteuid() != 0 {
		tests = []struct {
			args []string
			code int
			want string
		}{{[]string{"run", "--", "true"}, exitSbxFailed, "needs root"}}
	}
	for _, tt := range tests {
		_, stderr, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
}

// TestPrivilegedKillAndGC kills sbx run with SIGKILL while its sandbox
// runs: the container, left running, has no network at all (its gateway
// died with sbx run; docs/network.md), and sbx gc removes the container,
// network and state.
func TestPrivilegedKillAndGC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	// sbx gc looks at every sbx-named object on the machine; sandboxes
	// running meanwhile are registered, and left alone.
	dir := t.TempDir()
	bin := buildSbx(t)
	root := busyboxRoot(t)
	for _, c := range []string{"sleep", "timeout"} {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	state := filepath.Join(dir, "state")
	run := exec.Command(bin, "run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.241.0/24",
		"--log", filepath.Join(dir, "log.jsonl"), "--quiet", "--", "sleep", "60")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the sandbox is up: its API socket exists.
	var id string
	for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		entries, _ := os.ReadDir(state)
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(state, e.Name(), "api.sock")); err == nil {
				id = e.Name()
			}
		}
	}
	if id == "" {
		run.Process.Kill()
		t.Fatal("the sandbox did not come up")
	}
	st, err := sandbox.Load(state, id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the container start
	run.Process.Kill()
	run.Wait()

	// The container still runs; its gateway is gone, and so is its network:
	// the gateway's port is refused at once, nothing else is reachable.
	gw := st.Subnet.Addr().Next().String()
	probe := fmt.Sprintf(`for p in %d 22 80; do printf 'GET http://x.test/ HTTP/1.0\r\n\r\n' | timeout 1 nc %s $p && echo "port $p answered"; echo "port $p: $?"; done`, st.GatewayPort, gw)
	out, err := exec.Command("ctr", "-n", "sbx", "task", "exec", "--exec-id", "probe", id, "sh", "-c", probe).CombinedOutput()
	if err != nil || strings.Contains(string(out), "answered") || strings.Contains(string(out), ": 143") || strings.Count(string(out), "port ") != 3 {
		t.Errorf("probing from the container after its gateway died: %v\n%s\nwant every port refused at once (143 is a timeout)", err, out)
	}

	stdout, stderr, code := runCLI(t, "gc", "--state-dir", state)
	if code != 0 || !strings.Contains(stdout, "removed sandbox "+id) {
		t.Fatalf("sbx gc: exit %d\n%s%s", code, stdout, stderr)
	}
	checkNothingLeft(t, id)
	ctrs, _ := exec.Command("ctr", "-n", "sbx", "containers", "list", "-q").Output()
	if strings.Contains(string(ctrs), id) {
		t.Errorf("container left: %s", ctrs)
	}
	if _, err := os.Stat(filepath.Join(state, id)); !os.IsNotExist(err) {
		t.Errorf("state left: %v", err)
	}
	// A second gc finds nothing.
	if stdout, _, code := runCLI(t, "gc", "--state-dir", state); code != 0 || !strings.Contains(stdout, "nothing to remove") {
		t.Errorf("second sbx gc: exit %d, %q", code, stdout)
	}
}

// runInBackground runs sbx with args until it ends or ctx is done.
func runInBackground(ctx context.Context, args ...string) <-chan [3]string {
	done := make(chan [3]string, 1)
	go func() {
		var out, errOut syncBuffer
		root := newRootCmd()
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := execute(ctx, root)
		done <- [3]string{out.String(), errOut.String(), fmt.Sprint(code)}
	}()
	return done
}

// waitForSandbox waits for a sandbox to come up in state and returns its
// id.
func waitForSandbox(t *testing.T, state string, not string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		entries, _ := os.ReadDir(state)
		for _, e := range entries {
			if e.Name() == not {
				continue
			}
			if _, err := os.Stat(filepath.Join(state, e.Name(), "api.sock")); err == nil {
				return e.Name()
			}
		}
	}
	t.Fatal("the sandbox did not come up")
	return ""
}

// countingService answers every connection or datagram that reaches it
// with "hi" and counts them.
type countingService struct {
	c io.Closer
	n atomic.Int64
}

// serveCounting opens a listener or packet socket with open and serves it
// until the test ends.
func serveCounting(t *testing.T, open func() (io.Closer, error)) *countingService {
	t.Helper()
	c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &countingService{c: c}
	go func() {
		switch c := c.(type) {
		case net.Listener:
			for {
				conn, err := c.Accept()
				if err != nil {
					return
				}
				s.n.Add(1)
				io.WriteString(conn, "hi\n")
				conn.Close()
			}
		case net.PacketConn:
			buf := make([]byte, 512)
			for {
				_, from, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				s.n.Add(1)
				c.WriteTo([]byte("hi\n"), from)
			}
		}
	}()
	return s
}

// take returns how many reached s since the last take.
func (s *countingService) take() int { return int(s.n.Swap(0)) }

// control reaches a countingService from the host and reads its answer.
func control(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if network == "udp" {
		c.Write([]byte("query"))
	}
	_, err = io.ReadFull(c, make([]byte, 3))
	return err
}

// TestPrivilegedLivePolicyAndIsolation runs two sandboxes at once. The
// first keeps asking for a blocked host until a rule added over its
// management API lets it through; the second tries to reach the first
// one's addresses and the upstream directly, which must all fail at once.
// They get different subnets.
func TestPrivilegedLivePolicyAndIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	for _, c := range []string{"sleep", "seq", "ping", "ls", "timeout", "nslookup"} {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	common := []string{"run", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.242.0/24", "--quiet",
		"--resolve", "later.test=" + up.Addr, "--allow-private", up.Net}
	ask := `GW=${HTTP_PROXY#http://}
ask() { printf 'GET http://%s:8080/ HTTP/1.1\r\nHost: %s:8080\r\nConnection: close\r\n\r\n' "$1" "$1" | nc ${GW%:*} ${GW##*:}; }
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := runInBackground(ctx, append(append([]string{}, common...), "--log", filepath.Join(dir, "a.jsonl"), "--",
		"sh", "-c", ask+`for i in $(seq 200); do ask later.test | grep -q "200 OK" && { echo ALLOWED after $i; exit 0; }; sleep 0.1; done; exit 1`)...)
	idA := waitForSandbox(t, state, "")
	stA, err := sandbox.Load(state, idA)
	if err != nil {
		t.Fatal(err)
	}

	// The second sandbox probes the first one's gateway and sandbox
	// addresses and the upstream, directly. Something listens at every
	// target, so that a probe that fails was refused, not unanswered: a
	// TCP service on every host address (the first one's host end and the
	// upstream's), a DNS server on the first one's host end, a TCP
	// service in the first sandbox's namespace; each counts what reaches
	// it, and the host's are shown to answer the host. (DNS is asked with
	// nslookup: busybox's nc has no -u, so the earlier probe, nc -u, failed
	// whatever the rules. The server's "hi" is no DNS answer: an escape
	// shows in its count.)
	hostA := stA.Subnet.Addr().Next()
	hostSvc := serveCounting(t, func() (io.Closer, error) { return net.Listen("tcp", "0.0.0.0:0") })
	svcPort := hostSvc.c.(net.Listener).Addr().(*net.TCPAddr).Port
	dnsA := serveCounting(t, func() (io.Closer, error) { return net.ListenPacket("udp", netip.AddrPortFrom(hostA, 53).String()) })
	namesA, _ := sandbox.NamesFor(idA)
	sandboxA := serveCounting(t, func() (io.Closer, error) {
		return listenIn(t, namesA.Netns, func() (io.Closer, error) { return net.Listen("tcp", "0.0.0.0:8080") }), nil
	})
	for _, target := range []string{net.JoinHostPort(hostA.String(), fmt.Sprint(svcPort)), net.JoinHostPort(up.Host, fmt.Sprint(svcPort))} {
		if err := control("tcp", target); err != nil {
			t.Fatalf("control: the host service at %s does not answer the host: %v", target, err)
		}
	}
	if err := control("udp", netip.AddrPortFrom(hostA, 53).String()); err != nil {
		t.Fatalf("control: the DNS server at %s:53 does not answer the host: %v", hostA, err)
	}
	if hostSvc.take() != 2 || dnsA.take() != 1 {
		t.Fatal("control: the services did not count the host's probes")
	}
	// Each probe runs under timeout 1: one that has not failed within a
	// second is reported SLOW, which is as bad as REACHED.
	probes := fmt.Sprintf(`probe() { timeout 1 "$@" </dev/null >/dev/null 2>&1; rc=$?; case $rc in 0) echo "REACHED $name";; 124|137|143) echo "SLOW $name";; *) echo "failed $name";; esac; }
for target in "%s 3128" "%s %d" "%s 8080" "%s 8080" "%s %d"; do name="tcp $target"; probe nc -w 2 $target; done
name=icmp; probe ping -c 1 -W 2 %s
IF=$(ls /sys/class/net | grep sbxc)
name=ipv6; probe nc -w 2 "fe80::1%%$IF" 3128
name=dns; probe nslookup probe.test %s`, hostA, hostA, svcPort, hostA.Next(), up.Addr, up.Host, svcPort, hostA, hostA)
	start := time.Now()
	// Without capture: the wave-1 rules, where a probe that connects has
	// reached something. TestPrivilegedCaptureNetwork and TestPrivilegedCaptureLayers probe with it.
	second := <-runInBackground(ctx, append(append([]string{}, common...), "--no-capture", "--log", filepath.Join(dir, "b.jsonl"), "--", "sh", "-c", probes)...)
	elapsed := time.Since(start)
	t.Logf("probes from the second sandbox:\n%s", second[0])
	if strings.Contains(second[0], "REACHED") || strings.Contains(second[0], "SLOW") || strings.Count(second[0], "failed") != 8 {
		t.Errorf("the second sandbox reached what it must not:\n%s\n%s", second[0], second[1])
	}
	if elapsed > 5*time.Second {
		t.Errorf("the second sandbox's eight probes took %v; each must fail at once, not time out", elapsed)
	}
	time.Sleep(200 * time.Millisecond) // for a datagram still on its way
	for name, n := range map[string]int{"the host's TCP service": hostSvc.take(), "the DNS server on the first sandbox's host end": dnsA.take(),
		"the TCP service in the first sandbox": sandboxA.take()} {
		if n != 0 {
			t.Errorf("%s was reached %d times from the second sandbox", name, n)
		}
	}

	// Add the rule over the first sandbox's API; its next request passes.
	tok, err := os.ReadFile(filepath.Join(state, idA, "token"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(state, idA, "api.sock"))
	}}}
	req, _ := http.NewRequest("POST", "http://sbx/v1/policy/rules", strings.NewReader(`{"host": "later.test", "ports": [8080], "action": "allow", "position": 0}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("adding the rule: %v %v", resp, err)
	}
	resp.Body.Close()
	r := <-first
	if r[2] != "0" || !strings.Contains(r[0], "ALLOWED") {
		t.Errorf("the first sandbox: exit %s\n%s\n%s", r[2], r[0], r[1])
	}
	logA, _ := os.ReadFile(filepath.Join(dir, "a.jsonl"))
	if !strings.Contains(string(logA), `"event":"policy"`) || !strings.Contains(string(logA), `"action":"block"`) || !strings.Contains(string(logA), `"rule":"r1"`) {
		t.Errorf("the first sandbox's log lacks the block, the policy change or the allow by the new rule")
	}
}

// TestPrivilegedTerminalAndStdin: -t gives the command a terminal, -i
// gives it sbx's standard input; without them it has neither.
func TestPrivilegedTerminalAndStdin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	dir := t.TempDir()
	run := func(stdin, script string, flags ...string) (string, int) {
		var out, errOut strings.Builder
		cmd := newRootCmd()
		args := append([]string{"run", "--quiet", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
			"--subnet-pool", "10.213.243.0/24", "--log", filepath.Join(dir, "log.jsonl"), "--log-append"}, flags...)
		cmd.SetArgs(append(args, "--", "sh", "-c", script))
		cmd.SetIn(strings.NewReader(stdin))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		code := execute(t.Context(), cmd)
		return out.String(), code
	}
	tty := `[ -t 1 ] && echo TTY-YES || echo TTY-NO`
	if out, code := run("", tty, "-t"); code != 0 || !strings.Contains(out, "TTY-YES") {
		t.Errorf("-t: exit %d, %q; want a terminal", code, out)
	}
	if out, code := run("piped-in\n", tty+"; cat", "-i"); code != 0 || !strings.Contains(out, "TTY-NO") || !strings.Contains(out, "piped-in") {
		t.Errorf("-i: exit %d, %q; want no terminal and the input echoed", code, out)
	}
	if out, code := run("piped-in\n", "cat"); code != 0 || strings.Contains(out, "piped-in") {
		t.Errorf("without -i: exit %d, %q; want no input", code, out)
	}
}

// TestPrivilegedSignalsReachTheCommand sends SIGTERM to sbx run: the
// command gets it, and its exit code comes back. The gateway outlives the
// signal: a request the command makes while it winds down is decided,
// answered and logged.
func TestPrivilegedSignalsReachTheCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	dir := t.TempDir()
	bin := buildSbx(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	state := filepath.Join(dir, "state")
	logFile := filepath.Join(dir, "log.jsonl")
	script := `GW=${HTTP_PROXY#http://}
last() { printf 'GET http://up.test:8080/ HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n' | nc ${GW%:*} ${GW##*:} | grep HTTP/; }
trap 'echo got-term; last; exit 9' TERM; echo ready; while true; do sleep 0.1; done`
	var out syncBuffer // written by exec's copying goroutine
	run := exec.Command(bin, "run", "--quiet", "--rootfs", root, "--state-dir", state, "--subnet-pool", "10.213.244.0/24",
		"--log", logFile, "--allow", "up.test:8080", "--resolve", "up.test="+up.Addr, "--allow-private", up.Net,
		"--", "sh", "-c", script)
	run.Stdout = &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "ready"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			run.Process.Kill()
			t.Fatal("the command did not start")
		}
	}
	run.Process.Signal(syscall.SIGTERM)
	err := run.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 9 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("after SIGTERM: %v, output %q; want the command's trap to run and exit 9", err, out.String())
	}
	if log, _ := os.ReadFile(logFile); !strings.Contains(out.String(), "HTTP/1.1 200") || !strings.Contains(string(log), `"host":"up.test"`) {
		t.Errorf("a request made after SIGTERM: output %q, log:\n%s\nwant it answered 200 and logged", out.String(), log)
	}
	if entries, _ := os.ReadDir(state); len(entries) > 1 {
		t.Errorf("state left after a signalled run: %v", entries)
	}
}

// TestPrivilegedInit: the command is not PID 1 (tini is, from Debian's
// tini package, which scripts/test.sh installs), so a shell loop with no
// TERM handler stops at SIGTERM at once instead of after the 10 s grace,
// exit 143.
func TestPrivilegedInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	if sandbox.FindInit() == "" {
		t.Fatal("tini-static is missing (scripts/test.sh installs tini)")
	}
	dir := t.TempDir()
	bin := buildSbx(t)
	root := busyboxRoot(t)
	os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
	var out syncBuffer
	run := exec.Command(bin, "run", "--quiet", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.243.0/24", "--log", filepath.Join(dir, "log.jsonl"), "--",
		"sh", "-c", `echo "pid $$"; while true; do sleep 1; done`)
	var errOut syncBuffer
	run.Stdout, run.Stderr = &out, &errOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "pid "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			run.Process.Kill()
			t.Fatal("the command did not start")
		}
	}
	if strings.Contains(out.String(), "pid 1\n") {
		t.Errorf("the command is PID 1: %q", out.String())
	}
	run.Process.Signal(syscall.SIGTERM)
	ended := make(chan error, 1)
	go func() { ended <- run.Wait() }()
	select {
	case err := <-ended:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("after SIGTERM: %v, want exit 143\n%s", err, errOut.String())
		}
	case <-time.After(5 * time.Second): // the grace before SIGKILL is 10 s
		run.Process.Kill()
		<-ended
		t.Errorf("a shell loop did not stop at SIGTERM: its TERM went to a PID 1 that ignores it")
	}
}

// TestPrivilegedHostRootfs runs a command on the host's own system
// directories (the default --rootfs host): they are there and read-only,
// secrets read as empty, the working directory is shared read-write, and
// HOME is a fresh directory.
func TestPrivilegedHostRootfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	work := t.TempDir()
	os.Chmod(work, 0o777)
	t.Chdir(work)
	dir := t.TempDir()
	script := `echo "shadow=$(cat /etc/shadow 2>/dev/null | wc -c)"
echo "home=$HOME pwd=$(pwd)"
ls /usr/bin >/dev/null && echo usr-ok
touch /usr/sbx-write-test 2>/dev/null && echo usr-rw || echo usr-ro
echo from-sandbox > made-inside.txt && echo cwd-rw
touch $HOME/x && echo home-rw`
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.245.0/24",
		"--log", filepath.Join(dir, "log.jsonl"), "--", "/bin/sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"shadow=0", "home=/home/sbx pwd=" + work, "usr-ok", "usr-ro", "cwd-rw", "home-rw"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if data, err := os.ReadFile(filepath.Join(work, "made-inside.txt")); err != nil || string(data) != "from-sandbox\n" {
		t.Errorf("the file made inside is not in the working directory: %q %v", data, err)
	}
	if _, err := os.Stat("/usr/sbx-write-test"); err == nil {
		os.Remove("/usr/sbx-write-test")
		t.Errorf("the sandbox wrote to the host's /usr")
	}
}

func TestParseVolume(t *testing.T) {
	dir := t.TempDir()
	m, err := parseVolume(dir + ":/data:ro")
	if err != nil || m.Source != dir || m.Destination != "/data" || !strings.Contains(strings.Join(m.Options, ","), "ro") {
		t.Errorf("parseVolume = %+v, %v", m, err)
	}
	for _, bad := range []string{dir, dir + ":data", dir + ":/", "/no/such:/x", dir + ":/x:rx"} {
		if _, err := parseVolume(bad); err == nil {
			t.Errorf("parseVolume(%q) succeeded", bad)
		}
	}
}

// TestPrivilegedVolume mounts a host directory read-only and another
// read-write into a directory-rootfs sandbox.
func TestPrivilegedVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	root := busyboxRoot(t)
	os.MkdirAll(filepath.Join(root, "ro"), 0o755)
	os.MkdirAll(filepath.Join(root, "rw"), 0o755)
	ro, rw, dir := t.TempDir(), t.TempDir(), t.TempDir()
	os.Chmod(rw, 0o777) // the command runs as nobody, not as root
	os.WriteFile(filepath.Join(ro, "in.txt"), []byte("from-host\n"), 0o644)
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", root, "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.246.0/24", "--log", filepath.Join(dir, "log.jsonl"),
		"-v", ro+":/ro:ro", "-v", rw+":/rw", "--", "sh", "-c",
		`cat /ro/in.txt; echo x > /ro/new 2>/dev/null && echo ro-writable; echo out > /rw/out.txt && echo rw-ok`)
	if code != 0 || !strings.Contains(stdout, "from-host") || strings.Contains(stdout, "ro-writable") || !strings.Contains(stdout, "rw-ok") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if data, _ := os.ReadFile(filepath.Join(rw, "out.txt")); string(data) != "out\n" {
		t.Errorf("the read-write volume did not get the file: %q", data)
	}
	if fi, err := os.Stat(filepath.Join(rw, "out.txt")); err == nil && fi.Sys().(*syscall.Stat_t).Uid != sandbox.NobodyID {
		t.Errorf("the file the sandbox wrote belongs to uid %d, want nobody (%d)", fi.Sys().(*syscall.Stat_t).Uid, sandbox.NobodyID)
	}
}

// TestPrivilegedOperate drives a running sandbox from outside: sbx ps,
// sbx policy show/allow/block/remove/replace, sbx decisions (a page,
// --follow receiving a record made after it started, --file), and sbx stop.
func TestPrivilegedOperate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	up := upstreamNamespace(t)
	root := busyboxRoot(t)
	for _, c := range []string{"sleep", "seq"} {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	logFile := filepath.Join(dir, "log.jsonl")
	loop := `GW=${HTTP_PROXY#http://}
while true; do printf 'GET http://later.test:8080/ HTTP/1.1\r\nHost: later.test\r\nConnection: close\r\n\r\n' | nc ${GW%:*} ${GW##*:} >/dev/null; sleep 0.2; done`
	// sbx stop signals the sbx run process: here that is this test
	// binary, so the sandbox runs in a child process.
	bin := buildSbx(t)
	run := exec.Command(bin, "run", "--quiet", "--name", "agent", "--rootfs", root, "--state-dir", state,
		"--subnet-pool", "10.213.247.0/24", "--log", logFile,
		"--resolve", "later.test="+up.Addr, "--allow-private", up.Net, "--", "sh", "-c", loop)
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{}) // closed when sbx run has ended
	go func() { run.Wait(); close(ended) }()
	t.Cleanup(func() {
		run.Process.Kill()
		<-ended
		runCLI(t, "gc", "--state-dir", state)
	})
	id := waitForSandbox(t, state, "")
	sb := []string{"--sandbox", id, "--state-dir", state}
	cli := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("sbx %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}

	if out := cli("ps", "--state-dir", state); !strings.Contains(out, id) || !strings.Contains(out, "agent") {
		t.Errorf("sbx ps:\n%s", out)
	}
	if out := cli(append([]string{"policy", "show"}, sb...)...); !strings.Contains(out, "default block") {
		t.Errorf("policy show:\n%s", out)
	}
	if out := cli(append([]string{"policy", "allow", "--id", "later"}, append(sb, "later.test:8080")...)...); !strings.Contains(out, "rule later added") {
		t.Errorf("policy allow:\n%s", out)
	}
	if out := cli(append([]string{"policy", "block", "--position", "0"}, append(sb, "x.test")...)...); !strings.Contains(out, "added: block x.test") {
		t.Errorf("policy block:\n%s", out)
	}
	if out := cli(append([]string{"policy", "check", "--json"}, append(sb, "http://later.test:8080/")...)...); !strings.Contains(out, `"action":"allow","rule":"later"`) {
		t.Errorf("policy check --sandbox of an allowed target: %s", out)
	}
	if out := cli(append([]string{"policy", "check", "--json"}, append(sb, "x.test")...)...); !strings.Contains(out, `"action":"block","rule":"r`) {
		t.Errorf("policy check --sandbox of a blocked target: %s", out)
	}
	if out := cli(append([]string{"policy", "show"}, sb...)...); !strings.Contains(out, "later") || !strings.Contains(out, "x.test") {
		t.Errorf("policy show after adding:\n%s", out)
	}
	// Wait for an allowed request by the new rule.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.Contains(cli(append([]string{"decisions"}, sb...)...), "allow") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no allowed request after the allow rule")
		}
	}
	if out := cli(append([]string{"policy", "remove"}, append(sb, "later")...)...); !strings.Contains(out, "rule later removed") {
		t.Errorf("policy remove:\n%s", out)
	}
	pfile := filepath.Join(dir, "p.yaml")
	os.WriteFile(pfile, []byte("default: block\nallow_private: ["+up.Net+"]\nrules:\n  - {id: again, host: later.test, ports: [8080], action: allow}\n"), 0o644)
	if out := cli(append([]string{"policy", "replace"}, append(sb, pfile)...)...); !strings.Contains(out, "policy replaced") {
		t.Errorf("policy replace:\n%s", out)
	}

	// decisions --follow from the last record on gets a new one.
	lines := strings.Split(strings.TrimSpace(cli(append([]string{"decisions", "--json"}, sb...)...)), "\n")
	var last struct{ Seq uint64 }
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	follow := <-runInBackground(fctx, append([]string{"decisions", "--follow", "--json", "--since", fmt.Sprint(last.Seq)}, sb...)...)
	var got []uint64
	for _, l := range strings.Split(strings.TrimSpace(follow[0]), "\n") {
		var r struct{ Seq uint64 }
		if json.Unmarshal([]byte(l), &r) == nil {
			got = append(got, r.Seq)
		}
	}
	if len(got) == 0 || got[0] <= last.Seq {
		t.Errorf("decisions --follow since %d got %v (stderr %q)", last.Seq, got, follow[1])
	}

	if out := cli("stop", "--state-dir", state, id); !strings.Contains(out, "stopped") {
		t.Errorf("sbx stop:\n%s", out)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("sbx run did not end after sbx stop")
	}
	if out := cli("decisions", "--file", logFile); !strings.Contains(out, "later.test:8080/") || !strings.Contains(out, "rule again added") && !strings.Contains(out, "policy") {
		t.Errorf("decisions --file:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(state, id)); !os.IsNotExist(err) {
		t.Errorf("state left after sbx stop: %v", err)
	}
}

// buildSbx builds the sbx binary into a directory anyone may enter.
func buildSbx(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbx-bin-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sbx")
	// Its sandboxes keep their records where the test's own do (TestMain).
	if out, err := exec.Command("go", "build", "-ldflags=-X main.logRoot="+logRoot, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building sbx: %v\n%s", err, out)
	}
	return bin
}

// TestPrivilegedNotRoot runs every command that needs root as the user
// nobody (CI is root, so the test drops to nobody itself): each says it
// needs root and to use sudo, and makes nothing.
func TestPrivilegedNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the commands as another user (CI runs as root)")
	}
	bin := buildSbx(t)
	state := t.TempDir() // mode 0700, root's: as /run/sbx is
	policy := filepath.Join(filepath.Dir(bin), "policy.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	sd := "--state-dir=" + state
	for _, args := range [][]string{
		{"run", sd, "--", "true"},
		{"gc", sd},
		{"ps", sd},
		{"stop", sd, "deadbeef"},
		{"policy", "show", sd, "--sandbox", "deadbeef"},
		{"policy", "check", sd, "--sandbox", "deadbeef", "x.test"},
		{"policy", "allow", sd, "--sandbox", "deadbeef", "x.test"},
		{"policy", "block", sd, "--sandbox", "deadbeef", "x.test"},
		{"policy", "remove", sd, "--sandbox", "deadbeef", "r1"},
		{"policy", "replace", sd, "--sandbox", "deadbeef", policy},
		{"decisions", sd, "--sandbox", "deadbeef"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "needs root") || !strings.Contains(string(out), "sudo") {
			t.Errorf("sbx %s as nobody: %v, printed %q; want a failure that says it needs root and to use sudo", strings.Join(args, " "), err, out)
		}
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("the state directory is not empty: %v", entries)
	}
}

// TestOperateErrors: what a user can get wrong says what to do next.
func TestOperateErrors(t *testing.T) {
	state := t.TempDir()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"policy", "show", "--sandbox", "deadbeef", "--state-dir", state}, exitFailure, "sbx ps"},
		{[]string{"policy", "show"}, exitUsage, "--sandbox ID"},
		{[]string{"policy", "show", "--api", "127.0.0.1:1"}, exitUsage, "--token-file"},
		{[]string{"policy", "allow", "--sandbox", "deadbeef", "--state-dir", state, "*."}, exitUsage, "'*.' needs a domain"},
		{[]string{"policy", "allow", "--sandbox", "deadbeef", "--state-dir", state, "*"}, exitUsage, "explicit port list"},
		{[]string{"policy", "remove", "--sandbox", "deadbeef", "--state-dir", state}, exitUsage, "give the id"},
		{[]string{"decisions", "--sandbox", "deadbeef", "--state-dir", state}, exitFailure, "sbx ps"},
		{[]string{"decisions", "--file", filepath.Join(state, "missing.jsonl")}, exitFailure, "no such file"},
		{[]string{"stop", "--state-dir", state, "deadbeef"}, exitFailure, "sbx ps"},
		{[]string{"stop", "--state-dir", state, "not-an-id"}, exitFailure, "no running sandbox has the id, name or id prefix"},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			args []string
			code int
			want string
		}{[]string{"run", "--runtime", "containerd", "--containerd", filepath.Join(state, "none.sock"), "--rootfs", t.TempDir(), "--", "true"}, exitSbxFailed, "is it installed and running"})
	}
	for _, tt := range tests {
		_, stderr, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
}
