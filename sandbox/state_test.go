package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// testRegistry points RegistryDir at a directory of the test's own.
func testRegistry(t *testing.T) string {
	t.Helper()
	was := RegistryDir
	RegistryDir = t.TempDir()
	t.Cleanup(func() { RegistryDir = was })
	return RegistryDir
}

func TestReserveReleaseList(t *testing.T) {
	reg := testRegistry(t)
	dir := t.TempDir()
	pool := netip.MustParsePrefix("10.213.0.0/29") // two /30s
	a, err := Reserve(dir, pool, State{ID: "aaaaaaaa", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Reserve(dir, pool, State{ID: "bbbbbbbb", PID: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Prefix == b.Prefix {
		t.Fatalf("two sandboxes got %s", a.Prefix)
	}
	if _, err := Reserve(dir, pool, State{ID: "cccccccc"}); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("third reservation in a pool of two: %v, want ErrPoolExhausted", err)
	}
	if _, err := Reserve(dir, pool, State{ID: "aaaaaaaa"}); err == nil {
		t.Errorf("a second reservation for the same id succeeded")
	}
	st, err := Load(dir, "bbbbbbbb")
	if err != nil || st.Subnet != b.Prefix || st.PID != 2 {
		t.Errorf("Load = %+v, %v", st, err)
	}
	if err := Release(dir, "aaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "aaaaaaaa"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "sbx ps") {
		t.Errorf("Load of a released sandbox: %v, want ErrNotFound naming sbx ps", err)
	}
	c, err := Reserve(dir, pool, State{ID: "cccccccc"})
	if err != nil || c.Prefix != a.Prefix {
		t.Errorf("after a release: %v %v, want the freed %s", c, err, a.Prefix)
	}
	if fi, err := os.Stat(dir + "/cccccccc/state.json"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v %v, want mode 0600", fi, err)
	}
	if _, err := os.Stat(reg + "/aaaaaaaa.json"); !os.IsNotExist(err) {
		t.Errorf("a released sandbox is still registered: %v", err)
	}
	if _, err := os.Stat(reg + "/cccccccc.json"); err != nil {
		t.Errorf("a reserved sandbox is not registered: %v", err)
	}
}

// TestReserveAcrossStateDirs: sandboxes recorded in different state
// directories (a test's and the machine's) never get the same subnet.
func TestReserveAcrossStateDirs(t *testing.T) {
	testRegistry(t)
	pool := netip.MustParsePrefix("10.213.0.0/29") // two /30s
	a, err := Reserve(t.TempDir(), pool, State{ID: "aaaaaaaa"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Reserve(t.TempDir(), pool, State{ID: "bbbbbbbb"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Prefix == b.Prefix {
		t.Errorf("two state directories got the same subnet %s", a.Prefix)
	}
	if _, err := Reserve(t.TempDir(), pool, State{ID: "cccccccc"}); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("a third state directory: %v, want ErrPoolExhausted", err)
	}
}

// TestReserveAcrossProcesses starts reservations from several processes
// at once (this test binary, re-run as a helper) and expects different
// subnets for all.
func TestReserveAcrossProcesses(t *testing.T) {
	if id := os.Getenv("SBX_TEST_RESERVE_ID"); id != "" {
		RegistryDir = os.Getenv("SBX_TEST_RESERVE_REGISTRY")
		sub, err := Reserve(os.Getenv("SBX_TEST_RESERVE_DIR"), DefaultPool, State{ID: id})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(sub.Prefix)
		os.Exit(0)
	}
	reg := testRegistry(t)
	const n = 8
	var wg sync.WaitGroup
	results := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestReserveAcrossProcesses$")
			// Each in a state directory of its own: the registry alone
			// keeps them apart.
			cmd.Env = append(os.Environ(), fmt.Sprintf("SBX_TEST_RESERVE_ID=%08x", i+1),
				"SBX_TEST_RESERVE_DIR="+t.TempDir(), "SBX_TEST_RESERVE_REGISTRY="+reg)
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("helper %d: %v %s", i, err, out)
			}
			results[i] = strings.TrimSpace(string(out))
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range results {
		if seen[r] {
			t.Errorf("subnet %s given twice: %v", r, results)
		}
		seen[r] = true
	}
}
