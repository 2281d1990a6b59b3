package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-dev/sbx/rootfs"
)

// fakeHome is a home of uid 1000 with a fake secret in every credential
// store of rootfs.CredentialStores (a file holding "SECRET <path>", a
// directory holding one), and notes.txt, which is no credential.
func fakeHome(t *testing.T) string {
	t.Helper()
	home := sharedDir(t, 1000, 1000, 0o700)
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range rootfs.CredentialStores {
		if c.Dir {
			write(filepath.Join(c.Path, "key"), "SECRET "+c.Path+"\n", 0o600)
		} else {
			write(c.Path, "SECRET "+c.Path+"\n", 0o600)
		}
	}
	write("notes.txt", "visible notes\n", 0o644)
	chownTree(t, home, 1000, 1000)
	return home
}

// chownTree gives dir and everything below it to uid:gid.
func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hostileScript reads every credential store of the home, and tries to
// write into each: a directory's planted file, a file's appended line.
func hostileScript() string {
	var b strings.Builder
	b.WriteString("id -u; cat \"$HOME/notes.txt\"\n")
	for _, c := range rootfs.CredentialStores {
		p := `"$HOME/` + c.Path + `"`
		fmt.Fprintf(&b, "find %s -type f -exec cat {} + 2>/dev/null\n", p)
		if c.Dir {
			fmt.Fprintf(&b, "echo PLANTED > %s/planted 2>/dev/null && echo wrote %s\n", p, c.Path)
		} else {
			fmt.Fprintf(&b, "echo PLANTED >> %s 2>/dev/null\n", p)
		}
	}
	b.WriteString("(echo scratch > \"$HOME/scratch\") 2>/dev/null && echo home-writable\ntrue\n")
	return b.String()
}

// TestPrivilegedHomeCredentialStores: with --home ro and overlay, a
// hostile command run as a normal uid reads nothing from any credential
// store of the home (each read empty or absent) while the rest of the home
// is visible, and writes nothing through a replaced directory or file to
// the host; --home rw shows the stores as they are.
func TestPrivilegedHomeCredentialStores(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	work := sharedDir(t, 1000, 1000, 0o755)
	t.Chdir(work)
	for _, tc := range []struct {
		mode          string
		wantSecrets   bool
		wantWritable  bool // the home itself, inside
		wantScratchOn bool // the home's new file left on the host
	}{
		{"ro", false, false, false},
		{"overlay", false, true, false},
		{"rw", true, true, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			home := fakeHome(t)
			state := t.TempDir()
			stdout, stderr, code := runCLI(t, "run", "--show", "none", "--state-dir", state, "--subnet-pool", "10.213.214.0/24",
				"--log", filepath.Join(state, "log.jsonl"), "--home", tc.mode, "--home-dir", home, "--", "/bin/sh", "-c", hostileScript())
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			if !strings.HasPrefix(stdout, "1000\nvisible notes\n") {
				t.Errorf("got %q first, want uid 1000 and the home's notes.txt", stdout)
			}
			if got := strings.Count(stdout, "SECRET "); tc.wantSecrets != (got > 0) {
				t.Errorf("got %d secrets read, want them read: %v\n%s", got, tc.wantSecrets, stdout)
			}
			if got := strings.Contains(stdout, "home-writable"); got != tc.wantWritable {
				t.Errorf("got the home writable inside: %v, want %v\n%s", got, tc.wantWritable, stderr)
			}
			_, err := os.Stat(filepath.Join(home, "scratch"))
			if got := err == nil; got != tc.wantScratchOn {
				t.Errorf("got the sandbox's new file in the host's home: %v, want %v", got, tc.wantScratchOn)
			}
			if got := strings.Contains(stderr, homeRWNote); got != tc.wantSecrets {
				t.Errorf("got the rw warning: %v, want %v\n%s", got, tc.wantSecrets, stderr)
			}
			if tc.wantSecrets {
				return
			}
			if strings.Contains(stdout, "wrote ") {
				t.Errorf("a write into a replaced directory succeeded:\n%s", stdout)
			}
			for _, c := range rootfs.CredentialStores {
				p, want := filepath.Join(home, c.Path), "SECRET "+c.Path+"\n"
				if c.Dir {
					if _, err := os.Stat(filepath.Join(p, "planted")); err == nil {
						t.Errorf("%s: the sandbox planted a file in it on the host", c.Path)
					}
					p = filepath.Join(p, "key")
				}
				if got, err := os.ReadFile(p); err != nil || string(got) != want {
					t.Errorf("%s on the host: got %q, %v; want %q", c.Path, got, err, want)
				}
			}
		})
	}
}

// agentHome is fakeHome with a fake Claude Code installed by the native
// installer (~/.local/bin/claude, ~/.local/share/claude), its settings,
// Codex's settings and a tool of the user's (~/.local/bin/mytool).
func agentHome(t *testing.T) string {
	t.Helper()
	home := fakeHome(t)
	claude := "#!/bin/sh\necho \"claude $(cat $HOME/.local/share/claude/version) $(cat $HOME/.claude/settings.json)\"\n" +
		"cat $HOME/notes.txt $HOME/.codex/config.toml 2>/dev/null\nfind $HOME/.claude -type f -exec cat {} + 2>/dev/null\n" +
		"echo changed > $HOME/.claude/settings.json\necho '# tampered' >> $HOME/.local/bin/claude\n"
	for rel, content := range map[string]string{
		".local/share/claude/versions/2.0.0-fake": claude,
		".local/bin/mytool":                       "#!/bin/sh\necho mytool\n",
		".local/share/claude/version":             "2.0.0-fake\n",
		".claude/settings.json":                   `{"model":"fake"}` + "\n",
		".codex/config.toml":                      "codex settings\n",
	} {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The native installer's link, absolute.
	if err := os.Symlink(filepath.Join(home, ".local/share/claude/versions/2.0.0-fake"), filepath.Join(home, ".local/bin/claude")); err != nil {
		t.Fatal(err)
	}
	chownTree(t, home, 1000, 1000)
	return home
}

// TestPrivilegedAgentHome: --agent claude starts the user's own install
// of Claude Code with its settings, and shows nothing else of the home:
// not its login, not another agent's settings, not the user's notes;
// what it writes is thrown away, the install it started from (through the
// native installer's absolute link) included.
func TestPrivilegedAgentHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := agentHome(t)
	state := t.TempDir()
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.215.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--agent", "claude", "--block", "api.anthropic.com", "--home-dir", home, "--", "claude", "--version")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "claude 2.0.0-fake {\"model\":\"fake\"}\n{\"model\":\"fake\"}\n"; stdout != want {
		t.Errorf("got %q, want %q: the install and its settings only", stdout, want)
	}
	if got, _ := os.ReadFile(filepath.Join(home, ".claude/settings.json")); string(got) != "{\"model\":\"fake\"}\n" {
		t.Errorf("the host's settings: got %q after the run, want them unchanged", got)
	}
	if got, _ := os.ReadFile(filepath.Join(home, ".local/share/claude/versions/2.0.0-fake")); strings.HasSuffix(string(got), "\n# tampered\n") {
		t.Errorf("the host's install: got %q after the run, want it unchanged", got)
	}
}

// TestPrivilegedHiddenCommandSaysWhere: a command found only in the
// user's home, which the sandbox does not show, exits 127 with a line
// that names where it is and the flag that shows it.
func TestPrivilegedHiddenCommandSaysWhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := agentHome(t)
	for _, tc := range []struct {
		command string
		want    string
	}{
		{"claude", filepath.Join(home, ".local/bin/claude") + " is in the home of uid 1000, which the sandbox does not show: --agent claude shows it"},
		{"mytool", filepath.Join(home, ".local/bin/mytool") + " is in the home of uid 1000, which the sandbox does not show: --home ro (or overlay) shows it"},
	} {
		state := t.TempDir()
		stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.215.0/24",
			"--log", filepath.Join(state, "log.jsonl"), "--home-dir", home, "--", tc.command)
		if code != 127 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: got exit %d, %q, %q; want 127 and %q", tc.command, code, stdout, stderr, tc.want)
		}
	}
}

// TestPrivilegedAgentNpmInstall: with --agent claude, an npm -g install
// of Claude Code in the user's own prefix (prefix= in ~/.npmrc, as npm's
// docs advise) starts from its bin link, its package's own files found
// beside it; of the prefix only its bin links and that package are shown.
func TestPrivilegedAgentNpmInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	if _, err := os.Stat("/usr/bin/npm"); err != nil {
		t.Fatalf("/usr/bin/npm is missing: this test installs with the real npm: %v", err)
	}
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := fakeHome(t)
	prefix := filepath.Join(home, ".npm-prefix")
	// The stand-in package, named as Claude Code's, its bin a script that
	// requires a file of its own package.
	pkg := filepath.Join(home, "src")
	for name, content := range map[string]string{
		"package.json": `{"name": "@anthropic-ai/claude-code", "version": "9.9.9", "bin": {"claude": "cli.js"}}`,
		"cli.js":       "#!/usr/bin/env node\nconsole.log('claude ' + require('./version.js') + ' ' + require('fs').readFileSync(require('os').homedir() + '/.claude/settings.json', 'utf8').trim());\n",
		"version.js":   "module.exports = '9.9.9-npm';\n",
	} {
		os.MkdirAll(pkg, 0o755)
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(home, ".claude"), 0o755)
	os.WriteFile(filepath.Join(home, ".claude/settings.json"), []byte(`{"model":"npm"}`), 0o644)
	// prefix= follows the credential store's fake token, as a user's
	// ~/.npmrc holds both.
	npmrc, _ := os.ReadFile(filepath.Join(home, ".npmrc"))
	os.WriteFile(filepath.Join(home, ".npmrc"), append(npmrc, "prefix=${HOME}/.npm-prefix\n"...), 0o600)
	chownTree(t, home, 1000, 1000)
	install := exec.Command("npm", "install", "-g", "--offline", "--no-audit", "--no-fund", "--prefix", prefix, pkg)
	install.Env = append(os.Environ(), "HOME="+home, "npm_config_cache="+filepath.Join(home, ".npm"))
	install.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install -g as uid 1000: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(prefix, "bin", "other"), []byte("#!/bin/sh\n"), 0o755)
	state := t.TempDir()
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.215.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--agent", "claude", "--block", "api.anthropic.com", "--home-dir", home, "--", "/bin/sh", "-c",
		"claude; ls $HOME/.npm-prefix/lib/node_modules; cat $HOME/.npmrc $HOME/notes.txt 2>/dev/null; true")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "claude 9.9.9-npm {\"model\":\"npm\"}\n@anthropic-ai\n"; stdout != want {
		t.Errorf("got %q, want %q: the npm install, its settings, and nothing else", stdout, want)
	}
}

// TestPrivilegedAgentRealClaudeCode: the real Claude Code, installed by
// npm -g into a normal user's prefix under their home (~/.npm-global),
// starts with --agent claude and finds its settings, while its login
// reads empty. The package is the one the agent tests install from npm
// (cached), linked into the prefix as npm -g lays it out.
func TestPrivilegedAgentRealClaudeCode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	cached := filepath.Join(installAgent(t, claudeCodePackage), "node_modules", claudeCodePackage.name)
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := fakeHome(t)
	installClaudeInHome(t, home, cached)
	os.WriteFile(filepath.Join(home, ".claude/settings.json"), []byte(`{"model":"settings-of-the-user"}`), 0o644)
	chownTree(t, home, 1000, 1000)
	state := t.TempDir()
	script := "claude --version; cat ~/.claude/settings.json; echo; wc -c < ~/.claude/.credentials.json; cat ~/.claude.json 2>/dev/null | wc -c"
	stdout, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.216.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--agent", "claude", "--block", "api.anthropic.com", "--home-dir", home, "--", "/bin/sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := claudeCodePackage.version + " (Claude Code)\n{\"model\":\"settings-of-the-user\"}\n0\n0\n"; stdout != want {
		t.Errorf("got %q, want %q: the user's install and settings, its login empty", stdout, want)
	}
}

// TestPrivilegedHomeSecretFileRefused: a secret's file in the user's
// home is refused when --home shows the home, through the overlay too,
// and taken with --home empty.
func TestPrivilegedHomeSecretFileRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	t.Chdir(sharedDir(t, 1000, 1000, 0o755))
	home := fakeHome(t)
	token := filepath.Join(home, "token")
	if err := os.WriteFile(token, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"ro", "overlay", "rw"} {
		state := t.TempDir()
		_, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.216.0/24",
			"--log", filepath.Join(state, "log.jsonl"), "--home", mode, "--home-dir", home,
			"--secret", "TOKEN="+token+"@api.example.test", "--", "true")
		if code == 0 || !strings.Contains(stderr, "the value of secret TOKEN is read from "+token) {
			t.Errorf("--home %s: got exit %d, %q; want the secret's file refused", mode, code, stderr)
		}
	}
	state := t.TempDir()
	if _, stderr, code := runCLI(t, "run", "--quiet", "--state-dir", state, "--subnet-pool", "10.213.216.0/24",
		"--log", filepath.Join(state, "log.jsonl"), "--home-dir", home,
		"--secret", "TOKEN="+token+"@api.example.test", "--", "true"); code != 0 {
		t.Errorf("--home empty: got exit %d, %q; want the secret taken", code, stderr)
	}
}

// installClaudeInHome lays Claude Code, installed from npm at cached,
// into home's ~/.npm-global as npm -g does: hard links where the cache
// is on the same filesystem, else a copy.
func installClaudeInHome(t *testing.T, home, cached string) {
	t.Helper()
	pkg := filepath.Join(home, ".npm-global/lib/node_modules", claudeCodePackage.name)
	os.MkdirAll(filepath.Dir(pkg), 0o755)
	if out, err := exec.Command("cp", "-al", cached, pkg).CombinedOutput(); err != nil {
		os.RemoveAll(pkg)
		if out, err := exec.Command("cp", "-a", cached, pkg).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	} else if len(out) > 0 {
		t.Log(string(out))
	}
	os.MkdirAll(filepath.Join(home, ".npm-global/bin"), 0o755)
	if err := os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", filepath.Join(home, ".npm-global/bin/claude")); err != nil {
		t.Fatal(err)
	}
}
