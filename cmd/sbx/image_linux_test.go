package main

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// checkRunPulls runs sbx run with first (the flags of a run with the pull
// policy missing, the image not yet there) through run: it pulls once
// (manifest and blobs, no progress on stderr that is not a terminal) and
// runs the command from the image (exit 7); a second run asks the
// registry nothing; --pull always asks for the manifest again and fetches
// no blob it has.
func checkRunPulls(t *testing.T, reg *sandboxtest.Registry, run func(...string) (string, string, int), first ...string) {
	t.Helper()
	image := first[len(first)-1]
	stdout, stderr, code := run(first...)
	if code != 7 {
		t.Fatalf("sbx run %s: exit %d, want 7 (run from the image)\nstdout:\n%s\nstderr:\n%s", strings.Join(first, " "), code, stdout, stderr)
	}
	reqs := reg.Take()
	if sandboxtest.CountRequests(reqs, "GET", "manifests") == 0 || sandboxtest.CountRequests(reqs, "GET", "blobs") < 2 {
		t.Errorf("the first run did not fetch the manifest, config and layer: %v", reqs)
	}
	if strings.Contains(stderr, "pulling") || strings.Contains(stderr, "\r") {
		t.Errorf("progress on stderr that is not a terminal:\n%q", stderr)
	}

	if _, stderr, code := run(first...); code != 7 {
		t.Errorf("second sbx run %s: exit %d, want 7\n%s", strings.Join(first, " "), code, stderr)
	}
	if reqs := reg.Take(); len(reqs) != 0 {
		t.Errorf("the second run asked the registry for a present image: %v", reqs)
	}

	if _, stderr, code := run("--pull", "always", "--image", image); code != 7 {
		t.Errorf("sbx run --pull always: exit %d, want 7\n%s", code, stderr)
	}
	reqs = reg.Take()
	if sandboxtest.CountRequests(reqs, "HEAD", "manifests")+sandboxtest.CountRequests(reqs, "GET", "manifests") == 0 {
		t.Errorf("--pull always did not ask the registry for the manifest: %v", reqs)
	}
	if n := sandboxtest.CountRequests(reqs, "GET", "blobs"); n != 0 {
		t.Errorf("--pull always fetched %d blobs it had: %v", n, reqs)
	}
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
// state, pool and log (one for all the runs of a test: --log-append).
func imageRunArgs(t *testing.T) []string {
	dir := t.TempDir()
	return []string{"run", "--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.228.0/24",
		"--log", filepath.Join(dir, "decisions.jsonl"), "--log-append"}
}

// fromImage is a command that exits 7 when it runs from sandboxtest.BusyboxImage.
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
	reg := sandboxtest.StartRegistry(t)
	image := reg.Push(t, "sbxtest/busybox:run-pull")
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
	if reqs := reg.Take(); len(reqs) != 0 {
		t.Errorf("--pull never asked the registry: %v", reqs)
	}
	if entries, _ := os.ReadDir(filepath.Join(filepath.Dir(args[2]), "state")); len(entries) > 1 {
		t.Errorf("--pull never of a missing image made a sandbox: %v", entries)
	}

	checkRunPulls(t, reg, run, "--image", image)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tt := range []struct {
		flags []string
		code  int
		want  []string
	}{
		{[]string{"--image", reg.Host + "/sbxtest/nosuch:1"}, exitSbxFailed, []string{"image not found in its registry", "check the name and tag", "sbx image import FILE"}},
		{[]string{"--image", closed + "/sbxtest/busybox:1"}, exitSbxFailed, []string{"registry unreachable", "check the network", "sbx image import FILE"}},
		// A bad flag value is a usage error.
		{[]string{"--pull", "sometimes", "--image", image}, exitUsage, []string{`--pull "sometimes": want never, missing or always`}},
	} {
		_, stderr, code := run(tt.flags...)
		if code != tt.code {
			t.Errorf("sbx run %s: exit %d, want %d\n%s", strings.Join(tt.flags, " "), code, tt.code, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("sbx run %s: stderr lacks %q:\n%s", strings.Join(tt.flags, " "), w, stderr)
			}
		}
	}
	for _, n := range []string{reg.Host + "/sbxtest/nosuch:1", closed + "/sbxtest/busybox:1"} {
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
	img := sandboxtest.BusyboxImage(t)

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
