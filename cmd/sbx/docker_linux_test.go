package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// testDockerImage is the image TestPrivilegedDockerRun loads into Docker.
const testDockerImage = "sbxtest/busybox:cli"

// loadDockerImage loads testDockerImage, busybox and a few applets, into
// Docker through its API (ImageLoad of a docker-archive, which every
// Docker reads), and removes it when the test ends.
func loadDockerImage(t *testing.T) {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is missing (scripts/test.sh installs it): %v", err)
	}
	file := func(w *tar.Writer, name string, data []byte) {
		w.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))})
		w.Write(data)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range []string{"bin/", "etc/", "proc/", "dev/", "sys/", "tmp/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	file(tw, "bin/busybox", bb)
	for _, c := range []string{"sh", "nc", "printf", "cat", "grep", "echo", "true", "sleep"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	tw.Close()
	sum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(sum[:])
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}}})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{testDockerImage}, "Layers": []string{layerHex + "/layer.tar"}}})
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	file(aw, layerHex+"/layer.tar", layer.Bytes())
	file(aw, "config.json", config)
	file(aw, "manifest.json", manifest)
	aw.Close()

	ctx := context.Background()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.ImageRemove(ctx, testDockerImage, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		c.Close()
	})
	res, err := c.ImageLoad(ctx, &archive, client.ImageLoadWithQuiet(true))
	if err != nil {
		t.Fatalf("loading the test image (scripts/test.sh installs docker.io and starts dockerd): %v", err)
	}
	msg, _ := io.ReadAll(res)
	res.Close()
	if !bytes.Contains(msg, []byte("Loaded image")) {
		t.Fatalf("loading the test image: %s", msg)
	}
}

// TestPrivilegedDockerRun runs sbx run --runtime docker end to end, as
// TestPrivilegedRun does with containerd: through the real gateway an
// allowed host answers and a blocked one gets 403; the exit code comes
// back; no container, namespace or rule is left.
func TestPrivilegedDockerRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and Docker (CI runs as root)")
	}
	loadDockerImage(t)
	_, stderr, dir := runEndToEnd(t, "10.213.241.0/24", "--runtime", "docker", "--image", testDockerImage)
	logFile := filepath.Join(dir, "decisions.jsonl")
	// A command that is not in the image exits 127, as in a shell.
	if _, stderr, code := runCLI(t, "run", "--runtime", "docker", "--image", testDockerImage, "--quiet", "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.241.0/24", "--log", logFile, "--log-append", "--", "no-such-command"); code != 127 {
		t.Errorf("a missing command: exit %d, want 127\n%s", code, stderr)
	}
	// Nothing of the sandboxes is left.
	if entries, _ := os.ReadDir(filepath.Join(dir, "state")); len(entries) > 1 { // .lock stays
		t.Errorf("state left: %v", entries)
	}
	m := regexp.MustCompile(`sandbox ([0-9a-f]{8})`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no sandbox id in the output:\n%s", stderr)
	}
	id := m[1]
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label="+sandbox.DockerLabelSandbox+"="+id, "--format", "{{.Names}}").CombinedOutput()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left:\n%s", out)
	}
	netnsOut, _ := exec.Command("ip", "netns", "list").Output()
	rules, _ := exec.Command("iptables", "-S").Output()
	for _, line := range strings.Split(string(netnsOut)+string(rules), "\n") {
		if strings.Contains(line, id) {
			t.Errorf("left behind: %s", line)
		}
	}
}

// TestPrivilegedDockerRunPull is TestPrivilegedRunPull with --runtime
// docker: --pull never refuses a missing image and says how to load it
// into Docker; --pull missing has the daemon pull it from the registry on
// 127.0.0.1 into Docker's store and runs the command from it, with no
// progress on a stderr that is not a terminal; a second run asks the
// registry nothing; --pull always asks for the manifest again and
// fetches no blob.
func TestPrivilegedDockerRunPull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and Docker (CI runs as root)")
	}
	reg := sandboxtest.StartRegistry(t)
	image := reg.Push(t, "sbxtest/busybox:docker-run-pull")
	ctx := context.Background()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rm := func() {
		if _, err := c.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("removing image %s: %v", image, err)
		}
	}
	rm()
	t.Cleanup(rm)

	dir := t.TempDir()
	run := func(extra ...string) (string, string, int) {
		t.Helper()
		args := []string{"run", "--runtime", "docker", "--state-dir", filepath.Join(dir, "state"), "--subnet-pool", "10.213.231.0/24",
			"--log", filepath.Join(dir, "decisions.jsonl"), "--log-append"}
		return runCLI(t, append(append(args, extra...), fromImage...)...)
	}

	_, stderr, code := run("--pull", "never", "--image", image)
	if code != exitSbxFailed || !strings.Contains(stderr, "not in Docker's store") || !strings.Contains(stderr, "docker load -i FILE") || !strings.Contains(stderr, "--pull missing") {
		t.Errorf("--pull never of a missing image: exit %d, stderr:\n%s\nwant %d and advice naming docker load -i FILE and --pull missing", code, stderr, exitSbxFailed)
	}
	if reqs := reg.Take(); len(reqs) != 0 {
		t.Errorf("--pull never asked the registry: %v", reqs)
	}

	checkRunPulls(t, reg, run, "--pull", "missing", "--image", image)
	if _, err := c.ImageInspect(ctx, image); err != nil {
		t.Errorf("the pulled image is not in Docker's store: %v", err)
	}
}
