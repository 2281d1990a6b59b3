package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/sirupsen/logrus"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// removeImageOnCleanup removes the image name from containerd's sbx
// namespace now (a leftover of an earlier run) and when the test ends.
func removeImageOnCleanup(t *testing.T, cd *Containerd, name string) {
	t.Helper()
	rm := func() {
		ctx := namespaces.WithNamespace(context.Background(), ContainerdNamespace)
		if err := cd.client.ImageService().Delete(ctx, name, images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("removing image %s: %v", name, err)
		}
	}
	rm()
	t.Cleanup(rm)
}

// logRecorder is a logrus hook that records the messages it sees.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Levels() []logrus.Level { return logrus.AllLevels }

func (r *logRecorder) Fire(e *logrus.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, e.Message)
	return nil
}

func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runFromPushed starts a sandbox with rt from image, one that pushBusybox
// pushed, and checks that the command runs from it: its exit code and
// its output, which is complete once Close returns (Wait may return
// before the last of it has been copied).
func runFromPushed(t *testing.T, rt Runtime, image string, pool netip.Prefix) {
	t.Helper()
	ctx := context.Background()
	var out, errOut bytes.Buffer
	gw := &fakeGateway{}
	s, err := Start(ctx, Spec{
		Command:   []string{"sh", "-c", `echo "image=$FROM_IMAGE"; [ "$FROM_IMAGE" = yes ] && exit 7`},
		StateDir:  t.TempDir(),
		Pool:      pool,
		Runtime:   rt,
		Gateway:   gw.start,
		Container: ContainerSpec{Image: image, UID: NobodyID, GID: NobodyID, Limits: Limits{Pids: 64}},
		Stdio:     Stdio{Out: &out, Err: &errOut},
	})
	if err != nil {
		t.Fatalf("starting a sandbox from %s: %v", image, err)
	}
	t.Cleanup(func() { s.Close() })
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if code, err := s.Wait(wctx); code != 7 || err != nil {
		t.Errorf("Wait = %d, %v; want 7 (the command runs from the image, with its environment)\n%s%s", code, err, out.String(), errOut.String())
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !strings.Contains(out.String(), "image=yes") {
		t.Errorf("output %q, want image=yes", out.String())
	}
}

// imagePuller is a runtime whose store EnsureImage fills: *Containerd
// and *Docker.
type imagePuller interface {
	Runtime
	EnsureImage(ctx context.Context, ref string, policy PullPolicy, progress io.Writer) (string, error)
}

// checkPullPolicies runs the pull policies on ref, pushed to reg and not
// yet in rt's store: never refuses it and asks the registry nothing;
// missing pulls it (manifest and blobs) and a sandbox runs from it (in
// pool); a second missing asks the registry nothing; always asks for the
// manifest again and fetches no blob. It returns the progress missing
// drew.
func checkPullPolicies(t *testing.T, reg *sandboxtest.Registry, rt imagePuller, ref string, pool netip.Prefix) string {
	t.Helper()
	ctx := context.Background()
	if _, err := rt.EnsureImage(ctx, ref, PullNever, nil); !errors.Is(err, ErrImageNotPresent) {
		t.Fatalf("EnsureImage(never) of a missing image: %v, want ErrImageNotPresent", err)
	}
	if reqs := reg.Take(); len(reqs) != 0 {
		t.Errorf("--pull never asked the registry: %v", reqs)
	}

	var progress bytes.Buffer
	got, err := rt.EnsureImage(ctx, ref, PullMissing, &progress)
	if err != nil {
		t.Fatalf("EnsureImage(missing): %v", err)
	}
	if got != ref {
		t.Errorf("EnsureImage(missing) = %q, want %q", got, ref)
	}
	reqs := reg.Take()
	if sandboxtest.CountRequests(reqs, "GET", "manifests") == 0 || sandboxtest.CountRequests(reqs, "GET", "blobs") < 2 {
		t.Errorf("the pull did not fetch the manifest, config and layer: %v", reqs)
	}

	runFromPushed(t, rt, got, pool)

	if _, err := rt.EnsureImage(ctx, ref, PullMissing, nil); err != nil {
		t.Fatalf("EnsureImage(missing) of a present image: %v", err)
	}
	if reqs := reg.Take(); len(reqs) != 0 {
		t.Errorf("missing asked the registry again for a present image: %v", reqs)
	}

	if _, err := rt.EnsureImage(ctx, ref, PullAlways, nil); err != nil {
		t.Fatalf("EnsureImage(always): %v", err)
	}
	reqs = reg.Take()
	if sandboxtest.CountRequests(reqs, "HEAD", "manifests")+sandboxtest.CountRequests(reqs, "GET", "manifests") == 0 {
		t.Errorf("always did not ask the registry for the manifest: %v", reqs)
	}
	if n := sandboxtest.CountRequests(reqs, "GET", "blobs"); n != 0 {
		t.Errorf("always fetched %d blobs it had: %v", n, reqs)
	}
	return progress.String()
}

// checkPullFailures pulls an image reg lacks (ErrImageNotFound) and one
// from a registry that does not answer (ErrRegistryUnreachable), after
// removeOnCleanup of each, and returns their names for the caller to
// check that no image was left.
func checkPullFailures(t *testing.T, reg *sandboxtest.Registry, rt imagePuller, removeOnCleanup func(string), repoTag string) (missing, down string) {
	t.Helper()
	ctx := context.Background()
	missing = reg.Host + "/sbxtest/nosuch:1"
	removeOnCleanup(missing)
	if _, err := rt.EnsureImage(ctx, missing, PullMissing, nil); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("EnsureImage of an image the registry lacks: %v, want ErrImageNotFound", err)
	}
	down = closedPort(t) + "/" + repoTag
	removeOnCleanup(down)
	if _, err := rt.EnsureImage(ctx, down, PullMissing, nil); !errors.Is(err, ErrRegistryUnreachable) {
		t.Errorf("EnsureImage from a registry that does not answer: %v, want ErrRegistryUnreachable", err)
	}
	return missing, down
}

// TestPrivilegedImagePull pulls from a registry on loopback: --pull never
// refuses a missing image; missing pulls it once (manifest and blobs),
// then runs a sandbox from it, and a second missing asks the registry
// nothing; always asks for the manifest again but fetches no blob it
// has. A missing image and a registry that does not answer are told
// apart, and leave no image.
func TestPrivilegedImagePull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for containerd and namespaces (CI runs as root)")
	}
	ctx := context.Background()
	cd, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.Close() })
	reg := sandboxtest.StartRegistry(t)
	ref := reg.Push(t, "sbxtest/busybox:pull")
	removeImageOnCleanup(t, cd, ref)

	progress := checkPullPolicies(t, reg, cd, ref, netip.MustParsePrefix("10.213.229.0/24"))
	if !strings.Contains(progress, "pulled "+ref) {
		t.Errorf("progress = %q, want it to end with pulled %s", progress, ref)
	}

	// containerd's client logs each failed fetch; none of it may reach
	// logrus's standard logger, which writes to the user's stderr.
	logged := &logRecorder{}
	hooks := logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.StandardLogger().AddHook(logged)
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(hooks) })
	missing, down := checkPullFailures(t, reg, cd, func(name string) { removeImageOnCleanup(t, cd, name) }, "sbxtest/busybox:pull")
	if msgs := logged.messages(); len(msgs) != 0 {
		t.Errorf("failed pulls logged to the standard logger (the user's stderr): %q", msgs)
	}
	for _, n := range []string{missing, down} {
		if _, err := cd.client.GetImage(namespaces.WithNamespace(ctx, ContainerdNamespace), n); !errdefs.IsNotFound(err) {
			t.Errorf("a failed pull left image %s: %v", n, err)
		}
	}
}

// TestPrivilegedImageImport imports an OCI layout archive: the image is
// named as the archive says, unpacked, and found by its short name with
// PullNever. An image that does not unpack (its layer is not the one its
// configuration names) is refused and leaves no image, and a file that is
// no archive is an error.
func TestPrivilegedImageImport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for containerd (CI runs as root)")
	}
	ctx := context.Background()
	cd, err := ConnectContainerd(ctx, DefaultContainerdSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cd.Close() })

	ref := "docker.io/sbxtest/busybox:import-lib"
	removeImageOnCleanup(t, cd, ref)
	f, err := os.Open(busyboxImageTarFor(t, ref, false))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := cd.ImportImage(ctx, f)
	if err != nil || len(names) != 1 || names[0] != ref {
		t.Fatalf("ImportImage = %q, %v; want [%s]", names, err, ref)
	}
	img, err := cd.client.GetImage(namespaces.WithNamespace(ctx, ContainerdNamespace), ref)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := img.IsUnpacked(namespaces.WithNamespace(ctx, ContainerdNamespace), imageSnapshotter); !ok || err != nil {
		t.Errorf("the imported image is not unpacked: %v, %v", ok, err)
	}
	if got, err := cd.EnsureImage(ctx, "sbxtest/busybox:import-lib", PullNever, nil); err != nil || got != ref {
		t.Errorf("EnsureImage(never) of the short name = %q, %v; want %s", got, err, ref)
	}

	corrupt := "docker.io/sbxtest/busybox:import-corrupt"
	removeImageOnCleanup(t, cd, corrupt)
	f2, err := os.Open(busyboxImageTarFor(t, corrupt, true))
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if names, err := cd.ImportImage(ctx, f2); err == nil {
		t.Errorf("ImportImage of an image whose layer is not the one its config names = %q; want an error", names)
	}
	if _, err := cd.client.GetImage(namespaces.WithNamespace(ctx, ContainerdNamespace), corrupt); !errdefs.IsNotFound(err) {
		t.Errorf("a failed import left image %s: %v", corrupt, err)
	}

	if names, err := cd.ImportImage(ctx, strings.NewReader("not an archive")); err == nil {
		t.Errorf("ImportImage of text = %q; want an error", names)
	}
}

func TestParsePullPolicy(t *testing.T) {
	for _, s := range PullPolicies {
		p, err := ParsePullPolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePullPolicy(%q) = %v, %v; want %s", s, p, err, s)
		}
	}
	if p, err := ParsePullPolicy("sometimes"); err == nil {
		t.Errorf("ParsePullPolicy(sometimes) = %v; want an error", p)
	}
	var zero PullPolicy
	if zero != PullMissing {
		t.Errorf("the zero PullPolicy is %v, want missing", zero)
	}
}

func TestImageLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost:5000": true, "127.0.0.1:5000": true, "127.1.2.3": true, "[::1]:5000": true, "::1": true,
		"docker.io": false, "registry-1.docker.io:443": false, "10.0.0.1:5000": false, "localhost.example.com": false,
	} {
		if got, _ := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestImageHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1500: "1.5 kB", 12_300_000: "12.3 MB", 1_200_000_000: "1.2 GB", 5_000_000_000_000: "5000.0 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
