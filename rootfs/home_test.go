package rootfs

import (
	"flag"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the credential stores' table of docs/home.md")

// credentialTable is docs/home.md's table of CredentialStores.
func credentialTable() string {
	var b strings.Builder
	b.WriteString("| path below the home | kind | kept by |\n|---|---|---|\n")
	for _, c := range CredentialStores {
		kind := "file (reads empty)"
		if c.Dir {
			kind = "directory (empty, read-only)"
		}
		b.WriteString("| `~/" + c.Path + "` | " + kind + " | " + c.Owner + " |\n")
	}
	return b.String()
}

// TestCredentialStoresDoc: docs/home.md lists CredentialStores, the one
// list, as they are (go test ./rootfs -run TestCredentialStoresDoc
// -update rewrites it).
func TestCredentialStoresDoc(t *testing.T) {
	const page = "../docs/home.md"
	const begin, end = "<!-- credential stores: generated from rootfs.CredentialStores -->\n", "<!-- end of credential stores -->\n"
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), begin)
	got, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q ... %q block", page, begin, end)
	}
	want := credentialTable()
	if *update {
		if err := os.WriteFile(page, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s's table is not rootfs.CredentialStores (-want +got), run with -update:\n%s", page, diff)
	}
}

// TestCredentialStoresWellFormed: each path is relative and clean, once.
func TestCredentialStoresWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range CredentialStores {
		if c.Path == "" || path.IsAbs(c.Path) || path.Clean(c.Path) != c.Path || strings.HasPrefix(c.Path, "..") || seen[c.Path] || c.Owner == "" {
			t.Errorf("got %+v, want a clean relative path, listed once, with its owner", c)
		}
		seen[c.Path] = true
	}
}

func TestHostLayoutHome(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(home+"/.local/share/claude", 0o755)
	os.MkdirAll(home+"/.claude", 0o755)
	creds := CredentialPaths(home)
	for _, tc := range []struct {
		name       string
		view       HomeView
		wantMounts []Mount // of the home, in order
		wantMasked []string
	}{
		{"ro", HomeView{Mode: HomeRO, Dir: home, Source: home},
			[]Mount{{home, home, "bind", ReadOnlyBind}}, creds},
		{"overlay", HomeView{Mode: HomeOverlay, Dir: home, Source: "/merged"},
			[]Mount{{home, "/merged", "bind", ReadWriteBind}}, creds},
		{"rw", HomeView{Mode: HomeRW, Dir: home, Source: home},
			[]Mount{{home, home, "bind", ReadWriteBind}}, nil},
		{"agent", HomeView{Mode: HomeOverlay, Dir: home, Source: home, Show: Agents["claude"]},
			[]Mount{
				{home, "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=700", "uid=1000,gid=1000", "size=5242880"}},
				{home + "/.local/share/claude", home + "/.local/share/claude", "bind", ReadWriteBind},
				{home + "/.claude", home + "/.claude", "bind", ReadWriteBind},
			}, creds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			l, err := Host(t.TempDir(), cwd, HostOptions{UID: 1000, GID: 1000, TmpSize: 5 << 20, Home: tc.view})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(l.Env, "HOME="+home) {
				t.Errorf("got env %q, want HOME=%s", l.Env, home)
			}
			var got []Mount
			for _, m := range l.Mounts {
				if m.Destination == home || strings.HasPrefix(m.Destination, home+"/") {
					got = append(got, m)
				}
			}
			if diff := cmp.Diff(tc.wantMounts, got); diff != "" {
				t.Errorf("the home's mounts (-want +got):\n%s", diff)
			}
			if last := l.Mounts[len(l.Mounts)-1]; last.Destination != cwd {
				t.Errorf("got %s mounted last, want the working directory over the home", last.Destination)
			}
			for _, p := range tc.wantMasked {
				if !slices.Contains(l.Masked, p) {
					t.Errorf("%s is not masked", p)
				}
			}
			// A secret's file in the home is refused, also when the home
			// is seen through an overlay mounted elsewhere.
			if !slices.Contains(l.Visible(), home) {
				t.Errorf("got Visible %q, want the home %s in it", l.Visible(), home)
			}
			if tc.wantMasked == nil && slices.ContainsFunc(l.Masked, func(m string) bool { return strings.HasPrefix(m, home) }) {
				t.Errorf("got %q masked in rw, want the home as it is", l.Masked)
			}
		})
	}
}

func TestParseHomeMode(t *testing.T) {
	for _, m := range HomeModes {
		if got, err := ParseHomeMode(string(m)); err != nil || got != m {
			t.Errorf("ParseHomeMode(%q): got %q, %v; want it back", m, got, err)
		}
	}
	if _, err := ParseHomeMode("writable"); err == nil {
		t.Error("ParseHomeMode(writable): got no error, want one")
	}
}

// TestHomeViewResolve: a shown path's links are followed as inside, with
// the home's absolute links leading on in Source (the overlay), never to
// the host's file; a link out of the home or into a credential store is
// not shown.
func TestHomeViewResolve(t *testing.T) {
	dir, source := "/home/alice", t.TempDir()
	for _, d := range []string{".local/bin", ".local/share/claude/versions", ".ssh", ".claude"} {
		os.MkdirAll(source+"/"+d, 0o755)
	}
	os.WriteFile(source+"/.local/share/claude/versions/2.0", []byte("bin"), 0o755)
	os.WriteFile(source+"/.ssh/id_ed25519", []byte("key"), 0o600)
	links := map[string]string{
		".local/bin/claude":   dir + "/.local/share/claude/versions/2.0",
		".local/bin/rel":      "../share/claude/versions/2.0",
		".local/bin/out":      "/etc/passwd",
		".local/bin/up":       "../../../../etc/passwd",
		".local/bin/key":      dir + "/.ssh/id_ed25519",
		".local/bin/creds":    "../../.claude/.credentials.json",
		".local/bin/dangling": "nowhere",
	}
	for l, target := range links {
		if err := os.Symlink(target, source+"/"+l); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(source+"/.claude/.credentials.json", []byte("token"), 0o600)
	h := HomeView{Mode: HomeOverlay, Dir: dir, Source: source}
	for _, tc := range []struct {
		rel, want string
	}{
		{".local/bin/claude", source + "/.local/share/claude/versions/2.0"},
		{".local/bin/rel", source + "/.local/share/claude/versions/2.0"},
		{".claude", source + "/.claude"},
		{".local/bin/out", ""},
		{".local/bin/up", ""},
		{".local/bin/key", ""},
		{".local/bin/creds", ""},
		{".local/bin/dangling", ""},
		{".ssh", ""},
	} {
		got, ok := h.resolve(tc.rel)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("resolve(%s): got %q, %v; want %q", tc.rel, got, ok, tc.want)
		}
	}
}
