package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDocExamplesRun runs the examples of the pages marked run, as
// docexamples_test.go's package comment says: each page's in a directory
// of its own, in order, with the files of its file, policy and script
// examples and of cmd/sbx/testdata/docexamples/PAGE/ there, as the user
// nobody when the test runs as root, and wants each command's exit code
// and what the page shows it print.
func TestDocExamplesRun(t *testing.T) {
	bin := buildSbx(t)
	ran := 0
	for _, page := range docPages(t) {
		examples, _ := readExamples(t, page)
		var todo []docExample
		for _, ex := range examples {
			if ex.kind != "" && ex.kind != "synopsis" && ex.kind != "not run" {
				todo = append(todo, ex)
			}
		}
		if len(todo) == 0 {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(page), ".md"), func(t *testing.T) {
			dir := exampleDir(t, page)
			for _, ex := range todo {
				if ex.kind == "run" {
					ran += runExample(t, bin, dir, ex)
					continue
				}
				if ex.arg == "" {
					continue // a policy or script shown, not a file
				}
				name := filepath.Join(dir, ex.arg)
				if err := os.WriteFile(name, []byte(strings.Join(ex.lines, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if ran == 0 {
		t.Error("no example of the pages was run")
	}
}

// exampleDir makes the working directory of page's examples, with the
// files of cmd/sbx/testdata/docexamples/PAGE/, writable by the user the
// examples run as.
func exampleDir(t *testing.T, page string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbx-docexample-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fixtures := filepath.Join("testdata", "docexamples", strings.TrimSuffix(filepath.Base(page), ".md"))
	if err := os.CopyFS(dir, os.DirFS(fixtures)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			return os.Lchown(path, nobodyID, nobodyID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// nobodyID is the uid and gid the examples run as when the test runs as
// root.
const nobodyID = 65534

// runExample runs ex's commands in dir with bin as sbx, and returns how
// many it ran.
func runExample(t *testing.T, bin, dir string, ex docExample) int {
	t.Helper()
	cmds := exampleCommands(ex)
	codes, err := exampleExits(ex, len(cmds))
	if err != nil {
		t.Errorf("%s:%d: %v", ex.page, ex.line, err)
		return 0
	}
	for i, c := range cmds {
		out, code := runShell(t, bin, dir, c.cmd)
		where := fmt.Sprintf("%s:%d: %s", ex.page, ex.line, strings.SplitN(c.cmd, "\n", 2)[0])
		if code != codes[i] {
			t.Errorf("%s: exit code %d, want %d; it printed:\n%s", where, code, codes[i], out)
		}
		if c.dollar && !outputMatches(c.output, out) {
			t.Errorf("%s: output differs from the page's (-page +got):\n%s", where, cmp.Diff(trimLines(c.output), trimLines(strings.Split(strings.TrimSuffix(out, "\n"), "\n"))))
		}
	}
	return len(cmds)
}

// exampleExits returns the exit code ex wants of each of its n commands:
// those its mark gives after "exits", else 0.
func exampleExits(ex docExample, n int) ([]int, error) {
	codes := make([]int, n)
	arg, ok := strings.CutPrefix(ex.arg, "exits ")
	if !ok {
		if ex.arg != "" {
			return nil, fmt.Errorf("the mark run takes only \"; exits N...\", not %q", ex.arg)
		}
		return codes, nil
	}
	fields := strings.Fields(arg)
	if len(fields) != n {
		return nil, fmt.Errorf("the mark gives %d exit codes for %d commands", len(fields), n)
	}
	for i, f := range fields {
		c, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("exit code %q: %w", f, err)
		}
		codes[i] = c
	}
	return codes, nil
}

// runShell runs command with sh -c in dir, with bin's directory first on
// PATH, as nobody when the test runs as root, and returns what it printed
// on stdout and stderr, and its exit code.
func runShell(t *testing.T, bin, dir, command string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8", "TZ=UTC"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID}}
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		err = <-done
		t.Errorf("%q did not end within 60s", command)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("running %q: %v", command, err)
	}
	return out.String(), 0
}

// outputMatches reports whether got is the output the page shows, want,
// line by line, trailing blanks aside; a line "..." of want stands for
// any number of lines.
func outputMatches(want []string, got string) bool {
	return matchLines(trimLines(want), trimLines(strings.Split(strings.TrimSuffix(got, "\n"), "\n")))
}

// matchLines matches got against want, whose "..." lines match any run
// of lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && want[0] == got[0] && matchLines(want[1:], got[1:])
}

// trimLines returns lines without their trailing blanks, and without
// trailing empty lines.
func trimLines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " \t")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// TestReadmeBuildMakesAStaticSbx: the build README.md gives (the code
// span with "go build ... ./cmd/sbx") makes an sbx that sbx kube image
// can put in an image, which wants a static executable; and its go
// install sets the same environment. The build's -o is a temporary file.
func TestReadmeBuildMakesAStaticSbx(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(data)), " ") // spans broken across lines
	var build, install string
	for _, m := range regexp.MustCompile("`([^`]*go (?:build|install) [^`]*)`").FindAllStringSubmatch(text, -1) {
		switch {
		case strings.Contains(m[1], "go build") && strings.HasSuffix(m[1], "./cmd/sbx"):
			build = m[1]
		case strings.Contains(m[1], "go install"):
			install = m[1]
		}
	}
	if build == "" || install == "" {
		t.Fatalf("README.md has no `... go build ... ./cmd/sbx` (%q) or `... go install ...` (%q)", build, install)
	}
	env, _, _ := strings.Cut(build, "go build")
	if !strings.HasPrefix(install, env+"go install") {
		t.Errorf("README.md's go install (%q) does not build as its go build does (%q)", install, build)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sbx")
	command := regexp.MustCompile(`-o \S+`).ReplaceAllString(build, "-o "+bin)
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md's build, %s: %v\n%s", command, err, out)
	}
	if out, err := exec.Command(bin, "kube", "image", "-o", filepath.Join(dir, "sbx.tar")).CombinedOutput(); err != nil {
		t.Errorf("sbx kube image of the sbx README.md's build makes: %v\n%s", err, out)
	}
}
