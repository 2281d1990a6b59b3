package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testImageNamespace is the machine containerd's namespace that
// TestPrivilegedKubeImage imports into, and removes.
const testImageNamespace = "sbx-test-kubeimage"

// buildStaticSbx builds sbx with cgo off into a directory of the test's.
func buildStaticSbx(t *testing.T) string {
	t.Helper()
	goCmd, err := exec.LookPath("go") // go test puts its toolchain's first on PATH
	if err != nil {
		goCmd = "/usr/local/go/bin/go"
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "sbx")
	cmd := exec.Command(goCmd, "build", "-o", exe, "./cmd/sbx")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/sbx: %v\n%s", err, out)
	}
	return exe
}

// runTool runs a command for the test, at most two minutes, and returns
// its combined output and error.
func runTool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// TestPrivilegedKubeImage builds a static sbx, writes its image with
// WriteImage, and runs `/sbx version` from it: imported into the machine's
// containerd (namespace sbx-test-kubeimage) and run with ctr, and loaded
// into Docker and run there without a network. Both runs print sbx's
// version, as the image's user (65532), with nothing but the image's
// files. The images are removed after.
func TestPrivilegedKubeImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for containerd and Docker (CI runs as root)")
	}
	exe := buildStaticSbx(t)
	want, err := runTool(t, exe, "version")
	if err != nil || !strings.HasPrefix(want, "sbx ") {
		t.Fatalf("%s version on the host: %v, %q", exe, err, want)
	}
	nonce := make([]byte, 4)
	rand.Read(nonce)
	ref := "localhost/" + testImageNamespace + ":" + hex.EncodeToString(nonce)
	archive := filepath.Join(t.TempDir(), "sbx.tar")
	if err := WriteImageFile(archive, ImageOptions{Ref: ref, Exe: exe}); err != nil {
		t.Fatalf("WriteImageFile: %v", err)
	}

	t.Run("containerd", func(t *testing.T) {
		if _, err := exec.LookPath("ctr"); err != nil {
			t.Skip("no ctr on this machine")
		}
		ctr := func(args ...string) (string, error) {
			return runTool(t, "ctr", append([]string{"-n", testImageNamespace}, args...)...)
		}
		id := testImageNamespace + "-" + hex.EncodeToString(nonce)
		cleanup := func() {
			ctr("tasks", "kill", "-s", "SIGKILL", id)
			ctr("containers", "rm", id)
			ctr("images", "rm", "--sync", ref)
			runTool(t, "ctr", "namespaces", "rm", testImageNamespace)
		}
		cleanup()
		t.Cleanup(cleanup)
		if out, err := ctr("images", "import", archive); err != nil {
			t.Fatalf("ctr images import: %v\n%s", err, out)
		}
		out, err := ctr("run", "--rm", ref, id, "/sbx", "version") // ctr run replaces the entrypoint too
		if err != nil || out != want {
			t.Fatalf("ctr run %s /sbx version: %v, output %q; want %q", ref, err, out, want)
		}
	})

	t.Run("docker", func(t *testing.T) {
		if _, err := exec.LookPath("docker"); err != nil {
			t.Skip("no docker on this machine")
		}
		if out, err := runTool(t, "docker", "info"); err != nil {
			t.Skipf("Docker does not answer: %v\n%s", err, out)
		}
		cleanup := func() { runTool(t, "docker", "rmi", "--force", ref) }
		cleanup()
		t.Cleanup(cleanup)
		if out, err := runTool(t, "docker", "load", "--input", archive); err != nil || !strings.Contains(out, ref) {
			t.Fatalf("docker load: %v, output %q; want it to name %s", err, out, ref)
		}
		out, err := runTool(t, "docker", "run", "--rm", "--network", "none", ref, "version")
		if err != nil || out != want {
			t.Fatalf("docker run --network none %s version: %v, output %q; want %q", ref, err, out, want)
		}
		out, err = runTool(t, "docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", ref)
		if err == nil {
			t.Errorf("docker run --entrypoint sh %s: got no error (output %q), want no shell in the image", ref, out)
		}
		out, err = runTool(t, "docker", "image", "inspect", "--format", "{{.Config.User}} {{.Config.Entrypoint}} {{.Os}}/{{.Architecture}}", ref)
		if got := strings.TrimSpace(out); err != nil || !strings.HasPrefix(got, ImageUser+" [/sbx] linux/") {
			t.Errorf("docker image inspect %s: %v, %q; want user %s, entrypoint [/sbx], linux", ref, err, got, ImageUser)
		}
	})
}
