package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A user's first session: the tools they run in a --rootfs host sandbox
// write where such tools write (/tmp, HOME, /run, the working directory),
// as whichever user the command runs as.

// TestPrivilegedWritablePlaces writes every place a --rootfs host sandbox
// gives its command to write, as nobody, as a normal uid and as --user 0:
// /tmp is 1777 and root's, HOME 0700 and the user's, /run the user's, and
// the working directory the owner's. runc gives a tmpfs the mode of its
// mount point, so a mount point made 0755 left /tmp writable by root only.
func TestPrivilegedWritablePlaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	state := t.TempDir()
	script := `id -u
echo "tmp=$(stat -c '%a %u' /tmp) home=$(stat -c '%a %u' "$HOME") run=$(stat -c '%u' /run)"
for d in /tmp "$HOME" /run "$PWD"; do
	if touch "$d/written" && mkdir -p "$d/a/b" && rm -r "$d/written" "$d/a"; then echo "write $d: ok"; else echo "write $d: FAILED"; fi
done
f=$(mktemp) && echo "mktemp=$f"
d=$(mktemp -d) && echo "mktemp-d=$d"`
	for _, tc := range []struct {
		name     string
		owner    int      // of the working directory
		extra    []string // flags
		wantUID  int
		wantHome string // mode and owner of HOME
	}{
		{"nobody", 65534, nil, 65534, "700 65534"},
		{"uid 1000", 1000, nil, 1000, "700 1000"},
		{"--user 0", 0, []string{"--user", "0"}, 0, "700 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := sharedDir(t, tc.owner, tc.owner, 0o755)
			t.Chdir(work)
			args := append([]string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.236.0/24",
				"--log", filepath.Join(state, strings.ReplaceAll(tc.name, " ", "-")+".jsonl")}, tc.extra...)
			stdout, stderr, code := runCLI(t, append(args, "--", "/bin/sh", "-c", script)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			if !strings.HasPrefix(stdout, strconv.Itoa(tc.wantUID)+"\n") {
				t.Errorf("the command ran as %q, want uid %d", strings.SplitN(stdout, "\n", 2)[0], tc.wantUID)
			}
			if want := "tmp=1777 0 home=" + tc.wantHome + " run=" + strconv.Itoa(tc.wantUID); !strings.Contains(stdout, want) {
				t.Errorf("modes and owners: want %q in\n%s", want, stdout)
			}
			for _, d := range []string{"/tmp", "/home/sbx", "/run", work} {
				if want := "write " + d + ": ok"; !strings.Contains(stdout, want) {
					t.Errorf("want %q in\n%s\n%s", want, stdout, stderr)
				}
			}
			for _, p := range []string{"mktemp=/tmp/", "mktemp-d=/tmp/"} {
				if !strings.Contains(stdout, p) {
					t.Errorf("want %q in\n%s\n%s", p, stdout, stderr)
				}
			}
		})
	}
}

// TestPrivilegedRealToolsAsAUser is a first session with real tools in a
// --rootfs host sandbox as a normal user (the owner of the working
// directory, uid 1000): npm installs a local package whose install script
// writes to /tmp and HOME (as node-gyp does), Python's tempfile makes its
// file in /tmp (it falls back to the working directory when /tmp is not
// writable), git makes a repository and a commit, and mktemp works.
func TestPrivilegedRealToolsAsAUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	for _, tool := range []string{"/usr/bin/node", "/usr/bin/npm", "/usr/bin/python3", "/usr/bin/git"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s is missing: this test runs the real tool (scripts/test.sh installs git and python3; Node.js and npm come with the machine): %v", tool, err)
		}
	}
	work := sharedDir(t, 1000, 1000, 0o755)
	// The package, packed by npm on the host as its author would.
	pkg := filepath.Join(t.TempDir(), "pkg")
	os.MkdirAll(pkg, 0o755)
	install := `const fs = require('fs'), os = require('os');
fs.writeFileSync(os.tmpdir() + '/sbx-probe-tmp', 't');
fs.writeFileSync(os.homedir() + '/sbx-probe-home', 'h');
console.log('install-script: ' + fs.mkdtempSync(os.tmpdir() + '/node-gyp-tmp-'));`
	for name, content := range map[string]string{
		"package.json": `{"name": "sbx-probe", "version": "1.0.0", "scripts": {"install": "node install.js"}}`,
		"install.js":   install,
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pack := exec.Command("npm", "pack", "--pack-destination", work, "--offline")
	pack.Dir = pkg
	pack.Env = append(os.Environ(), "npm_config_cache="+t.TempDir())
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	os.Chown(filepath.Join(work, "sbx-probe-1.0.0.tgz"), 1000, 1000)
	t.Chdir(work)
	state := t.TempDir()
	script := `id -u
echo "mktemp=$(mktemp)"
python3 -c 'import tempfile; f = tempfile.NamedTemporaryFile(delete=False); print("python-tempfile=" + f.name)'
git init -q repo && cd repo && echo hi > a && git add a &&
	git -c user.name=sbx -c user.email=sbx@example.test commit -qm first && echo "git-commits=$(git rev-list --count HEAD)"
cd ..
npm install --offline --no-audit --no-fund --foreground-scripts ./sbx-probe-1.0.0.tgz 2>&1 && echo npm-install=ok
ls /tmp/sbx-probe-tmp "$HOME/sbx-probe-home" "$HOME/.npm" >/dev/null && echo install-script-wrote=ok`
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.235.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--", "/bin/sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"1000\n", "mktemp=/tmp/tmp.", "python-tempfile=/tmp/", "git-commits=1", "install-script: /tmp/node-gyp-tmp-", "npm-install=ok", "install-script-wrote=ok"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("want %q in the output:\n%s\n%s", want, stdout, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "node_modules", "sbx-probe", "package.json")); err != nil {
		t.Errorf("npm install left no package in the working directory: %v", err)
	}
}

// TestPrivilegedStartErrorsSayWhy: exit codes 126 and 127 of a command
// that cannot start come with one line that names the cause and the fix,
// such as which uid cannot enter which directory: a root filesystem of
// mode 0700 (what mktemp -d makes) used to exit 126 without a word.
func TestPrivilegedStartErrorsSayWhy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	state := t.TempDir()
	t.Chdir(t.TempDir())
	run := func(root string, args ...string) (string, int) {
		stdout, stderr, code := runCLI(t, append([]string{"run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.234.0/24",
			"--log", filepath.Join(t.TempDir(), "log.jsonl"), "--rootfs", root, "--"}, args...)...)
		if stdout != "" {
			t.Errorf("sbx run %s printed %q on stdout", strings.Join(args, " "), stdout)
		}
		return stderr, code
	}
	private := busyboxRoot(t)
	os.Chmod(private, 0o700)
	open := busyboxRoot(t)
	os.Chmod(filepath.Join(open, "bin", "busybox"), 0o644)
	for _, tc := range []struct {
		name     string
		root     string
		args     []string
		wantCode int
		want     []string
	}{
		{"root filesystem 0700, as nobody", private, []string{"echo", "hi"}, 126,
			[]string{"uid 65534 cannot enter /, the root filesystem " + private, "drwx------", "chmod o+x " + private, "--user 0"}},
		{"not executable", open, []string{"echo", "hi"}, 126,
			[]string{"uid 65534 cannot execute /bin/echo", filepath.Join(open, "bin", "busybox"), "chmod o+x"}},
		{"not found", open, []string{"sbx-no-such-command"}, 127,
			[]string{"sbx-no-such-command: command not found in the sandbox's PATH", "the root filesystem " + open + " must hold it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, code := run(tc.root, tc.args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != tc.wantCode || len(lines) != 1 {
				t.Fatalf("exit %d with %d lines, want %d with one line:\n%s", code, len(lines), tc.wantCode, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("want %q in %q", w, stderr)
				}
			}
		})
	}
	// Root may enter its own 0700 directory: the check does not refuse
	// what the kernel allows.
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.234.0/24",
		"--log", filepath.Join(t.TempDir(), "log.jsonl"), "--rootfs", private, "--user", "0", "--", "echo", "hi")
	if code != 0 || stdout != "hi\n" {
		t.Errorf("--user 0 in a 0700 root filesystem of root's: exit %d, %q, %q; want 0 and hi", code, stdout, stderr)
	}
}
