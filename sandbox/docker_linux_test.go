package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The images the Docker tests load: busybox and a few files, one with no
// user, one whose configuration names the user app (uid 1001, primary
// group root, also in group extra).
const (
	testDockerImage     = "sbxtest/busybox:docker"
	testDockerUserImage = "sbxtest/busybox:docker-user"
)

// dockerImageTar writes a docker-archive (what docker save writes, and
// every Docker's ImageLoad reads) of testDockerImage and
// testDockerUserImage.
func dockerImageTar(t *testing.T) []byte {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range []string{"bin/", "etc/", "proc/", "dev/", "sys/", "tmp/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	file := func(w *tar.Writer, name string, mode int64, data []byte) {
		w.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))})
		w.Write(data)
	}
	file(tw, "bin/busybox", 0o755, bb)
	for _, c := range []string{"sh", "echo", "cat", "grep", "nc", "sleep", "true", "id", "ls", "tty"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	file(tw, "etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1001:0:app:/tmp:/bin/sh\n"))
	file(tw, "etc/group", 0o644, []byte("root:x:0:app\nextra:x:2000:app\n"))
	file(tw, "not-executable", 0o644, []byte("data\n"))
	tw.Close()
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])

	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	file(aw, layerHex+"/layer.tar", 0o644, layer.Bytes())
	var manifest []map[string]any
	for _, img := range []struct{ ref, user string }{{testDockerImage, ""}, {testDockerUserImage, "app"}} {
		config, _ := json.Marshal(map[string]any{
			"architecture": "amd64", "os": "linux",
			"config": map[string]any{"Env": []string{"PATH=/bin", "FROM_IMAGE=yes"}, "Cmd": []string{"sh"}, "User": img.user},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
		})
		sum := sha256.Sum256(config)
		name := hex.EncodeToString(sum[:]) + ".json"
		file(aw, name, 0o644, config)
		manifest = append(manifest, map[string]any{"Config": name, "RepoTags": []string{img.ref}, "Layers": []string{layerHex + "/layer.tar"}})
	}
	m, _ := json.Marshal(manifest)
	file(aw, "manifest.json", 0o644, m)
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// connectDocker connects to Docker and loads the test images, which are
// removed when the test ends.
func connectDocker(t *testing.T) *Docker {
	t.Helper()
	ctx := context.Background()
	d, err := ConnectDocker(ctx, "")
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs docker.io and starts dockerd)", err)
	}
	t.Cleanup(func() { d.Close() })
	res, err := d.client.ImageLoad(ctx, bytes.NewReader(dockerImageTar(t)), client.ImageLoadWithQuiet(true))
	if err != nil {
		t.Fatalf("loading the test images: %v", err)
	}
	msg, _ := io.ReadAll(res)
	res.Close()
	if !bytes.Contains(msg, []byte("Loaded image")) {
		t.Fatalf("loading the test images: %s", msg)
	}
	t.Cleanup(func() {
		for _, ref := range []string{testDockerImage, testDockerUserImage} {
			d.client.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	})
	return d
}

// testRuntime is a runtime the privileged tests start sandboxes with, and
// how a ContainerSpec names a root filesystem with busybox in it.
type testRuntime struct {
	name string
	rt   Runtime
	root func(t *testing.T, cs *ContainerSpec)
}

// testRuntimes connects to containerd and Docker, each closed when the
// test ends.
func testRuntimes(t *testing.T) []testRuntime {
	t.Helper()
	cd, err := ConnectContainerd(context.Background(), DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.Close() })
	return []testRuntime{
		{name: "containerd", rt: cd, root: func(t *testing.T, cs *ContainerSpec) {
			root := busyboxRootfs(t)
			for _, c := range []string{"nc", "sleep", "id", "tty"} {
				os.Symlink("busybox", filepath.Join(root, "bin", c))
			}
			os.WriteFile(filepath.Join(root, "not-executable"), []byte("data\n"), 0o644)
			cs.RootFS = root
		}},
		{name: "docker", rt: connectDocker(t), root: func(_ *testing.T, cs *ContainerSpec) { cs.Image = testDockerImage }},
	}
}

// netprobe builds testdata/netprobe statically, once per test.
func netprobe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "netprobe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/netprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	return bin
}

// netReport is what testdata/netprobe prints.
type netReport struct {
	Probes []probe           `json:"probes"`
	Status map[string]string `json:"status"`
	UID    int               `json:"uid"`
	Links  []string          `json:"links"`
	Netns  uint64            `json:"netns"`
}

// TestPrivilegedIsolation runs testdata/netprobe as a sandbox's command,
// with each runtime, as nobody and as root: from inside, only the
// gateway's port answers; another port of its address (where something
// listens), another address, UDP, ICMP, raw sockets and IPv6 fail at
// once; the command holds neither CAP_NET_ADMIN nor CAP_NET_RAW nor a
// capability of DroppedCapabilities, runs under seccomp with
// no-new-privileges, as the user asked; the namespace holds only the
// sandbox's links. With Docker the command's container has no network
// of Docker's: it is in the pause container's, whose namespace is the
// sandbox's. After Close nothing is left.
func TestPrivilegedIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables, containerd and Docker (CI runs as root)")
	}
	ctx := context.Background()
	probeBin := netprobe(t)
	for _, tr := range testRuntimes(t) {
		for _, uid := range []uint32{NobodyID, 0} {
			t.Run(tr.name+"/uid="+strconvU(uid), func(t *testing.T) {
				var out, errOut bytes.Buffer
				gw := &fakeGateway{}
				spec := Spec{
					Command:  []string{"/sbx-netprobe"},
					StateDir: t.TempDir(),
					Pool:     testPool,
					Runtime:  tr.rt,
					Gateway:  gw.start,
					Container: ContainerSpec{UID: uid, GID: uid, Limits: Limits{Pids: 64},
						Env: []string{"SBX_PROBE_OTHER=" + strconvU(DefaultGatewayPort+1)},
						Mounts: []specs.Mount{{Destination: "/sbx-netprobe", Source: probeBin, Type: "bind",
							Options: []string{"rbind", "ro"}}}},
					Stdio: Stdio{Out: &out, Err: &errOut},
				}
				tr.root(t, &spec.Container)
				s, err := Start(ctx, spec)
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				var sandboxNS unix.Stat_t
				if err := unix.Stat("/var/run/netns/"+s.Names.Netns, &sandboxNS); err != nil {
					t.Fatal(err)
				}
				if d, ok := tr.rt.(*Docker); ok {
					checkDockerNetwork(t, d, s)
				}
				waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if code, err := s.Wait(waitCtx); err != nil || code != 0 {
					t.Fatalf("Wait = %d, %v; want 0 (stderr %q)", code, err, errOut.String())
				}
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				var r netReport
				if err := json.Unmarshal(out.Bytes(), &r); err != nil {
					t.Fatalf("probe output %q (stderr %q): %v", out.String(), errOut.String(), err)
				}
				checkIsolation(t, r, uid)
				if r.Netns != sandboxNS.Ino {
					t.Errorf("the command ran in network namespace %d, not the sandbox's %d", r.Netns, sandboxNS.Ino)
				}
				if !slices.Equal(r.Links, []string{"lo", s.Names.InnerVeth}) {
					t.Errorf("links in the namespace %v, want lo and %s only", r.Links, s.Names.InnerVeth)
				}
				assertSandboxGone(t, tr.rt, spec.StateDir, s.ID)
			})
		}
	}
}

// checkIsolation checks a probe's report against docs/network.md.
func checkIsolation(t *testing.T, r netReport, uid uint32) {
	t.Helper()
	if len(r.Probes) < 8 {
		t.Fatalf("only %d probes ran: %+v", len(r.Probes), r.Probes)
	}
	for _, p := range r.Probes {
		want := p.Name == "gateway port"
		if p.OK != want {
			t.Errorf("%s from inside: ok=%v (%s), want ok=%v", p.Name, p.OK, p.Err, want)
		}
		if !want && p.Elapsed > time.Second {
			t.Errorf("%s from inside failed after %v, want at once", p.Name, p.Elapsed)
		}
		t.Logf("%s: ok=%v err=%q in %v", p.Name, p.OK, p.Err, p.Elapsed)
	}
	// The namespace is the kernel's default, whoever made it: no group
	// may open ICMP echo sockets (Docker's namespaces let every group).
	for _, p := range r.Probes {
		if p.Name == "icmp echo (ping socket)" && !strings.Contains(p.Err, "permission denied") {
			t.Errorf("an ICMP echo socket could be opened: %s", p.Err)
		}
	}
	if r.UID != int(uid) {
		t.Errorf("uid %d, want %d", r.UID, uid)
	}
	forbidden := []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}
	forbidden = append(forbidden, DroppedCapabilities...)
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
		bits, err := parseHex(r.Status[k])
		if err != nil {
			t.Fatalf("%s = %q: %v", k, r.Status[k], err)
		}
		for _, name := range forbidden {
			if bits&(1<<capNumber(t, name)) != 0 {
				t.Errorf("%s = %s holds %s", k, r.Status[k], name)
			}
		}
		if uid != 0 && k != "CapBnd" && bits != 0 {
			t.Errorf("uid %d: %s = %s, want no capability", uid, k, r.Status[k])
		}
	}
	if eff, _ := parseHex(r.Status["CapEff"]); uid == 0 && eff != capBits(t, BaseCapabilities) {
		t.Errorf("root: CapEff = %s, want exactly %v", r.Status["CapEff"], BaseCapabilities)
	}
	if r.Status["NoNewPrivs"] != "1" || r.Status["Seccomp"] != "2" {
		t.Errorf("NoNewPrivs %q, Seccomp %q; want 1 and 2", r.Status["NoNewPrivs"], r.Status["Seccomp"])
	}
}

// checkDockerNetwork checks, while sandbox s runs, that its command's
// container has no network of Docker's: it shares the pause container's,
// which is Docker's "none", and the namespace it runs in is the sandbox's.
func checkDockerNetwork(t *testing.T, d *Docker, s *Sandbox) {
	t.Helper()
	ctx := context.Background()
	command, pauseName := dockerNames(s.ID)
	cmd, err := d.client.ContainerInspect(ctx, command, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pause, err := d.client.ContainerInspect(ctx, pauseName, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(cmd.Container.HostConfig.NetworkMode), "container:"+pause.Container.ID; got != want {
		t.Errorf("the command's network mode is %q, want %q", got, want)
	}
	if got := string(pause.Container.HostConfig.NetworkMode); got != "none" || !pause.Container.Config.NetworkDisabled {
		t.Errorf("the pause container's network mode is %q (disabled: %v), want none and disabled", got, pause.Container.Config.NetworkDisabled)
	}
	if ns := pause.Container.NetworkSettings; ns != nil && (len(ns.Networks) > 0 || ns.SandboxKey != "") {
		t.Errorf("Docker made a network for the pause container: %+v", ns)
	}
	if ns := cmd.Container.NetworkSettings; ns != nil && len(ns.Networks) > 0 {
		t.Errorf("the command's container is on Docker networks %v", ns.Networks)
	}
	if hc := cmd.Container.HostConfig; hc.Privileged || !hc.ReadonlyRootfs || !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("host config %+v: privileged, or root writable, or no-new-privileges missing", hc)
	}
	var sandboxNS unix.Stat_t
	if err := unix.Stat("/var/run/netns/"+s.Names.Netns, &sandboxNS); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pid  int
	}{{command, cmd.Container.State.Pid}, {pauseName, pause.Container.State.Pid}} {
		var st unix.Stat_t
		if c.pid <= 0 {
			continue // the command may have ended already
		}
		if err := unix.Stat("/proc/"+strconvU(uint32(c.pid))+"/ns/net", &st); err != nil {
			continue
		}
		if st.Ino != sandboxNS.Ino || st.Dev != sandboxNS.Dev {
			t.Errorf("%s runs in network namespace %d, not the sandbox's %d", c.name, st.Ino, sandboxNS.Ino)
		}
	}
	// Nothing of Docker's in the namespace: its links are the sandbox's.
	h, err := netns.GetFromName(s.Names.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	links, _ := nh.LinkList()
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	if !slices.Equal(names, []string{"lo", s.Names.InnerVeth}) {
		t.Errorf("links in the namespace: %v, want lo and %s", names, s.Names.InnerVeth)
	}
}

// TestPrivilegedDockerContainer: through Docker, a command that cannot
// be executed is a StartError 126 and one that does not exist 127, as in
// a shell, and nothing is left; standard input reaches the command and
// its end is the command's; an image's user that is not root is kept
// without group 0; a crashed run's containers (both) are found by
// ContainerIDs and removed by RemoveContainer.
func TestPrivilegedDockerContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and Docker (CI runs as root)")
	}
	ctx := context.Background()
	d := connectDocker(t)
	start := func(t *testing.T, cs ContainerSpec, stdio Stdio, args ...string) (*Sandbox, error) {
		gw := &fakeGateway{}
		if cs.Image == "" {
			cs.Image = testDockerImage
		}
		cs.Limits = Limits{Pids: 64}
		spec := Spec{Command: args, StateDir: t.TempDir(), Pool: testPool, Runtime: d, Gateway: gw.start, Container: cs, Stdio: stdio}
		s, err := Start(ctx, spec)
		if err == nil {
			t.Cleanup(func() { s.Close() })
		} else {
			assertSandboxGone(t, d, spec.StateDir, gw.cfg.ID)
		}
		return s, err
	}
	for _, tc := range []struct {
		args []string
		code int
	}{{[]string{"/not-executable"}, ExitCannotExecute}, {[]string{"/bin/no-such-command"}, ExitNotFound}, {[]string{"no-such-command"}, ExitNotFound}} {
		_, err := start(t, ContainerSpec{UID: NobodyID, GID: NobodyID}, Stdio{}, tc.args...)
		var se *StartError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("%s: %v, want a StartError %d", tc.args[0], err, tc.code)
		}
	}

	t.Run("stdin", func(t *testing.T) {
		var out bytes.Buffer
		s, err := start(t, ContainerSpec{UID: NobodyID, GID: NobodyID}, Stdio{In: strings.NewReader("hello\n"), Out: &out},
			"sh", "-c", "cat; echo end; grep -q '^127.0.0.1.*localhost' /etc/hosts || echo no-localhost; exit 3")
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if code, err := s.Wait(waitCtx); err != nil || code != 3 {
			t.Errorf("Wait = %d, %v; want 3", code, err)
		}
		s.Close()
		if out.String() != "hello\nend\n" {
			t.Errorf("output %q, want the input and end", out.String())
		}
	})

	t.Run("image user", func(t *testing.T) {
		var out bytes.Buffer
		s, err := start(t, ContainerSpec{Image: testDockerUserImage, UID: NobodyID, GID: NobodyID, KeepImageUser: true},
			Stdio{Out: &out}, "id")
		if err != nil {
			t.Fatal(err)
		}
		s.Wait(ctx)
		s.Close()
		got := strings.Fields(out.String())
		if len(got) != 3 || got[0] != "uid=1001(app)" || got[1] != "gid=65534" ||
			!slices.Contains(strings.Split(strings.TrimPrefix(got[2], "groups="), ","), "2000(extra)") || strings.Contains(got[2], "(root)") {
			t.Errorf("id: %q, want uid 1001, gid 65534, group 2000 and not root's", out.String())
		}
	})

	t.Run("leftovers", func(t *testing.T) {
		id, _ := NewID()
		names, _ := NamesFor(id)
		t.Cleanup(func() {
			d.RemoveContainer(ctx, id)
			TeardownNetwork(ctx, names)
		})
		cs := ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, Image: testDockerImage, Args: []string{"true"},
			UID: NobodyID, GID: NobodyID}
		if err := d.MakeNamespace(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Create(ctx, cs, Stdio{}); err != nil {
			t.Fatal(err)
		}
		// The run crashes here: nothing is deleted.
		ids, err := d.ContainerIDs(ctx)
		if err != nil || !slices.Contains(ids, id) {
			t.Fatalf("ContainerIDs = %v, %v; want %s among them", ids, err, id)
		}
		if err := d.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		if ids, _ := d.ContainerIDs(ctx); slices.Contains(ids, id) {
			t.Errorf("ContainerIDs still lists %s after RemoveContainer", id)
		}
		for _, name := range []string{"sbx-" + id, "sbx-" + id + "-pause"} {
			if _, err := d.client.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
				t.Errorf("container %s left", name)
			}
		}
		if err := TeardownNetwork(ctx, names); err != nil {
			t.Fatal(err)
		}
		assertNetworkGone(t, names)
	})
}

// capNames are the capabilities' numbers (linux/capability.h).
var capNames = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP"}

func capNumber(t *testing.T, name string) int {
	t.Helper()
	i := slices.Index(capNames, name)
	if i < 0 {
		t.Fatalf("unknown capability %s", name)
	}
	return i
}

func capBits(t *testing.T, names []string) uint64 {
	t.Helper()
	var bits uint64
	for _, n := range names {
		bits |= 1 << capNumber(t, n)
	}
	return bits
}

func parseHex(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

func strconvU(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
