package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.mut")
	os.WriteFile(path, []byte("# a comment\nwhat: w\nfile: a/b.go\npackages: ./a ./b\ntests: TestA TestB\n--- find\n\tx := 1\n--- replace\n\tx := 2\n"), 0o644)
	m, err := parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.name != "x" || m.what != "w" || m.file != "a/b.go" || !slices.Equal(m.pkgs, []string{"./a", "./b"}) ||
		!slices.Equal(m.tests, []string{"TestA", "TestB"}) || m.find != "\tx := 1\n" || m.replace != "\tx := 2\n" {
		t.Errorf("parse: %+v", m)
	}
	for _, bad := range []string{
		"what: w\nfile: f\npackages: ./a\ntests: T\n",                             // no find
		"what: w\nfile: f\npackages: ./a\n--- find\nx\n--- replace\ny\n",          // no tests
		"what: w\nfile: f\npackage: ./a\ntests: T\n--- find\nx\n--- replace\ny\n", // unknown key
	} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := parse(path); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
}

// TestMutationsParse: every mutation of the project is well formed and
// names a file that exists.
func TestMutationsParse(t *testing.T) {
	muts, err := load(filepath.Join("..", "mutations"), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range muts {
		if _, err := os.Stat(filepath.Join("..", "..", m.file)); err != nil {
			t.Errorf("%s: %v", m.name, err)
		}
	}
}

// TestCheckAllNeverTwoPrivileged: every mutation is checked once, at most
// jobs at once and never two privileged ones together, and the failures
// are counted.
func TestCheckAllNeverTwoPrivileged(t *testing.T) {
	var muts []mutation
	for i := range 12 {
		test := "TestPlain"
		if i%3 == 0 {
			test = "TestPrivilegedThing"
		}
		muts = append(muts, mutation{name: fmt.Sprint("m", i), tests: []string{test}})
	}
	var mu sync.Mutex
	running, privRunning, most := 0, 0, 0
	seen := map[string]int{}
	check := func(m mutation) (string, string) {
		mu.Lock()
		seen[m.name]++
		running++
		most = max(most, running)
		if m.privileged() {
			privRunning++
			if privRunning > 1 {
				t.Errorf("%s: two privileged mutations at once", m.name)
			}
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		if m.privileged() {
			privRunning--
		}
		mu.Unlock()
		if m.name == "m4" || m.name == "m6" {
			return "SURVIVED", "green"
		}
		return "killed", ""
	}
	var out strings.Builder
	if failed := checkAll(muts, 3, check, &out); failed != 2 {
		t.Errorf("%d failed, want 2:\n%s", failed, out.String())
	}
	if most != 3 {
		t.Errorf("at most %d at once, want 3", most)
	}
	for _, m := range muts {
		if seen[m.name] != 1 {
			t.Errorf("%s checked %d times", m.name, seen[m.name])
		}
	}
	if n := strings.Count(out.String(), "\n"); n != 14 {
		t.Errorf("%d lines of report, want 12 verdicts and 2 details:\n%s", n, out.String())
	}
}
