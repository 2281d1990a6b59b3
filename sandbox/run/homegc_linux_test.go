package run

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHelperMountHome is not a test: TestPrivilegedGCHomes runs the test
// binary with it as a stand-in for sbx run, which mounts an overlay of
// the home, says where, and waits to be killed.
func TestHelperMountHome(t *testing.T) {
	parent := os.Getenv("SBX_TEST_HOMES")
	if parent == "" {
		t.Skip("run by TestPrivilegedGCHomes")
	}
	merged, _, err := mountOverlay(parent, os.Getenv("SBX_TEST_HOME"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString(merged + "\n")
	select {}
}

// mounted reports whether path is a mount point in this mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

// TestPrivilegedGCHomes: the overlay of the home of a run killed with
// SIGKILL stays mounted; GCHomes unmounts and removes it, and leaves the
// overlay of a live run (this process) mounted, and what is not of its
// naming alone.
func TestPrivilegedGCHomes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount (CI runs as root)")
	}
	parent := filepath.Join(t.TempDir(), "homes")
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "notes.txt"), []byte("notes\n"), 0o644)

	// A run killed after it mounted its overlay.
	killed := exec.Command(os.Args[0], "-test.run=^TestHelperMountHome$")
	killed.Env = append(os.Environ(), "SBX_TEST_HOMES="+parent, "SBX_TEST_HOME="+home)
	out, err := killed.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	if err != nil {
		t.Fatalf("the killed run said no mount: %v", err)
	}
	dead := strings.TrimSpace(line)
	if !mounted(t, dead) {
		t.Fatalf("%s: not mounted after the kill; the test has nothing to collect", dead)
	}

	// A live run's, and a directory of another naming.
	live, release, err := mountOverlay(parent, home, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	other := filepath.Join(parent, "home-other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountHome(filepath.Dir(dead)) })

	removed, err := GCHomes(parent)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Base(filepath.Dir(dead))}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if mounted(t, dead) || mounted(t, filepath.Dir(dead)) {
		t.Errorf("%s: still mounted after GCHomes", dead)
	}
	if _, err := os.Stat(filepath.Dir(dead)); !os.IsNotExist(err) {
		t.Errorf("%s: got %v, want it removed", filepath.Dir(dead), err)
	}
	if !mounted(t, live) {
		t.Errorf("%s: the live run's overlay was unmounted", live)
	}
	if got, err := os.ReadFile(filepath.Join(live, "notes.txt")); string(got) != "notes\n" {
		t.Errorf("the live run's home: got %q, %v; want its notes", got, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("%s: got %v, want it left alone", other, err)
	}
}
