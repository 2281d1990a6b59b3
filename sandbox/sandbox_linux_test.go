package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGateway answers every connection with "gateway-ok" on the address
// Start gives it, and records what it was given. It also listens, and
// answers nothing, on the next port of that address: another port where
// something listens, which the sandbox must not reach either.
type fakeGateway struct {
	cfg    GatewayConfig
	ln     net.Listener
	other  net.Listener
	closed bool
	fail   error
}

func (g *fakeGateway) start(_ context.Context, c GatewayConfig) (io.Closer, error) {
	g.cfg = c
	if g.fail != nil {
		return nil, g.fail
	}
	ln, err := net.Listen("tcp", c.Listen.String())
	if err != nil {
		return nil, err
	}
	other, err := net.Listen("tcp", netip.AddrPortFrom(c.Listen.Addr(), c.Listen.Port()+1).String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	g.ln, g.other = ln, other
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(conn, "gateway-ok\n")
			conn.Close()
		}
	}()
	return g, nil
}

func (g *fakeGateway) Close() error {
	g.closed = true
	g.other.Close()
	return g.ln.Close()
}

// testPool is where the privileged tests' sandboxes take their subnets.
var testPool = netip.MustParsePrefix("10.213.233.0/24")

// startSpec is a Spec for a busybox sandbox of runtime tr in its own
// state directory and pool, running script.
func startSpec(t *testing.T, tr testRuntime, gw *fakeGateway, script string, out io.Writer) Spec {
	t.Helper()
	spec := Spec{
		Command:   []string{"sh", "-c", script},
		StateDir:  t.TempDir(),
		Pool:      testPool,
		Runtime:   tr.rt,
		Gateway:   gw.start,
		Container: ContainerSpec{UID: NobodyID, GID: NobodyID, Limits: Limits{Pids: 64}},
		Stdio:     Stdio{Out: out, Err: out},
	}
	tr.root(t, &spec.Container)
	return spec
}

// assertSandboxGone checks that nothing of sandbox id is left: state,
// network, container.
func assertSandboxGone(t *testing.T, rt ContainerRuntime, stateDir, id string) {
	t.Helper()
	n, _ := NamesFor(id)
	assertNetworkGone(t, n)
	if _, err := Load(stateDir, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("state of %s left: %v", id, err)
	}
	ids, _ := rt.ContainerIDs(context.Background())
	for _, c := range ids {
		if c == id {
			t.Errorf("container %s left", id)
		}
	}
}

// TestPrivilegedStart runs a sandbox through the library: the command
// reaches the gateway Start started (with the proxy in its environment),
// Wait returns its exit code, Close leaves nothing; Stop ends a command
// that would run on with SIGTERM's exit code; a command that cannot be
// run and a gateway that cannot start leave nothing either.
func TestPrivilegedStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	for _, tr := range testRuntimes(t) {
		t.Run(tr.name, func(t *testing.T) { testStart(t, tr) })
	}
}

func testStart(t *testing.T, tr testRuntime) {
	ctx := context.Background()
	// What is gone is no error (errdefs, not the message's words).
	if err := tr.rt.RemoveContainer(ctx, "00000000"); err != nil {
		t.Errorf("removing a container that does not exist: %v", err)
	}

	t.Run("run", func(t *testing.T) {
		var out lockedBuilder
		gw := &fakeGateway{}
		spec := startSpec(t, tr, gw, `GW=${HTTP_PROXY#http://}; nc ${GW%:*} ${GW##*:} </dev/null; echo "sandbox=$SBX_SANDBOX"; exit 7`, &out)
		s, err := Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		code, err := s.Wait(ctx)
		if err != nil || code != 7 {
			t.Errorf("Wait = %d, %v; want 7", code, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if !strings.Contains(out.String(), "gateway-ok") || !strings.Contains(out.String(), "sandbox="+s.ID) {
			t.Errorf("output %q: the command did not reach the gateway or lacks SBX_SANDBOX", out.String())
		}
		if gw.cfg.Interface != s.Names.HostVeth || gw.cfg.Client != s.Subnet.Sandbox || !gw.closed {
			t.Errorf("gateway given %+v (closed %v), want interface %s, client %s, closed", gw.cfg, gw.closed, s.Names.HostVeth, s.Subnet.Sandbox)
		}
		assertSandboxGone(t, tr.rt, spec.StateDir, s.ID)
	})

	t.Run("stop", func(t *testing.T) {
		gw := &fakeGateway{}
		spec := startSpec(t, tr, gw, `trap 'exit 143' TERM; while true; do sleep 0.1; done`, io.Discard)
		s, err := Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := s.Wait(waitCtx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a running command: %v, want the context's deadline", err)
		}
		if code, err := s.Stop(5 * time.Second); err != nil || code != 143 {
			t.Errorf("Stop = %d, %v; want 143", code, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertSandboxGone(t, tr.rt, spec.StateDir, s.ID)
	})

	t.Run("not found", func(t *testing.T) {
		gw := &fakeGateway{}
		spec := startSpec(t, tr, gw, "", io.Discard)
		spec.Command = []string{"/no/such/command"}
		s, err := Start(ctx, spec)
		var se *StartError
		if !errors.As(err, &se) || se.Code != ExitNotFound {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Start of a missing command: %v, want a StartError %d", err, ExitNotFound)
		}
		if !gw.closed {
			t.Errorf("the gateway was left running")
		}
		assertSandboxGone(t, tr.rt, spec.StateDir, gw.cfg.ID)
	})

	t.Run("gateway fails", func(t *testing.T) {
		gw := &fakeGateway{fail: errors.New("no gateway today")}
		spec := startSpec(t, tr, gw, "true", io.Discard)
		s, err := Start(ctx, spec)
		if err == nil || !strings.Contains(err.Error(), "no gateway today") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Start with a failing gateway: %v", err)
		}
		assertSandboxGone(t, tr.rt, spec.StateDir, gw.cfg.ID)
	})
}

// TestPrivilegedOutputIsNotLost: a command that prints and ends at once
// has all of its output, standard output and error, delivered by the time
// Close returns, every time.
func TestPrivilegedOutputIsNotLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	ctx := context.Background()
	for _, tr := range testRuntimes(t) {
		t.Run(tr.name, func(t *testing.T) {
			lost := 0
			for i := range 12 {
				var out lockedBuilder
				spec := startSpec(t, tr, &fakeGateway{}, "echo out-line; echo err-line >&2", &out)
				s, err := Start(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				if code, err := s.Wait(ctx); err != nil || code != 0 {
					t.Errorf("run %d: exit %d, %v", i, code, err)
				}
				if err := s.Close(); err != nil {
					t.Errorf("run %d: Close: %v", i, err)
				}
				if !strings.Contains(out.String(), "out-line") || !strings.Contains(out.String(), "err-line") {
					lost++
					t.Logf("run %d: output %q", i, out.String())
				}
			}
			if lost > 0 {
				t.Errorf("output lost in %d of 12 runs", lost)
			}
		})
	}
}

// lockedBuilder is a strings.Builder that the two stream copiers may
// write at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cancelOnStart is a Runtime whose containers cancel the context of
// Start just after the command started, as a signal to sbx run that lands
// while the runtime is still answering does.
type cancelOnStart struct {
	Runtime
	cancel context.CancelFunc
}

func (r cancelOnStart) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	c, err := r.Runtime.Create(ctx, cs, stdio)
	if err != nil {
		return nil, err
	}
	return cancelingContainer{c, r.cancel}, nil
}

type cancelingContainer struct {
	Container
	cancel context.CancelFunc
}

func (c cancelingContainer) Start(ctx context.Context) error {
	if err := c.Container.Start(ctx); err != nil {
		return err
	}
	c.cancel()
	return ctx.Err() // what a runtime call cut off by the cancel returns
}

// readyWriter closes ready once "ready" has been written to it.
type readyWriter struct {
	mu    sync.Mutex
	seen  []byte
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen != nil && bytes.Contains(w.seen, []byte("ready")) {
		return len(p), nil
	}
	w.seen = append(w.seen, p...)
	if bytes.Contains(w.seen, []byte("ready")) {
		close(w.ready)
	}
	return len(p), nil
}

// TestPrivilegedSignalDuringStart: a signal that lands while the command
// is being started does not fail the start (sbx run said exit 125 and
// tore down a running command); the sandbox starts, and Stop then gives
// the command's own answer to SIGTERM.
func TestPrivilegedSignalDuringStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	tr := testRuntimes(t)[0] // containerd
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The command says when its trap is set: a SIGTERM before that finds
	// the shell as the container's pid 1 with no handler, which the
	// kernel does not deliver, and Stop would end in SIGKILL.
	out := &readyWriter{ready: make(chan struct{})}
	spec := startSpec(t, tr, &fakeGateway{}, `trap 'exit 143' TERM; echo ready; while true; do sleep 0.1; done`, out)
	spec.Runtime = cancelOnStart{spec.Runtime, cancel}
	s, err := Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start with a signal while the command starts: %v", err)
	}
	defer s.Close()
	if _, err := s.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v, want the cancelled context", err)
	}
	select {
	case <-out.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not say ready within 10s")
	}
	if code, err := s.Stop(5 * time.Second); err != nil || code != 143 {
		t.Errorf("Stop = %d, %v; want 143", code, err)
	}
}

// TestPrivilegedNamespaceBesideContainer: Start asks the runtime for the
// container before the network namespace is made (its record needs
// none), with a ContainerSpec.WaitNetns after which the namespace the
// container's process joins exists.
func TestPrivilegedNamespaceBesideContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	tr := testRuntimes(t)[0] // containerd
	spec := startSpec(t, tr, &fakeGateway{}, "true", io.Discard)
	w := &netnsWaiter{Runtime: spec.Runtime}
	spec.Runtime = w
	s, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w.err != nil {
		t.Error(w.err)
	}
}

// netnsWaiter is a Runtime whose Create waits for the namespace itself
// and checks that it exists then.
type netnsWaiter struct {
	Runtime
	err error
}

func (w *netnsWaiter) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	if cs.WaitNetns == nil {
		w.err = errors.New("Create got no WaitNetns")
		return w.Runtime.Create(ctx, cs, stdio)
	}
	if err := cs.WaitNetns(); err != nil {
		w.err = fmt.Errorf("WaitNetns: %w", err)
	} else if _, err := os.Stat(cs.NetnsPath); err != nil {
		w.err = fmt.Errorf("the namespace after WaitNetns: %w", err)
	}
	cs.WaitNetns = func() error { return nil }
	return w.Runtime.Create(ctx, cs, stdio)
}
