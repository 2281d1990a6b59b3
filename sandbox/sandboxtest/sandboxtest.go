// Package sandboxtest holds what the tests of sandbox, its packages and
// cmd/sbx share: for images, a busybox image built from Debian's
// busybox-static and an OCI registry on loopback that records the
// requests it gets; for networks, a named network namespace that goes
// with its test, and loopback set up with the addresses a test listens
// on. It is for tests only and imports no other package of sbx.
package sandboxtest

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxLayer returns a layer, as an uncompressed tar, of busybox-static
// with sh, echo and cat, the usual mount points, and a nonce file, so that
// its blobs are new: none is in a content store from an earlier test
// whose image was removed but not yet collected.
func BusyboxLayer(t testing.TB) []byte {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	for _, c := range []string{"sh", "echo", "cat"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	for _, d := range []string{"proc/", "dev/", "sys/", "tmp/", "etc/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	nonce := []byte(t.Name() + " " + time.Now().Format(time.RFC3339Nano))
	tw.WriteHeader(&tar.Header{Name: "etc/nonce", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(nonce))})
	tw.Write(nonce)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return layer.Bytes()
}

// BusyboxImage returns an image of BusyboxLayer for this machine's
// architecture, with PATH=/bin and FROM_IMAGE=yes in its environment and
// sh as its command.
func BusyboxImage(t testing.TB) v1.Image {
	t.Helper()
	data := BusyboxLayer(t)
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
	return img
}

// Registry is an OCI registry on loopback (go-containerregistry's) that
// records the requests it gets; it stops when the test ends.
type Registry struct {
	Host string // 127.0.0.1:port
	mu   sync.Mutex
	reqs []string // "GET /v2/<repo>/blobs/<digest>"
	// lost is a repository whose blobs are answered 404 (blob unknown),
	// as if they were lost after its manifest was written; "" for none.
	lost string
}

// StartRegistry starts a Registry for the test.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{}
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
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// LoseBlobs makes the registry answer 404 to every blob of repo.
func (r *Registry) LoseBlobs(repo string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = repo
}

// Take returns the requests since the last Take.
func (r *Registry) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs = nil
	return reqs
}

// Push pushes BusyboxImage to the registry as repoTag, forgets the
// requests that took, and returns the image's name.
func (r *Registry) Push(t testing.TB, repoTag string) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, BusyboxImage(t)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	r.Take()
	return ref.Name()
}

// CountRequests counts the requests of reqs with method for kind
// ("manifests" or "blobs").
func CountRequests(reqs []string, method, kind string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, method+" /v2/") && strings.Contains(r, "/"+kind+"/") {
			n++
		}
	}
	return n
}
