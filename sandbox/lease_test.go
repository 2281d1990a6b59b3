package sandbox

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// useTempRegistry points RegistryDir (and so the leases) at a directory of
// the test's own.
func useTempRegistry(t *testing.T) {
	t.Helper()
	was := RegistryDir
	RegistryDir = t.TempDir()
	t.Cleanup(func() { RegistryDir = was })
}

// TestMain lets a test run this binary as a lease holder: with
// SBX_TEST_HOLD_LEASE=ID it takes ID's lease under the registry in
// SBX_TEST_HOLD_REGISTRY, says "held", and waits to be killed.
func TestMain(m *testing.M) {
	if id := os.Getenv("SBX_TEST_HOLD_LEASE"); id != "" {
		RegistryDir = os.Getenv("SBX_TEST_HOLD_REGISTRY")
		if _, err := TakeLease(id); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		select {}
	}
	os.Exit(m.Run())
}

// TestLeaseHeldUntilItsHolderDies: while another process holds a
// sandbox's lease, gc's take says it is held; once that process is killed
// (SIGKILL: it cleans nothing up), gc takes it, and releasing it removes
// the file.
func TestLeaseHeldUntilItsHolderDies(t *testing.T) {
	useTempRegistry(t)
	id, _ := NewID()
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), "SBX_TEST_HOLD_LEASE="+id, "SBX_TEST_HOLD_REGISTRY="+RegistryDir)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the holder said %q, want held", line)
	}

	if l, held, err := takeLeftLease(id); err != nil || !held || l != nil {
		t.Fatalf("takeLeftLease of a held lease: got %v, held %v, %v; want held", l, held, err)
	}
	if _, err := TakeLease(id); !errors.Is(err, ErrIDTaken) {
		t.Errorf("TakeLease of a held id: got %v, want ErrIDTaken", err)
	}

	holder.Process.Kill()
	holder.Wait()
	l, held, err := takeLeftLease(id)
	if err != nil || held {
		t.Fatalf("takeLeftLease once its holder is dead: held %v, %v; want it taken", held, err)
	}
	// Taken, it is held against everyone else.
	if _, held, _ := takeLeftLease(id); !held {
		t.Errorf("a lease gc holds is not held for another")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(leaseDir(), id+".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lease file is left after Release: %v", err)
	}
}

// TestLeaseIsLockedBeforeItIsThere: a lease file is never seen unlocked
// while its holder lives, so gc cannot take a sandbox in the moment its
// start takes its lease; and taking a new lease never waits.
func TestLeaseIsLockedBeforeItIsThere(t *testing.T) {
	useTempRegistry(t)
	// The moment a lease file is there, gc finds it held.
	leaseLinked = func(id string) {
		if _, held, err := takeLeftLease(id); err != nil || !held {
			t.Errorf("a lease just linked into place: held %v, %v; want held", held, err)
		}
	}
	t.Cleanup(func() { leaseLinked = nil })
	for range 200 {
		id, l, err := newLeasedID()
		if err != nil {
			t.Fatal(err)
		}
		if _, held, err := takeLeftLease(id); err != nil || !held {
			t.Fatalf("a new lease: held %v, %v; want held", held, err)
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(leaseDir())
	if len(entries) != 0 {
		t.Errorf("left in the lease directory: %v", entries)
	}
}

// TestDroppedLeaseIsTakenAgain: a gc that could not remove everything
// keeps the file for the next one, which takes it.
func TestDroppedLeaseIsTakenAgain(t *testing.T) {
	useTempRegistry(t)
	id, _ := NewID()
	l, held, err := takeLeftLease(id)
	if err != nil || held {
		t.Fatalf("takeLeftLease of a new id: held %v, %v", held, err)
	}
	l.Drop()
	ids, err := leasedIDs()
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("leasedIDs after Drop: %v, %v; want [%s]", ids, err, id)
	}
	l, held, err = takeLeftLease(id)
	if err != nil || held {
		t.Fatalf("takeLeftLease of a dropped lease: held %v, %v", held, err)
	}
	l.Release()
}
