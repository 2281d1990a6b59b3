package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
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
	_, err = Load(dir, "aaaaaaaa")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNotFound) || *nf != (NotFoundError{Ref: "aaaaaaaa", ID: true}) {
		t.Errorf("Load of a released sandbox: got %v, want a *NotFoundError for id aaaaaaaa wrapping ErrNotFound", err)
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

// TestFindAndStatus: a sandbox is found by id, name or unique id prefix,
// never when its owner is gone; a name runs once at a time; WaitRunning
// waits through starting and reports one that went away.
func TestFindAndStatus(t *testing.T) {
	testRegistry(t)
	dir := t.TempDir()
	pid, start, err := ThisProcess()
	if err != nil {
		t.Skip("needs Linux's /proc")
	}
	pool := netip.MustParsePrefix("10.213.0.0/28")
	for _, st := range []State{
		{ID: "1a2b3c4d", Name: "agent", PID: pid, PIDStart: start},
		{ID: "1a2bffff", PID: pid, PIDStart: start},
		{ID: "99999999", Name: "gone", PID: 1 << 30}, // no such process
	} {
		if _, err := Reserve(dir, pool, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Reserve(dir, pool, State{ID: "77777777", Name: "agent", PID: pid, PIDStart: start}); !errors.Is(err, ErrNameInUse) {
		t.Errorf("a second sandbox named agent: %v, want ErrNameInUse", err)
	}
	if _, err := Reserve(dir, pool, State{ID: "88888888", Name: "gone", PID: pid, PIDStart: start}); err != nil {
		t.Errorf("the name of a sandbox whose owner is gone: %v, want it free", err)
	}
	for ref, want := range map[string]string{"1a2b3c4d": "1a2b3c4d", "agent": "1a2b3c4d", "1a2b3": "1a2b3c4d", "1a2bf": "1a2bffff", "88": "88888888", "gone": "88888888"} {
		if st, err := Find(dir, ref); err != nil || st.ID != want {
			t.Errorf("Find(%q) = %s, %v; want %s", ref, st.ID, err, want)
		}
	}
	for ref, want := range map[string]error{"1a2b": ErrAmbiguous, "1": ErrAmbiguous, "99999999": ErrNotFound, "99": ErrNotFound, "": ErrNotFound, "zz": ErrNotFound} {
		if _, err := Find(dir, ref); !errors.Is(err, want) {
			t.Errorf("Find(%q): %v, want %v", ref, err, want)
		}
	}

	if st, _ := Load(dir, "1a2b3c4d"); st.Status != StatusStarting {
		t.Errorf("a reserved sandbox is %q, want %q", st.Status, StatusStarting)
	}
	running := make(chan struct{})
	go func() {
		defer close(running)
		time.Sleep(50 * time.Millisecond)
		SetStatus(dir, "1a2b3c4d", StatusRunning)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := WaitRunning(ctx, dir, "1a2b3c4d"); err != nil || st.Status != StatusRunning {
		t.Errorf("WaitRunning = %+v, %v; want running", st, err)
	}
	<-running
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(50 * time.Millisecond)
		Release(dir, "1a2bffff")
	}()
	if _, err := WaitRunning(ctx, dir, "1a2bffff"); !errors.Is(err, ErrNotFound) {
		t.Errorf("WaitRunning on a sandbox that went away: %v, want ErrNotFound", err)
	}
	<-released // before testRegistry's cleanup changes RegistryDir
}
