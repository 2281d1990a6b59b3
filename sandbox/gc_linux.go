package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/go-iptables/iptables"
	"github.com/hashicorp/go-multierror"
	"github.com/vishvananda/netlink"
)

// processStart returns the start time of process pid (in clock ticks since
// boot, field 22 of /proc/<pid>/stat), which with the pid names a process
// uniquely even after pids wrap around.
func processStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// OwnerAlive reports whether the sbx run process recorded in st still
// runs: same pid, same start time.
func OwnerAlive(st State) bool {
	if st.PID <= 0 {
		return false
	}
	if err := syscall.Kill(st.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	start, err := processStart(st.PID)
	return err == nil && (st.PIDStart == 0 || start == st.PIDStart)
}

// Leftovers returns the ids of sandboxes whose sbx run process is gone but
// whose state or kernel objects remain: state directories (in stateDir or
// any registered in RegistryDir) with a dead owner, and namespaces, veths,
// iptables chains and containers named after a sandbox id that no live
// sandbox has. A sandbox whose owner lives is never a leftover, whatever
// state directory it was started with. Objects not named as sbx names
// them are never considered.
func Leftovers(ctx context.Context, stateDir string, rt ContainerRuntime) ([]string, error) {
	// The kernel's and the runtime's objects first, the states after: a
	// sandbox records its state (Reserve) before it makes any object, so
	// one whose object is listed here has its state recorded by the time
	// the states are read below, and is seen to live. Read the other way
	// round, a sandbox that started between the two reads had objects and
	// no state, and was collected while it ran.
	found := map[string]bool{}
	add := func(name, prefix, suffix string) {
		id, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return
		}
		if id, ok = strings.CutSuffix(id, suffix); ok && CheckID(id) == nil {
			found[id] = true
		}
	}
	if entries, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range entries {
			add(e.Name(), "sbx-", "")
		}
	}
	links, err := linkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	for _, l := range links {
		add(l.Attrs().Name, "sbxh", "")
	}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			return nil, fmt.Errorf("iptables: %w", err)
		}
		chains, err := ipt.ListChains("filter")
		if err != nil {
			return nil, fmt.Errorf("listing iptables chains: %w", err)
		}
		for _, c := range chains {
			add(c, "SBX-", "-IN")
			add(c, "SBX-", "-FWD")
		}
	}
	if rt != nil {
		ctrs, err := rt.ContainerIDs(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing containers: %w", err)
		}
		for _, c := range ctrs {
			add(c, "", "")
		}
	}
	// A shim containerd no longer knows of, for a runtime that can tell
	// (and kills only its own).
	if rt != nil {
		for _, id := range orphanCandidates(ContainerdNamespace) {
			found[id] = true
		}
	}
	// A start killed before it made anything leaves its lease alone.
	leased, err := leasedIDs()
	if err != nil {
		return nil, fmt.Errorf("listing leases: %w", err)
	}
	for _, id := range leased {
		found[id] = true
	}
	states, err := recordedStates(stateDir)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, st := range states {
		if OwnerAlive(st) {
			live[st.ID] = true
		} else {
			found[st.ID] = true
		}
	}
	var ids []string
	for id := range found {
		if !live[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// ContainerRuntime is what garbage collection needs of a container
// runtime: *Containerd in production.
type ContainerRuntime interface {
	ContainerIDs(ctx context.Context) ([]string, error)
	RemoveContainer(ctx context.Context, id string) error
}

// GC removes every leftover of sandboxes whose sbx run process is gone
// (see Leftovers): container (when rt is not nil), network, state, then
// the sandbox's lease. It works on a sandbox only while it holds its lease
// (see TakeLease), which a live run never lets go, so it cannot take a
// sandbox that runs or starts, however the two interleave; and since the
// state goes after the network, a subnet is given out again only once
// nothing uses it. It returns the ids it cleaned and every failure; one
// sandbox's failure does not stop the others.
func GC(ctx context.Context, stateDir string, rt ContainerRuntime) ([]string, error) {
	ids, err := Leftovers(ctx, stateDir, rt)
	if err != nil {
		return nil, err
	}
	var errs *multierror.Error
	var cleaned []string
	for _, id := range ids {
		ok, err := collect(ctx, stateDir, rt, id)
		if err != nil {
			errs = multierror.Append(errs, err)
		}
		if ok {
			cleaned = append(cleaned, id)
		}
	}
	return cleaned, errs.ErrorOrNil()
}

// collect removes what sandbox id left, holding its lease; ok is false
// when its run lives (nothing is touched) or something could not be
// removed.
func collect(ctx context.Context, stateDir string, rt ContainerRuntime, id string) (ok bool, _ error) {
	lease, held, err := takeLeftLease(id)
	if err != nil || held {
		return false, err
	}
	// A run of an sbx from before leases holds none: its recorded owner
	// still tells.
	if st, err := recordedState(stateDir, id); err == nil && OwnerAlive(st) {
		lease.Release()
		return false, nil
	}
	fail := func(err error) (bool, error) {
		lease.Drop()
		return false, err
	}
	if rt != nil {
		if err := rt.RemoveContainer(ctx, id); err != nil {
			return fail(fmt.Errorf("sandbox %s: removing its container: %w", id, err))
		}
	}
	n, _ := NamesFor(id)
	if err := TeardownNetwork(ctx, n); err != nil {
		return fail(fmt.Errorf("sandbox %s: %w", id, err))
	}
	// Its state: where the registry says it was kept, and here.
	if dir, ok := registeredDir(id); ok {
		if err := Release(dir, id); err != nil {
			return fail(err)
		}
	}
	if err := Release(stateDir, id); err != nil {
		return fail(err)
	}
	return true, lease.Release()
}

// recordedState returns the state of sandbox id, from stateDir or the
// registry.
func recordedState(stateDir, id string) (State, error) {
	st, err := Load(stateDir, id)
	if err == nil {
		return st, nil
	}
	if dir, ok := registeredDir(id); ok {
		return Load(dir, id)
	}
	return State{}, err
}

// linkList lists the host's links. A dump that links made or removed
// meanwhile (other sandboxes starting) comes back marked interrupted and
// maybe incomplete: it is read again, a few times, before giving up.
func linkList() ([]netlink.Link, error) {
	for try := 0; ; try++ {
		links, err := netlink.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || try == 10 {
			return links, err
		}
	}
}

// recordedStates returns the states in stateDir and in RegistryDir (where
// sandboxes recorded in other state directories are), read under the lock
// Reserve takes, so that none is read half-recorded.
func recordedStates(stateDir string) ([]State, error) {
	if _, err := os.Stat(RegistryDir); err == nil {
		unlock, err := lockDir(RegistryDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	states, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	reg, err := listRegistered()
	if err != nil {
		return nil, err
	}
	for _, r := range reg {
		states = append(states, r.State)
	}
	return states, nil
}

// registeredDir returns the state directory that sandbox id was
// registered with, if it is registered.
func registeredDir(id string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(RegistryDir, id+".json"))
	var r registered
	if err != nil || json.Unmarshal(data, &r) != nil {
		return "", false
	}
	return r.StateDir, r.StateDir != ""
}

// ThisProcess returns this process's pid and start time, which Start
// records in State as the sandbox's owner, so that OwnerAlive (and a later
// garbage collection) can tell whether the run that made it lives.
func ThisProcess() (pid int, start uint64, err error) {
	pid = os.Getpid()
	start, err = processStart(pid)
	return pid, start, err
}
