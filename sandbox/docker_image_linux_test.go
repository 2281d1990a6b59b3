package sandbox

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/sbx-dev/sbx/sandbox/sandboxtest"
)

// removeDockerImageOnCleanup removes the image name from Docker's store
// now (a leftover of an earlier run) and when the test ends, whether it
// passed or not.
func removeDockerImageOnCleanup(t *testing.T, d *Docker, name string) {
	t.Helper()
	rm := func() {
		_, err := d.client.ImageRemove(context.Background(), name, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("removing image %s: %v", name, err)
		}
	}
	rm()
	t.Cleanup(rm)
}

// TestPrivilegedDockerImagePull is TestPrivilegedImagePull with Docker,
// whose daemon pulls from the registry on 127.0.0.1 (an insecure registry
// by default): never refuses a missing image and asks the registry
// nothing; missing pulls it (manifest and blobs), with progress, and a
// sandbox runs from it; a second missing asks the registry nothing;
// always asks for the manifest again and fetches no blob. An image the
// registry lacks, a registry that does not answer, and a pull that fails
// after it began (its blobs lost, an error in the middle of the daemon's
// progress stream) are told apart, and leave no image.
func TestPrivilegedDockerImagePull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and Docker (CI runs as root)")
	}
	ctx := context.Background()
	d, err := ConnectDocker(ctx, "")
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs docker.io and starts dockerd)", err)
	}
	t.Cleanup(func() { d.Close() })
	reg := sandboxtest.StartRegistry(t)
	ref := reg.Push(t, "sbxtest/busybox:docker-pull")
	removeDockerImageOnCleanup(t, d, ref)

	p := checkPullPolicies(t, reg, d, ref, netip.MustParsePrefix("10.213.230.0/24"))
	if !strings.HasPrefix(p, "\r") || !strings.HasSuffix(p, "\n") || !strings.Contains(p, "pulled "+ref) {
		t.Errorf("progress = %q, want one line rewritten in place, ending with pulled %s", p, ref)
	}

	missing, down := checkPullFailures(t, reg, d, func(name string) { removeDockerImageOnCleanup(t, d, name) }, "sbxtest/busybox:docker-pull")
	lost := reg.Push(t, "sbxtest/lost:1")
	removeDockerImageOnCleanup(t, d, lost)
	reg.LoseBlobs("sbxtest/lost")
	var progress bytes.Buffer
	_, err = d.EnsureImage(ctx, lost, PullMissing, &progress)
	if err == nil || errors.Is(err, ErrImageNotFound) || errors.Is(err, ErrRegistryUnreachable) {
		t.Errorf("EnsureImage of an image whose blobs are lost: %v, want an error that is neither not found nor unreachable", err)
	}
	if !strings.Contains(progress.String(), "pulling "+lost+" failed") {
		t.Errorf("progress of a failed pull = %q, want it to end with pulling %s failed", progress.String(), lost)
	}
	for _, n := range []string{missing, down, lost} {
		if _, err := d.client.ImageInspect(ctx, n); !errdefs.IsNotFound(err) {
			t.Errorf("a failed pull left image %s: %v", n, err)
		}
	}
}

// messages is a progress stream of msgs, then err when it is not nil.
func messages(err error, msgs ...jsonstream.Message) iter.Seq2[jsonstream.Message, error] {
	return func(yield func(jsonstream.Message, error) bool) {
		for _, m := range msgs {
			if !yield(m, nil) {
				return
			}
		}
		if err != nil {
			yield(jsonstream.Message{}, err)
		}
	}
}

// TestReadPullStream: a pull's progress is counted per layer into the
// meter; an error in the stream, after progress, ends the pull with that
// error, of the kind its code names; so does an error of the stream
// itself.
func TestReadPullStream(t *testing.T) {
	dl := func(id string, cur, total int64) jsonstream.Message {
		return jsonstream.Message{ID: id, Status: "Downloading", Progress: &jsonstream.Progress{Current: cur, Total: total}}
	}
	progress := []jsonstream.Message{
		{Status: "Pulling from sbxtest/busybox", ID: "1"},
		{ID: "aaa", Status: "Pulling fs layer"},
		{ID: "bbb", Status: "Pulling fs layer"},
		dl("aaa", 100, 1000),
		dl("bbb", 50, 500),
		dl("aaa", 600, 1000),
		{ID: "bbb", Status: "Download complete"},
		{ID: "aaa", Status: "Extracting", Progress: &jsonstream.Progress{Current: 10, Total: 1000}},
	}

	m := &pullMeter{}
	if err := readPullStream(messages(nil, append(progress, jsonstream.Message{Status: "Status: Downloaded newer image"})...), m); err != nil {
		t.Errorf("a pull that ends well: %v, want nil", err)
	}
	if done, total := m.done.Load(), m.total.Load(); done != 1100 || total != 1500 {
		t.Errorf("meter: %d of %d bytes, want 1100 of 1500", done, total)
	}

	err := readPullStream(messages(nil, append(progress, jsonstream.Message{Error: &jsonstream.Error{Message: "blob unknown to registry"}})...), nil)
	if err == nil || err.Error() != "blob unknown to registry" || errdefs.IsNotFound(err) {
		t.Errorf("an error in the stream: %v, want blob unknown to registry, of no kind", err)
	}
	err = readPullStream(messages(nil, append(progress, jsonstream.Message{Error: &jsonstream.Error{Code: 404, Message: "manifest unknown"}})...), nil)
	if !errdefs.IsNotFound(err) {
		t.Errorf("an error in the stream with code 404: %v, want a not-found error", err)
	}
	broken := errors.New("unexpected EOF")
	if err := readPullStream(messages(broken, progress...), nil); !errors.Is(err, broken) {
		t.Errorf("a stream that breaks: %v, want %v", err, broken)
	}
}

func TestDialRegistry(t *testing.T) {
	if err := dialRegistry(context.Background(), closedPort(t)); err == nil {
		t.Errorf("dialRegistry of a closed port: nil, want an error")
	}
	reg := sandboxtest.StartRegistry(t)
	if err := dialRegistry(context.Background(), reg.Host); err != nil {
		t.Errorf("dialRegistry(%s): %v, want nil", reg.Host, err)
	}
}
