package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/hashicorp/go-multierror"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// specOpts turns cs into OCI spec options. The container never gets
// CAP_NET_ADMIN or CAP_NET_RAW, nor the capabilities that reach beyond it
// (DroppedCapabilities) unless cs.CapAdd names them; a command that is not
// root has no capabilities but those; it runs under containerd's default
// seccomp profile with no-new-privileges, in the sandbox's network
// namespace (docs/network.md, guarantee 5), within cs.Limits.
func specOpts(cs ContainerSpec) []oci.SpecOpts {
	var opts []oci.SpecOpts
	args := cs.Args
	if cs.Init != "" {
		args = append([]string{InitPath, "-g", "--"}, cs.Args...)
		cs.Mounts = append(slices.Clip(cs.Mounts), specs.Mount{Destination: InitPath, Source: cs.Init, Type: "bind",
			Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	if cs.Image == "" {
		opts = append(opts, oci.WithRootFSPath(cs.RootFS))
	}
	opts = append(opts,
		oci.WithRootFSReadonly(),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: cs.NetnsPath}),
		oci.WithProcessArgs(args...),
		// PATH first, so that a bare command name is found and cs.Env can
		// still set its own (the later of two values wins).
		oci.WithEnv(append([]string{"PATH=" + DefaultPath}, cs.Env...)),
		oci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(),
		oci.WithHostname("sbx-"+cs.ID),
		withUser(cs),
		withLimits(cs.Limits),
	)
	if cs.Cwd != "" {
		opts = append(opts, oci.WithProcessCwd(cs.Cwd))
	}
	if cs.TTY {
		opts = append(opts, oci.WithTTY)
	}
	// The container's own cgroups, read-only, so that runtimes inside (Go,
	// Node, the JVM) size themselves to the limits, and the limits can be
	// read; runc shows only the container's part of the hierarchy.
	mounts := append([]specs.Mount{{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
		Options: []string{"ro", "nosuid", "noexec", "nodev"}}}, cs.Mounts...)
	opts = append(opts, oci.WithMounts(mounts))
	if len(cs.Masked) > 0 {
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
			s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, cs.Masked...)
			return nil
		})
	}
	return opts
}

// withUser sets who the command runs as and its capabilities. It comes
// after the image's configuration, which may name a user: that user is
// kept only when cs.KeepImageUser says so and it is not root, and loses
// group 0. Root keeps
// BaseCapabilities and cs.CapAdd; any other user gets cs.CapAdd alone, as
// ambient capabilities (runc would otherwise hand it the full set).
func withUser(cs ContainerSpec) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		if cs.Image != "" && cs.KeepImageUser && s.Process.User.UID != 0 {
			// The image's user, but never in root's group: it could plant
			// set-group-ID binaries and read what only that group may.
			u := &s.Process.User
			if u.GID == 0 {
				u.GID = NobodyID
			}
			u.AdditionalGids = slices.DeleteFunc(u.AdditionalGids, func(g uint32) bool { return g == 0 })
		} else {
			s.Process.User = specs.User{UID: cs.UID, GID: cs.GID}
		}
		add := slices.Clone(cs.CapAdd)
		bounding := append(slices.Clone(BaseCapabilities), add...)
		if s.Process.User.UID == 0 {
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: bounding, Effective: bounding, Permitted: bounding}
		} else {
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: bounding, Effective: add, Permitted: add, Inheritable: add, Ambient: add}
		}
		return nil
	}
}

// withLimits bounds memory (with no swap beyond it where the kernel
// accounts swap), CPU time and processes; zero fields leave the runtime's
// default, which is no limit.
func withLimits(l Limits) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		r := s.Linux.Resources
		if l.Memory > 0 {
			limit := l.Memory
			r.Memory = &specs.LinuxMemory{Limit: &limit}
			if swapAccounted() {
				swap := l.Memory // memory and swap together: no swap
				r.Memory.Swap = &swap
			}
		}
		if l.CPUs > 0 {
			period := uint64(100_000)
			quota := int64(l.CPUs * float64(period))
			r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
		}
		if l.Pids > 0 {
			pids := l.Pids
			r.Pids = &specs.LinuxPids{Limit: &pids}
		}
		return nil
	}
}

// swapAccounted reports whether the kernel limits memory and swap
// together: always under cgroup v2, under v1 only with swap accounting on
// (runc refuses a swap limit it cannot set).
var swapAccounted = sync.OnceValue(func() bool {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
})

// DefaultLimits are the limits a sandbox gets unless told: half of this
// machine's memory, all CPUs but one (at least one), and
// DefaultPidsLimit processes. One sandbox cannot starve the host, and the
// gateway keeps a CPU to decide with.
func DefaultLimits() Limits {
	l := Limits{CPUs: float64(max(1, runtime.NumCPU()-1)), Pids: DefaultPidsLimit}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		l.Memory = int64(si.Totalram) * int64(si.Unit) / 2
	}
	return l
}

// GenerateSpec returns the OCI spec a container for cs gets, without
// containerd: what the golden tests compare.
func GenerateSpec(ctx context.Context, cs ContainerSpec) (*specs.Spec, error) {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	return oci.GenerateSpec(ctx, nil, &containers.Container{ID: cs.ID}, specOpts(cs)...)
}

// Containerd runs sandbox containers through a containerd daemon.
type Containerd struct {
	client *containerd.Client
	socket string

	mu    sync.Mutex
	ahead chan aheadLease // PrepareCreate's lease, until Create or Close takes it
}

// aheadLease is the lease PrepareCreate asked for: its id, or why there
// is none.
type aheadLease struct {
	id  string
	err error
}

// leaseTimeout bounds the making and the deletion of a lease.
const leaseTimeout = 10 * time.Second

// ConnectContainerd connects to containerd at socket.
func ConnectContainerd(ctx context.Context, socket string) (*Containerd, error) {
	return connectContainerd(ctx, socket, false)
}

// ConnectContainerdToCreate is ConnectContainerd for a caller that makes a
// container next (sbx run): PrepareCreate's lease is asked for beside the
// question that finds the daemon, on the connection it opens, rather than
// after its answer.
func ConnectContainerdToCreate(ctx context.Context, socket string) (*Containerd, error) {
	return connectContainerd(ctx, socket, true)
}

func connectContainerd(ctx context.Context, socket string, create bool) (*Containerd, error) {
	hint := "is it installed and running? (apt-get install containerd runc; scripts/test.sh starts it where there is no systemd)"
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("no containerd socket at %s: %s", socket, hint)
	}
	c, err := containerd.New(socket, containerd.WithDefaultNamespace(ContainerdNamespace), containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %s: %w", socket, hint, err)
	}
	cd := &Containerd{client: c, socket: socket}
	if create {
		cd.PrepareCreate(ctx)
	}
	// The connection is lazy: ask once, so a missing daemon is found now.
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		c.Close() // which ends the lease's question too
		return nil, fmt.Errorf("containerd at %s does not answer: %s: %w", socket, hint, err)
	}
	return cd, nil
}

// PrepareCreate asks containerd, in the background, for the lease under
// which the next Create makes its container, which containerd's client
// would otherwise make, and delete, on the way: each is a write to
// containerd's database that waits for the disk. Create deletes it once
// the container is made, in the background too (the container's Delete
// waits for that), and Close deletes one that no Create took.
func (c *Containerd) PrepareCreate(ctx context.Context) {
	ch := make(chan aheadLease, 1)
	c.mu.Lock()
	c.ahead = ch
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.WithoutCancel(ctx), ContainerdNamespace), leaseTimeout)
		defer cancel()
		l, err := c.client.LeasesService().Create(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour))
		ch <- aheadLease{id: l.ID, err: err}
	}()
}

// takeLease returns the lease PrepareCreate asked for, once containerd
// has made it; ok is false when there is none.
func (c *Containerd) takeLease() (id string, ok bool) {
	c.mu.Lock()
	ch := c.ahead
	c.ahead = nil
	c.mu.Unlock()
	if ch == nil {
		return "", false
	}
	l := <-ch
	return l.id, l.err == nil
}

// deleteLease deletes the lease id in the background; the channel it
// returns is closed once containerd has answered. A lease left behind
// (containerd did not answer) expires within a day.
func (c *Containerd) deleteLease(id string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ContainerdNamespace), leaseTimeout)
		defer cancel()
		c.client.LeasesService().Delete(ctx, leases.Lease{ID: id})
	}()
	return done
}

// Close deletes the lease of a PrepareCreate that no Create took, and
// closes the connection.
func (c *Containerd) Close() error {
	if id, ok := c.takeLease(); ok {
		<-c.deleteLease(id)
	}
	return c.client.Close()
}

// Run runs cs to its end: Create, then Task.Run, then Task.Delete. The
// exit code is the command's; ExitNotFound or ExitCannotExecute when it
// cannot be run. When ctx is cancelled the command gets SIGTERM, and
// SIGKILL after grace.
func (c *Containerd) Run(ctx context.Context, cs ContainerSpec, stdio Stdio, grace time.Duration) (code int, retErr error) {
	t, err := c.create(ctx, cs, stdio)
	var se *StartError
	if errors.As(err, &se) {
		return se.Code, nil
	}
	if err != nil {
		return -1, err
	}
	defer func() {
		if err := t.Delete(); err != nil {
			retErr = multierror.Append(retErr, err)
		}
	}()
	return t.Run(ctx, grace)
}

// Task is a container whose process is created, in its namespaces, but
// not started: nothing of the command runs until Start. Creating it while
// the sandbox's network is still being set up saves most of containerd's
// start time; the network must be complete before Start.
type Task struct {
	id      string
	c       *Containerd
	ctr     containerd.Container
	task    containerd.Task            // nil when the task could not be created
	exitCh  chan containerd.ExitStatus // the command's end, or why it is not known, once
	in      io.Reader
	eof     chan struct{}
	started chan struct{} // closed by Start once the command runs: stdin flows from then
	exited  atomic.Bool   // Wait saw the command's end
	lost    atomic.Bool   // sbx gave up on containerd and killed the command without it
	deleted bool
	// outs are the command's output streams as the shim's copiers see
	// them: Delete closes them, so that nothing is written to the
	// caller's writers once it returns, not even by a copier that a lost
	// containerd left running.
	outs []*closableWriter
	// cgroupsPath is the container's cgroup, in each hierarchy: where
	// its processes are found, and killed, when containerd does not
	// answer.
	cgroupsPath string
	// cleanupCtx outlives the caller's context: Delete and the stdin
	// closer use it. cancel ends the stdin closer and the stdin gate.
	cleanupCtx context.Context
	cancel     context.CancelFunc
	// leaseGone, when the container was made under PrepareCreate's
	// lease, is closed once the lease is deleted: Delete waits for it.
	leaseGone <-chan struct{}
}

// Create creates cs's container and its task. The netns at cs.NetnsPath
// must exist. A command that cannot be run is a *StartError. On error
// nothing is left. Standard input is not read before Start starts the
// command, so none of it is lost when the sandbox fails to start.
func (c *Containerd) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	t, err := c.create(ctx, cs, stdio)
	if err != nil {
		return nil, err // not a nil *Task in a non-nil interface
	}
	return t, nil
}

// create is Create with the concrete result.
func (c *Containerd) create(ctx context.Context, cs ContainerSpec, stdio Stdio) (_ *Task, retErr error) {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	t := &Task{id: cs.ID, c: c, eof: make(chan struct{}), started: make(chan struct{})}
	t.cleanupCtx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	var newOpts []containerd.NewContainerOpts
	spec := specOpts(cs)
	if cs.Image != "" {
		img, err := c.client.GetImage(ctx, cs.Image)
		if err != nil {
			t.cancel()
			return nil, fmt.Errorf("image %s is not in containerd's %q namespace (EnsureImage pulls it; ImportImage loads an archive): %w",
				cs.Image, ContainerdNamespace, err)
		}
		// The image's own settings first, ours over them. The snapshot is
		// writable for runc to make mount points; the spec makes / read-only.
		spec = append([]oci.SpecOpts{oci.WithImageConfig(img)}, spec...)
		newOpts = append(newOpts, containerd.WithImage(img), containerd.WithNewSnapshot(cs.ID, img))
	}
	spec = append(spec, func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Linux != nil {
			t.cgroupsPath = s.Linux.CgroupsPath
		}
		return nil
	})
	newOpts = append(newOpts, containerd.WithNewSpec(spec...))
	// Under PrepareCreate's lease, when there is one; containerd's client
	// makes its own otherwise.
	leased := ctx
	id, hasLease := c.takeLease()
	if hasLease {
		leased = leases.WithLease(ctx, id)
	}
	var err error
	t.ctr, err = c.client.NewContainer(leased, cs.ID, newOpts...)
	if hasLease {
		t.leaseGone = c.deleteLease(id)
	}
	if err != nil {
		t.cancel()
		if hasLease {
			<-t.leaseGone
		}
		return nil, fmt.Errorf("creating container %s: %w", cs.ID, err)
	}
	defer func() {
		if retErr != nil {
			if err := t.Delete(); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}
	}()
	if cs.WaitNetns != nil {
		if err := cs.WaitNetns(); err != nil {
			return nil, err
		}
	}
	// When the input ends, the command must see its end too: the task's
	// stdin is closed then, as ctr does.
	if stdio.In != nil {
		t.in = &eofReader{r: &gatedReader{r: stdio.In, open: t.started, done: t.cleanupCtx.Done()}, eof: t.eof}
	}
	// containerd's shim needs every stream or none: a missing writer
	// beside a present one fails with `opening file ""`.
	out, errOut := stdio.Out, stdio.Err
	if out == nil {
		out = io.Discard
	}
	if errOut == nil {
		errOut = io.Discard
	}
	stdout, stderr := &closableWriter{w: out}, &closableWriter{w: errOut}
	t.outs = []*closableWriter{stdout, stderr}
	streams := []cio.Opt{cio.WithStreams(t.in, stdout, stderr)}
	if cs.TTY {
		streams = append(streams, cio.WithTerminal)
	}
	task, err := t.ctr.NewTask(ctx, cio.NewCreator(streams...))
	if err != nil {
		if code, ok := startFailure(err); ok {
			return nil, &StartError{Code: code, Err: err}
		}
		return nil, fmt.Errorf("creating the task of %s: %w", cs.ID, err)
	}
	t.task = task
	t.exitCh = make(chan containerd.ExitStatus, 1)
	go t.supervise()
	return t, nil
}

// Start starts the command: a *StartError when it cannot be run (not
// found, not executable). From then on standard input flows to it.
func (t *Task) Start(ctx context.Context) error {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	task := t.task
	if err := task.Start(ctx); err != nil {
		if code, ok := startFailure(err); ok {
			return &StartError{Code: code, Err: err}
		}
		return fmt.Errorf("starting %s: %w", t.id, err)
	}
	close(t.started)
	if t.in != nil {
		// Ends at the input's end or when the task is deleted.
		go func() {
			select {
			case <-t.eof:
				task.CloseIO(t.cleanupCtx, containerd.WithStdinCloser)
			case <-t.cleanupCtx.Done():
			}
		}()
	}
	return nil
}

// Wait waits for the started command's end and returns its exit code, or
// ctx's error when ctx ends first. Only one Wait may end with the exit.
// It outlasts a restart of containerd; when containerd stays unreachable
// for runtimeLostAfter, or no longer knows the task, the command is killed
// without it and Wait fails with ErrRuntimeLost.
func (t *Task) Wait(ctx context.Context) (int, error) {
	select {
	case st := <-t.exitCh:
		code, at, err := st.Result()
		t.exited.Store(err == nil && !at.IsZero())
		if err != nil {
			return -1, err
		}
		return int(code), nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// supervise waits for the task's end through containerd and hands it to
// Wait. containerd's Wait breaks when the daemon restarts, while the shim
// keeps the command (and its exit status) alive: it is asked again, through
// the client's new connection, until containerd answers. When containerd
// stays unreachable for runtimeLostAfter, or answers that it no longer
// knows the task (its shim died), sbx gives up: the command is killed
// without containerd, through its shim and cgroup, and only then does Wait
// hear of it, with ErrRuntimeLost. It returns once it has handed over a
// result, or when Delete cancels cleanupCtx.
func (t *Task) supervise() {
	ctx := namespaces.WithNamespace(t.cleanupCtx, ContainerdNamespace)
	var unreachableSince time.Time
	delay := 50 * time.Millisecond
	for {
		asked := time.Now()
		var st containerd.ExitStatus
		ch, err := t.task.Wait(ctx)
		if err == nil {
			st = <-ch
			_, _, err = st.Result()
		}
		switch {
		case err == nil:
			t.exitCh <- st
			return
		case ctx.Err() != nil: // deleted
			t.exitCh <- *containerd.NewExitStatus(containerd.UnknownExitStatus, time.Time{}, fmt.Errorf("waiting for %s: %w", t.id, err))
			return
		}
		err = errgrpc.ToNative(err)
		if !errdefs.IsNotFound(err) {
			// An answer that took a while came from a containerd that was
			// there: its loss starts the count again.
			if unreachableSince.IsZero() || time.Since(asked) > time.Second {
				unreachableSince, delay = time.Now(), 50*time.Millisecond
			}
			if time.Since(unreachableSince) < runtimeLostAfter {
				select {
				case <-time.After(delay):
					delay = min(2*delay, time.Second)
					continue
				case <-ctx.Done():
					continue // the next Wait fails at once, as deleted
				}
			}
			err = fmt.Errorf("containerd at %s has not answered for %v (is it running? systemctl status containerd): %w", t.c.socket, runtimeLostAfter, err)
		} else {
			err = fmt.Errorf("containerd no longer knows the task of %s: its shim died: %w", t.id, err)
		}
		t.lost.Store(true)
		lost := fmt.Errorf("%w: %w; sbx gave up on sandbox %s and killed its command", ErrRuntimeLost, err, t.id)
		if kerr := killWithoutRuntime(t.id, t.cgroupsPath, t.c.socket); kerr != nil {
			lost = fmt.Errorf("%w: %w; sbx gave up on sandbox %s but could not kill its command: %w", ErrRuntimeLost, err, t.id, kerr)
		}
		t.exitCh <- *containerd.NewExitStatus(containerd.UnknownExitStatus, time.Time{}, lost)
		return
	}
}

// Signal sends sig to the command (to the init, which passes it on to the
// command's process group).
func (t *Task) Signal(ctx context.Context, sig syscall.Signal) error {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	return t.task.Kill(ctx, sig)
}

// Run starts the command and waits for its end, returning its exit code:
// ExitNotFound or ExitCannotExecute, with a nil error, when it cannot be
// run. When ctx is cancelled the command gets SIGTERM, and SIGKILL after
// grace. Exited tells afterwards whether Run saw the command end.
func (t *Task) Run(ctx context.Context, grace time.Duration) (int, error) {
	if err := t.Start(ctx); err != nil {
		var se *StartError
		if errors.As(err, &se) {
			return se.Code, nil
		}
		return -1, err
	}
	// Wait's error is its context's only when the exit was not taken.
	if code, err := t.Wait(ctx); err == nil || err != ctx.Err() {
		return code, err
	}
	cleanup := t.cleanupCtx
	t.Signal(cleanup, syscall.SIGTERM)
	graceCtx, cancel := context.WithTimeout(cleanup, grace)
	defer cancel()
	if code, err := t.Wait(graceCtx); err == nil || err != graceCtx.Err() {
		return code, err
	}
	t.Signal(cleanup, syscall.SIGKILL)
	return t.Wait(cleanup)
}

// Exited reports whether Wait saw the command end. When it did not (it
// failed, or containerd stopped answering), the command may still run.
func (t *Task) Exited() bool { return t.exited.Load() }

// deleteTimeout bounds Delete; a variable for the tests.
var deleteTimeout = 30 * time.Second

// runtimeLostAfter is how long containerd may be unreachable before
// sbx gives up on it; a variable for the tests.
var runtimeLostAfter = 30 * time.Second

// Delete kills what is left of the task and deletes it and the container
// (with its snapshot). It is safe to call more than once. When containerd
// cannot do it (it is gone, or the start it failed left a shim behind),
// what runs of the container is killed without containerd: no process of
// it outlives Delete.
func (t *Task) Delete() error {
	if t.deleted {
		return nil
	}
	t.deleted = true
	defer t.cancel()
	if t.leaseGone != nil {
		defer func() { <-t.leaseGone }()
	}
	// containerd's task Delete waits for the copiers to drain what the
	// command wrote; past that (or when containerd could not be asked),
	// nothing more reaches the caller's writers.
	defer func() {
		for _, w := range t.outs {
			w.Close()
		}
	}()
	timeout := deleteTimeout
	if t.lost.Load() {
		timeout = min(timeout, 2*time.Second) // one try: containerd was given its time
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.cleanupCtx), timeout)
	defer cancel()
	var errs *multierror.Error
	if t.task != nil {
		// Once the command is seen to have ended, nothing of it is left to
		// kill (its PID namespace ended with its init), which spares
		// containerd a wait and a kill.
		var opts []containerd.ProcessDeleteOpts
		if !t.exited.Load() {
			opts = append(opts, containerd.WithProcessKill)
		}
		err := retryUnavailable(ctx, func() error {
			_, err := t.task.Delete(ctx, opts...)
			return err
		})
		if err != nil && !errdefs.IsNotFound(err) {
			errs = multierror.Append(errs, fmt.Errorf("deleting the task of %s: %w", t.id, err))
		}
		if err := retryUnavailable(ctx, func() error { return t.ctr.Delete(ctx, containerd.WithSnapshotCleanup) }); err != nil && !errdefs.IsNotFound(err) {
			errs = multierror.Append(errs, fmt.Errorf("deleting container %s: %w", t.id, err))
		}
	} else {
		// A task containerd made although NewTask failed (say, cancelled
		// half-way) would keep the container: RemoveContainer looks for
		// one, and deletes the container too.
		if err := retryUnavailable(ctx, func() error { return t.c.RemoveContainer(ctx, t.id) }); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("removing container %s: %w", t.id, err))
		}
	}
	if errs.ErrorOrNil() == nil {
		return nil
	}
	// containerd did not delete it all: whatever it left running (a shim,
	// runc init, the command) goes without it.
	if err := killWithoutRuntime(t.id, t.cgroupsPath, t.c.socket); err != nil {
		return multierror.Append(errs, err)
	}
	// One line: the steps' failures are alike (containerd is gone).
	return &RecordKeptError{Runtime: "containerd", Address: t.c.socket, Container: t.id, Err: errs.Errors[0]}
}

// retryUnavailable runs fn until it returns anything but a failure to
// reach containerd (which restarts), or ctx ends.
func retryUnavailable(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !errdefs.IsUnavailable(errgrpc.ToNative(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// gatedReader reads r only once open is closed; when done is closed first
// it reads as at the end.
// closableWriter writes to w until it is closed, and discards what comes
// after: a write in progress when Close is called ends before Close
// returns.
type closableWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (c *closableWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return len(p), nil
	}
	return c.w.Write(p)
}

func (c *closableWriter) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

type gatedReader struct {
	r    io.Reader
	open <-chan struct{}
	done <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	select {
	case <-g.open:
		return g.r.Read(p)
	case <-g.done:
		return 0, io.EOF
	}
}

// eofReader closes eof once its reader ends.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

// startFailure maps runc's failure to exec the command to a shell's exit
// code. It reads the error's text because that is all there is: runc's
// exec error comes through the shim and containerd's API as a message
// (gRPC Unknown), with no type or code to check. Container lookups, which
// do carry codes, are checked with errdefs.
func startFailure(err error) (int, bool) {
	// Only the runtime's failure to execute the command (or the init in
	// front of it) is the command's: "exec: \"x\": executable file not
	// found in $PATH", "exec: \"/x\": stat /x: permission denied". Any
	// other failure, such as a mount whose source is missing, is sbx's.
	msg := err.Error()
	i := strings.Index(msg, "exec: ")
	if i < 0 {
		return 0, false
	}
	switch m := msg[i:]; {
	case strings.Contains(m, "executable file not found") || strings.Contains(m, "no such file or directory") || strings.Contains(m, "not a directory"):
		return ExitNotFound, true
	case strings.Contains(m, "permission denied") || strings.Contains(m, "exec format error"):
		return ExitCannotExecute, true
	}
	return 0, false
}

// RemoveContainer deletes container id and its task, if they exist, for
// garbage collection.
func (c *Containerd) RemoveContainer(ctx context.Context, id string) error {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	// containerd's default cgroup for a container, for a record already
	// gone; the record's own when it is there.
	cgroupsPath := "/" + ContainerdNamespace + "/" + id
	ctr, err := c.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		// A run killed while containerd started the task can leave the
		// task's shim running with no record (containerd gave the task
		// up and removed its bundle, the shim stayed), and its cgroups.
		return c.reapOrphan(id, cgroupsPath)
	} else if err != nil {
		return fmt.Errorf("loading container %s: %w", id, err)
	}
	// The record's own path only when it is the container's own cgroup:
	// gc kills what is in it.
	if spec, err := ctr.Spec(ctx); err == nil && spec.Linux != nil && path.Base(spec.Linux.CgroupsPath) == id {
		cgroupsPath = spec.Linux.CgroupsPath
	}
	var errs *multierror.Error
	task, err := ctr.Task(ctx, nil)
	switch {
	case err == nil:
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			errs = multierror.Append(errs, fmt.Errorf("deleting the task of %s: %w", id, err))
		}
	case !errdefs.IsNotFound(err):
		errs = multierror.Append(errs, fmt.Errorf("loading the task of %s: %w", id, err))
	}
	if err := ctr.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		errs = multierror.Append(errs, fmt.Errorf("deleting container %s: %w", id, err))
	}
	if errs.ErrorOrNil() == nil {
		errs = multierror.Append(errs, c.reapOrphan(id, cgroupsPath))
	}
	return errs.ErrorOrNil()
}

// reapOrphan kills a shim of container id that this containerd (its
// socket) no longer knows of, with what it started, and removes the
// container's cgroups once empty: for gc, once containerd's record and
// task are gone. What else is in those cgroups is not gc's to know (a
// container of another containerd using sbx's namespace): it is left, and
// said. A cgroup path that is a systemd slice is left to systemd.
func (c *Containerd) reapOrphan(id, cgroupsPath string) error {
	var paths []string
	if cgroupsPath != "" && !strings.Contains(cgroupsPath, ":") {
		paths = []string{cgroupsPath}
	}
	if err := reapContainer(id, ContainerdNamespace, c.socket, paths, false); err != nil {
		return fmt.Errorf("removing what is left of container %s: %w", id, err)
	}
	return nil
}

// ContainerIDs lists the ids of sbx's containers.
func (c *Containerd) ContainerIDs(ctx context.Context) ([]string, error) {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	list, err := c.client.Containers(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(list))
	for _, ctr := range list {
		ids = append(ids, ctr.ID())
	}
	return ids, nil
}
