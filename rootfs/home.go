package rootfs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// HomeMode says how much of the user's home the host layout shows.
type HomeMode string

// The home modes of the host layout.
const (
	// HomeEmpty shows a fresh, empty home at Home (the default).
	HomeEmpty HomeMode = "empty"
	// HomeRO shows the user's home read-only, CredentialStores hidden.
	HomeRO HomeMode = "ro"
	// HomeOverlay shows the user's home writable, the writes going to a
	// layer thrown away at the end, CredentialStores hidden.
	HomeOverlay HomeMode = "overlay"
	// HomeRW shows the user's home writable, credential stores and all.
	HomeRW HomeMode = "rw"
)

// HomeModes are the modes, in the order the CLI names them.
var HomeModes = []HomeMode{HomeEmpty, HomeRO, HomeOverlay, HomeRW}

// A CredentialStore is a file or directory of a home where a program
// keeps credentials: keys, tokens, passwords, session cookies.
type CredentialStore struct {
	// Path is below the home, with slashes.
	Path string
	// Dir says it is a directory (else a file).
	Dir bool
	// Owner is the program or kind of program that keeps it.
	Owner string
}

// CredentialStores are the credential stores the host layout replaces by
// empty ones (a directory by an empty read-only one, a file by one that
// reads empty and keeps nothing written to it) in every home mode that
// shows the home but HomeRW. It is the one list: docs/home.md is checked
// against it.
var CredentialStores = []CredentialStore{
	{".ssh", true, "SSH keys and agent sockets"},
	{".gnupg", true, "GnuPG keys"},
	{".password-store", true, "pass"},
	{".aws", true, "AWS CLI"},
	{".azure", true, "Azure CLI"},
	{".config/gcloud", true, "Google Cloud CLI"},
	{".config/gh", true, "GitHub CLI"},
	{".config/hub", false, "hub"},
	{".config/glab-cli", true, "GitLab CLI"},
	{".docker/config.json", false, "Docker registry logins"},
	{".kube", true, "kubectl"},
	{".netrc", false, "curl, git, ftp"},
	{".npmrc", false, "npm registry tokens"},
	{".yarnrc.yml", false, "Yarn registry tokens"},
	{".pypirc", false, "PyPI upload tokens"},
	{".config/pip/pip.conf", false, "pip index credentials"},
	{".cargo/credentials.toml", false, "crates.io tokens"},
	{".cargo/credentials", false, "crates.io tokens (old name)"},
	{".gem/credentials", false, "RubyGems tokens"},
	{".git-credentials", false, "git's credential store"},
	{".config/git/credentials", false, "git's credential store (XDG)"},
	{".terraform.d/credentials.tfrc.json", false, "Terraform Cloud tokens"},
	{".vault-token", false, "HashiCorp Vault"},
	{".local/share/keyrings", true, "GNOME keyring"},
	{".mozilla", true, "Firefox profiles"},
	{".config/google-chrome", true, "Chrome profiles"},
	{".config/chromium", true, "Chromium profiles"},
	{".config/BraveSoftware", true, "Brave profiles"},
	{".config/microsoft-edge", true, "Edge profiles"},
	{".claude/.credentials.json", false, "Claude Code's login (OAuth tokens)"},
	{".claude.json", false, "Claude Code's state, which may hold an API key (primaryApiKey)"},
	{".codex/auth.json", false, "Codex's login (API key or OAuth tokens)"},
	{".codex/.credentials.json", false, "Codex's MCP server logins"},
	{".gemini/oauth_creds.json", false, "Gemini CLI's login (OAuth tokens)"},
	{".gemini/mcp-oauth-tokens.json", false, "Gemini CLI's MCP server logins"},
	{".gemini/gemini-credentials.json", false, "Gemini CLI's stored credentials"},
	{".gemini/google_accounts.json", false, "Gemini CLI's accounts"},
}

// Agents are the agent CLIs whose install and settings HomeView.Agent
// shows, by name: paths below the home, with slashes.
var Agents = map[string][]string{
	"claude": {".local/bin/claude", ".local/share/claude", ".claude", ".config/claude"},
	"codex":  {".local/bin/codex", ".codex"},
	"gemini": {".local/bin/gemini", ".gemini"},
}

// HomeView is the user's home in the host layout: HostOptions.Home.
type HomeView struct {
	// Mode is how much of it is shown; "" means HomeEmpty.
	Mode HomeMode
	// Dir is the home's path, on the host and in the sandbox, which
	// HOME names.
	Dir string
	// Source is what is mounted at Dir: Dir itself for HomeRO and
	// HomeRW, a directory sbx made for HomeOverlay (Dir with an upper
	// layer of its own).
	Source string
	// Show, when not empty, are the only paths below Dir shown (from
	// Source; the rest of the home is a fresh tmpfs): an agent's install
	// and settings (Agents).
	Show []string
}

// CredentialPaths are the paths below dir of the CredentialStores.
func CredentialPaths(dir string) []string {
	paths := make([]string, len(CredentialStores))
	for i, c := range CredentialStores {
		paths[i] = path.Join(dir, c.Path)
	}
	return paths
}

// homeMounts are the mounts that show h, in order, and the paths they
// mask. Credential stores are masked whether they exist or not (a
// missing one is skipped by the runtime).
func (h HomeView) mounts(owner string, size int64) ([]Mount, []string, error) {
	if !filepath.IsAbs(h.Dir) || filepath.Clean(h.Dir) != h.Dir || h.Dir == "/" || isSystemPath(h.Dir) {
		return nil, nil, fmt.Errorf("home directory %q: want an absolute path that is not / or a system directory", h.Dir)
	}
	opts := ReadWriteBind
	if h.Mode == HomeRO {
		opts = ReadOnlyBind
	}
	var ms []Mount
	if len(h.Show) == 0 {
		ms = append(ms, Mount{Destination: h.Dir, Source: h.Source, Type: "bind", Options: opts})
	} else {
		ms = append(ms, Mount{Destination: h.Dir, Source: "tmpfs", Type: "tmpfs", Options: []string{"nosuid", "nodev", "mode=700", owner, fmt.Sprintf("size=%d", size)}})
		for _, p := range h.Show {
			src, ok := h.resolve(p)
			if !ok {
				continue // not installed, a dangling link, or one out of the home
			}
			ms = append(ms, Mount{Destination: path.Join(h.Dir, p), Source: src, Type: "bind", Options: opts})
		}
	}
	if h.Mode == HomeRW {
		return ms, nil, nil
	}
	return ms, CredentialPaths(h.Dir), nil
}

// resolve is where rel, a path below the home, leads in Source,
// following links as the sandbox would with the home at Dir: a link's
// absolute target below Dir leads on in Source (so that what an agent's
// link leads to is shown through the overlay, never the host's file
// writable). ok is false for a path that does not exist, or leads out of
// the home or into a credential store.
func (h HomeView) resolve(rel string) (src string, ok bool) {
	rest := strings.Split(path.Clean(rel), "/")
	cur := ""
	for hops := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		if next == ".." || strings.HasPrefix(next, "../") || isCredentialStore(next) {
			return "", false
		}
		fi, err := os.Lstat(filepath.Join(h.Source, next))
		if err != nil {
			return "", false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", false
		}
		target, err := os.Readlink(filepath.Join(h.Source, next))
		if err != nil {
			return "", false
		}
		if path.IsAbs(target) {
			r, err := filepath.Rel(h.Dir, target)
			if err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return "", false
			}
			target, cur = r, ""
		}
		rest = append(strings.Split(path.Join(cur, target), "/"), rest...)
		cur = ""
	}
	if cur == "" || isCredentialStore(cur) {
		return "", false
	}
	return filepath.Join(h.Source, cur), true
}

// isCredentialStore reports whether rel, a clean path below a home, is a
// credential store or below one.
func isCredentialStore(rel string) bool {
	for _, c := range CredentialStores {
		if rel == c.Path || strings.HasPrefix(rel, c.Path+"/") {
			return true
		}
	}
	return false
}

// hidden reports whether the home mode m hides the user's home, so that
// HOME is Home.
func (m HomeMode) hidden() bool { return m == "" || m == HomeEmpty }

// ParseHomeMode parses the name of a HomeMode.
func ParseHomeMode(s string) (HomeMode, error) {
	for _, m := range HomeModes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(HomeModes))
	for i, m := range HomeModes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("home mode %q: want one of %s", s, strings.Join(names, ", "))
}
