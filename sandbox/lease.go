package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A sandbox's lease is what tells garbage collection that its sbx run
// lives: a file leaseDir()/<id>.lock that the run holds locked (flock)
// from before its first object is made until after its last is removed.
// The kernel lets the lock go when the holder dies, however it dies, so
// "nobody holds the lock" is the one test of a crashed run that cannot
// race with a start: gc takes the lock before it removes anything of a
// sandbox, and holds it until it is done, so a run and a gc never work on
// one sandbox at once.

// leaseDir is where leases are: beside the registry, so that tests that
// set RegistryDir get leases of their own.
func leaseDir() string { return filepath.Join(RegistryDir, "leases") }

// Lease is a sandbox's lease, held by this process. Its zero value is not
// usable; make one with TakeLease.
type Lease struct {
	f    *os.File
	path string
}

// ErrIDTaken is an id whose lease file exists: another sandbox has it, or
// what a crashed one left that gc has not removed yet.
var ErrIDTaken = errors.New("the id is taken")

// TakeLease takes the lease of sandbox id for this process. The file is
// locked before it is linked into place, so whoever finds it finds it
// locked while its holder lives. An id whose lease file exists already is
// ErrIDTaken. The caller calls Release once the sandbox's last object is
// removed; a process that dies lets the lease go by itself.
func TakeLease(id string) (_ *Lease, retErr error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	dir := leaseDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
	}
	f, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return nil, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
	}
	defer os.Remove(f.Name())
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
	}
	path := filepath.Join(dir, id+".lock")
	err = os.Link(f.Name(), path)
	if leaseLinked != nil && err == nil {
		leaseLinked(id)
	}
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrIDTaken)
	} else if err != nil {
		return nil, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
	}
	return &Lease{f: f, path: path}, nil
}

// leaseLinked, when a test sets it, is called with the id of a lease just
// linked into place, before TakeLease returns.
var leaseLinked func(id string)

// takeLeftLease takes the lease of sandbox id when no live process holds
// it, for gc: held is true when one does. Where there is no lease file (a
// sandbox of an sbx before leases, or what such a run left), it makes one,
// so that nothing else takes the id while gc works on it.
func takeLeftLease(id string) (_ *Lease, held bool, _ error) {
	if err := CheckID(id); err != nil {
		return nil, false, err
	}
	dir := leaseDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
	}
	path := filepath.Join(dir, id+".lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, true, nil
		}
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("taking the lease of sandbox %s: %w", id, err)
		}
		// Between the open and the lock, its holder (or another gc) may
		// have released it: the lock is then on a file nobody else finds.
		// Take the one at the path instead.
		var held, there syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &there) == nil &&
			held.Dev == there.Dev && held.Ino == there.Ino {
			return &Lease{f: f, path: path}, false, nil
		}
		f.Close()
	}
}

// Release removes the lease file, then lets the lock go, so that a later
// gc finds no file rather than one nobody holds. A file already gone is
// no error. Release is for a sandbox whose objects are all gone.
func (l *Lease) Release() error {
	err := os.Remove(l.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	l.f.Close()
	if err != nil {
		return fmt.Errorf("removing the lease of sandbox %s: %w", l.id(), err)
	}
	return nil
}

// Drop lets the lock go and keeps the file, for a sandbox whose objects
// could not all be removed: the next gc finds the file and takes it.
func (l *Lease) Drop() { l.f.Close() }

func (l *Lease) id() string {
	return strings.TrimSuffix(filepath.Base(l.path), ".lock")
}

// leasedIDs returns the ids of the lease files in leaseDir, held or not.
func leasedIDs() ([]string, error) {
	entries, err := os.ReadDir(leaseDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok && CheckID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// newLeasedID returns a new sandbox id and its lease.
func newLeasedID() (string, *Lease, error) {
	for try := 0; ; try++ {
		id, err := NewID()
		if err != nil {
			return "", nil, err
		}
		lease, err := TakeLease(id)
		if errors.Is(err, ErrIDTaken) && try < 10 {
			continue
		}
		return id, lease, err
	}
}
