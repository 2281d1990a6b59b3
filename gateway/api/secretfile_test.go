package api

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpenToOthers(t *testing.T) {
	dir := t.TempDir()
	other := os.Getegid() + 4242
	for _, tc := range []struct {
		mode     os.FileMode
		otherGrp bool
		want     bool
	}{
		{0o600, false, false},
		{0o400, true, false},
		{0o440, false, false}, // Kubernetes' Secret for an fsGroup: the process's own group
		{0o640, false, false},
		{0o440, true, true}, // another group may read it
		{0o604, false, true},
		{0o620, false, true},
		{0o602, false, true},
	} {
		p := filepath.Join(dir, "f")
		os.Remove(p)
		if err := os.WriteFile(p, []byte("x"), tc.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, tc.mode)
		if tc.otherGrp {
			if os.Getuid() != 0 {
				continue // only root gives a file away
			}
			if err := os.Chown(p, -1, other); err != nil {
				t.Fatal(err)
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := OpenToOthers(fi); got != tc.want {
			t.Errorf("mode %#o, another group %v: OpenToOthers = %v, want %v", tc.mode, tc.otherGrp, got, tc.want)
		}
	}
}
