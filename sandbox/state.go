package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DefaultStateDir holds one directory per running sandbox (docs/cli.md):
// its metadata, and later its API socket and token.
const DefaultStateDir = "/run/sbx"

// ErrNotFound is returned for a sandbox id with no state directory.
var ErrNotFound = errors.New("no such sandbox")

// A NotFoundError is Find's and Load's error for a sandbox that is not
// running; it wraps ErrNotFound.
type NotFoundError struct {
	// Ref is what named the sandbox: an id, a name or an id prefix
	// (Find), or an id (Load, which sets ID); "" when none was given.
	Ref string
	ID  bool
}

func (e *NotFoundError) Error() string { return e.Say("") }

// Say words the error with listing, how to list the running sandboxes,
// in parentheses after it; none when listing is "".
func (e *NotFoundError) Say(listing string) string {
	var msg, them string
	switch {
	case e.Ref == "":
		msg, them = "no sandbox given: "+ErrNotFound.Error(), "the running ones"
	case e.ID:
		msg, them = "sandbox "+e.Ref+": "+ErrNotFound.Error(), "the running ones"
	default:
		msg, them = fmt.Sprintf("no running sandbox has the id, name or id prefix %q: %v", e.Ref, ErrNotFound), "them"
	}
	if listing == "" {
		return msg
	}
	return msg + " (" + listing + " lists " + them + ")"
}

func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ErrNameInUse is returned by Reserve for a name a running sandbox has.
var ErrNameInUse = errors.New("sandbox name in use")

// ErrAmbiguous is returned by Find for a prefix of several sandboxes' ids.
var ErrAmbiguous = errors.New("ambiguous sandbox id prefix")

// State is what a running sandbox records in <state dir>/<id>/state.json,
// for sbx ps, sbx stop and sbx gc.
type State struct {
	ID          string       `json:"id"`
	Name        string       `json:"name,omitempty"`
	Status      Status       `json:"status,omitempty"`
	PID         int          `json:"pid"`                 // the sbx run process
	PIDStart    uint64       `json:"pid_start,omitempty"` // its start time, against pid reuse
	Subnet      netip.Prefix `json:"subnet"`
	GatewayPort uint16       `json:"gateway_port"`
	Command     []string     `json:"command,omitempty"`
	Created     time.Time    `json:"created"`
}

// Status is where a sandbox is in its life, as sbx ps shows it.
type Status string

const (
	// StatusStarting: recorded, its network, gateway and container are
	// being made; its management API may not answer yet.
	StatusStarting Status = "starting"
	// StatusRunning: its command runs and its management API answers.
	StatusRunning Status = "running"
	// StatusStopping: it is being taken down.
	StatusStopping Status = "stopping"
)

// RegistryDir records every sandbox of this machine, whatever state
// directory it was started with: its state and where that is kept.
// Reserve gives out no subnet that a registered sandbox holds, and GC
// counts a registered sandbox whose owner lives as live, so sandboxes
// recorded in different state directories (tests, say) never share a
// subnet or collect each other. A variable for unprivileged tests.
var RegistryDir = "/run/sbx/.registry"

// registered is a sandbox's entry in RegistryDir.
type registered struct {
	State
	StateDir string `json:"state_dir"`
}

// Reserve picks a /30 of pool that no sandbox of this machine holds for
// sandbox id and records it (with st's other fields) in dir/<id>/state.json
// and in RegistryDir, under an exclusive lock on RegistryDir/.lock so that
// sandboxes started at the same time, by different processes and with
// different state directories, never get the same subnet. The caller
// removes both with Release when the sandbox is gone.
func Reserve(dir string, pool netip.Prefix, st State) (Subnet, error) {
	if err := CheckID(st.ID); err != nil {
		return Subnet{}, err
	}
	for _, d := range []string{dir, RegistryDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return Subnet{}, fmt.Errorf("creating the state directory: %w", err)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Subnet{}, err
	}
	unlock, err := lockDir(RegistryDir)
	if err != nil {
		return Subnet{}, err
	}
	defer unlock()
	states, err := List(dir)
	if err != nil {
		return Subnet{}, err
	}
	reg, err := listRegistered()
	if err != nil {
		return Subnet{}, err
	}
	for _, r := range reg {
		states = append(states, r.State)
	}
	used := make([]netip.Prefix, 0, len(states))
	for _, s := range states {
		if s.ID == st.ID {
			return Subnet{}, fmt.Errorf("sandbox %s already exists", st.ID)
		}
		if st.Name != "" && s.Name == st.Name && OwnerAlive(s) {
			return Subnet{}, fmt.Errorf("a sandbox named %q runs already (%s): %w", st.Name, s.ID, ErrNameInUse)
		}
		used = append(used, s.Subnet)
	}
	sub, err := UnusedSubnet(pool, used)
	if err != nil {
		return Subnet{}, err
	}
	st.Subnet, st.Status = sub.Prefix, StatusStarting
	if err := writeJSON(filepath.Join(RegistryDir, st.ID+".json"), registered{st, abs}); err != nil {
		return Subnet{}, fmt.Errorf("registering sandbox %s: %w", st.ID, err)
	}
	if err := writeState(dir, st); err != nil {
		os.Remove(filepath.Join(RegistryDir, st.ID+".json"))
		return Subnet{}, err
	}
	return sub, nil
}

// Release removes the state directory of sandbox id and its entry in
// RegistryDir. Missing ones are no error.
func Release(dir, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
		return fmt.Errorf("removing the state of sandbox %s: %w", id, err)
	}
	if err := os.Remove(filepath.Join(RegistryDir, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unregistering sandbox %s: %w", id, err)
	}
	return nil
}

// SetStatus records sandbox id's status in dir (and in RegistryDir).
func SetStatus(dir, id string, status Status) error {
	st, err := Load(dir, id)
	if err != nil {
		return err
	}
	st.Status = status
	if err := writeState(dir, st); err != nil {
		return err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		writeJSON(filepath.Join(RegistryDir, id+".json"), registered{st, abs})
	}
	return nil
}

// Find returns the state of the sandbox in dir that ref names: its id, its
// name, or a prefix of one id alone, in that order. Sandboxes whose owner
// is gone are not found. The errors wrap ErrNotFound or ErrAmbiguous and
// say what to do.
func Find(dir, ref string) (State, error) {
	if ref == "" {
		return State{}, &NotFoundError{}
	}
	states, err := List(dir)
	if err != nil {
		return State{}, err
	}
	states = slices.DeleteFunc(states, func(st State) bool { return !OwnerAlive(st) })
	for _, st := range states {
		if st.ID == ref {
			return st, nil
		}
	}
	for _, st := range states {
		if st.Name == ref {
			return st, nil
		}
	}
	var matches []State
	for _, st := range states {
		if strings.HasPrefix(st.ID, ref) {
			matches = append(matches, st)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return State{}, &NotFoundError{Ref: ref}
	}
	var ids []string
	for _, m := range matches {
		ids = append(ids, m.ID)
	}
	return State{}, fmt.Errorf("%q begins the ids of %s: %w; give more of the id", ref, strings.Join(ids, ", "), ErrAmbiguous)
}

// WaitRunning waits until the sandbox id in dir is running (its
// management API answers) and returns its state: at once when it is, and
// while it starts, until ctx ends. A sandbox that goes away meanwhile is
// ErrNotFound.
func WaitRunning(ctx context.Context, dir, id string) (State, error) {
	for {
		st, err := Load(dir, id)
		if err != nil {
			return State{}, err
		}
		if st.Status != StatusStarting || !OwnerAlive(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return State{}, fmt.Errorf("sandbox %s is still starting: %w", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// listRegistered returns RegistryDir's entries, skipping what cannot be
// read (an entry being written or removed).
func listRegistered() ([]registered, error) {
	entries, err := os.ReadDir(RegistryDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var reg []registered
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckID(id) != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(RegistryDir, e.Name()))
		if err != nil {
			continue
		}
		var r registered
		if json.Unmarshal(data, &r) == nil && r.ID == id {
			reg = append(reg, r)
		}
	}
	return reg, nil
}

// Load reads the state of sandbox id; ErrNotFound when there is none.
func Load(dir, id string) (State, error) {
	if err := CheckID(id); err != nil {
		return State{}, err
	}
	data, err := os.ReadFile(filepath.Join(dir, id, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, &NotFoundError{Ref: id, ID: true}
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

// writeState writes dir/<id>/state.json atomically.
func writeState(dir string, st State) error {
	sdir := filepath.Join(dir, st.ID)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return fmt.Errorf("creating the state of sandbox %s: %w", st.ID, err)
	}
	if err := writeJSON(filepath.Join(sdir, "state.json"), st); err != nil {
		return fmt.Errorf("writing the state of sandbox %s: %w", st.ID, err)
	}
	return nil
}

// writeJSON writes v to path atomically (write, then rename), mode 0600.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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

// Recorded reports whether sandbox id is recorded on this machine: its
// state in dir or in RegistryDir, or its lease there. It then starts,
// runs or stops, or a crashed run left it for gc; it has not ended, and
// what is kept of it is not an ended sandbox's. What cannot be looked at
// (no permission) counts as recorded.
func Recorded(dir, id string) bool {
	for _, p := range []string{filepath.Join(dir, id), filepath.Join(RegistryDir, id+".json"), filepath.Join(leaseDir(), id+".lock")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}
