package sandbox

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/hashicorp/go-multierror"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/versions"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrDockerStopped is what Wait returns when dockerd stopped the
// command's container, or will when it starts again: a dockerd without
// live-restore ends its containers with itself. sbx killed what was
// left of the command first.
var ErrDockerStopped = errors.New("dockerd stopped the container")

// busyboxCandidates are where Debian's busybox-static puts busybox.
var busyboxCandidates = []string{"/usr/bin/busybox", "/bin/busybox"}

// findStaticBusybox returns the path of a statically linked busybox on
// the host: the pause container runs it, whatever its image holds.
func findStaticBusybox() (string, error) {
	for _, p := range busyboxCandidates {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", errors.New("no statically linked busybox on this machine, which Docker sandboxes need to hold their network namespace: apt-get install busybox-static")
}

// Docker runs sandbox containers through a Docker daemon (docs/runtimes.md):
// images from Docker's store, and the sandbox's network namespace, with
// all of sbx's rules, instead of any network of Docker's.
//
// Docker cannot put a container in a network namespace given by path, so
// each sandbox has two containers. MakeNamespace starts a pause container,
// sbx-<id>-pause, with its network disabled (runc makes an empty
// namespace; Docker's network code makes nothing) and mounts it at
// /var/run/netns/sbx-<id>, where SetupNetwork fills it as it fills the one
// CreateNamespace makes for containerd. Create then creates the command's
// container, sbx-<id>, in the pause container's network ("container:"
// mode), which Start starts. Both carry DockerLabelSandbox, for garbage
// collection. A Docker is safe for concurrent use.
type Docker struct {
	client      *client.Client
	busybox     string
	recursiveRO bool // the daemon makes read-only binds read-only all the way down

	mu     sync.Mutex
	pauses map[string]dockerPause // by sandbox id, from MakeNamespace to Create
}

// dockerPause is a sandbox's pause container.
type dockerPause struct {
	id        string   // the container's id
	imageUser string   // the user cs.Image's configuration names
	cgroups   []string // its cgroups, for killing it without dockerd
}

// ConnectDocker connects to the Docker daemon at host (unix:///path or
// tcp://addr); "" means DOCKER_HOST, or Docker's default socket.
func ConnectDocker(ctx context.Context, host string) (*Docker, error) {
	hint := "is it installed and running? (apt-get install docker.io; scripts/test.sh starts dockerd where there is no systemd)"
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	busybox, err := findStaticBusybox()
	if err != nil {
		return nil, err
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to Docker: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ping, err := c.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("docker at %s does not answer: %s: %w", c.DaemonHost(), hint, err)
	}
	return &Docker{client: c, busybox: busybox, recursiveRO: !versions.LessThan(ping.APIVersion, "1.44"),
		pauses: map[string]dockerPause{}}, nil
}

// Close closes the connection.
func (d *Docker) Close() error { return d.client.Close() }

// MakeNamespace starts cs's pause container and mounts its network
// namespace at cs.NetnsPath. The namespace holds a loopback, down, and
// nothing else; nothing but the pause container's sleep runs in it. cs.Image must
// be in Docker's store. On error nothing is left.
func (d *Docker) MakeNamespace(ctx context.Context, cs ContainerSpec) (retErr error) {
	if cs.Image == "" {
		return errors.New("docker runs images only: ContainerSpec.Image is required (a root directory cannot be given to Docker read-only with its submounts)")
	}
	img, err := d.client.ImageInspect(ctx, cs.Image)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("image %s is not in Docker's store (load it with: docker load -i FILE, or pull it with: docker pull %s): %w", cs.Image, cs.Image, err)
	} else if err != nil {
		return fmt.Errorf("inspecting image %s: %w", cs.Image, err)
	}
	var imageUser string
	if img.Config != nil {
		imageUser = img.Config.User
	}
	_, name := dockerNames(cs.ID)
	cfg, hc := dockerPauseConfig(cs, d.busybox)
	created, err := d.client.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return fmt.Errorf("creating container %s: %w", name, err)
	}
	var cgroups []string
	defer func() {
		if retErr != nil {
			// dockerd may be gone (a failed start is often why): then
			// what it started is killed without it.
			if err := d.removeOrKill(context.WithoutCancel(ctx), created.ID, cgroups, deleteTimeout); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}
	}()
	if _, err := d.client.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("starting container %s: %w", name, err)
	}
	pid, err := d.runningPid(ctx, created.ID)
	if err != nil {
		return err
	}
	cgroups = procCgroupsNaming(pid, created.ID)
	if err := mountNetns(pid, cs.NetnsPath); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			unix.Unmount(cs.NetnsPath, unix.MNT_DETACH)
			os.Remove(cs.NetnsPath)
		}
	}()
	// Docker lets every group open ICMP echo sockets in its containers'
	// namespaces; the sandbox's rules refuse ICMP anyway, but the
	// namespace is made like CreateNamespace's: the kernel's default.
	if err := netnsSysctl(cs.NetnsPath, "net/ipv4/ping_group_range", "1\t0"); err != nil {
		return err
	}
	// The pid was the pause container's when it was mounted only if the
	// container still runs as that pid now.
	if again, err := d.runningPid(ctx, created.ID); err != nil || again != pid {
		return fmt.Errorf("container %s stopped while its network namespace was mounted (pid %d, then %d): %v", name, pid, again, err)
	}
	d.mu.Lock()
	d.pauses[cs.ID] = dockerPause{id: created.ID, imageUser: imageUser, cgroups: cgroups}
	d.mu.Unlock()
	return nil
}

// runningPid returns the pid of container id's process, which must run.
func (d *Docker) runningPid(ctx context.Context, id string) (int, error) {
	res, err := d.client.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("inspecting container %s: %w", id, err)
	}
	st := res.Container.State
	if st == nil || !st.Running || st.Pid <= 0 {
		return 0, fmt.Errorf("container %s does not run (%+v)", id, st)
	}
	return st.Pid, nil
}

// mountNetns bind-mounts the network namespace of process pid at path, as
// ip netns attach does. It refuses the host's own namespace: sbx's rules
// must never go there.
func mountNetns(pid int, path string) (retErr error) {
	src := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	var ns, self unix.Stat_t
	if err := unix.Stat(src, &ns); err != nil {
		return fmt.Errorf("finding the network namespace of pid %d: %w", pid, err)
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return err
	}
	if ns.Ino == self.Ino && ns.Dev == self.Dev {
		return fmt.Errorf("pid %d is in the host's network namespace", pid)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("creating network namespace %s: %w", filepath.Base(path), err)
	}
	f.Close()
	if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return fmt.Errorf("mounting the network namespace of pid %d at %s: %w", pid, path, err)
	}
	return nil
}

// Create creates cs's container in the network of the pause container
// that MakeNamespace started for cs.ID, with its standard streams
// attached: nothing of the command runs, and no standard input is read,
// until Start. Its output is copied until the container ends. On error
// the command's container is not left (the pause container is, for
// RemoveContainer).
func (d *Docker) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	c, err := d.create(ctx, cs, stdio)
	if err != nil {
		return nil, err // not a nil *DockerContainer in a non-nil interface
	}
	return c, nil
}

func (d *Docker) create(ctx context.Context, cs ContainerSpec, stdio Stdio) (_ *DockerContainer, retErr error) {
	d.mu.Lock()
	pause, ok := d.pauses[cs.ID]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %s has no pause container: MakeNamespace comes first", cs.ID)
	}
	user := dockerUser{UID: cs.UID, GID: cs.GID}
	if cs.KeepImageUser && pause.imageUser != "" {
		passwd, group, err := d.userFiles(ctx, pause.id)
		if err != nil {
			return nil, err
		}
		if user, err = imageUser(pause.imageUser, passwd, group, user); err != nil {
			return nil, fmt.Errorf("image %s: %w", cs.Image, err)
		}
	}
	// Docker writes no /etc/hosts for a container whose network it did
	// not make, and its empty mount point hides the image's: the
	// loopback names at least, unless the caller mounts its own.
	if !slices.ContainsFunc(cs.Mounts, func(m specs.Mount) bool { return m.Destination == "/etc/hosts" }) {
		if err := writeDockerHosts(); err != nil {
			return nil, err
		}
		cs.Mounts = append(slices.Clip(cs.Mounts), specs.Mount{Destination: "/etc/hosts", Source: DockerHostsFile, Type: "bind",
			Options: []string{"rbind", "ro"}})
	}
	cfg, hc, err := dockerCommandConfig(cs, pause.id, user, d.recursiveRO)
	if err != nil {
		return nil, err
	}
	if stdio.In != nil {
		cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin = true, true, true
	}
	name, _ := dockerNames(cs.ID)
	created, err := d.client.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return nil, fmt.Errorf("creating container %s: %w", name, err)
	}
	out, errOut := stdio.Out, stdio.Err
	if out == nil {
		out = io.Discard
	}
	if errOut == nil {
		errOut = io.Discard
	}
	c := &DockerContainer{d: d, id: created.ID, name: name, sandbox: cs.ID, pause: pause.id, pauseCgroups: pause.cgroups,
		tty: cs.TTY, stdin: stdio.In != nil, out: out, errOut: errOut,
		started: make(chan struct{}), outDone: make(chan struct{}), exitCh: make(chan dockerExit, 1), reattached: make(chan struct{})}
	c.cleanupCtx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if retErr != nil {
			if err := c.deleteCommand(context.WithoutCancel(ctx), deleteTimeout); err != nil {
				retErr = multierror.Append(retErr, err)
			}
			c.cancel()
		}
	}()
	// Whether the container can outlive a restart of dockerd: without
	// live-restore, dockerd stops it when it stops. Asked beside the
	// start, not before it (/info is one of dockerd's slower answers):
	// it is read only once dockerd has gone away, and until the answer
	// comes the container is taken to stop with dockerd, as when dockerd
	// does not answer at all.
	go func() {
		if info, err := d.client.Info(c.cleanupCtx, client.InfoOptions{}); err == nil {
			c.liveRestore.Store(info.Info.LiveRestoreEnabled)
		}
	}()
	// Attached before the start, so that no output is lost.
	if err := c.attach(ctx); err != nil {
		return nil, err
	}
	if stdio.In != nil {
		c.in = &gatedReader{r: stdio.In, open: c.started, done: c.cleanupCtx.Done()}
	}
	// Registered now (the daemon answers once it waits), so that an exit
	// right after the start is not missed.
	w := d.client.ContainerWait(c.cleanupCtx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	c.waitRes, c.waitErr = w.Result, w.Error
	select {
	case err := <-c.waitErr:
		return nil, fmt.Errorf("waiting for container %s: %w", name, err)
	default:
	}
	return c, nil
}

// DockerHostsFile is the /etc/hosts of Docker sandboxes: the loopback's
// names.
const DockerHostsFile = "/var/lib/sbx/docker/hosts"

// dockerHosts is DockerHostsFile's content.
const dockerHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// writeDockerHosts writes DockerHostsFile when it is missing or differs,
// atomically, so that sandboxes starting at once never see half of it.
func writeDockerHosts() error {
	if data, err := os.ReadFile(DockerHostsFile); err == nil && string(data) == dockerHosts {
		return nil
	}
	dir := filepath.Dir(DockerHostsFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".hosts-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(dockerHosts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), DockerHostsFile)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", DockerHostsFile, err)
	}
	return nil
}

// userFiles returns /etc/passwd and /etc/group of container id (empty
// when the image has none).
func (d *Docker) userFiles(ctx context.Context, id string) (passwd, group []byte, err error) {
	read := func(path string) ([]byte, error) {
		res, err := d.client.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
		if errdefs.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading %s of the image: %w", path, err)
		}
		defer res.Content.Close()
		tr := tar.NewReader(res.Content)
		for {
			h, err := tr.Next()
			if err != nil {
				return nil, nil // a link or a directory: as if absent
			}
			if h.Typeflag == tar.TypeReg {
				return io.ReadAll(io.LimitReader(tr, 1<<20))
			}
		}
	}
	if passwd, err = read("/etc/passwd"); err != nil {
		return nil, nil, err
	}
	group, err = read("/etc/group")
	return passwd, group, err
}

// DockerContainer is a sandbox's command in Docker: created, attached,
// and started by Start.
//
// It outlasts a restart of dockerd that has live-restore: the wait and
// the output's attachment break with the daemon, and are made again once
// it answers. Output the command writes from the moment dockerd goes away
// until sbx is attached again is lost (the containers have no log driver
// that Docker could replay it from); the command blocks once the pipes
// between it and dockerd are full. A dockerd without live-restore stops
// its containers when it stops, or kills them when it starts again after
// a crash: the command cannot go on, and Wait fails with ErrDockerStopped
// once what is left of it is killed. When dockerd stays unreachable for
// runtimeLostAfter, the command is killed without it and Wait fails with
// ErrRuntimeLost.
type DockerContainer struct {
	d            *Docker
	id           string // the command's container
	name         string
	sandbox      string
	pause        string   // the pause container
	pauseCgroups []string // its cgroups, for killing it without dockerd
	tty, stdin   bool
	out, errOut  io.Writer
	in           io.Reader     // the gated standard input, nil for none
	started      chan struct{} // closed by Start once the command runs
	outDone      chan struct{} // closed when the output is copied, from the last attachment
	waitRes      <-chan container.WaitResponse
	waitErr      <-chan error
	exitCh       chan dockerExit // the command's end, or why it is not known, once
	liveRestore  atomic.Bool     // dockerd keeps the container across its restarts
	cgroups      []string        // the command's cgroups, from Start
	exited       atomic.Bool
	lost         atomic.Bool // sbx gave up on dockerd and killed the command without it

	mu         sync.Mutex
	att        *dockerAttachment // the latest attachment
	reattached chan struct{}     // closed, and replaced, when att is replaced

	deleted sync.Once
	delErr  error
	// cleanupCtx outlives the caller's context: the wait and Delete use
	// it; cancel ends the wait and the stdin gate.
	cleanupCtx context.Context
	cancel     context.CancelFunc
}

// dockerExit is what Wait returns.
type dockerExit struct {
	code   int
	err    error
	exited bool // the command's own end
}

// dockerAttachment is one attachment to the command's standard streams.
type dockerAttachment struct {
	conn *client.HijackedResponse
	done chan struct{} // closed once its output is copied to its end
}

// attach attaches to the command's streams and copies its output until
// the attachment ends (the command's processes are gone, dockerd went
// away, or Delete closes it).
func (c *DockerContainer) attach(ctx context.Context) error {
	res, err := c.d.client.ContainerAttach(ctx, c.id, client.ContainerAttachOptions{
		Stream: true, Stdin: c.stdin, Stdout: true, Stderr: true})
	if err != nil {
		return fmt.Errorf("attaching to container %s: %w", c.name, err)
	}
	a := &dockerAttachment{conn: &res.HijackedResponse, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		if c.tty {
			io.Copy(c.out, a.conn.Reader)
		} else {
			stdcopy.StdCopy(c.out, c.errOut, a.conn.Reader)
		}
	}()
	c.mu.Lock()
	c.att = a
	close(c.reattached)
	c.reattached = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// attachment returns the latest attachment and what is closed when it
// is replaced.
func (c *DockerContainer) attachment() (*dockerAttachment, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.att, c.reattached
}

// Start starts the command: a *StartError when it cannot be run (not
// found, not executable). From then on standard input flows to it.
func (c *DockerContainer) Start(ctx context.Context) error {
	if _, err := c.d.client.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		if code, ok := startFailure(err); ok {
			return &StartError{Code: code, Err: err}
		}
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	// Where the command runs, for killing it without dockerd. A failure
	// here leaves killDockerContainer to find the cgroups by the id.
	if res, err := c.d.client.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{}); err == nil && res.Container.State != nil {
		c.cgroups = procCgroupsNaming(res.Container.State.Pid, c.id)
	}
	close(c.started)
	go c.supervise()
	if c.in != nil {
		go c.copyInput()
	}
	return nil
}

// copyInput copies the standard input to the command, through the latest
// attachment: a chunk that an attachment broken by dockerd's restart did
// not take goes to the next one. At the input's end the command sees the
// end of its input. It ends then, or when Delete closes the attachment.
func (c *DockerContainer) copyInput() {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := c.in.Read(buf)
		for chunk := buf[:n]; len(chunk) > 0; {
			a, next := c.attachment()
			w, err := a.conn.Conn.Write(chunk)
			chunk = chunk[w:]
			if err == nil {
				continue
			}
			select {
			case <-next:
			case <-c.cleanupCtx.Done():
				return
			}
		}
		if rerr != nil {
			a, _ := c.attachment()
			a.conn.CloseWrite()
			return
		}
	}
}

// Wait waits for the started command's end and returns its exit code, or
// ctx's error when ctx ends first. Only one Wait may end with the exit.
func (c *DockerContainer) Wait(ctx context.Context) (int, error) {
	select {
	case e := <-c.exitCh:
		c.exited.Store(e.exited)
		return e.code, e.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// supervise waits for the command's end through dockerd and hands it to
// Wait. When dockerd goes away the wait breaks: a dockerd with
// live-restore is asked again (the container runs on meanwhile, in its
// shim), and attached to again, once it answers; without live-restore
// the command is killed without dockerd (which stops, or will stop, it
// anyway) and Wait fails with ErrDockerStopped. When dockerd stays
// unreachable for runtimeLostAfter, or answers that it no longer knows
// the container, the command is killed without it and Wait fails with
// ErrRuntimeLost. It returns once it has handed over a result.
func (c *DockerContainer) supervise() {
	defer func() {
		a, _ := c.attachment()
		go func() {
			<-a.done
			close(c.outDone)
		}()
	}()
	ctx := c.cleanupCtx
	res, errc := c.waitRes, c.waitErr
	var unreachableSince time.Time
	for {
		var werr error
		select {
		case r := <-res:
			if r.Error != nil && r.Error.Message != "" {
				c.exitCh <- dockerExit{code: int(r.StatusCode), err: fmt.Errorf("waiting for %s: %s", c.name, r.Error.Message)}
				return
			}
			// A dockerd without live-restore that no longer takes
			// connections is shutting down: it stopped the command.
			if !c.liveRestore.Load() && !c.d.listening() {
				c.exitCh <- dockerExit{code: -1, err: c.giveUp(true, nil)}
				return
			}
			c.exitCh <- dockerExit{code: int(r.StatusCode), exited: true}
			return
		case werr = <-errc:
		}
		if ctx.Err() != nil { // deleted
			c.exitCh <- dockerExit{code: -1, err: fmt.Errorf("waiting for %s: %w", c.name, werr)}
			return
		}
		if !c.liveRestore.Load() && !c.d.listening() {
			c.exitCh <- dockerExit{code: -1, err: c.giveUp(true, nil)}
			return
		}
		if unreachableSince.IsZero() {
			unreachableSince = time.Now()
		}
		// Until dockerd answers, or runtimeLostAfter.
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.d.client.Ping(pctx, client.PingOptions{})
			cancel()
			if err == nil {
				break
			}
			// Without live-restore, a dockerd that refuses connections
			// has stopped the command, or will as it starts again.
			if !c.liveRestore.Load() && client.IsErrConnectionFailed(err) && !c.d.listening() {
				c.exitCh <- dockerExit{code: -1, err: c.giveUp(true, nil)}
				return
			}
			if ctx.Err() != nil {
				c.exitCh <- dockerExit{code: -1, err: fmt.Errorf("waiting for %s: %w", c.name, werr)}
				return
			}
			if time.Since(unreachableSince) >= runtimeLostAfter {
				c.exitCh <- dockerExit{code: -1, err: c.giveUp(false, fmt.Errorf(
					"dockerd at %s has not answered for %v (is it running? systemctl status docker): %w", c.d.client.DaemonHost(), runtimeLostAfter, err))}
				return
			}
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
		}
		// The dockerd that answers now may not be the one that went
		// away: without live-restore it killed the container as it
		// started.
		if info, err := c.d.client.Info(ctx, client.InfoOptions{}); err == nil && !info.Info.LiveRestoreEnabled {
			c.liveRestore.Store(false)
			c.exitCh <- dockerExit{code: -1, err: c.giveUp(true, nil)}
			return
		}
		// The output's attachment ended with the old daemon: attach
		// again, unless the command has ended (dockerd refuses then).
		if a, _ := c.attachment(); isClosed(a.done) {
			c.attach(ctx)
		}
		w := c.d.client.ContainerWait(ctx, c.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		res, errc = w.Result, w.Error
		select {
		case err := <-errc:
			if errdefs.IsNotFound(err) {
				c.exitCh <- dockerExit{code: -1, err: c.giveUp(false, fmt.Errorf("dockerd at %s no longer knows container %s: %w", c.d.client.DaemonHost(), c.name, err))}
				return
			}
			errc = closedErr(err) // handled as a broken wait, above
		default:
			unreachableSince = time.Time{}
		}
	}
}

// closedErr returns a channel that yields err.
func closedErr(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// giveUp kills what is left of the sandbox's containers without dockerd
// and returns Wait's error: ErrDockerStopped when stopped (dockerd went
// away and has no live-restore), otherwise ErrRuntimeLost for cause.
func (c *DockerContainer) giveUp(stopped bool, cause error) error {
	c.lost.Store(true)
	kerr := c.killWithoutDaemon()
	host := c.d.client.DaemonHost()
	if stopped {
		err := fmt.Errorf("%w: dockerd at %s went away, and a dockerd without live-restore stops its containers (as it stops, or as it starts again after a crash); sbx killed what was left of sandbox %s's command. dockerd's live-restore keeps containers running across its restarts: \"live-restore\": true in /etc/docker/daemon.json, then systemctl reload docker",
			ErrDockerStopped, host, c.sandbox)
		if kerr != nil {
			err = fmt.Errorf("%w; but sbx could not kill all of it: %w", err, kerr)
		}
		return err
	}
	if kerr != nil {
		return fmt.Errorf("%w: %w; sbx gave up on sandbox %s but could not kill its command: %w", ErrRuntimeLost, cause, c.sandbox, kerr)
	}
	return fmt.Errorf("%w: %w; sbx gave up on sandbox %s and killed its command", ErrRuntimeLost, cause, c.sandbox)
}

// killWithoutDaemon kills what runs of the command's and the pause
// container without dockerd.
func (c *DockerContainer) killWithoutDaemon() error {
	return multierror.Append(killDockerContainer(c.id, c.cgroups), killDockerContainer(c.pause, c.pauseCgroups)).ErrorOrNil()
}

// listening reports whether dockerd takes new connections (a dockerd
// shutting down closed its listener; connections it had go on).
func (d *Docker) listening() bool {
	host := d.client.DaemonHost()
	proto, addr, ok := strings.Cut(host, "://")
	if !ok {
		return true // not one to dial: assume it does
	}
	conn, err := net.DialTimeout(proto, addr, 2*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Signal sends sig to the command (to the init, when there is one, which
// passes it on to the command's process group).
func (c *DockerContainer) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := c.d.client.ContainerKill(ctx, c.id, client.ContainerKillOptions{Signal: strconv.Itoa(int(sig))})
	return err
}

// Exited reports whether Wait saw the command end. When it did not (it
// failed, or dockerd went away), the command may still run.
func (c *DockerContainer) Exited() bool { return c.exited.Load() }

// Delete kills what is left and removes the command's container (once its
// output is copied) and the pause container, retrying while dockerd does
// not answer, for deleteTimeout (2 s once sbx gave up on dockerd). When
// dockerd cannot, what runs of them is killed without it: no process of
// the sandbox outlives Delete. The namespace's mount stays for
// TeardownNetwork. It is safe to call more than once.
func (c *DockerContainer) Delete() error {
	c.deleted.Do(func() {
		timeout := deleteTimeout
		if c.lost.Load() {
			timeout = min(timeout, 2*time.Second) // dockerd was given its time
		}
		c.delErr = all(func() error { return c.deleteCommand(c.cleanupCtx, timeout) }, func() error {
			return c.d.removeOrKill(c.cleanupCtx, c.pause, c.pauseCgroups, timeout)
		})
		c.d.mu.Lock()
		delete(c.d.pauses, c.sandbox)
		c.d.mu.Unlock()
		c.cancel()
	})
	return c.delErr
}

// deleteCommand removes the command's container, killing what runs, and
// lets its output be copied to the end first.
func (c *DockerContainer) deleteCommand(ctx context.Context, timeout time.Duration) error {
	err := c.d.removeOrKill(ctx, c.id, c.cgroups, timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a, _ := c.attachment()
	if a != nil {
		// Output comes only from a command that started; the attachment
		// of one that never did is not ended by the daemon.
		select {
		case <-c.started:
			select {
			case <-c.outDone:
			case <-ctx.Done():
			}
		default:
		}
		a.conn.Close()
	}
	return err
}

// removeOrKill removes container id, killing what runs in it, retrying
// while dockerd does not answer, for at most timeout. When dockerd
// cannot, what runs of the container (cgroups: its cgroups, when known)
// is killed without it, and the error says so.
func (d *Docker) removeOrKill(ctx context.Context, id string, cgroups []string, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	for {
		if err = d.remove(rctx, id); err == nil || !dockerUnreachable(err) {
			break
		}
		select {
		case <-rctx.Done():
		case <-time.After(200 * time.Millisecond):
			continue
		}
		break
	}
	if err == nil {
		return nil
	}
	if kerr := killDockerContainer(id, cgroups); kerr != nil {
		return fmt.Errorf("%w; killing it without dockerd: %w", err, kerr)
	}
	return &RecordKeptError{Runtime: "dockerd", Address: d.client.DaemonHost(), Container: id, Err: err}
}

// dockerUnreachable reports whether err is a failure to reach dockerd,
// or a connection it broke (it went away, it restarts), rather than its
// answer.
func dockerUnreachable(err error) bool {
	return client.IsErrConnectionFailed(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// remove removes container id, killing what runs in it; a container that
// is gone already is no error.
func (d *Docker) remove(ctx context.Context, id string) error {
	_, err := d.client.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes sandbox id's containers (both, whatever their
// state) for garbage collection, and for a Start that failed before it had
// a container.
func (d *Docker) RemoveContainer(ctx context.Context, id string) error {
	d.mu.Lock()
	pause, hasPause := d.pauses[id]
	delete(d.pauses, id)
	d.mu.Unlock()
	list, err := d.client.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", DockerLabelSandbox+"="+id)})
	if err != nil {
		err = fmt.Errorf("listing the containers of sandbox %s: %w", id, err)
		if hasPause && dockerUnreachable(err) {
			// A start that failed as dockerd went away: the pause
			// container it started is killed without it (there is no
			// command's container: Create failed).
			return multierror.Append(err, d.removeOrKill(ctx, pause.id, pause.cgroups, deleteTimeout))
		}
		return err
	}
	var errs *multierror.Error
	for _, c := range list.Items {
		if c.Labels[DockerLabelSandbox] != id {
			continue
		}
		if err := d.remove(ctx, c.ID); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	return errs.ErrorOrNil()
}

// ContainerIDs lists the ids of the sandboxes that have containers in
// Docker.
func (d *Docker) ContainerIDs(ctx context.Context) ([]string, error) {
	list, err := d.client.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", DockerLabelSandbox)})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, c := range list.Items {
		if id := c.Labels[DockerLabelSandbox]; id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// netnsSysctl writes value to the sysctl key (a path below /proc/sys/) of
// the network namespace at path: /proc/sys/net is that of the thread that
// opens it (inNetns).
func netnsSysctl(path, key, value string) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer ns.Close()
	return inNetns(ns, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("setting %s in %s: %w", key, filepath.Base(path), err)
		}
		return nil
	})
}
