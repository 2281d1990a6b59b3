package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sirupsen/logrus"
)

// ociRegistry is an OCI registry on loopback (go-containerregistry's)
// that records the requests it gets.
type ociRegistry struct {
	host string // 127.0.0.1:port
	mu   sync.Mutex
	reqs []string // "GET /v2/<repo>/blobs/<digest>"
	// lost is a repository whose blobs are answered 404 (blob unknown),
	// as if they were lost after its manifest was written; "" for none.
	lost string
}

func startRegistry(t *testing.T) *ociRegistry {
	t.Helper()
	r := &ociRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Method+" "+req.URL.Path)
		lost := r.lost
		r.mu.Unlock()
		if lost != "" && strings.HasPrefix(req.URL.Path, "/v2/"+lost+"/blobs/") && req.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}`)
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// loseBlobs makes the registry answer 404 to every blob of repo.
func (r *ociRegistry) loseBlobs(repo string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = repo
}

// take returns the requests since the last take.
func (r *ociRegistry) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs = nil
	return reqs
}

// countRequests counts the requests of reqs with method for kind
// ("manifests" or "blobs").
func countRequests(reqs []string, method, kind string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, method+" /v2/") && strings.Contains(r, "/"+kind+"/") {
			n++
		}
	}
	return n
}

// pushBusybox pushes a busybox image (FROM_IMAGE=yes in its environment)
// to r as repoTag and returns its reference.
func (r *ociRegistry) pushBusybox(t *testing.T, repoTag string) string {
	t.Helper()
	data := busyboxLayer(t)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/bin", "FROM_IMAGE=yes"}
	cf.Config.Cmd = []string{"sh"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	r.take() // the push's own requests
	return ref.Name()
}

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
	reg := startRegistry(t)
	ref := reg.pushBusybox(t, "sbxtest/busybox:pull")
	removeImageOnCleanup(t, cd, ref)

	if _, err := cd.EnsureImage(ctx, ref, PullNever, nil); !errors.Is(err, ErrImageNotPresent) {
		t.Fatalf("EnsureImage(never) of a missing image: %v, want ErrImageNotPresent", err)
	}
	if reqs := reg.take(); len(reqs) != 0 {
		t.Errorf("--pull never asked the registry: %v", reqs)
	}

	var progress bytes.Buffer
	got, err := cd.EnsureImage(ctx, ref, PullMissing, &progress)
	if err != nil {
		t.Fatalf("EnsureImage(missing): %v", err)
	}
	if got != ref {
		t.Errorf("EnsureImage(missing) = %q, want %q", got, ref)
	}
	reqs := reg.take()
	if countRequests(reqs, "GET", "manifests") == 0 || countRequests(reqs, "GET", "blobs") < 2 {
		t.Errorf("the pull did not fetch the manifest, config and layer: %v", reqs)
	}
	if !strings.Contains(progress.String(), "pulled "+ref) {
		t.Errorf("progress = %q, want it to end with pulled %s", progress.String(), ref)
	}

	runFromPushed(t, cd, got, netip.MustParsePrefix("10.213.229.0/24"))

	if _, err := cd.EnsureImage(ctx, ref, PullMissing, nil); err != nil {
		t.Fatalf("EnsureImage(missing) of a present image: %v", err)
	}
	if reqs := reg.take(); len(reqs) != 0 {
		t.Errorf("missing asked the registry again for a present image: %v", reqs)
	}

	if _, err := cd.EnsureImage(ctx, ref, PullAlways, nil); err != nil {
		t.Fatalf("EnsureImage(always): %v", err)
	}
	reqs = reg.take()
	if countRequests(reqs, "HEAD", "manifests")+countRequests(reqs, "GET", "manifests") == 0 {
		t.Errorf("always did not ask the registry for the manifest: %v", reqs)
	}
	if n := countRequests(reqs, "GET", "blobs"); n != 0 {
		t.Errorf("always fetched %d blobs it had: %v", n, reqs)
	}

	// containerd's client logs each failed fetch; none of it may reach
	// logrus's standard logger, which writes to the user's stderr.
	logged := &logRecorder{}
	hooks := logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.StandardLogger().AddHook(logged)
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(hooks) })
	missing := reg.host + "/sbxtest/nosuch:1"
	removeImageOnCleanup(t, cd, missing)
	if _, err := cd.EnsureImage(ctx, missing, PullMissing, nil); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("EnsureImage of an image the registry lacks: %v, want ErrImageNotFound", err)
	}
	down := closedPort(t) + "/sbxtest/busybox:pull"
	removeImageOnCleanup(t, cd, down)
	if _, err := cd.EnsureImage(ctx, down, PullMissing, nil); !errors.Is(err, ErrRegistryUnreachable) {
		t.Errorf("EnsureImage from a registry that does not answer: %v, want ErrRegistryUnreachable", err)
	}
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
