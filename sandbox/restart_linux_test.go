package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// leftovers lists what of container id runs or exists, found without
// the runtime.
func leftovers(id string) []string {
	return sandboxtest.Leftovers(id, "/"+ContainerdNamespace+"/"+id)
}

// testContainerd starts a containerd of the test's own and connects to
// it; the client is closed when the test ends.
func testContainerd(t *testing.T) (*sandboxtest.Containerd, *Containerd) {
	t.Helper()
	ctd := sandboxtest.StartContainerd(t, ContainerdNamespace)
	cd, err := ConnectContainerd(context.Background(), ctd.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.Close() })
	return ctd, cd
}

// restartSpec is a Spec for a busybox sandbox on the test's containerd cd
// running script.
func restartSpec(t *testing.T, cd *Containerd, script string, out *lockedBuilder) Spec {
	t.Helper()
	tr := testRuntime{name: "containerd", rt: cd, root: func(t *testing.T, cs *ContainerSpec) {
		root := busyboxRootfs(t)
		os.Symlink("busybox", filepath.Join(root, "bin", "sleep"))
		cs.RootFS = root
	}}
	return startSpec(t, tr, &fakeGateway{}, script, out)
}

// shortRuntimeBounds makes sbx give up on an unreachable runtime, and on
// a deletion, within seconds, for the test.
func shortRuntimeBounds(t *testing.T, lost, del time.Duration) {
	wasLost, wasDel := runtimeLostAfter, deleteTimeout
	runtimeLostAfter, deleteTimeout = lost, del
	t.Cleanup(func() { runtimeLostAfter, deleteTimeout = wasLost, wasDel })
}

// TestPrivilegedRuntimeRestart: a sandbox survives a restart of its
// containerd, whether the daemon ends cleanly (SIGTERM) or is killed
// (SIGKILL): sbx reconnects, the command runs on with its network, and its
// exit code comes back; nothing is left after Close.
func TestPrivilegedRuntimeRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx := context.Background()
			ctd, cd := testContainerd(t)
			var out lockedBuilder
			// The command's network is checked after the restart: the
			// gateway still answers.
			spec := restartSpec(t, cd, `sleep 3; GW=${HTTP_PROXY#http://}; nc ${GW%:*} ${GW##*:} </dev/null; exit 7`, &out)
			s, err := Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			time.Sleep(500 * time.Millisecond)
			ctd.Stop(t, sig)
			time.Sleep(300 * time.Millisecond)
			ctd.Start(t)
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			code, err := s.Wait(waitCtx)
			if err != nil || code != 7 {
				t.Errorf("Wait after containerd's restart on %v = %d, %v; want 7, nil", sig, code, err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if !strings.Contains(out.String(), "gateway-ok") {
				t.Errorf("output %q: the command lost its network across the restart", out.String())
			}
			assertSandboxGone(t, cd, spec.StateDir, s.ID)
			if left := leftovers(s.ID); len(left) > 0 {
				t.Errorf("left after Close:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestPrivilegedRuntimeLost: when containerd is killed and does not come
// back, sbx gives up after runtimeLostAfter: Wait fails with
// ErrRuntimeLost only once the command is killed (no process of the
// container is left, nor its shim), and Close leaves nothing of the
// sandbox, containerd still gone.
func TestPrivilegedRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()
	ctd, cd := testContainerd(t)
	var out lockedBuilder
	spec := restartSpec(t, cd, `trap '' TERM; sleep 60; exit 7`, &out)
	s, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	time.Sleep(300 * time.Millisecond)
	if left := leftovers(s.ID); len(left) == 0 {
		t.Fatalf("no process of the running sandbox found: the test cannot see the command")
	}
	ctd.Stop(t, syscall.SIGKILL)
	began := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := s.Wait(waitCtx)
	took := time.Since(began)
	if !errors.Is(err, ErrRuntimeLost) {
		t.Errorf("Wait with containerd gone = %d, %v; want ErrRuntimeLost", code, err)
	}
	if took > 20*time.Second {
		t.Errorf("Wait took %v to give up, want about runtimeLostAfter (%v)", took, runtimeLostAfter)
	}
	if left := leftovers(s.ID); len(left) > 0 {
		t.Errorf("the command outlived the Wait that reported its loss:\n%s", strings.Join(left, "\n"))
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close with containerd gone: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("Close with containerd gone did not end within a minute")
	}
	n, _ := NamesFor(s.ID)
	assertNetworkGone(t, n)
	if left := leftovers(s.ID); len(left) > 0 {
		t.Errorf("left after Close:\n%s", strings.Join(left, "\n"))
	}
	if _, err := Load(spec.StateDir, s.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("state of %s left: %v", s.ID, err)
	}
}

// TestPrivilegedRuntimeKilledDuringStart: containerd killed at points
// along a sandbox's start: the start either fails and leaves nothing (no
// shim, no runc init, no cgroup, no namespace), or succeeds and then the
// sandbox ends either way without a process left.
func TestPrivilegedRuntimeKilledDuringStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()
	ctd := sandboxtest.StartContainerd(t, ContainerdNamespace)
	var failed, started int
	for i, delay := range []time.Duration{0, 10, 20, 30, 40, 50, 60, 80, 100, 120, 150, 200} {
		delay *= time.Millisecond
		if !ctd.Running() {
			ctd.Start(t)
		}
		cd, err := ConnectContainerd(ctx, ctd.Socket)
		if err != nil {
			t.Fatal(err)
		}
		var out lockedBuilder
		spec := restartSpec(t, cd, `sleep 60`, &out)
		rec := &idRecorder{Runtime: cd}
		spec.Runtime = rec
		res := make(chan struct {
			s   *Sandbox
			err error
		}, 1)
		go func() {
			s, err := Start(ctx, spec)
			res <- struct {
				s   *Sandbox
				err error
			}{s, err}
		}()
		time.Sleep(delay)
		ctd.Stop(t, syscall.SIGKILL)
		var r struct {
			s   *Sandbox
			err error
		}
		select {
		case r = <-res:
		case <-time.After(time.Minute):
			t.Fatalf("try %d (%v): Start did not end within a minute of containerd's death", i, delay)
		}
		id := rec.id.Load()
		if r.err != nil {
			failed++
		} else {
			started++
			code, err := r.s.Wait(ctx)
			t.Logf("try %d (%v): started, then Wait = %d, %v", i, delay, code, err)
			if err := r.s.Close(); err != nil {
				t.Logf("try %d: Close: %v", i, err)
			}
		}
		if id == nil {
			t.Logf("try %d (%v): Start failed before creating a container: %v", i, delay, r.err)
		} else if left := leftovers(*id); len(left) > 0 {
			t.Errorf("try %d (%v, start error %v): left:\n%s", i, delay, r.err, strings.Join(left, "\n"))
			sandboxtest.KillCgroup(t, "/"+ContainerdNamespace+"/"+*id)
		}
		cd.Close()
	}
	t.Logf("containerd killed during %d starts: %d failed, %d started", failed+started, failed, started)
}

// idRecorder is a Runtime that records the id of the container it
// creates.
type idRecorder struct {
	Runtime
	id atomic.Pointer[string]
}

func (r *idRecorder) Create(ctx context.Context, cs ContainerSpec, stdio Stdio) (Container, error) {
	r.id.Store(&cs.ID)
	return r.Runtime.Create(ctx, cs, stdio)
}
