package approval

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAddApprovedRuleSparseFile: an approvals file grown to 256 MiB (a
// sparse file, which costs its maker no disk) is refused by the always
// answer with ErrFileUntrusted, saying 1 MiB, after reading no
// more than that: the answer allocates a few MiB, not the file.
func TestAddApprovedRuleSparseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "approvals.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, f.Truncate(256<<20), f.Close())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = AddApprovedRule(path, netpolicy.Rule{Host: "pypi.org", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}, "allowed always by cli")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFileUntrusted) || !strings.Contains(err.Error(), "1 MiB") {
		t.Errorf("got %v, want ErrFileUntrusted saying 1 MiB", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("the answer allocated %d MiB, want at most 8", got>>20)
	}
	if fi, _ := os.Stat(path); fi.Size() != 256<<20 {
		t.Errorf("the file's size: got %d, want it as it was", fi.Size())
	}
}

// TestAddApprovedRuleRefusesUntrusted: an approvals file that its group
// or others may write, or that another user owns, is refused with the
// fix, and left as it was.
func TestAddApprovedRuleRefusesUntrusted(t *testing.T) {
	r := netpolicy.Rule{Host: "pypi.org", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
	for _, tt := range []struct {
		name  string
		mode  os.FileMode
		owner int // -1: the test's own
		want  string
	}{
		{"group-writable", 0o664, -1, "chmod go-w"},
		{"other-writable", 0o646, -1, "chmod go-w"},
		{"another user's", 0o644, 4242, "owned by uid 4242"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.owner >= 0 && os.Geteuid() != 0 {
				t.Skip("needs root to give a file to another user")
			}
			path := filepath.Join(t.TempDir(), "approvals.yaml")
			mustDo(t, os.WriteFile(path, []byte("version: 1\n"), 0o600), os.Chmod(path, tt.mode))
			if tt.owner >= 0 {
				mustDo(t, os.Chown(path, tt.owner, tt.owner))
			}
			err := AddApprovedRule(path, r, "x")
			if !errors.Is(err, ErrFileUntrusted) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrFileUntrusted with %q", err, tt.want)
			}
			if data, _ := os.ReadFile(path); string(data) != "version: 1\n" {
				t.Errorf("the file: got %q, want it as it was", data)
			}
		})
	}
}

// TestAddApprovedRuleConcurrentProcesses: four sbx processes (this test's
// binary, run again) answering always into one approvals file at once
// keep every rule: each reads, changes and writes the file under the
// lock the others take too.
func TestAddApprovedRuleConcurrentProcesses(t *testing.T) {
	if dir := os.Getenv("SBX_TEST_APPROVALS_WRITER"); dir != "" {
		return // the writer's part is TestApprovalsWriterProcess
	}
	path := filepath.Join(t.TempDir(), "approvals.yaml")
	mustDo(t, os.WriteFile(path, []byte("version: 1\n"), 0o644))
	const procs, each = 4, 15
	var wg sync.WaitGroup
	errs := make([]error, procs)
	outs := make([][]byte, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestApprovalsWriterProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "SBX_TEST_APPROVALS_WRITER="+path, "SBX_TEST_APPROVALS_WRITER_ID="+strconv.Itoa(i), "SBX_TEST_APPROVALS_WRITER_N="+strconv.Itoa(each))
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v\n%s", i, err, outs[i])
		}
	}
	p, err := netpolicy.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for i := range procs {
		for j := range each {
			host := fmt.Sprintf("p%d-r%d.example", i, j)
			if d := p.Verdict(netpolicy.Target{Host: host, Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Allow {
				missing = append(missing, host)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("got %d rules lost of %d, want none: %v", len(missing), procs*each, missing)
	}
}

// TestApprovalsWriterProcess is the writer process of
// TestAddApprovedRuleConcurrentProcesses: it adds its rules one by one.
func TestApprovalsWriterProcess(t *testing.T) {
	path := os.Getenv("SBX_TEST_APPROVALS_WRITER")
	if path == "" {
		t.Skip("run by TestAddApprovedRuleConcurrentProcesses")
	}
	id := os.Getenv("SBX_TEST_APPROVALS_WRITER_ID")
	n, _ := strconv.Atoi(os.Getenv("SBX_TEST_APPROVALS_WRITER_N"))
	for j := range n {
		r := netpolicy.Rule{Host: fmt.Sprintf("p%s-r%d.example", id, j), Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
		if err := AddApprovedRule(path, r, "allowed always by cli"); err != nil {
			t.Fatal(err)
		}
	}
}
