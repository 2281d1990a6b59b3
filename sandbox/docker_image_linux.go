package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// EnsureImage makes sure the image ref is in Docker's store and returns
// the name Create takes as ContainerSpec.Image: ref as given when Docker
// has it (Docker resolves short names itself), else its normalized form
// (busybox is docker.io/library/busybox:latest), which is what is pulled.
//
// The policies are Containerd.EnsureImage's: PullMissing pulls only an
// image that is not there, PullAlways asks the registry every time (the
// daemon fetches only what changed), PullNever makes an image that is not
// there ErrImageNotPresent. A failed pull is ErrImageNotFound when the
// daemon says the registry has no such image (or refuses to say without
// credentials), and ErrRegistryUnreachable when the registry's address
// cannot be dialed from here either; the daemon leaves no image of a
// failed pull. The daemon does the pulling, with its own settings: its
// proxy, its mirrors, and plain HTTP for its insecure registries
// (127.0.0.0/8 by default). Credentials are not sent.
//
// When progress is not nil, the pull's progress is written to it as one
// line rewritten in place (for a terminal), ending in a newline.
func (d *Docker) EnsureImage(ctx context.Context, ref string, policy PullPolicy, progress io.Writer) (string, error) {
	named, perr := reference.ParseDockerRef(ref)
	if policy != PullAlways {
		_, err := d.client.ImageInspect(ctx, ref)
		switch {
		case err == nil:
			return ref, nil
		case !errdefs.IsNotFound(err):
			return "", fmt.Errorf("looking up image %s in Docker: %w", ref, err)
		case policy == PullNever:
			return "", fmt.Errorf("image %s is not in Docker's store: %w", ref, ErrImageNotPresent)
		}
	}
	if perr != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, perr)
	}
	name := named.String()
	var meter *pullMeter
	stop := func() {}
	if progress != nil {
		meter = &pullMeter{name: name, w: progress, start: time.Now()}
		stop = meter.run()
	}
	err := d.pull(ctx, name, meter)
	stop()
	if meter != nil {
		meter.finish(err)
	}
	if err != nil {
		return "", dockerPullError(ctx, named, err)
	}
	return name, nil
}

// pull asks the daemon to pull name and reads its progress to the end
// (the daemon stops a pull whose client goes away).
func (d *Docker) pull(ctx context.Context, name string, meter *pullMeter) error {
	res, err := d.client.ImagePull(ctx, name, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer res.Close()
	return readPullStream(res.JSONMessages(ctx), meter)
}

// readPullStream reads a pull's progress messages to their end and
// returns the first error one of them reports, or the stream's own. It
// counts the bytes of the layers being downloaded into meter, when it is
// not nil.
func readPullStream(msgs iter.Seq2[jsonstream.Message, error], meter *pullMeter) error {
	type layer struct{ done, total int64 }
	layers := map[string]*layer{}
	for m, err := range msgs {
		if err != nil {
			return err
		}
		if m.Error != nil {
			return &pullStreamError{m.Error}
		}
		if m.ID == "" {
			continue
		}
		l := layers[m.ID]
		switch m.Status {
		case "Downloading":
			if m.Progress == nil {
				continue
			}
			if l == nil {
				l = &layer{}
				layers[m.ID] = l
			}
			l.done, l.total = m.Progress.Current, max(m.Progress.Total, l.total)
		case "Download complete":
			if l != nil {
				l.done = l.total
			}
		default:
			continue
		}
		if meter != nil {
			var done, total int64
			for _, l := range layers {
				done, total = done+l.done, total+l.total
			}
			meter.done.Store(done)
			meter.total.Store(total)
		}
	}
	return nil
}

// pullStreamError is an error a pull's progress stream ends with: what
// the daemon said, and the kind of error (errdefs) its code names, if it
// gives one.
type pullStreamError struct{ e *jsonstream.Error }

func (e *pullStreamError) Error() string { return e.e.Message }

// Is reports whether the error's code is of target's kind.
func (e *pullStreamError) Is(target error) bool {
	return e.e.Code != 0 && errors.Is(errhttp.ToNative(e.e.Code), target)
}

// dockerPullError names what went wrong with a pull: ErrImageNotFound when the
// daemon says so, ErrRegistryUnreachable when the registry cannot be
// dialed, or the error as it is. The daemon tells a registry it could not
// reach only in the words of its message (a 500, like any other failure),
// so that is found out by dialing the registry from here, as the daemon
// on this machine does.
func dockerPullError(ctx context.Context, named reference.Named, err error) error {
	name := named.String()
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("pulling %s: %w: %w", name, ErrImageNotFound, err)
	case errdefs.IsUnauthorized(err), errdefs.IsPermissionDenied(err):
		return fmt.Errorf("pulling %s: %w, or it needs credentials: %w", name, ErrImageNotFound, err)
	case ctx.Err() != nil:
		return fmt.Errorf("pulling %s: %w", name, err)
	}
	host := reference.Domain(named)
	if dialRegistry(ctx, host) != nil {
		return fmt.Errorf("pulling %s: %w (%s): %w", name, ErrRegistryUnreachable, host, err)
	}
	return fmt.Errorf("pulling %s: %w", name, err)
}

// registryDialTimeout bounds dialRegistry.
const registryDialTimeout = 5 * time.Second

// dialRegistry opens, and closes, a TCP connection to the registry host
// (a reference's domain): its port, else 443 and, for a loopback host,
// also 80, as the daemon tries them. It returns nil when one answered.
func dialRegistry(ctx context.Context, host string) error {
	if host == "docker.io" {
		host = "registry-1.docker.io" // what the daemon dials for docker.io
	}
	addrs := []string{host}
	if _, _, err := net.SplitHostPort(host); err != nil {
		addrs = []string{net.JoinHostPort(host, "443")}
		if ok, _ := isLoopbackHost(host); ok {
			addrs = append(addrs, net.JoinHostPort(host, "80"))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, registryDialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		var dl net.Dialer
		c, err := dl.DialContext(ctx, "tcp", a)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return combine(errs...)
}
