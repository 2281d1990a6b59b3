package run

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
)

// A HomeError is a home mode (RootFS.Home, RootFS.Agent) that cannot be
// given to the command's user.
type HomeError struct {
	UID    uint32
	Reason string
}

func (e *HomeError) Error() string {
	return fmt.Sprintf("the home of uid %d cannot be shown: %s", e.UID, e.Reason)
}

// homeDir is the home directory of uid: given (dir), else the user
// database's. It must be a directory that uid owns.
func homeDir(uid uint32, dir string) (string, error) {
	if dir == "" {
		u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
		if err != nil {
			return "", &HomeError{UID: uid, Reason: "no such user in the user database; run as a user with a home (--user)"}
		}
		dir = u.HomeDir
	}
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return "", &HomeError{UID: uid, Reason: fmt.Sprintf("its home %q is not a directory", dir)}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uid {
		return "", &HomeError{UID: uid, Reason: fmt.Sprintf("its home %s belongs to uid %d", dir, st.Uid)}
	}
	return dir, nil
}

// homeView works out the home the host layout shows the user u, and
// makes below parent the overlay that HomeOverlay and an agent need
// (its upper layer bounded by fsys.TmpSize); release undoes
// what it made, and is never nil.
func homeView(fsys RootFS, u User, parent string) (v rootfs.HomeView, release func(), err error) {
	release = func() {}
	mode := fsys.Home
	if fsys.Agent != "" {
		show, ok := rootfs.Agents[fsys.Agent]
		if !ok {
			return v, release, fmt.Errorf("agent %q: want claude, codex or gemini", fsys.Agent)
		}
		if mode != "" && mode != rootfs.HomeEmpty {
			return v, release, fmt.Errorf("agent %s: its files of the home are shown as an overlay, so the home mode must be empty, not %s", fsys.Agent, mode)
		}
		mode = rootfs.HomeOverlay
		v.Show = show
	}
	var dir string
	if mode != "" && mode != rootfs.HomeEmpty {
		if dir, err = homeDir(u.UID, fsys.HomeDir); err != nil {
			return v, release, err
		}
	}
	if fsys.Agent != "" {
		v.Show = append(slices.Clip(v.Show), npmInstalls(dir, agentPackages[fsys.Agent])...)
	}
	if mode == "" || mode == rootfs.HomeEmpty {
		return rootfs.HomeView{}, release, nil
	}
	v.Mode, v.Dir, v.Source = mode, dir, dir
	if mode != rootfs.HomeOverlay {
		return v, release, nil
	}
	size := fsys.TmpSize
	if size <= 0 {
		size = rootfs.DefaultTmpSize
	}
	merged, release, err := mountOverlay(parent, dir, size)
	if err != nil {
		return v, func() {}, err
	}
	v.Source = merged
	return v, release, nil
}

// agentPackages are the npm packages of the agents of rootfs.Agents.
var agentPackages = map[string]string{
	"claude": "@anthropic-ai/claude-code",
	"codex":  "@openai/codex",
	"gemini": "@google/gemini-cli",
}

// npmInstalls are the paths below home of the global installs of the
// npm package pkg under home: each prefix's bin directory (its links,
// and node itself with nvm) and the package's directory. The prefixes
// are npm's prefix= in ~/.npmrc, ~/.npm-global and nvm's versions.
func npmInstalls(home, pkg string) []string {
	prefixes := []string{filepath.Join(home, ".npm-global")}
	if p := npmrcPrefix(home); p != "" {
		prefixes = append(prefixes, p)
	}
	nvm, _ := filepath.Glob(filepath.Join(home, ".nvm/versions/node/*"))
	prefixes = append(prefixes, nvm...)
	var show []string
	for _, prefix := range prefixes {
		rel, err := filepath.Rel(home, prefix)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") || slices.Contains(show, filepath.Join(rel, "bin")) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(prefix, "lib/node_modules", pkg)); err == nil && fi.IsDir() {
			show = append(show, filepath.Join(rel, "bin"), filepath.Join(rel, "lib/node_modules", pkg))
		}
	}
	return show
}

// npmrcPrefix is the prefix= line of home's .npmrc, ~ and ${HOME}
// standing for home; "" for none. Only that line is taken from the file,
// which is the user's.
func npmrcPrefix(home string) string {
	f, err := os.Open(filepath.Join(home, ".npmrc"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || strings.TrimSpace(k) != "prefix" {
			continue
		}
		v = strings.TrimSpace(v)
		v = strings.Replace(v, "${HOME}", home, 1)
		if rest, ok := strings.CutPrefix(v, "~/"); ok {
			v = filepath.Join(home, rest)
		}
		if filepath.IsAbs(v) {
			return filepath.Clean(v)
		}
	}
	return ""
}

// homeBins are the directories of a home where users install commands,
// which the command's PATH holds first when the home is shown.
var homeBins = []string{".local/bin", "bin"}

// homePath is the PATH variable the layout sets for the home v: its
// homeBins and the bin directories it shows (an agent's npm prefix)
// before the sandbox's default, or none when no home is shown.
func homePath(v rootfs.HomeView) []string {
	if v.Dir == "" {
		return nil
	}
	var dirs []string
	for _, b := range append(slices.Clone(homeBins), v.Show...) {
		if filepath.Base(b) == "bin" && !slices.Contains(dirs, filepath.Join(v.Dir, b)) {
			dirs = append(dirs, filepath.Join(v.Dir, b))
		}
	}
	return []string{"PATH=" + strings.Join(append(dirs, sandbox.DefaultPath), ":")}
}

// hiddenCommand says where name, a command not found in the sandbox, is
// in u's home when the sandbox does not show it there, and which flag
// shows it; "" when it is not there or is shown.
func hiddenCommand(fsys RootFS, u User, name string) string {
	if strings.Contains(name, "/") || (fsys.Agent == "" && fsys.Home != "" && fsys.Home != rootfs.HomeEmpty) || fsys.Agent == name {
		return ""
	}
	dir, err := homeDir(u.UID, fsys.HomeDir)
	if err != nil {
		return ""
	}
	bins := slices.Clone(homeBins)
	if pkg, ok := agentPackages[name]; ok {
		bins = append(bins, npmInstalls(dir, pkg)...)
	}
	for _, b := range bins {
		p := filepath.Join(dir, b, name)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		flag := "--home ro (or overlay)"
		if _, ok := rootfs.Agents[name]; ok {
			flag = "--agent " + name
		}
		return fmt.Sprintf("%s is in the home of uid %d, which the sandbox does not show: %s shows it", p, u.UID, flag)
	}
	return ""
}
