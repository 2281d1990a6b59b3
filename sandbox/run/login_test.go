package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/rootfs"
)

// TestCheckLogin: a login is refused where the agent would not find its
// file (the home hidden, no agent shown), where the command would see the
// real one (the home read-write), with another agent's files, another
// root filesystem, or an agent sbx keeps no login of.
func TestCheckLogin(t *testing.T) {
	tests := []struct {
		name string
		fsys RootFS
		want string // in the error; "" for none
	}{
		{"agent", RootFS{Agent: "claude", Login: "claude"}, ""},
		{"codex agent", RootFS{Agent: "codex", Login: "codex"}, ""},
		{"home overlay", RootFS{Home: rootfs.HomeOverlay, Login: "claude"}, ""},
		{"home ro", RootFS{Home: rootfs.HomeRO, Login: "codex"}, ""},
		{"none", RootFS{}, ""},
		{"home empty", RootFS{Login: "claude"}, "the home is not shown"},
		{"home rw", RootFS{Home: rootfs.HomeRW, Login: "claude"}, "shown read-write"},
		{"another agent", RootFS{Agent: "codex", Login: "claude"}, "agent codex's files"},
		{"image", RootFS{Image: "alpine", Agent: "claude", Login: "claude"}, "not the host layout"},
		{"rootfs dir", RootFS{Dir: "/srv/root", Agent: "claude", Login: "claude"}, "not the host layout"},
		{"gemini", RootFS{Agent: "gemini", Login: "gemini"}, "claude and codex only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fsys.CheckLogin()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestKeepLogin: the layout shows the command a copy of the login, the
// user's, with placeholders, at the credential file's path in place of
// the masked store; the gateway gets the login; the copy is removed by
// what keepLogin returns.
func TestKeepLogin(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
	real := `{"claudeAiOauth":{"accessToken":"real-access","refreshToken":"real-refresh","expiresAt":1,"scopes":[],"subscriptionType":"pro"}}`
	os.WriteFile(filepath.Join(home, ".claude/.credentials.json"), []byte(real), 0o600)
	dest := filepath.Join(home, ".claude/.credentials.json")
	p := &prepared{user: User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())},
		layout: rootfs.Layout{Masked: []string{"/etc/shadow", dest}}}
	spec := &Spec{RootFS: RootFS{Agent: "claude", Login: "claude"}}
	remove, err := keepLogin(spec, p, rootfs.HomeView{Dir: home, Mode: rootfs.HomeOverlay}, filepath.Join(t.TempDir(), "logins"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/etc/shadow"}, p.layout.Masked); diff != "" {
		t.Errorf("masked (-want +got):\n%s", diff)
	}
	m := p.layout.Mounts[len(p.layout.Mounts)-1]
	if m.Destination != dest || m.Type != "bind" {
		t.Fatalf("got mount %+v, want a bind at %s", m, dest)
	}
	b, err := os.ReadFile(m.Source)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "real-") || !strings.Contains(string(b), "claudeAiOauth") {
		t.Errorf("got the copy %s, want the file's shape with placeholders", b)
	}
	if fi, _ := os.Stat(m.Source); fi.Mode().Perm() != 0o600 {
		t.Errorf("got the copy's mode %v, want 0600", fi.Mode().Perm())
	}
	if len(spec.Gateway.Logins) != 1 || spec.Gateway.Logins[0].Agent() != "claude" {
		t.Errorf("got the gateway's logins %v, want the claude login", spec.Gateway.Logins)
	}
	remove()
	if _, err := os.Stat(m.Source); !os.IsNotExist(err) {
		t.Errorf("the copy is still there after remove: %v", err)
	}
}

// TestKeepLoginOverlay: with the home's overlay, the copy is written in
// it (the agent may replace it by a rename), the user's, 0600, and the
// file below it the host has is left as it was.
func TestKeepLoginOverlay(t *testing.T) {
	home, merged := t.TempDir(), t.TempDir()
	real := `{"claudeAiOauth":{"accessToken":"real-access","refreshToken":"real-refresh","expiresAt":1,"scopes":[],"subscriptionType":"pro"}}`
	for _, d := range []string{home, merged} {
		os.MkdirAll(filepath.Join(d, ".claude"), 0o700)
		os.WriteFile(filepath.Join(d, ".claude/.credentials.json"), []byte(real), 0o600)
	}
	dest := filepath.Join(home, ".claude/.credentials.json")
	p := &prepared{user: User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}, layout: rootfs.Layout{Masked: []string{dest}}}
	spec := &Spec{RootFS: RootFS{Agent: "claude", Login: "claude"}}
	if _, err := keepLogin(spec, p, rootfs.HomeView{Dir: home, Source: merged, Mode: rootfs.HomeOverlay}, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if len(p.layout.Masked) != 0 || len(p.layout.Mounts) != 0 {
		t.Errorf("got masked %v and mounts %v, want the store unmasked and no mount", p.layout.Masked, p.layout.Mounts)
	}
	b, _ := os.ReadFile(filepath.Join(merged, ".claude/.credentials.json"))
	if strings.Contains(string(b), "real-") || !strings.Contains(string(b), "sbx-login-claude-refresh-") {
		t.Errorf("got the overlay's file %s, want the copy", b)
	}
	if b, _ := os.ReadFile(dest); string(b) != real {
		t.Errorf("got the host's file %s, want it as it was", b)
	}
}
