package sandbox

import (
	"errors"
	"fmt"
)

// PullPolicy says when EnsureImage (Containerd's or Docker's) pulls an
// image from its registry.
type PullPolicy int

const (
	// PullMissing pulls the image only when it is not in the runtime's
	// store (containerd's sbx namespace, Docker's images); the zero value.
	PullMissing PullPolicy = iota
	// PullNever never pulls: an image that is not there is
	// ErrImageNotPresent.
	PullNever
	// PullAlways asks the registry every time, and fetches what changed.
	PullAlways
)

// PullPolicies are the names ParsePullPolicy takes, in the order of the
// help text.
var PullPolicies = []string{"never", "missing", "always"}

// ParsePullPolicy parses never, missing or always.
func ParsePullPolicy(s string) (PullPolicy, error) {
	switch s {
	case "never":
		return PullNever, nil
	case "missing":
		return PullMissing, nil
	case "always":
		return PullAlways, nil
	}
	return 0, fmt.Errorf("unknown pull policy %q: want never, missing or always", s)
}

// String returns the policy's name, as ParsePullPolicy takes it.
func (p PullPolicy) String() string {
	switch p {
	case PullNever:
		return "never"
	case PullMissing:
		return "missing"
	case PullAlways:
		return "always"
	}
	return fmt.Sprintf("PullPolicy(%d)", int(p))
}

// Errors of EnsureImage that callers act on; each comes wrapped with the
// image's name and the cause.
var (
	// ErrImageNotPresent: the image is not in the runtime's store
	// (containerd's sbx namespace, Docker's images) and the policy forbids
	// pulling it.
	ErrImageNotPresent = errors.New("image not present")
	// ErrImageNotFound: the registry answered that it has no such image
	// (or that it is not allowed to say without credentials).
	ErrImageNotFound = errors.New("image not found in its registry")
	// ErrRegistryUnreachable: the registry could not be reached at all
	// (name resolution, connection, TLS or timeout).
	ErrRegistryUnreachable = errors.New("registry unreachable")
)
