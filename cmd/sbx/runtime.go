package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/sandbox"
)

// Container runtimes sbx run takes (docs/runtimes.md).
const (
	runtimeContainerd = "containerd"
	runtimeDocker     = "docker"
)

// runtimeOptions say which container runtime to use and where it listens.
type runtimeOptions struct {
	name       string // containerd, docker, or "" for the first that answers
	socket     string // containerd's socket
	dockerHost string // Docker's address; "" for DOCKER_HOST or its default
	// create says a container is made next (sbx run): containerd's lease
	// for it is asked for while connecting.
	create bool
}

// connectedRuntime is a container runtime sbx run has connected to.
type connectedRuntime interface {
	sandbox.Runtime
	imageEnsurer
	io.Closer
}

// connectRuntime connects to the runtime o names; with none named, to
// containerd when its socket answers, else to Docker. It returns the
// runtime's name too.
func connectRuntime(ctx context.Context, o runtimeOptions) (connectedRuntime, string, error) {
	switch o.name {
	case runtimeContainerd:
		cd, err := o.connectContainerd(ctx)
		if err != nil {
			return nil, "", err
		}
		return cd, runtimeContainerd, nil
	case runtimeDocker:
		d, err := sandbox.ConnectDocker(ctx, o.dockerHost)
		if err != nil {
			return nil, "", err
		}
		return d, runtimeDocker, nil
	case "":
		cd, cerr := o.connectContainerd(ctx)
		if cerr == nil {
			return cd, runtimeContainerd, nil
		}
		d, derr := sandbox.ConnectDocker(ctx, o.dockerHost)
		if derr == nil {
			return d, runtimeDocker, nil
		}
		return nil, "", fmt.Errorf("no container runtime answers: %w", multierror.Append(cerr, derr))
	}
	return nil, "", fmt.Errorf("--runtime %q: want %s or %s", o.name, runtimeContainerd, runtimeDocker)
}

// connectContainerd connects to containerd at o.socket, asking for the
// lease of the container to make when o.create.
func (o runtimeOptions) connectContainerd(ctx context.Context) (*sandbox.Containerd, error) {
	if o.create {
		return sandbox.ConnectContainerdToCreate(ctx, o.socket)
	}
	return sandbox.ConnectContainerd(ctx, o.socket)
}

// gcRuntimes are the runtimes sbx gc cleans: every one that answers.
type gcRuntimes []sandbox.ContainerRuntime

// connectGCRuntimes connects to containerd and Docker, each if it
// answers; it returns what it could not reach as a note, and the closers
// to call at the end.
func connectGCRuntimes(ctx context.Context, o runtimeOptions) (gcRuntimes, []io.Closer, error) {
	var rts gcRuntimes
	var closers []io.Closer
	var errs error
	if cd, err := sandbox.ConnectContainerd(ctx, o.socket); err != nil {
		errs = multierror.Append(errs, err)
	} else {
		rts, closers = append(rts, cd), append(closers, cd)
	}
	if d, err := sandbox.ConnectDocker(ctx, o.dockerHost); err != nil {
		errs = multierror.Append(errs, err)
	} else {
		rts, closers = append(rts, d), append(closers, d)
	}
	return rts, closers, errs
}

// ContainerIDs lists the sandbox ids with containers in any runtime.
func (r gcRuntimes) ContainerIDs(ctx context.Context) ([]string, error) {
	var ids []string
	for _, rt := range r {
		got, err := rt.ContainerIDs(ctx)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// RemoveContainer removes sandbox id's containers from every runtime.
func (r gcRuntimes) RemoveContainer(ctx context.Context, id string) error {
	var errs []error
	for _, rt := range r {
		errs = append(errs, rt.RemoveContainer(ctx, id))
	}
	return combine(errs...)
}
