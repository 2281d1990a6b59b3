package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultGatewayPort is the port a sandbox's gateway listens on, on the
// host end of its veth.
const DefaultGatewayPort = 3128

// ErrRuntimeLost is what Wait returns when the runtime stopped answering
// for too long or lost the container: sbx gave up on it, after killing
// the command.
var ErrRuntimeLost = errors.New("the container runtime stopped answering")

// A RecordKeptError is a teardown's error when the runtime did not remove
// the container and sbx killed its processes without it: the runtime
// keeps a record of the container, which garbage collection (GC) removes
// once the runtime answers.
type RecordKeptError struct {
	// Runtime is "containerd" or "dockerd", Address where it was asked
	// (a socket or a host), and Container the container's id.
	Runtime, Address, Container string
	// Err is the runtime's error.
	Err error
}

func (e *RecordKeptError) Error() string { return e.Say("garbage collection") }

// Say words the error with collect, how to say what removes the record.
func (e *RecordKeptError) Say(collect string) string {
	return fmt.Sprintf("%s at %s keeps a record of container %s, whose processes sbx killed without it (%s removes the record once %s answers): %v",
		e.Runtime, e.Address, e.Container, collect, e.Runtime, e.Err)
}

func (e *RecordKeptError) Unwrap() error { return e.Err }

// Runtime runs a sandbox's container: *Containerd or *Docker. It is what
// Start and GC need of one.
type Runtime interface {
	ContainerRuntime
	// Create creates cs's container with its process created but not
	// started, in the network namespace at cs.NetnsPath; a command that
	// cannot be run is a *StartError. On error nothing is left.
	Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error)
}

// namespaceMaker is a Runtime that cannot join a network namespace by
// path (*Docker): MakeNamespace makes the sandbox's empty namespace
// itself, mounted at cs.NetnsPath (where CreateNamespace would have made
// it), and Start calls it in CreateNamespace's place, before the network
// is set up in it. On error nothing of it is left; otherwise what it made
// goes with RemoveContainer(cs.ID) or the container's Delete, and with
// TeardownNetwork.
type namespaceMaker interface {
	MakeNamespace(ctx context.Context, cs ContainerSpec) error
}

// Container is a container made by a Runtime, whose command runs from
// Start.
type Container interface {
	// Start starts the command: a *StartError when it cannot be run.
	Start(ctx context.Context) error
	// Wait waits for the command's end and returns its exit code, or
	// ctx's error when ctx ends first.
	Wait(ctx context.Context) (int, error)
	// Signal sends sig to the command.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Exited reports whether Wait saw the command end.
	Exited() bool
	// Delete kills what is left and removes the container; it is safe to
	// call more than once.
	Delete() error
}

// GatewayConfig is where a sandbox's gateway listens and what it serves:
// only Client, on Interface, never dialing Fence.
type GatewayConfig struct {
	// ID is the sandbox's id.
	ID string
	// Listen is the host end's address and the gateway's port.
	Listen netip.AddrPort
	// Interface is the host end of the sandbox's veth, sbxh<id>.
	Interface string
	// Client is the sandbox's address, the only client to serve.
	Client netip.Addr
	// Fence are networks the gateway must never dial: the sandbox's pool
	// and DefaultPool.
	Fence []netip.Prefix
	// StateDir is the sandbox's directory in the state directory, where
	// its management API's socket and token go.
	StateDir string
	// Capture is set when Spec.Capture is: what the gateway must serve
	// besides its proxy.
	Capture *GatewayCapture
}

// StartGateway starts a sandbox's gateway once its network is up, and
// returns what stops it. ctx is not cancelled by a signal to the
// sandbox: the gateway outlives the command's winding down.
type StartGateway func(ctx context.Context, c GatewayConfig) (io.Closer, error)

// Spec is what Start makes. Runtime, Gateway and Command are required;
// every other zero field has the default its comment names.
type Spec struct {
	// Name labels the sandbox in sbx ps.
	Name string
	// Command is the command and its arguments.
	Command []string
	// StateDir is where running sandboxes are recorded; "" means
	// DefaultStateDir.
	StateDir string
	// Pool is where the sandbox's /30 comes from; the zero value means
	// DefaultPool.
	Pool netip.Prefix
	// GatewayPort is the gateway's port; 0 means DefaultGatewayPort.
	GatewayPort uint16
	// Runtime runs the container.
	Runtime Runtime
	// Gateway starts the gateway.
	Gateway StartGateway
	// Container is what runs; Start sets its ID, NetnsPath and Args, and
	// puts the proxy variables (HTTP_PROXY, ..., SBX_SANDBOX) before its
	// Env.
	Container ContainerSpec
	// Stdio are the command's streams.
	Stdio Stdio
	// Capture sends what the command tries without the proxy to the
	// gateway too (docs/capture.md): DNS to its stub (the container's
	// /etc/resolv.conf names it), other TCP connections to a transparent
	// listener, and reports of every other packet refused; the gateway
	// gets them in GatewayConfig.Capture. Without it, the proxy port is
	// the only way out and everything else fails unseen.
	Capture bool
	// Trust, when set, is a CA the command trusts besides its roots: the
	// gateway's TLS inspection CA. Its files are in TrustDir in the
	// container, bound over Trust.Replace, and named by the variables TLS
	// clients read (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, ...), which come
	// before Container.Env's, so the command's own win.
	Trust *Trust
}

// Sandbox is a running sandbox made by Start. Wait, Stop and Close may be
// called from different goroutines; Close must always be called.
type Sandbox struct {
	// ID is the sandbox's id; Names its kernel objects; Subnet its /30.
	ID     string
	Names  Names
	Subnet Subnet
	// Proxy is the gateway's URL, as the command finds it in HTTP_PROXY.
	Proxy string

	spec      Spec
	container Container
	gateway   io.Closer
	// capture is what openCapture opened (as far as it got), for the
	// gateway; removeAll closes its PacketLog before the gateway and the
	// rest after.
	capture *GatewayCapture
	undo    []func() error // what Close undoes, in reverse
	// stopping, set by Close, is closed once the state says stopping:
	// the gateway and the state go only after.
	stopping chan struct{}

	done     chan struct{} // closed when the command's end is known
	code     int
	waitErr  error
	closeErr error
	closed   sync.Once
}

// Start makes a sandbox and starts its command: it reserves a subnet and
// records the sandbox in spec.StateDir, creates the network namespace,
// sets up the network (rules before links) and starts the gateway while
// the runtime creates the container (whose process joins the namespace
// once it exists), and starts the command only when both are done, so
// that it never runs before its rules. A command
// that cannot be run is a *StartError (its Code is the shell's exit code).
// On error nothing is left.
func Start(ctx context.Context, spec Spec) (_ *Sandbox, retErr error) {
	if spec.Runtime == nil || spec.Gateway == nil || len(spec.Command) == 0 {
		return nil, errors.New("sandbox: Spec.Runtime, Spec.Gateway and Spec.Command are required")
	}
	if spec.StateDir == "" {
		spec.StateDir = DefaultStateDir
	}
	if !spec.Pool.IsValid() {
		spec.Pool = DefaultPool
	}
	if spec.GatewayPort == 0 {
		spec.GatewayPort = DefaultGatewayPort
	}
	pid, pidStart, err := ThisProcess()
	if err != nil {
		return nil, err
	}
	// The lease first, before anything of the sandbox exists, and let go
	// last: while it is held, gc leaves the sandbox alone.
	id, lease, err := newLeasedID()
	if err != nil {
		return nil, err
	}
	names, _ := NamesFor(id)
	s := &Sandbox{ID: id, Names: names, spec: spec, done: make(chan struct{})}
	s.undo = append(s.undo, lease.Release)
	defer func() {
		if retErr != nil {
			if err := s.teardown(); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}
	}()
	// Teardown runs on a context Ctrl-C cannot cancel.
	teardownCtx := context.WithoutCancel(ctx)

	s.Subnet, err = Reserve(spec.StateDir, spec.Pool, State{ID: id, PID: pid, PIDStart: pidStart,
		GatewayPort: spec.GatewayPort, Command: spec.Command, Created: time.Now().UTC(), Name: spec.Name})
	if err != nil {
		return nil, err
	}
	s.undo = append(s.undo, func() error { s.stopped(); return Release(spec.StateDir, id) })
	teardownNetwork := onlyOnce(func() error { return TeardownNetwork(teardownCtx, names) })
	s.undo = append(s.undo, teardownNetwork)

	gw := netip.AddrPortFrom(s.Subnet.Host, spec.GatewayPort)
	s.Proxy = "http://" + net.JoinHostPort(gw.Addr().String(), strconv.Itoa(int(gw.Port())))
	cs := spec.Container
	cs.ID, cs.NetnsPath, cs.Args = id, "/var/run/netns/"+names.Netns, spec.Command
	cs.Env = append([]string{
		"HTTP_PROXY=" + s.Proxy, "HTTPS_PROXY=" + s.Proxy, "http_proxy=" + s.Proxy, "https_proxy=" + s.Proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1", "SBX_SANDBOX=" + id,
	}, cs.Env...)
	plan := NetPlan{Names: names, Subnet: s.Subnet, GatewayPort: spec.GatewayPort}
	if spec.Capture {
		plan.Capture = &Capture{DNSPort: DefaultDNSPort, TransparentPort: DefaultTransparentPort, PacketGroup: DefaultPacketGroup}
		resolv, err := writeResolvConf(filepath.Join(spec.StateDir, id), s.Subnet.Host)
		if err != nil {
			return nil, err
		}
		cs.Mounts = append(slices.Clip(cs.Mounts), specs.Mount{Destination: "/etc/resolv.conf", Source: resolv, Type: "bind",
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	}

	javaErr := func() error { return nil }
	if spec.Trust != nil {
		mounts, done, err := writeTrust(filepath.Join(spec.StateDir, id), spec.Trust)
		if err != nil {
			return nil, err
		}
		// The Java truststore is made while the network and the container
		// are; the command starts once it is written, and nothing is
		// taken down before it is.
		javaErr = onlyOnce(func() error { return <-done })
		s.undo = append(s.undo, func() error { javaErr(); return nil })
		cs.Mounts = append(slices.Clip(cs.Mounts), mounts...)
		cs.Env = spec.Trust.withEnv(cs.Env)
	}

	// The namespace, empty. A runtime that cannot join one by path makes
	// it itself (and undoes it itself when it fails), first; otherwise it
	// is made while the runtime makes the container's record, which does
	// not need it, and the container's process, which joins it, waits
	// for it (ContainerSpec.WaitNetns).
	makeNamespace := func() error { return CreateNamespace(names) }
	if nm, ok := spec.Runtime.(namespaceMaker); ok {
		if err := nm.MakeNamespace(ctx, cs); err != nil {
			return nil, err
		}
		makeNamespace = func() error { return nil }
	}
	nsErr := make(chan error, 1)
	cs.WaitNetns = func() error {
		if err := <-nsErr; err != nil {
			return errNoNamespace
		}
		return nil
	}

	// The network and gateway on one side, the runtime's container (most
	// of the start time) on the other, at once.
	netErr, ctrErr := make(chan error, 1), make(chan error, 1)
	go func() {
		err := makeNamespace()
		nsErr <- err
		if err != nil {
			netErr <- err
			return
		}
		if err := SetupNetwork(ctx, plan); err != nil {
			netErr <- err
			return
		}
		gc := GatewayConfig{
			ID: id, Listen: gw, Interface: names.HostVeth, Client: s.Subnet.Sandbox,
			Fence: fence(spec.Pool), StateDir: filepath.Join(spec.StateDir, id),
		}
		if plan.Capture != nil {
			if gc.Capture, err = s.openCapture(cs.NetnsPath, plan); err != nil {
				netErr <- err
				return
			}
		}
		s.gateway, err = spec.Gateway(teardownCtx, gc)
		netErr <- err
	}()
	go func() {
		var err error
		s.container, err = spec.Runtime.Create(ctx, cs, spec.Stdio)
		ctrErr <- err
	}()
	errNet, errCtr := <-netErr, <-ctrErr
	if errors.Is(errCtr, errNoNamespace) {
		errCtr = nil // errNet says why there is none
	}
	// The gateway outlives the container: it is closed after (or, once
	// the command is seen to have ended, beside) the container's removal.
	s.undo = append(s.undo, func() error { return s.removeAll(teardownNetwork) })
	var se *StartError
	if errNet == nil && errors.As(errCtr, &se) {
		return nil, errCtr
	}
	if err := multierror.Append(nil, errNet, errCtr).ErrorOrNil(); err != nil {
		return nil, err
	}
	if err := javaErr(); err != nil {
		return nil, err
	}
	// Not cancelled by ctx: a signal that lands while the runtime is still
	// answering that the command started must reach the command (through
	// Stop), not fail a start that happened.
	if err := s.container.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	// From now on sbx ps says running, and commands that talk to it
	// through its management API stop waiting.
	if err := SetStatus(spec.StateDir, id, StatusRunning); err != nil {
		return nil, err
	}
	// Ends when the command ends, or when Close deletes the container.
	go func() {
		s.code, s.waitErr = s.container.Wait(context.WithoutCancel(ctx))
		close(s.done)
	}()
	return s, nil
}

// openCapture opens what the gateway of a capturing sandbox serves: the
// transparent listener in its namespace, the report of refused packets and
// the finder of sockets' processes, kept in s.capture however far it got.
// removeAll closes them, around the gateway, for Close and for a failed
// Start.
func (s *Sandbox) openCapture(nsPath string, plan NetPlan) (*GatewayCapture, error) {
	c := &GatewayCapture{DNS: netip.AddrPortFrom(plan.Subnet.Host, plan.Capture.DNSPort)}
	s.capture = c
	var err error
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(plan.Capture.TransparentPort)))
	if c.Transparent, err = listenInNetns(nsPath, addr); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if c.Packets, err = OpenPacketLog(nsPath, plan.Capture.PacketGroup); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if c.Owners, err = NewOwners(nsPath); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return c, nil
}

// errNoNamespace is a container's Create stopped because its network
// namespace could not be made: Start says why the namespace could not.
var errNoNamespace = errors.New("the sandbox's network namespace was not made")

// fence returns the networks a sandbox's gateway never dials.
func fence(pool netip.Prefix) []netip.Prefix {
	if pool == DefaultPool {
		return []netip.Prefix{pool}
	}
	return []netip.Prefix{pool, DefaultPool}
}

// removeAll removes the container and closes the gateway, then tears
// the network down. Once the command is seen to have ended (its PID
// namespace ends with it) the container's removal overlaps the rest;
// otherwise (it never started, or the runtime stopped answering) they go
// in order, so that nothing of it runs with its network half gone.
func (s *Sandbox) removeAll(teardownNetwork func() error) error {
	deleteContainer := func() error {
		if s.container == nil {
			return s.spec.Runtime.RemoveContainer(context.Background(), s.ID) // whatever a failed create left
		}
		return s.container.Delete()
	}
	closeGateway := func() error {
		s.stopped() // the management API goes once the state says stopping
		c := s.capture
		s.capture = nil
		var errs *multierror.Error
		// The refused packets' reports still in the socket are read and
		// reported before the gateway closes its log; what the gateway
		// served goes after it.
		if c != nil && c.Packets != nil {
			errs = multierror.Append(errs, c.Packets.Close())
		}
		if s.gateway != nil {
			errs = multierror.Append(errs, s.gateway.Close())
		}
		if c != nil && c.Transparent != nil {
			c.Transparent.Close() // the gateway closed it already, normally
		}
		if c != nil && c.Owners != nil {
			errs = multierror.Append(errs, c.Owners.Close())
		}
		return errs.ErrorOrNil()
	}
	if s.container != nil && s.container.Exited() {
		ctrErr := make(chan error, 1)
		go func() { ctrErr <- deleteContainer() }()
		return multierror.Append(closeGateway(), teardownNetwork(), <-ctrErr).ErrorOrNil()
	}
	return multierror.Append(deleteContainer(), closeGateway(), teardownNetwork()).ErrorOrNil()
}

// Wait waits for the command's end and returns its exit code, or ctx's
// error when ctx ends first. The command's output may still be on its way
// to Spec.Stdio then; it is all there once Close returns.
func (s *Sandbox) Wait(ctx context.Context) (int, error) {
	select {
	case <-s.done:
		return s.code, s.waitErr
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Stop sends the command SIGTERM, and SIGKILL when it has not ended after
// grace, and returns its exit code. The gateway goes on deciding what the
// command does meanwhile.
func (s *Sandbox) Stop(grace time.Duration) (int, error) {
	select {
	case <-s.done:
		return s.code, s.waitErr
	default:
	}
	ctx := context.Background()
	s.container.Signal(ctx, syscall.SIGTERM)
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if code, err := s.Wait(graceCtx); err == nil || err != graceCtx.Err() {
		return code, err
	}
	s.container.Signal(ctx, syscall.SIGKILL)
	return s.Wait(ctx)
}

// Close removes the container (killing what is left of the command),
// closes the gateway, tears the network down and forgets the sandbox, in
// that order where it matters, and returns every failure. It is safe to
// call more than once.
func (s *Sandbox) Close() error {
	s.closed.Do(func() {
		// For sbx ps, and for those who follow the sandbox through its
		// management API (it is stopping, not lost, when the API goes):
		// written beside the container's removal, which does not need
		// it, and before the gateway and the state go, which wait for it.
		s.stopping = make(chan struct{})
		go func() {
			defer close(s.stopping)
			SetStatus(s.spec.StateDir, s.ID, StatusStopping)
		}()
		s.closeErr = s.teardown()
	})
	return s.closeErr
}

// stopped waits until the state says stopping, when Close began it.
func (s *Sandbox) stopped() {
	if s.stopping != nil {
		<-s.stopping
	}
}

// teardown runs the undo steps in reverse, collecting every failure.
func (s *Sandbox) teardown() error {
	var errs *multierror.Error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	s.undo = nil
	if err := errs.ErrorOrNil(); err != nil {
		return fmt.Errorf("tearing down sandbox %s: %w", s.ID, err)
	}
	return nil
}

// onlyOnce returns a func that runs fn the first time it is called and
// returns nil after.
func onlyOnce(fn func() error) func() error {
	var once sync.Once
	return func() (err error) {
		once.Do(func() { err = fn() })
		return err
	}
}
