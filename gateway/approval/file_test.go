package approval

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

func TestAddApprovedRule(t *testing.T) {
	allow := netpolicy.Rule{Host: "pypi.org", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
	tests := []struct {
		name, before string
		wantOrder    []string // substrings of the file after, in order
	}{
		{"new file", "", []string{"version: 1", "rules:", "# allowed always by cli", "host: pypi.org", "ports: [443]", "action: allow"}},
		{"no rules", "# mine\nversion: 1\ndefault: ask\n", []string{"# mine", "default: ask", "rules:", "host: pypi.org"}},
		{"appended without an ask rule", "version: 1\nrules:\n  - host: a.example # first\n    action: allow\n",
			[]string{"a.example", "# first", "# allowed always", "pypi.org"}},
		{"before the first ask rule", "version: 1\nrules:\n  - host: a.example\n    action: block\n  - host: '*'\n    ports: [443]\n    action: ask\n  - host: b.example\n    action: ask\n",
			[]string{"a.example", "pypi.org", "action: ask", "b.example"}},
		{"flow list", "version: 1\nrules: [{host: a.example, action: allow}]\n", []string{"a.example", "# allowed always", "pypi.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "approvals.yaml")
			if tt.before != "" {
				if err := os.WriteFile(path, []byte(tt.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := AddApprovedRule(path, allow, "allowed always by cli at 2026-11-25T10:00:00Z"); err != nil {
				t.Fatalf("AddApprovedRule: %v", err)
			}
			data, _ := os.ReadFile(path)
			text, at := string(data), 0
			for _, s := range tt.wantOrder {
				i := strings.Index(text[at:], s)
				if i < 0 {
					t.Fatalf("the file lacks %q after byte %d:\n%s", s, at, text)
				}
				at += i + len(s)
			}
			p, err := netpolicy.ParseFile(path)
			if err != nil {
				t.Fatalf("the file does not parse: %v\n%s", err, text)
			}
			if d := p.Verdict(netpolicy.Target{Host: "pypi.org", Port: 443, Method: "CONNECT"}); d.Action != netpolicy.Allow {
				t.Errorf("Verdict: got %s, want allow\n%s", d.Action, text)
			}
		})
	}
}

func TestAddApprovedRuleRefuses(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "p.json")
	os.WriteFile(jsonFile, []byte(`{"version": 1}`), 0o600)
	list := filepath.Join(dir, "list.yaml")
	os.WriteFile(list, []byte("- a\n- b\n"), 0o600)
	badRules := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badRules, []byte("version: 1\nrules: nope\n"), 0o600)
	r := netpolicy.Rule{Host: "pypi.org", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
	for _, tt := range []struct {
		path string
		want error
	}{{jsonFile, ErrNotYAML}, {list, netpolicy.ErrInvalidPolicy}, {badRules, netpolicy.ErrInvalidPolicy}} {
		before, _ := os.ReadFile(tt.path)
		if err := AddApprovedRule(tt.path, r, "x"); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", filepath.Base(tt.path), err, tt.want)
		}
		if after, _ := os.ReadFile(tt.path); string(after) != string(before) {
			t.Errorf("%s changed: %q", filepath.Base(tt.path), after)
		}
	}
	if n := countTemps(t, dir); n != 0 {
		t.Errorf("the directory holds %d temporary files, want none", n)
	}
}

// countTemps counts the temporary files AddApprovedRule left in dir.
func countTemps(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			n++
		}
	}
	return n
}

// TestAddApprovedRulePinnedRefusesPlantedLinks: once the approvals file
// is pinned, a symbolic link planted at its name or in place of a
// directory on its path (as a sandbox that can write the working
// directory could) makes the always answer fail with
// ErrPathChanged, and nothing is written outside, nor through
// the link.
func TestAddApprovedRulePinnedRefusesPlantedLinks(t *testing.T) {
	r := netpolicy.Rule{Host: "evil.example", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
	const victimText = "version: 1\n# the host's own file\n"
	tests := []struct {
		name   string
		exists bool // the approvals file exists when pinned
		plant  func(t *testing.T, work, file, outside string)
	}{
		{"a link at the name to a file outside", true, func(t *testing.T, work, file, outside string) {
			mustDo(t, os.Remove(file), os.Symlink(filepath.Join(outside, "victim.yaml"), file))
		}},
		{"a link at the name to nothing, outside", true, func(t *testing.T, work, file, outside string) {
			mustDo(t, os.Remove(file), os.Symlink(filepath.Join(outside, "new.yaml"), file))
		}},
		{"a link at the name of a file not made yet", false, func(t *testing.T, work, file, outside string) {
			mustDo(t, os.Symlink(filepath.Join(outside, "victim.yaml"), file))
		}},
		{"the file's directory replaced by a link", true, func(t *testing.T, work, file, outside string) {
			sub := filepath.Dir(file)
			mustDo(t, os.Rename(sub, sub+".old"), os.Symlink(outside, sub))
		}},
		{"the directory of a file not made yet replaced by a link", false, func(t *testing.T, work, file, outside string) {
			sub := filepath.Dir(file)
			mustDo(t, os.Rename(sub, sub+".old"), os.Symlink(outside, sub))
		}},
		{"a directory higher on the path replaced by a link", true, func(t *testing.T, work, file, outside string) {
			mid := filepath.Join(work, "a")
			os.MkdirAll(filepath.Join(outside, "b"), 0o755)
			os.WriteFile(filepath.Join(outside, "b", "policy.yaml"), []byte(victimText), 0o644)
			mustDo(t, os.Rename(mid, mid+".old"), os.Symlink(outside, mid))
		}},
		{"the file's directory removed", false, func(t *testing.T, work, file, outside string) {
			mustDo(t, os.Remove(filepath.Dir(file)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work, outside := t.TempDir(), t.TempDir()
			file := filepath.Join(work, "a", "b", "policy.yaml")
			mustDo(t, os.MkdirAll(filepath.Dir(file), 0o755))
			if tt.exists {
				mustDo(t, os.WriteFile(file, []byte("version: 1\n"), 0o644))
			}
			victim := filepath.Join(outside, "victim.yaml")
			mustDo(t, os.WriteFile(victim, []byte(victimText), 0o644))
			release := PinFile(file)
			defer release()
			tt.plant(t, work, file, outside)
			before := treeOf(t, outside)
			err := AddApprovedRule(file, r, "allowed always by cli")
			t.Logf("AddApprovedRule: %v", err)
			if !errors.Is(err, ErrPathChanged) {
				t.Errorf("AddApprovedRule: got %v, want ErrPathChanged", err)
			} else if !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("the error does not say that nothing was written: %v", err)
			}
			if after := treeOf(t, outside); !maps.Equal(after, before) {
				t.Errorf("outside changed: got %q, want %q", after, before)
			}
			for p, text := range treeOf(t, work) {
				if strings.Contains(text, "evil.example") {
					t.Errorf("%s got the rule, want no file written: %q", p, text)
				}
			}
		})
	}
}

// TestPinApprovalsFile: a path through a symbolic link when pinned (at
// the file's name, or a directory on the way) is refused, naming the
// link and the real path, and nothing is written through it; a normal
// answer works and keeps the mode; a file whose directory is missing when
// pinned stays refused after the directory is made; a release undoes one
// pin.
func TestPinApprovalsFile(t *testing.T) {
	r := netpolicy.Rule{Host: "pypi.org", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}
	work, home := t.TempDir(), t.TempDir()
	real := filepath.Join(home, "policy.yaml")
	mustDo(t, os.WriteFile(real, []byte("version: 1\n"), 0o640))
	link := filepath.Join(work, "policy.yaml")
	dirLink := filepath.Join(work, "home")
	mustDo(t, os.Symlink(real, link), os.Symlink(home, dirLink))
	for _, p := range []string{link, filepath.Join(dirLink, "policy.yaml")} {
		release := PinFile(p)
		err := AddApprovedRule(p, r, "allowed always by cli")
		release()
		if !errors.Is(err, ErrFileUntrusted) || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), real) {
			t.Errorf("%s: got %v, want ErrFileUntrusted naming the link and %s", p, err, real)
		}
		// Unpinned, the same.
		if err := AddApprovedRule(p, r, "allowed always by cli"); !errors.Is(err, ErrFileUntrusted) {
			t.Errorf("%s, not pinned: got %v, want ErrFileUntrusted", p, err)
		}
	}
	if data, _ := os.ReadFile(real); strings.Contains(string(data), "pypi.org") {
		t.Errorf("the file got the rule through a link: %q", data)
	}

	release := PinFile(real)
	again := PinFile(real)
	if err := AddApprovedRule(real, r, "allowed always by cli"); err != nil {
		t.Fatalf("AddApprovedRule: %v", err)
	}
	if data, _ := os.ReadFile(real); !strings.Contains(string(data), "pypi.org") {
		t.Errorf("the pinned file lacks the rule: %q", data)
	}
	if fi, err := os.Stat(real); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode: got %v (%v), want 0640", fi.Mode().Perm(), err)
	}
	if n := countTemps(t, home); n != 0 {
		t.Errorf("the directory holds %d temporary files, want none", n)
	}
	release()
	release() // only the first call does anything
	if pins[pinKey(real)] == nil {
		t.Errorf("one release of two pins removed the pin")
	}
	again()
	if len(pins) != 0 {
		t.Errorf("after every release: got %d pins, want none", len(pins))
	}

	missing := filepath.Join(work, "later", "approvals.yaml")
	release = PinFile(missing)
	defer release()
	mustDo(t, os.Mkdir(filepath.Dir(missing), 0o755))
	if err := AddApprovedRule(missing, r, "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory made after the pin: got %v, want the pin's fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("%s was written", missing)
	}
}

// mustDo fails t at the first error of errs.
func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// treeOf returns the regular files below dir, by path, with their
// contents; links are not followed.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			data, err := os.ReadFile(p)
			files[p] = string(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
