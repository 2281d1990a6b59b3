package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/transfer"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	"github.com/hashicorp/go-multierror"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"
)

// The snapshotter images are unpacked into, for Pull and for Import, is
// "": containerd resolves it as it does for a container's snapshot
// (containerd.WithNewSnapshot in create) — the namespace's default
// snapshotter label, else the platform's default — so the unpacked layers
// are where the container's snapshot looks for them.
const imageSnapshotter = ""

// EnsureImage makes sure the image ref is in containerd's sbx namespace,
// unpacked, and returns the name it is stored under, which Create takes
// as ContainerSpec.Image. ref is looked up as given first (an imported
// image keeps the name its archive gave), then in its normalized form
// (busybox is docker.io/library/busybox:latest), which is what is pulled.
//
// With PullMissing it pulls only an image that is not there, with
// PullAlways it asks the registry every time (fetching only what changed),
// with PullNever an image that is not there is ErrImageNotPresent. A
// failed pull is ErrImageNotFound or ErrRegistryUnreachable when it is one
// of them, and leaves no image record (the fetched content is left to
// containerd's garbage collection). Registries are reached over HTTPS,
// except on a loopback address, where plain HTTP is used. Credentials are
// not used: an image of a private registry is loaded with ImportImage.
//
// When progress is not nil, the pull's progress is written to it as one
// line rewritten in place (for a terminal), ending in a newline.
func (c *Containerd) EnsureImage(ctx context.Context, ref string, policy PullPolicy, progress io.Writer) (string, error) {
	ctx = quietLog(namespaces.WithNamespace(ctx, ContainerdNamespace))
	named, perr := reference.ParseDockerRef(ref)
	if policy != PullAlways {
		img, err := c.client.GetImage(ctx, ref)
		if errdefs.IsNotFound(err) && perr == nil {
			img, err = c.client.GetImage(ctx, named.String())
		}
		switch {
		case err == nil:
			// Present; a record without its unpacked layers (ctr import
			// --no-unpack) is unpacked now, as containers need them.
			if err := unpackImage(ctx, img); err != nil {
				return "", err
			}
			return img.Name(), nil
		case !errdefs.IsNotFound(err):
			return "", fmt.Errorf("looking up image %s: %w", ref, err)
		case policy == PullNever:
			name := ref
			if perr == nil {
				name = named.String()
			}
			return "", fmt.Errorf("image %s is not in containerd's %q namespace: %w", name, ContainerdNamespace, ErrImageNotPresent)
		}
	}
	if perr != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, perr)
	}
	if err := c.pull(ctx, named.String(), progress); err != nil {
		return "", err
	}
	return named.String(), nil
}

// quietLog gives ctx a logger that discards: containerd's client logs
// each failed fetch through logrus's standard logger, on stderr, and what
// it says is in the error the caller gets.
func quietLog(ctx context.Context) context.Context {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return log.WithLogger(ctx, logrus.NewEntry(l))
}

// unpackImage unpacks img into imageSnapshotter, unless it is unpacked.
func unpackImage(ctx context.Context, img containerd.Image) error {
	ok, err := img.IsUnpacked(ctx, imageSnapshotter)
	if err != nil {
		return fmt.Errorf("checking whether image %s is unpacked: %w", img.Name(), err)
	}
	if ok {
		return nil
	}
	if err := img.Unpack(ctx, imageSnapshotter); err != nil {
		return fmt.Errorf("unpacking image %s: %w", img.Name(), err)
	}
	return nil
}

// pull pulls name (normalized) and unpacks it.
func (c *Containerd) pull(ctx context.Context, name string, progress io.Writer) error {
	var resolver remotes.Resolver = newResolver()
	var meter *pullMeter
	var stop func()
	if progress != nil {
		meter = &pullMeter{name: name, w: progress, start: time.Now()}
		resolver = &meteredResolver{Resolver: resolver, m: meter}
		stop = meter.run()
	}
	_, err := c.client.Pull(ctx, name,
		containerd.WithResolver(resolver),
		containerd.WithPullUnpack,
		containerd.WithPullSnapshotter(imageSnapshotter),
	)
	if meter != nil {
		stop()
		meter.finish(err)
	}
	if err != nil {
		return pullError(name, err)
	}
	return nil
}

// pullError names what went wrong with a pull: ErrImageNotFound,
// ErrRegistryUnreachable, or the error as it is.
func pullError(name string, err error) error {
	host := name
	if named, perr := reference.ParseNormalizedNamed(name); perr == nil {
		host = reference.Domain(named)
	}
	var (
		opErr  *net.OpError
		dnsErr *net.DNSError
		netErr net.Error
	)
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("pulling %s: %w: %w", name, ErrImageNotFound, err)
	case errors.Is(err, docker.ErrInvalidAuthorization):
		return fmt.Errorf("pulling %s: %w, or it needs credentials: %w", name, ErrImageNotFound, err)
	case errors.As(err, &dnsErr), errors.As(err, &opErr), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("pulling %s: %w (%s): %w", name, ErrRegistryUnreachable, host, err)
	}
	return fmt.Errorf("pulling %s: %w", name, err)
}

// newResolver returns a resolver for public registries: HTTPS with
// anonymous tokens, plain HTTP only for a loopback address (a registry
// on this machine, as in the tests). The host's proxy settings apply.
func newResolver() remotes.Resolver {
	return docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(
			docker.WithAuthorizer(docker.NewDockerAuthorizer()),
			docker.WithPlainHTTP(isLoopbackHost),
		),
	})
}

// isLoopbackHost reports whether host (host or host:port) is localhost or
// a loopback address.
func isLoopbackHost(host string) (bool, error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true, nil
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback(), nil
}

// meteredResolver counts the bytes its fetchers read into a pullMeter.
type meteredResolver struct {
	remotes.Resolver
	m *pullMeter
}

// SetOptions passes Pull's options (concurrency, limits) on.
func (r *meteredResolver) SetOptions(opts ...transfer.ImageResolverOption) {
	if ro, ok := r.Resolver.(remotes.ResolverWithOptions); ok {
		ro.SetOptions(opts...)
	}
}

func (r *meteredResolver) Fetcher(ctx context.Context, ref string) (remotes.Fetcher, error) {
	f, err := r.Resolver.Fetcher(ctx, ref)
	if err != nil {
		return nil, err
	}
	return remotes.FetcherFunc(func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
		rc, err := f.Fetch(ctx, desc)
		if err != nil {
			return nil, err
		}
		r.m.total.Add(desc.Size)
		return &countingReader{ReadCloser: rc, n: &r.m.done}, nil
	}), nil
}

// countingReader adds what it reads to n.
type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// pullMeter shows a pull's progress on one terminal line.
type pullMeter struct {
	name        string
	w           io.Writer
	start       time.Time
	done, total atomic.Int64 // bytes read, and the sizes of the blobs being fetched
	mu          sync.Mutex   // serializes writes to w
}

// run redraws the line every 200 ms until the returned stop is called.
func (m *pullMeter) run() (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	// Ends when stop closes quit.
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				m.draw(fmt.Sprintf("pulling %s: %s of %s", m.name, humanBytes(m.done.Load()), humanBytes(m.total.Load())), false)
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// finish writes the last line: pulled, or failed.
func (m *pullMeter) finish(err error) {
	if err != nil {
		m.draw(fmt.Sprintf("pulling %s failed after %s", m.name, humanBytes(m.done.Load())), true)
		return
	}
	m.draw(fmt.Sprintf("pulled %s (%s in %.1fs)", m.name, humanBytes(m.done.Load()), time.Since(m.start).Seconds()), true)
}

func (m *pullMeter) draw(line string, last bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := ""
	if last {
		end = "\n"
	}
	fmt.Fprintf(m.w, "\r%s\x1b[K%s", line, end)
}

// humanBytes formats n as 512 B, 1.5 kB, 12.3 MB or 1.2 GB.
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, prefix := float64(n)/unit, 0
	for f >= unit && prefix < 2 {
		f /= unit
		prefix++
	}
	return fmt.Sprintf("%.1f %cB", f, "kMG"[prefix])
}

// ImportImage loads a `docker save` archive or an OCI image layout (as a
// tar) from r into containerd's sbx namespace, unpacked for this
// platform, and returns the names of the images it made. An image that
// is named only by a tag in the archive gets the name
// import-<date>:<tag>; one with no name at all import-<date>@<digest>
// (as ctr images import names them). An image of the same name is
// replaced. When unpacking fails, the images it made are removed.
func (c *Containerd) ImportImage(ctx context.Context, r io.Reader) (_ []string, retErr error) {
	ctx = quietLog(namespaces.WithNamespace(ctx, ContainerdNamespace))
	ctx, done, err := c.client.WithLease(ctx)
	if err != nil {
		return nil, err
	}
	defer done(context.WithoutCancel(ctx))
	prefix := "import-" + time.Now().Format("2006-01-02")
	imgs, err := c.client.Import(ctx, r,
		containerd.WithImageRefTranslator(archive.AddRefPrefix(prefix)),
		containerd.WithDigestRef(archive.DigestTranslator(prefix)),
		containerd.WithSkipDigestRef(func(name string) bool { return name != "" }),
	)
	if err != nil {
		return nil, fmt.Errorf("importing an image archive (docker save or OCI layout): %w", err)
	}
	defer func() {
		if retErr == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, img := range imgs {
			if err := c.client.ImageService().Delete(cctx, img.Name); err != nil && !errdefs.IsNotFound(err) {
				retErr = multierror.Append(retErr, fmt.Errorf("removing image %s: %w", img.Name, err))
			}
		}
	}()
	if len(imgs) == 0 {
		return nil, errors.New("the archive holds no image for this platform")
	}
	names := make([]string, 0, len(imgs))
	for _, img := range imgs {
		if err := unpackImage(ctx, containerd.NewImageWithPlatform(c.client, img, platforms.Default())); err != nil {
			return nil, err
		}
		names = append(names, img.Name)
	}
	return names, nil
}
