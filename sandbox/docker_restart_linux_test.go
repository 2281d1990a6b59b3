package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// testDockerd starts a dockerd of the test's own (with live-restore or
// not), over a containerd of its own, loads the test images into it and
// connects to it; the client is closed when the test ends.
func testDockerd(t *testing.T, liveRestore bool) (*sandboxtest.Dockerd, *Docker) {
	t.Helper()
	dd := sandboxtest.StartDockerd(t, liveRestore)
	ctx := context.Background()
	d, err := ConnectDocker(ctx, dd.Host)
	if err != nil {
		t.Fatal(err)
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
	return dd, d
}

// dockerRestartSpec is a Spec for a busybox sandbox on the test's Docker d
// running script.
func dockerRestartSpec(t *testing.T, d *Docker, script string, out *lockedBuilder) Spec {
	t.Helper()
	tr := testRuntime{name: "docker", rt: d, root: func(_ *testing.T, cs *ContainerSpec) { cs.Image = testDockerImage }}
	return startSpec(t, tr, &fakeGateway{}, script, out)
}

// assertNothingLeft fails the test when a process, shim or cgroup of the
// test dockerd's containers is left.
func assertNothingLeft(t *testing.T, dd *sandboxtest.Dockerd, when string) int {
	t.Helper()
	left := dd.Leftovers()
	if len(left) > 0 {
		t.Errorf("left %s:\n%s", when, strings.Join(left, "\n"))
	}
	return len(left)
}

// TestPrivilegedDockerRuntimeRestart: with live-restore, a Docker
// sandbox survives a restart of dockerd, whether the daemon ends cleanly
// (SIGTERM) or is killed (SIGKILL): sbx reconnects, the command runs on
// with its network, its output after the restart comes through, and its
// exit code comes back; nothing is left after Close.
func TestPrivilegedDockerRuntimeRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and Docker (CI runs as root)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx := context.Background()
			dd, d := testDockerd(t, true)
			var out lockedBuilder
			// The command's network and output are checked after the
			// restart: the gateway still answers, and what it prints
			// then reaches sbx.
			spec := dockerRestartSpec(t, d, `echo before; sleep 6; GW=${HTTP_PROXY#http://}; nc ${GW%:*} ${GW##*:} </dev/null; echo after; exit 7`, &out)
			s, err := Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			time.Sleep(500 * time.Millisecond)
			dd.Stop(t, sig)
			time.Sleep(300 * time.Millisecond)
			dd.Start(t)
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			code, err := s.Wait(waitCtx)
			if err != nil || code != 7 {
				t.Errorf("Wait after dockerd's restart on %v = %d, %v; want 7, nil", sig, code, err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if got := out.String(); !strings.Contains(got, "before") || !strings.Contains(got, "gateway-ok") || !strings.Contains(got, "after") {
				t.Errorf("output %q, want before, gateway-ok and after: the command lost its network or its output across the restart", got)
			}
			assertSandboxGone(t, d, spec.StateDir, s.ID)
			assertNothingLeft(t, dd, "after Close")
		})
	}
}

// TestPrivilegedDockerRuntimeStopped: a dockerd without live-restore
// stops its containers when it stops (SIGTERM), or kills them when it
// starts again (after a SIGKILL): the command cannot go on. Wait fails at
// once with ErrDockerStopped, whose message names live-restore, and only
// once no process of the sandbox runs; Close leaves nothing, whether
// dockerd came back or not.
func TestPrivilegedDockerRuntimeStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and Docker (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal
		restart bool
	}{
		{"SIGTERM/restarted", syscall.SIGTERM, true},
		{"SIGKILL/restarted", syscall.SIGKILL, true},
		{"SIGKILL/gone", syscall.SIGKILL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dd, d := testDockerd(t, false)
			var out lockedBuilder
			spec := dockerRestartSpec(t, d, `trap '' TERM; sleep 60; exit 7`, &out)
			s, err := Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			time.Sleep(300 * time.Millisecond)
			if len(dd.Leftovers()) == 0 {
				t.Fatalf("no process of the running sandbox found: the test cannot see the command")
			}
			began := time.Now()
			stopped := make(chan struct{})
			go func() { dd.Stop(t, tc.sig); close(stopped) }()
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			code, err := s.Wait(waitCtx)
			took := time.Since(began)
			t.Logf("Wait after %v: %d, %v (after %v)", tc.sig, code, err, took.Round(time.Millisecond))
			if !errors.Is(err, ErrDockerStopped) || !strings.Contains(err.Error(), "live-restore") {
				t.Errorf("Wait with dockerd stopped by %v = %d, %v; want ErrDockerStopped naming live-restore", tc.sig, code, err)
			}
			if took > 20*time.Second {
				t.Errorf("Wait took %v to fail", took)
			}
			assertNothingLeft(t, dd, "when Wait reported the failure")
			<-stopped
			if tc.restart {
				dd.Start(t)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				t.Logf("Close: %v", err)
			case <-time.After(time.Minute):
				t.Fatalf("Close did not end within a minute")
			}
			n, _ := NamesFor(s.ID)
			assertNetworkGone(t, n)
			if tc.restart {
				assertSandboxGone(t, d, spec.StateDir, s.ID)
			}
			assertNothingLeft(t, dd, "after Close")
		})
	}
}

// TestPrivilegedDockerRuntimeLost: when a dockerd with live-restore is
// killed and does not come back, sbx gives up after runtimeLostAfter:
// Wait fails with ErrRuntimeLost only once the command is killed (no
// process of the container is left, nor its shim), and Close leaves
// nothing of the sandbox, dockerd still gone.
func TestPrivilegedDockerRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and Docker (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	ctx := context.Background()
	dd, d := testDockerd(t, true)
	var out lockedBuilder
	spec := dockerRestartSpec(t, d, `trap '' TERM; sleep 60; exit 7`, &out)
	s, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	time.Sleep(300 * time.Millisecond)
	if len(dd.Leftovers()) == 0 {
		t.Fatalf("no process of the running sandbox found: the test cannot see the command")
	}
	dd.Stop(t, syscall.SIGKILL)
	began := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := s.Wait(waitCtx)
	took := time.Since(began)
	if !errors.Is(err, ErrRuntimeLost) {
		t.Errorf("Wait with dockerd gone = %d, %v; want ErrRuntimeLost", code, err)
	}
	if took > 20*time.Second {
		t.Errorf("Wait took %v to give up, want about runtimeLostAfter (%v)", took, runtimeLostAfter)
	}
	assertNothingLeft(t, dd, "when Wait reported the loss")
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close with dockerd gone: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("Close with dockerd gone did not end within a minute")
	}
	n, _ := NamesFor(s.ID)
	assertNetworkGone(t, n)
	assertNothingLeft(t, dd, "after Close")
	if _, err := Load(spec.StateDir, s.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("state of %s left: %v", s.ID, err)
	}
}

// TestPrivilegedDockerRuntimeKilledDuringStart: dockerd (with and without
// live-restore) killed at points along a sandbox's start: the start either
// fails and leaves nothing (no shim, no process, no cgroup, no namespace),
// or succeeds and then the sandbox ends either way without a process
// left.
func TestPrivilegedDockerRuntimeKilledDuringStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and Docker (CI runs as root)")
	}
	shortRuntimeBounds(t, 3*time.Second, 3*time.Second)
	for _, liveRestore := range []bool{false, true} {
		name := "live-restore"
		if !liveRestore {
			name = "no-live-restore"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dd, _ := testDockerd(t, liveRestore)
			var failed, started, leaky int
			for i, delay := range []time.Duration{0, 20, 40, 60, 80, 100, 150, 200, 300, 400, 600, 800} {
				delay *= time.Millisecond
				if !dd.Running() {
					dd.Start(t)
				}
				d, err := ConnectDocker(ctx, dd.Host)
				if err != nil {
					t.Fatal(err)
				}
				var out lockedBuilder
				spec := dockerRestartSpec(t, d, `sleep 60`, &out)
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
				dd.Stop(t, syscall.SIGKILL)
				var r struct {
					s   *Sandbox
					err error
				}
				select {
				case r = <-res:
				case <-time.After(time.Minute):
					t.Fatalf("try %d (%v): Start did not end within a minute of dockerd's death", i, delay)
				}
				if r.err != nil {
					failed++
					t.Logf("try %d (%v): Start failed: %v", i, delay, r.err)
				} else {
					started++
					code, err := r.s.Wait(ctx)
					t.Logf("try %d (%v): started, then Wait = %d, %v", i, delay, code, err)
					if err := r.s.Close(); err != nil {
						t.Logf("try %d: Close: %v", i, err)
					}
				}
				if assertNothingLeft(t, dd, "after try "+delay.String()) > 0 {
					leaky++
				}
				d.Close()
			}
			t.Logf("dockerd killed during %d starts: %d failed, %d started, %d left something", failed+started, failed, started, leaky)
		})
	}
}

// TestPrivilegedDockerRuntimeContainerdRestart: a restart of the
// containerd under dockerd (SIGKILL, dockerd staying up, without
// live-restore) does not end a Docker sandbox: the exit code comes back.
func TestPrivilegedDockerRuntimeContainerdRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and Docker (CI runs as root)")
	}
	ctx := context.Background()
	dd, d := testDockerd(t, false)
	var out lockedBuilder
	spec := dockerRestartSpec(t, d, `echo before; sleep 4; echo after; exit 7`, &out)
	s, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	time.Sleep(500 * time.Millisecond)
	dd.Containerd.Stop(t, syscall.SIGKILL)
	time.Sleep(300 * time.Millisecond)
	dd.Containerd.Start(t)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := s.Wait(waitCtx)
	if err != nil || code != 7 {
		t.Errorf("Wait after the restart of dockerd's containerd = %d, %v; want 7, nil", code, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got := out.String(); !strings.Contains(got, "after") {
		t.Errorf("output %q, want before and after", got)
	}
	assertSandboxGone(t, d, spec.StateDir, s.ID)
	assertNothingLeft(t, dd, "after Close")
}
