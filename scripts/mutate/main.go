// Command mutate checks that sbx's security tests can fail: for each
// mutation in a directory (scripts/mutations), it copies the module to a
// scratch directory, breaks the code the mutation names in one exact
// place, runs the tests the mutation names, and wants them to fail. A
// mutation whose tests stay green, or whose code is no longer there to
// break, fails the check: a test that cannot fail proves nothing, and a
// mutation that no longer applies must be brought up to date with the code.
//
//	go run ./scripts/mutate [-dir scripts/mutations] [-run NAME] [-timeout 10m] [-j 2]
//
// A mutation file holds a header of "key: value" lines, then the text to
// find and the text to put in its place:
//
//	what: the default pool is dropped from a sandbox's fence
//	file: sandbox/sandbox.go
//	packages: ./cmd/sbx
//	tests: TestPrivilegedFenceHoldsTheDefaultPool
//	--- find
//		return []netip.Prefix{pool, DefaultPool}
//	--- replace
//		return []netip.Prefix{pool}
//
// The find text must occur exactly once in the file. tests is a
// space-separated list of test names in packages (go test package
// patterns, space-separated); they run with -run '^(A|B)$' and -count=1,
// and every one of them must fail.
// Privileged tests need root, as in scripts/test.sh. It exits 1 when any
// mutation survived or could not be applied, 2 on bad input.
//
// Up to -j mutations are checked at once, but never two whose tests are
// privileged (TestPrivileged*): those share the host's network, iptables
// and sandboxes, and the gc tests take another test's sandbox for a
// leftover. The rest touch nothing outside their own temporary files.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// mutation is one mutation file.
type mutation struct {
	name, what, file string
	pkgs, tests      []string
	find, replace    string
}

func main() {
	dir := flag.String("dir", "scripts/mutations", "the `DIR` of mutation files (*.mut)")
	run := flag.String("run", "", "only the mutations whose file name contains `TEXT`")
	timeout := flag.Duration("timeout", 10*time.Minute, "how long one mutation's tests may take")
	jobs := flag.Int("j", 2, "how many mutations to check at once (privileged ones one at a time)")
	flag.Parse()
	muts, err := load(*dir, *run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	if *jobs < 1 {
		fmt.Fprintln(os.Stderr, "mutate: -j must be 1 or more")
		os.Exit(2)
	}
	start := time.Now()
	failed := checkAll(muts, *jobs, func(m mutation) (string, string) { return check(root, m, *timeout) }, os.Stdout)
	fmt.Printf("%d of %d mutations killed by their tests (%s)\n", len(muts)-failed, len(muts), time.Since(start).Round(time.Second))
	if failed > 0 {
		os.Exit(1)
	}
}

// privileged reports whether any of m's tests is privileged.
func (m mutation) privileged() bool {
	for _, t := range m.tests {
		if strings.HasPrefix(t, "TestPrivileged") {
			return true
		}
	}
	return false
}

// checkAll checks muts with up to jobs at once, one privileged mutation
// at a time, prints each verdict to w as it comes, and returns how many
// were not killed. One worker takes the privileged mutations in turn,
// then helps with the rest; the others take only the rest.
func checkAll(muts []mutation, jobs int, check func(mutation) (verdict, detail string), w io.Writer) (failed int) {
	var priv, rest []mutation
	for _, m := range muts {
		if m.privileged() {
			priv = append(priv, m)
		} else {
			rest = append(rest, m)
		}
	}
	queue := make(chan mutation, len(rest))
	for _, m := range rest {
		queue <- m
	}
	close(queue)
	var mu sync.Mutex
	one := func(m mutation) {
		start := time.Now()
		verdict, detail := check(m)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%-8s %s: %s (%s, %s)\n", verdict, m.name, m.what, strings.Join(m.tests, " "), time.Since(start).Round(time.Second))
		if verdict != "killed" {
			failed++
			fmt.Fprintln(w, indent(detail))
		}
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			if i == 0 {
				for _, m := range priv {
					one(m)
				}
			}
			for m := range queue {
				one(m)
			}
		})
	}
	wg.Wait()
	return failed
}

// check applies m in a scratch copy of the module at root and runs its
// tests. The verdict is "killed" (a test failed, as it must), "SURVIVED"
// (they passed) or "BROKEN" (the mutation could not be applied, or the
// tests could not be run to a verdict: a build failure counts, since a
// mutation must break behaviour, not compilation).
func check(root string, m mutation, timeout time.Duration) (verdict, detail string) {
	scratch, err := os.MkdirTemp("", "sbx-mutate-")
	if err != nil {
		return "BROKEN", err.Error()
	}
	defer os.RemoveAll(scratch)
	// A parent every user can enter: tests run commands as other users.
	os.Chmod(scratch, 0o755)
	if err := copyModule(root, scratch); err != nil {
		return "BROKEN", "copying the module: " + err.Error()
	}
	path := filepath.Join(scratch, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		return "BROKEN", err.Error()
	}
	if n := strings.Count(string(src), m.find); n != 1 {
		return "BROKEN", fmt.Sprintf("%s holds the text to find %d times, want once: bring the mutation up to date with the code", m.file, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), m.find, m.replace, 1)), 0o644); err != nil {
		return "BROKEN", err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// -trimpath keeps the scratch directory's name out of what is built,
	// so every package the mutation does not touch comes from the build
	// cache instead of being compiled again for each mutation.
	// Vet has nothing to say about a one-line break, and a test binary
	// without its symbol table and debug information links faster.
	args := append([]string{"test", "-trimpath", "-vet=off", "-ldflags=-s -w", "-count=1", "-run", "^(" + strings.Join(m.tests, "|") + ")$"}, m.pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = scratch
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "BROKEN", fmt.Sprintf("the tests ran past %s", timeout)
	case err == nil:
		return "SURVIVED", "the tests passed with the code broken:\n" + tail(string(out), 20)
	case !errors.As(err, &ee):
		return "BROKEN", err.Error()
	case strings.Contains(string(out), "[build failed]") || strings.Contains(string(out), "[setup failed]"):
		return "BROKEN", "the mutated code does not build:\n" + tail(string(out), 20)
	}
	// Every test the mutation names must fail, not just one of them.
	var green []string
	for _, t := range m.tests {
		if !strings.Contains(string(out), "--- FAIL: "+t+" ") {
			green = append(green, t)
		}
	}
	if len(green) > 0 {
		return "SURVIVED", fmt.Sprintf("%s did not fail with the code broken:\n%s", strings.Join(green, ", "), tail(string(out), 20))
	}
	return "killed", ""
}

// load reads the *.mut files of dir whose names contain run.
func load(dir, run string) ([]mutation, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.mut"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no mutation files (*.mut) in %s", dir)
	}
	sort.Strings(files)
	var muts []mutation
	for _, f := range files {
		if !strings.Contains(filepath.Base(f), run) {
			continue
		}
		m, err := parse(f)
		if err != nil {
			return nil, err
		}
		muts = append(muts, m)
	}
	return muts, nil
}

// parse reads one mutation file.
func parse(path string) (mutation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return mutation{}, err
	}
	m := mutation{name: strings.TrimSuffix(filepath.Base(path), ".mut")}
	head, body, ok := strings.Cut(string(data), "--- find\n")
	if !ok {
		return m, fmt.Errorf("%s: no '--- find' line", path)
	}
	find, replace, ok := strings.Cut(body, "--- replace\n")
	if !ok {
		return m, fmt.Errorf("%s: no '--- replace' line", path)
	}
	m.find, m.replace = find, replace
	for line := range strings.SplitSeq(head, "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "what":
			m.what = v
		case "file":
			m.file = v
		case "packages":
			m.pkgs = strings.Fields(v)
		case "tests":
			m.tests = strings.Fields(v)
		case "", "#":
		default:
			if !strings.HasPrefix(line, "#") {
				return m, fmt.Errorf("%s: unknown header line %q", path, line)
			}
		}
	}
	if m.what == "" || m.file == "" || len(m.pkgs) == 0 || len(m.tests) == 0 || m.find == "" {
		return m, fmt.Errorf("%s: want what, file, packages, tests and a text to find", path)
	}
	return m, nil
}

// copyModule copies the module's files (those git tracks, and new ones it
// does not ignore) from root to dst.
func copyModule(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil // deleted in the work tree
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, bufio.NewReader(in)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// moduleRoot is the directory of the module the command runs in.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run it from sbx's directory")
	}
	return filepath.Dir(mod), nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
