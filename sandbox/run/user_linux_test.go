package run

import (
	"os"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/sandbox"
)

// TestChooseUser: the command is never root nor in root's group,
// whatever SUDO_UID, SUDO_GID and the working directory's owner say.
func TestChooseUser(t *testing.T) {
	nobody := uint32(sandbox.NobodyID)
	dir := t.TempDir() // root's when run as root, CI's case
	for _, tc := range []struct {
		sudoUID, sudoGID string
		host, image      bool
		uid, gid         uint32
		why              Why
	}{
		{"", "", true, false, nobody, nobody, UserNobody},
		{"0", "0", true, false, nobody, nobody, UserNobody}, // sudo from root
		{"1000", "1000", true, false, 1000, 1000, UserSudo},
		{"1000", "0", true, false, 1000, nobody, UserSudo},
		{"", "", false, true, nobody, nobody, UserNobody},
	} {
		t.Setenv("SUDO_UID", tc.sudoUID)
		t.Setenv("SUDO_GID", tc.sudoGID)
		if os.Geteuid() != 0 && tc.host && tc.sudoUID == "" {
			continue // the directory is the tester's own
		}
		u, err := ChooseUser(tc.host, tc.image, dir)
		if err != nil || u.UID != tc.uid || u.GID != tc.gid || u.Why != tc.why || u.KeepImage != (tc.image && tc.why == UserNobody) {
			t.Errorf("ChooseUser(sudo %q:%q, host %v, image %v) = %+v, %v; want %d:%d (%s)",
				tc.sudoUID, tc.sudoGID, tc.host, tc.image, u, err, tc.uid, tc.gid, tc.why)
		}
	}
	t.Setenv("SUDO_UID", "1000")
	t.Setenv("SUDO_GID", "")
	if u, err := ChooseUser(true, false, dir); err == nil || !strings.Contains(err.Error(), "SUDO_UID=1000 SUDO_GID=:") {
		t.Errorf("SUDO_GID unset: got %+v, %v; want an error naming both variables", u, err)
	}
	if os.Geteuid() == 0 {
		t.Setenv("SUDO_UID", "")
		for _, owner := range [][2]int{{1000, 1000}, {1000, 0}} {
			d := t.TempDir()
			os.Chown(d, owner[0], owner[1])
			want := uint32(owner[1])
			if want == 0 {
				want = nobody
			}
			if u, _ := ChooseUser(true, false, d); u.UID != 1000 || u.GID != want || u.Why != UserOwner {
				t.Errorf("working directory of %d:%d: %+v, want 1000:%d", owner[0], owner[1], u, want)
			}
		}
	}
}
