package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// Labels on the containers sbx makes in Docker, so that garbage
// collection finds them whatever their names: the sandbox id, and which
// of its two containers it is (DockerRoleCommand or DockerRolePause).
const (
	DockerLabelSandbox = "dev.sbx.sandbox"
	DockerLabelRole    = "dev.sbx.role"
	DockerRoleCommand  = "command"
	DockerRolePause    = "pause"
)

// DockerPausePath is where the pause container finds busybox: on the
// tmpfs that runc makes for /dev, so that nothing of the image is run and
// no file is made in it. Busybox runs the applet its first argument
// names when it is called as busybox.
const DockerPausePath = "/dev/.sbx-pause/busybox"

// Docker's default masked and read-only paths (moby's oci/defaults.go):
// HostConfig.MaskedPaths replaces the defaults, so ContainerSpec.Masked is
// added to them.
var (
	dockerMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	dockerReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// ErrDockerCapAdd is returned for a ContainerSpec that gives capabilities
// back to a user that is not root: Docker has no ambient capabilities, so
// such a user could not use them.
var ErrDockerCapAdd = errors.New("docker cannot give capabilities to a user that is not root (it sets no ambient capabilities)")

// dockerNames are the names of sandbox id's two containers in Docker.
func dockerNames(id string) (command, pause string) {
	return "sbx-" + id, "sbx-" + id + "-pause"
}

// dockerPauseConfig is the pause container that holds a Docker sandbox's
// network namespace: its network is disabled, so runc makes the namespace
// and Docker's network code does nothing in it (no sandbox, no hook,
// no hosts or resolv.conf files): a loopback, down, which sbx then fills.
// It comes from cs.Image but runs only
// busybox's sleep, mounted from the host; as nobody, with no capability,
// no-new-privileges, Docker's default seccomp profile and a read-only
// root, and small limits. It carries the sandbox's hostname, which the
// command's container, sharing its network, takes.
func dockerPauseConfig(cs ContainerSpec, busybox string) (*container.Config, *container.HostConfig) {
	pids := int64(8)
	memory := int64(32 << 20)
	swap := int64(0)
	if swapAccounted() {
		swap = memory
	}
	cfg := &container.Config{
		Image:      cs.Image,
		Hostname:   "sbx-" + cs.ID,
		User:       fmt.Sprintf("%d:%d", NobodyID, NobodyID),
		Entrypoint: []string{DockerPausePath, "sleep", "2147483647"},
		Cmd:        []string{},
		WorkingDir: "/",
		Labels:     map[string]string{DockerLabelSandbox: cs.ID, DockerLabelRole: DockerRolePause},
		// runc makes the namespace, with nothing in it: Docker's network
		// code makes no sandbox for it, runs no hook in it.
		NetworkDisabled: true,
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		Init:           new(bool), // none of the daemon's default: busybox is all that runs
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		LogConfig:      container.LogConfig{Type: "none"},
		Resources:      container.Resources{PidsLimit: &pids, Memory: memory, MemorySwap: swap},
		Mounts: []mount.Mount{{Type: mount.TypeBind, Source: busybox, Target: DockerPausePath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}},
	}
	return cfg, hc
}

// dockerCommandConfig is the command's container: it joins the pause
// container's network (and with it the sandbox's namespace and hostname)
// and gets none of Docker's; it runs as user, with DroppedCapabilities
// and CAP_NET_ADMIN dropped (Docker's whole default set is dropped and
// root gets back BaseCapabilities and cs.CapAdd; any other user gets no
// capability), no-new-privileges, Docker's default seccomp profile, a
// read-only root and cs.Limits. recursiveRO says whether the daemon makes
// read-only binds read-only all the way down (API 1.44 and later); when
// it does not, read-only binds leave out the mounts below them rather
// than show them writable.
func dockerCommandConfig(cs ContainerSpec, pause string, user dockerUser, recursiveRO bool) (*container.Config, *container.HostConfig, error) {
	if user.UID != 0 && len(cs.CapAdd) > 0 {
		return nil, nil, fmt.Errorf("capabilities %s for uid %d: %w", strings.Join(cs.CapAdd, ", "), user.UID, ErrDockerCapAdd)
	}
	for _, c := range cs.CapAdd {
		if !slices.Contains(DroppedCapabilities, c) {
			return nil, nil, fmt.Errorf("capability %s: only those of DroppedCapabilities can be given back", c)
		}
	}
	args := cs.Args
	mounts := slices.Clip(cs.Mounts)
	var ms []mount.Mount
	if cs.Init != "" {
		args = append([]string{InitPath, "-g", "--"}, cs.Args...)
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: cs.Init, Target: InitPath, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	for _, m := range mounts {
		dm, err := dockerMount(m.Destination, m.Source, m.Type, m.Options, recursiveRO)
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, dm)
	}
	cfg := &container.Config{
		Image:        cs.Image,
		User:         fmt.Sprintf("%d:%d", user.UID, user.GID),
		Entrypoint:   slices.Clone(args),
		Cmd:          []string{},
		Env:          slices.Clone(cs.Env),
		WorkingDir:   cs.Cwd,
		Tty:          cs.TTY,
		AttachStdout: true,
		AttachStderr: true,
		Labels:       map[string]string{DockerLabelSandbox: cs.ID, DockerLabelRole: DockerRoleCommand},
	}
	var capAdd []string
	if user.UID == 0 {
		capAdd = append(slices.Clone(BaseCapabilities), cs.CapAdd...)
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode("container:" + pause),
		Init:           new(bool), // cs.Init, never the daemon's default on top
		CapDrop:        []string{"ALL"},
		CapAdd:         capAdd,
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		LogConfig:      container.LogConfig{Type: "none"},
		Mounts:         ms,
		Resources:      dockerResources(cs.Limits),
	}
	for _, g := range user.Groups {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatUint(uint64(g), 10))
	}
	if len(cs.Masked) > 0 {
		hc.MaskedPaths = append(slices.Clone(dockerMaskedPaths), cs.Masked...)
		hc.ReadonlyPaths = slices.Clone(dockerReadonlyPaths)
	}
	return cfg, hc, nil
}

// dockerResources turns l into Docker's resources, as withLimits does for
// containerd: memory with no swap beyond it where the kernel accounts
// swap, CPU time as a quota of 100 ms periods, processes.
func dockerResources(l Limits) container.Resources {
	var r container.Resources
	if l.Memory > 0 {
		r.Memory = l.Memory
		if swapAccounted() {
			r.MemorySwap = l.Memory
		}
	}
	if l.CPUs > 0 {
		r.CPUPeriod = 100_000
		r.CPUQuota = int64(l.CPUs * 100_000)
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.PidsLimit = &pids
	}
	return r
}

// dockerMount turns an OCI mount of ContainerSpec.Mounts into Docker's.
// Binds are recursive and private, read-only when "ro" is among the
// options; Docker sets neither nosuid nor nodev on them, which
// no-new-privileges (set-user-ID bits give nothing) and Docker's device
// cgroup (no device but the harmless ones opens) stand in for. Tmpfs
// mounts keep their size and mode.
func dockerMount(dst, src, typ string, opts []string, recursiveRO bool) (mount.Mount, error) {
	switch typ {
	case "bind":
		ro := slices.Contains(opts, "ro")
		bo := &mount.BindOptions{Propagation: mount.PropagationRPrivate}
		switch {
		case ro && recursiveRO:
			bo.ReadOnlyForceRecursive = true
		case ro:
			// A plain read-only bind would leave the mounts below it
			// writable: leave them out instead.
			bo.NonRecursive = true
		}
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro, BindOptions: bo}, nil
	case "tmpfs":
		to := &mount.TmpfsOptions{}
		for _, o := range opts {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "size":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return mount.Mount{}, fmt.Errorf("tmpfs at %s: size %q: %w", dst, v, err)
				}
				to.SizeBytes = n
			case "mode":
				n, err := strconv.ParseUint(v, 8, 32)
				if err != nil {
					return mount.Mount{}, fmt.Errorf("tmpfs at %s: mode %q: %w", dst, v, err)
				}
				to.Mode = os.FileMode(n & 0o777)
				if n&0o1000 != 0 {
					to.Mode |= os.ModeSticky
				}
			}
		}
		return mount.Mount{Type: mount.TypeTmpfs, Target: dst, TmpfsOptions: to}, nil
	}
	return mount.Mount{}, fmt.Errorf("mount at %s: type %q is not one Docker takes here (bind or tmpfs)", dst, typ)
}

// dockerUser is who the command runs as, with supplementary groups.
type dockerUser struct {
	UID, GID uint32
	Groups   []uint32
}

// imageUser resolves the user an image's configuration names (spec:
// user[:group], by name or number) against the image's /etc/passwd and
// /etc/group, as runc would: a number not in passwd has group 0; a name
// not in passwd is an error. Supplementary groups are those of group
// that list the user by name. keepImageUser then applies what withUser
// applies for containerd: the image's user is kept only when it is not
// root, and never with group 0 (primary: NobodyID instead;
// supplementary: left out); fallback is used otherwise, and for an image
// that names no user.
func imageUser(spec string, passwd, group []byte, fallback dockerUser) (dockerUser, error) {
	if spec == "" {
		return fallback, nil
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	var u dockerUser
	name := ""
	found := false
	for _, f := range colonLines(passwd, 4) {
		if f[0] == userPart || f[2] == userPart {
			uid, err1 := strconv.ParseUint(f[2], 10, 32)
			gid, err2 := strconv.ParseUint(f[3], 10, 32)
			if err1 != nil || err2 != nil {
				continue
			}
			u.UID, u.GID, name, found = uint32(uid), uint32(gid), f[0], true
			break
		}
	}
	if !found {
		n, err := strconv.ParseUint(userPart, 10, 32)
		if err != nil {
			return dockerUser{}, fmt.Errorf("the image's user %q is not in its /etc/passwd", userPart)
		}
		u.UID, u.GID = uint32(n), 0
	}
	groups := colonLines(group, 4)
	if hasGroup {
		gid, err := strconv.ParseUint(groupPart, 10, 32)
		if err != nil {
			ok := false
			for _, f := range groups {
				if f[0] == groupPart {
					gid, err = strconv.ParseUint(f[2], 10, 32)
					ok = err == nil
					break
				}
			}
			if !ok {
				return dockerUser{}, fmt.Errorf("the image's group %q is not in its /etc/group", groupPart)
			}
		}
		u.GID = uint32(gid)
	} else if name != "" {
		for _, f := range groups {
			gid, err := strconv.ParseUint(f[2], 10, 32)
			if err == nil && slices.Contains(strings.Split(f[3], ","), name) && uint32(gid) != u.GID {
				u.Groups = append(u.Groups, uint32(gid))
			}
		}
	}
	if u.UID == 0 {
		return fallback, nil
	}
	if u.GID == 0 {
		u.GID = NobodyID
	}
	u.Groups = slices.DeleteFunc(u.Groups, func(g uint32) bool { return g == 0 })
	return u, nil
}

// colonLines splits a passwd or group file into lines of at least n
// colon-separated fields, skipping comments and short lines.
func colonLines(data []byte, n int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}
