package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// IDLen is the length of a sandbox id: 8 lower-case hex digits, so that
// "sbxh" + id fits the 15 bytes of a Linux interface name.
const IDLen = 8

// ErrInvalidID marks a sandbox id that is not IDLen lower-case hex digits.
var ErrInvalidID = errors.New("invalid sandbox id")

// NewID returns a random sandbox id.
func NewID() (string, error) {
	var b [IDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a sandbox id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// CheckID returns an error wrapping ErrInvalidID unless id is IDLen
// lower-case hex digits.
func CheckID(id string) error {
	if len(id) != IDLen {
		return fmt.Errorf("sandbox id %q: want %d lower-case hex digits, such as 1a2b3c4d: %w", id, IDLen, ErrInvalidID)
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("sandbox id %q: want %d lower-case hex digits, such as 1a2b3c4d: %w", id, IDLen, ErrInvalidID)
		}
	}
	return nil
}

// Names are the kernel objects of one sandbox, all derived from its id.
type Names struct {
	ID        string
	Netns     string // network namespace, sbx-<id>, at /var/run/netns/sbx-<id>
	HostVeth  string // the veth end on the host, sbxh<id>
	InnerVeth string // the veth end in the namespace, sbxc<id>
	ChainIn   string // host filter chain for packets from the sandbox to the host
	ChainFwd  string // host filter chain for packets the host would forward
	ChainGW   string // host filter chain for packets to the gateway from elsewhere
	Comment   string // the comment on every iptables rule, sbx:<id>
}

// NamesFor returns the names of sandbox id, which must pass CheckID.
func NamesFor(id string) (Names, error) {
	if err := CheckID(id); err != nil {
		return Names{}, err
	}
	return Names{
		ID:        id,
		Netns:     "sbx-" + id,
		HostVeth:  "sbxh" + id,
		InnerVeth: "sbxc" + id,
		ChainIn:   "SBX-" + id + "-IN",
		ChainFwd:  "SBX-" + id + "-FWD",
		ChainGW:   "SBX-" + id + "-GW",
		Comment:   "sbx:" + id,
	}, nil
}
