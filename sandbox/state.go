package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultStateDir holds one directory per running sandbox (DESIGN.md §7):
// its metadata, and later its API socket and token.
const DefaultStateDir = "/run/sbx"

// ErrNotFound is returned for a sandbox id with no state directory.
var ErrNotFound = errors.New("no such sandbox")

// State is what a running sandbox records in <state dir>/<id>/state.json,
// for sbx ps, sbx stop and sbx gc.
type State struct {
	ID          string       `json:"id"`
	Name        string       `json:"name,omitempty"`
	PID         int          `json:"pid"`                 // the sbx run process
	PIDStart    uint64       `json:"pid_start,omitempty"` // its start time, against pid reuse
	Subnet      netip.Prefix `json:"subnet"`
	GatewayPort uint16       `json:"gateway_port"`
	Command     []string     `json:"command,omitempty"`
	Created     time.Time    `json:"created"`
}

// Reserve picks a free /30 of pool for sandbox id and records it (with
// st's other fields) in dir/<id>/state.json, under an exclusive lock on
// dir/.lock so that sandboxes started at the same time, by different
// processes, never get the same subnet. The caller removes dir/<id> with
// Release when the sandbox is gone.
func Reserve(dir string, pool netip.Prefix, st State) (Subnet, error) {
	if err := CheckID(st.ID); err != nil {
		return Subnet{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Subnet{}, fmt.Errorf("creating the state directory: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Subnet{}, err
	}
	defer unlock()
	states, err := List(dir)
	if err != nil {
		return Subnet{}, err
	}
	used := make([]netip.Prefix, 0, len(states))
	for _, s := range states {
		if s.ID == st.ID {
			return Subnet{}, fmt.Errorf("sandbox %s already exists", st.ID)
		}
		used = append(used, s.Subnet)
	}
	sub, err := FreeSubnet(pool, used)
	if err != nil {
		return Subnet{}, err
	}
	st.Subnet = sub.Prefix
	if err := writeState(dir, st); err != nil {
		return Subnet{}, err
	}
	return sub, nil
}

// Release removes the state directory of sandbox id. A missing one is no
// error.
func Release(dir, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
		return fmt.Errorf("removing the state of sandbox %s: %w", id, err)
	}
	return nil
}

// Load reads the state of sandbox id; ErrNotFound when there is none.
func Load(dir, id string) (State, error) {
	if err := CheckID(id); err != nil {
		return State{}, err
	}
	data, err := os.ReadFile(filepath.Join(dir, id, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("sandbox %s: %w (sbx ps lists the running ones)", id, ErrNotFound)
	}
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("state of sandbox %s: %w", id, err)
	}
	return st, nil
}

// List returns the state of every sandbox recorded in dir, skipping
// entries that are not sandbox directories. A missing dir is an empty list.
func List(dir string) ([]State, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var states []State
	for _, e := range entries {
		if !e.IsDir() || CheckID(e.Name()) != nil {
			continue
		}
		st, err := Load(dir, e.Name())
		if errors.Is(err, ErrNotFound) {
			continue // being created or removed
		}
		if err != nil {
			return nil, err
		}
		states = append(states, st)
	}
	return states, nil
}

// writeState writes dir/<id>/state.json atomically (write, then rename).
func writeState(dir string, st State) error {
	sdir := filepath.Join(dir, st.ID)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return fmt.Errorf("creating the state of sandbox %s: %w", st.ID, err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(sdir, ".state.json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the state of sandbox %s: %w", st.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(sdir, "state.json")); err != nil {
		return fmt.Errorf("writing the state of sandbox %s: %w", st.ID, err)
	}
	return nil
}

// lockDir takes an exclusive flock on dir/.lock and returns its release.
// The lock ends with the process too, so a killed run never holds it.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the state directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the state directory: %w", err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
