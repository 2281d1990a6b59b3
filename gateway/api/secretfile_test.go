package api

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpenToOthers(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		want bool
	}{
		{0o600, false},
		{0o400, false},
		{0o640, true}, // a host's file readable by its group: refused
		{0o440, true},
		{0o604, true},
		{0o620, true},
		{0o602, true},
	} {
		p := filepath.Join(dir, "f")
		os.Remove(p)
		if err := os.WriteFile(p, []byte("x"), tc.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, tc.mode)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := OpenToOthers(fi); got != tc.want {
			t.Errorf("mode %#o: OpenToOthers = %v, want %v", tc.mode, got, tc.want)
		}
	}
}

// The Kubernetes shape, as the gateway pod sees its Secret: root's file,
// mode 0440, group the pod's fsGroup, read by a process of that group that
// is not root.
func TestOpenToOthersSecretMount(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give the file to another group")
	}
	const fsGroup = 65532
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("x"), 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, fsGroup); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		euid, egid int
		want       bool
	}{
		{"the pod's process", 65532, fsGroup, false},
		{"a process of another group", 65532, 1000, true},
		{"root", 0, fsGroup, true},
	} {
		if got := openToOthers(fi, tc.euid, tc.egid); got != tc.want {
			t.Errorf("%s: openToOthers = %v, want %v", tc.name, got, tc.want)
		}
	}
	os.Chmod(p, 0o460) // group-writable: never
	fi, _ = os.Stat(p)
	if !openToOthers(fi, 65532, fsGroup) {
		t.Error("a group-writable file was taken")
	}
	os.Chown(p, 1000, fsGroup) // not root's: never
	os.Chmod(p, 0o440)
	fi, _ = os.Stat(p)
	if !openToOthers(fi, 65532, fsGroup) {
		t.Error("a file of another user's was taken")
	}
}
