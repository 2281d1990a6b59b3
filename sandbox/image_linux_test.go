package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// testImageRef is the image TestPrivilegedImage builds and imports.
const testImageRef = "docker.io/sbxtest/busybox:latest"

// busyboxImageTar writes an OCI image layout, as a tar, of one layer
// holding busybox-static and a few of its applets, named testImageRef.
func busyboxImageTar(t *testing.T) string {
	t.Helper()
	return busyboxImageTarFor(t, testImageRef, false)
}

// busyboxImageTarFor is busyboxImageTar with the image's name; a corrupt
// one's configuration names a layer (diff id) other than the one it has,
// so that it imports but does not unpack.
func busyboxImageTarFor(t *testing.T, ref string, corrupt bool) string {
	t.Helper()
	layer := sandboxtest.BusyboxLayer(t)
	blobs := map[string][]byte{}
	add := func(data []byte) (string, int) {
		sum := sha256.Sum256(data)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[hex.EncodeToString(sum[:])] = data
		return d, len(data)
	}
	layerDigest, layerSize := add(layer)
	diffID := layerDigest
	if corrupt {
		diffID = "sha256:" + strings.Repeat("0", 64)
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin", "FROM_IMAGE=yes"}, "Cmd": []string{"sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	configDigest, configSize := add(config)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": configSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	manifestDigest, manifestSize := add(manifest)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": manifestSize,
			"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "latest"},
		}},
	})
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := tar.NewWriter(f)
	file := func(name string, data []byte) {
		out.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
		out.Write(data)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for h, data := range blobs {
		file("blobs/sha256/"+h, data)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrivilegedImage runs a container from an image already in
// containerd: its filesystem and environment, our command and rules.
func TestPrivilegedImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and containerd (CI runs as root)")
	}
	ctx := context.Background()
	if out, err := exec.Command("ctr", "-n", ContainerdNamespace, "images", "import", busyboxImageTar(t)).CombinedOutput(); err != nil {
		t.Fatalf("importing the test image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ctr", "-n", ContainerdNamespace, "images", "rm", testImageRef).Run() })
	cd, id, names := containerInNamespace(t, true)
	var out bytes.Buffer
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code, err := cd.Run(runCtx, ContainerSpec{ID: id, NetnsPath: "/var/run/netns/" + names.Netns, Image: testImageRef,
		Args: []string{"sh", "-c", `echo "image=$FROM_IMAGE"; grep Seccomp: /proc/self/status; echo x > /bin/new 2>/dev/null && echo root-rw; exit 5`}},
		Stdio{Out: &out}, time.Second)
	if err != nil || code != 5 {
		t.Fatalf("exit %d, %v\n%s", code, err, out.String())
	}
	for _, want := range []string{"image=yes", "Seccomp:\t2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "root-rw") {
		t.Errorf("the image's root is writable")
	}
	ids, _ := cd.ContainerIDs(ctx)
	for _, c := range ids {
		if c == id {
			t.Errorf("container %s left", id)
		}
	}
	snaps, _ := exec.Command("ctr", "-n", ContainerdNamespace, "snapshots", "ls").Output()
	if strings.Contains(string(snaps), id) {
		t.Errorf("snapshot %s left:\n%s", id, snaps)
	}

}
