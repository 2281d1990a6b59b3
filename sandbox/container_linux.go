package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/hashicorp/go-multierror"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// specOpts turns cs into OCI spec options. The container never gets
// CAP_NET_ADMIN (the default set lacks it) and loses CAP_NET_RAW; it runs
// under containerd's default seccomp profile with no-new-privileges, in the
// sandbox's network namespace (DESIGN.md §2, guarantee 5).
func specOpts(cs ContainerSpec) []oci.SpecOpts {
	var opts []oci.SpecOpts
	if cs.Image == "" {
		opts = append(opts, oci.WithRootFSPath(cs.RootFS))
	}
	opts = append(opts,
		oci.WithRootFSReadonly(),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: cs.NetnsPath}),
		oci.WithProcessArgs(cs.Args...),
		// PATH first, so that a bare command name is found and cs.Env can
		// still set its own (the later of two values wins).
		oci.WithEnv(append([]string{"PATH=" + defaultPath}, cs.Env...)),
		oci.WithNoNewPrivileges,
		oci.WithDroppedCapabilities([]string{"CAP_NET_RAW", "CAP_NET_ADMIN"}),
		seccomp.WithDefaultProfile(),
		oci.WithHostname("sbx-"+cs.ID),
	)
	if cs.Cwd != "" {
		opts = append(opts, oci.WithProcessCwd(cs.Cwd))
	}
	if cs.UID != 0 || cs.GID != 0 {
		opts = append(opts, oci.WithUIDGID(cs.UID, cs.GID))
	}
	if cs.TTY {
		opts = append(opts, oci.WithTTY)
	}
	if len(cs.Mounts) > 0 {
		opts = append(opts, oci.WithMounts(cs.Mounts))
	}
	if len(cs.Masked) > 0 {
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
			s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, cs.Masked...)
			return nil
		})
	}
	return opts
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
}

// ConnectContainerd connects to containerd at socket.
func ConnectContainerd(ctx context.Context, socket string) (*Containerd, error) {
	hint := "is it installed and running? (apt-get install containerd runc; scripts/test.sh starts it where there is no systemd)"
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("no containerd socket at %s: %s", socket, hint)
	}
	c, err := containerd.New(socket, containerd.WithDefaultNamespace(ContainerdNamespace), containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to containerd at %s: %s: %w", socket, hint, err)
	}
	// The connection is lazy: ask once, so a missing daemon is found now.
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("containerd at %s does not answer: %s: %w", socket, hint, err)
	}
	return &Containerd{client: c}, nil
}

// Close closes the connection.
func (c *Containerd) Close() error { return c.client.Close() }

// Run creates the container, runs its command to the end and removes the
// container, returning the command's exit code. When ctx is done the
// command gets SIGTERM, then SIGKILL after grace. Removal runs even when
// ctx is done. A command that cannot be started gives 127 (not found) or
// 126 (not executable) with a nil error.
func (c *Containerd) Run(ctx context.Context, cs ContainerSpec, stdio Stdio, grace time.Duration) (code int, retErr error) {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var newOpts []containerd.NewContainerOpts
	spec := specOpts(cs)
	if cs.Image != "" {
		img, err := c.client.GetImage(ctx, cs.Image)
		if err != nil {
			return -1, fmt.Errorf("image %s is not in containerd's %q namespace (import it with: ctr -n %s images import FILE, or pull it with ctr -n %s images pull): %w",
				cs.Image, ContainerdNamespace, ContainerdNamespace, ContainerdNamespace, err)
		}
		// The image's own settings first, ours over them. The snapshot is
		// writable for runc to make mount points; the spec makes / read-only.
		spec = append([]oci.SpecOpts{oci.WithImageConfig(img)}, spec...)
		newOpts = append(newOpts, containerd.WithImage(img), containerd.WithNewSnapshot(cs.ID, img))
	}
	newOpts = append(newOpts, containerd.WithNewSpec(spec...))
	ctr, err := c.client.NewContainer(ctx, cs.ID, newOpts...)
	if err != nil {
		return -1, fmt.Errorf("creating container %s: %w", cs.ID, err)
	}
	defer func() {
		if err := ctr.Delete(cleanupCtx, containerd.WithSnapshotCleanup); err != nil {
			retErr = multierror.Append(retErr, fmt.Errorf("deleting container %s: %w", cs.ID, err))
		}
	}()
	// When the input ends, the command must see its end too: the task's
	// stdin is closed then, as ctr does.
	var in io.Reader
	eof := make(chan struct{})
	if stdio.In != nil {
		in = &eofReader{r: stdio.In, eof: eof}
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
	streams := []cio.Opt{cio.WithStreams(in, out, errOut)}
	if cs.TTY {
		streams = append(streams, cio.WithTerminal)
	}
	task, err := ctr.NewTask(ctx, cio.NewCreator(streams...))
	if err != nil {
		if code, ok := startFailure(err); ok {
			return code, nil
		}
		return -1, fmt.Errorf("creating the task of %s: %w", cs.ID, err)
	}
	defer func() {
		if _, err := task.Delete(cleanupCtx, containerd.WithProcessKill); err != nil {
			retErr = multierror.Append(retErr, fmt.Errorf("deleting the task of %s: %w", cs.ID, err))
		}
	}()
	exitCh, err := task.Wait(cleanupCtx)
	if err != nil {
		return -1, fmt.Errorf("waiting for %s: %w", cs.ID, err)
	}
	if err := task.Start(ctx); err != nil {
		if code, ok := startFailure(err); ok {
			return code, nil
		}
		return -1, fmt.Errorf("starting %s: %w", cs.ID, err)
	}
	if in != nil {
		// Ends at the input's end or when Run returns (cleanupCtx).
		go func() {
			select {
			case <-eof:
				task.CloseIO(cleanupCtx, containerd.WithStdinCloser)
			case <-cleanupCtx.Done():
			}
		}()
	}
	select {
	case st := <-exitCh:
		return int(st.ExitCode()), st.Error()
	case <-ctx.Done():
	}
	task.Kill(cleanupCtx, syscall.SIGTERM)
	select {
	case st := <-exitCh:
		return int(st.ExitCode()), st.Error()
	case <-time.After(grace):
	}
	task.Kill(cleanupCtx, syscall.SIGKILL)
	st := <-exitCh
	return int(st.ExitCode()), st.Error()
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
// code.
func startFailure(err error) (int, bool) {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "executable file not found"):
		return ExitNotFound, true
	case strings.Contains(msg, "permission denied"):
		return ExitCannotExecute, true
	}
	return 0, false
}

// RemoveContainer deletes container id and its task, if they exist, for
// garbage collection.
func (c *Containerd) RemoveContainer(ctx context.Context, id string) error {
	ctx = namespaces.WithNamespace(ctx, ContainerdNamespace)
	ctr, err := c.client.LoadContainer(ctx, id)
	if err != nil {
		return nil // gone
	}
	var errs *multierror.Error
	if task, err := ctr.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	if err := ctr.Delete(ctx, containerd.WithSnapshotCleanup); err != nil {
		errs = multierror.Append(errs, err)
	}
	return errs.ErrorOrNil()
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
