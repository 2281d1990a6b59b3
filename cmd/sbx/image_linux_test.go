package main

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// busyboxImage is an image of busybox-static and sh, FROM_IMAGE=yes in
// its environment, whose blobs are new.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	tw.WriteHeader(&tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	// Blobs of this image alone: none is in containerd's content store
	// from an earlier test whose image was removed but not yet collected.
	nonce := []byte(t.Name() + " " + time.Now().Format(time.RFC3339Nano))
	tw.WriteHeader(&tar.Header{Name: "etc/nonce", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(nonce))})
	tw.Write(nonce)
	for _, d := range []string{"proc/", "dev/", "sys/", "tmp/", "etc/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
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

// recordingRegistry serves go-containerregistry's registry on
// 127.0.0.1 and records the requests it gets.
type recordingRegistry struct {
	host string
	mu   sync.Mutex
	reqs []string // "GET /v2/<repo>/blobs/<digest>"
}

func startRecordingRegistry(t *testing.T) *recordingRegistry {
	t.Helper()
	r := &recordingRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// take returns the requests since the last take.
func (r *recordingRegistry) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs = nil
	return reqs
}

// count counts the requests of reqs with method for kind ("manifests"
// or "blobs").
func count(reqs []string, method, kind string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, method+" /v2/") && strings.Contains(r, "/"+kind+"/") {
			n++
		}
	}
	return n
}

// removeImageOnCleanup removes image name from containerd's sbx namespace
// now (a leftover of an earlier run) and when the test ends.
func removeImageOnCleanup(t *testing.T, name string) {
	t.Helper()
	rm := func() { exec.Command("ctr", "-n", "sbx", "images", "rm", "--sync", name).Run() }
	rm()
	t.Cleanup(rm)
}

// imageInContainerd reports whether containerd's sbx namespace holds
// image name.
func imageInContainerd(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command("ctr", "-n", "sbx", "images", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("ctr images ls: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		if strings.TrimSpace(line) == name {
			return true
		}
	}
	return false
}

// imageRunArgs are the flags of sbx run for the image tests: their own
// state, pool and log.
func imageRunArgs(t *testing.T) []string {
	dir := t.TempDir()
	return []string{"run", "--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.228.0/24",
		"--log", filepath.Join(dir, "decisions.jsonl")}
}

// fromImage is a command that exits 7 when it runs from busyboxImage.
// (Its exit code tells, not its output, which a command that ends at
// once sometimes loses.)
var fromImage = []string{"--", "sh", "-c", `[ "$FROM_IMAGE" = yes ] && exit 7`}

// TestPrivilegedRunPull runs sbx run --image against a registry on
// loopback: --pull never refuses a missing image, says how to get it
// and makes no sandbox; the default (missing) pulls it once and runs the
// command from it; a second run asks the registry nothing; --pull always
// asks for the manifest again and fetches no blob it has. An image the
// registry lacks, a registry that does not answer and a bad --pull are
// told apart, each with what to do.
func TestPrivilegedRunPull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	reg := startRecordingRegistry(t)
	ref, err := name.ParseReference(reg.host + "/sbxtest/busybox:run-pull")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, busyboxImage(t)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	reg.take()
	image := ref.Name()
	removeImageOnCleanup(t, image)

	args := imageRunArgs(t)
	run := func(extra ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(append(args[:len(args):len(args)], extra...), fromImage...)...)
	}

	_, stderr, code := run("--pull", "never", "--image", image)
	if code != exitSbxFailed || !strings.Contains(stderr, "sbx image import FILE") || !strings.Contains(stderr, "--pull missing") {
		t.Errorf("--pull never of a missing image: exit %d, stderr:\n%s\nwant %d and advice naming sbx image import FILE and --pull missing", code, stderr, exitSbxFailed)
	}
	if reqs := reg.take(); len(reqs) != 0 {
		t.Errorf("--pull never asked the registry: %v", reqs)
	}
	if entries, _ := os.ReadDir(filepath.Join(filepath.Dir(args[2]), "state")); len(entries) > 1 {
		t.Errorf("--pull never of a missing image made a sandbox: %v", entries)
	}

	stdout, stderr, code := run("--image", image)
	if code != 7 {
		t.Fatalf("sbx run --image (missing): exit %d, want 7 (run from the image)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	reqs := reg.take()
	if count(reqs, "GET", "manifests") == 0 || count(reqs, "GET", "blobs") < 2 {
		t.Errorf("the first run did not fetch the manifest, config and layer: %v", reqs)
	}
	if strings.Contains(stderr, "pulling") || strings.Contains(stderr, "\r") {
		t.Errorf("progress on stderr that is not a terminal:\n%q", stderr)
	}

	if _, stderr, code := run("--image", image); code != 7 {
		t.Errorf("second sbx run --image: exit %d, want 7\n%s", code, stderr)
	}
	if reqs := reg.take(); len(reqs) != 0 {
		t.Errorf("the second run asked the registry for a present image: %v", reqs)
	}

	if _, stderr, code := run("--pull", "always", "--image", image); code != 7 {
		t.Errorf("sbx run --pull always: exit %d, want 7\n%s", code, stderr)
	}
	reqs = reg.take()
	if count(reqs, "HEAD", "manifests")+count(reqs, "GET", "manifests") == 0 {
		t.Errorf("--pull always did not ask the registry for the manifest: %v", reqs)
	}
	if n := count(reqs, "GET", "blobs"); n != 0 {
		t.Errorf("--pull always fetched %d blobs it had: %v", n, reqs)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tt := range []struct {
		flags []string
		want  []string
	}{
		{[]string{"--image", reg.host + "/sbxtest/nosuch:1"}, []string{"image not found in its registry", "check the name and tag", "sbx image import FILE"}},
		{[]string{"--image", closed + "/sbxtest/busybox:1"}, []string{"registry unreachable", "check the network", "sbx image import FILE"}},
		{[]string{"--pull", "sometimes", "--image", image}, []string{`--pull "sometimes": want never, missing or always`}},
	} {
		_, stderr, code := run(tt.flags...)
		if code != exitSbxFailed {
			t.Errorf("sbx run %s: exit %d, want %d\n%s", strings.Join(tt.flags, " "), code, exitSbxFailed, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("sbx run %s: stderr lacks %q:\n%s", strings.Join(tt.flags, " "), w, stderr)
			}
		}
	}
	for _, n := range []string{reg.host + "/sbxtest/nosuch:1", closed + "/sbxtest/busybox:1"} {
		if imageInContainerd(t, n) {
			t.Errorf("a failed pull left image %s", n)
			exec.Command("ctr", "-n", "sbx", "images", "rm", "--sync", n).Run()
		}
	}
}

// runCLIWithStdin is runCLI with stdin as sbx's standard input.
func runCLIWithStdin(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut strings.Builder
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = execute(t.Context(), root)
	return out.String(), errOut.String(), code
}

// tarDir writes the files under dir to a tar archive.
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPrivilegedImageImport loads a docker save archive from a file and
// an OCI image layout from standard input with sbx image import: each
// prints the name it made, and sbx run --pull never runs a command from
// it. Bad input is an error that names the file.
func TestPrivilegedImageImport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for containerd (CI runs as root)")
	}
	img := busyboxImage(t)

	// docker save: manifest.json, RepoTags normalized by containerd.
	saved := "docker.io/sbxtest/import:docker-save"
	removeImageOnCleanup(t, saved)
	tag, err := name.NewTag("sbxtest/import:docker-save")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.Write(tag, img, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	stdout, stderr, code := runCLI(t, "image", "import", archive)
	if code != 0 || stdout != saved+"\n" {
		t.Fatalf("sbx image import (docker save): exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, saved+"\n")
	}

	// An OCI layout whose image is named by a tag alone, from stdin.
	date := time.Now().Format("2006-01-02")
	ociName := "import-" + date + ":sbxtest-oci"
	removeImageOnCleanup(t, ociName)
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "sbxtest-oci"})); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runCLIWithStdin(t, bytes.NewReader(tarDir(t, dir)), "image", "import", "-")
	if stdout != ociName+"\n" {
		removeImageOnCleanup(t, strings.TrimSpace(stdout)) // past midnight
	}
	if code != 0 || !strings.HasPrefix(stdout, "import-") || !strings.HasSuffix(stdout, ":sbxtest-oci\n") {
		t.Fatalf("sbx image import - (OCI layout): exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, ociName+"\n")
	}

	args := imageRunArgs(t)
	for _, ref := range []string{"sbxtest/import:docker-save", strings.TrimSpace(stdout)} {
		stdout, stderr, code := runCLI(t, append(append(args[:len(args):len(args)], "--pull", "never", "--image", ref), fromImage...)...)
		if code != 7 {
			t.Errorf("sbx run --pull never --image %s: exit %d, want 7\nstdout:\n%s\nstderr:\n%s", ref, code, stdout, stderr)
		}
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"image", "import"}, exitUsage, "sbx image import takes FILE, got 0 arguments"},
		{[]string{"image", "import", "/no/such.tar"}, exitFailure, "/no/such.tar"},
		{[]string{"image", "import", writeFile(t, "junk.tar", "not an archive")}, exitFailure, "junk.tar: importing an image archive"},
	} {
		_, stderr, code := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
}
