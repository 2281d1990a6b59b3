package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
