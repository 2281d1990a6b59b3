//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"net"

	"github.com/vishvananda/netns"
)

// CreateNamespace needs Linux network namespaces.
func CreateNamespace(n Names) error { return errors.ErrUnsupported }

// SetupNetwork needs Linux network namespaces.
func SetupNetwork(ctx context.Context, p NetPlan) error { return errors.ErrUnsupported }

// TeardownNetwork needs Linux network namespaces.
func TeardownNetwork(ctx context.Context, n Names) error { return errors.ErrUnsupported }

// listenInNetns needs Linux network namespaces.
func listenInNetns(nsPath, addr string) (net.Listener, error) { return nil, errors.ErrUnsupported }

// NewNamedNetns needs Linux.
func NewNamedNetns(name string) (netns.NsHandle, error) { return 0, errors.ErrUnsupported }
