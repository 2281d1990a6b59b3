package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckCommand: a command that cannot start is found before the
// container starts, with the directory or file and the exit code a shell
// gives; what the layout cannot tell is left to the runtime.
func TestCheckCommand(t *testing.T) {
	const path = "/usr/bin:/bin"
	// The test's files belong to whoever runs it; other is a user that
	// owns none of them and is in none of their groups.
	me, myGroup, other := uint32(os.Getuid()), uint32(os.Getgid()), uint32(65534)
	if me == other {
		other = 65533
	}
	for _, tc := range []struct {
		name      string
		setup     func(t *testing.T, root string) // after a 0755 busybox-like tree
		uid       uint32
		gid       *uint32 // nil: the uid's number
		argv0     string
		cwd       string
		wantCode  int
		wantOp    string
		wantPath  string
		wantOwner bool // Source, Mode and Owner are set
	}{
		{name: "runs", uid: other, argv0: "sh"},
		{name: "by path", uid: other, argv0: "/bin/sh"},
		{name: "by path from a working directory", uid: other, argv0: "/bin/sh", cwd: "/work"},
		{name: "missing by path from a working directory", uid: other, argv0: "/bin/nosuch", cwd: "/work",
			wantCode: ExitNotFound, wantOp: "find", wantPath: "/bin/nosuch"},
		{name: "relative to the working directory", uid: other, argv0: "./tool", cwd: "/work"},
		{name: "root filesystem 0700", setup: chmod("", 0o700), uid: other, argv0: "sh",
			wantCode: ExitCannotExecute, wantOp: "enter", wantPath: "/", wantOwner: true},
		{name: "its owner may enter", setup: chmod("", 0o700), uid: me, argv0: "sh"},
		{name: "a directory on PATH 0700", setup: chmod("bin", 0o700), uid: other, argv0: "sh",
			wantCode: ExitCannotExecute, wantOp: "enter", wantPath: "/bin", wantOwner: true},
		{name: "not executable", setup: chmod("bin/busybox", 0o644), uid: other, argv0: "sh",
			wantCode: ExitCannotExecute, wantOp: "execute", wantPath: "/bin/sh", wantOwner: true},
		{name: "neither owner nor group", setup: chmod("bin/busybox", 0o750), uid: other, argv0: "sh",
			wantCode: ExitCannotExecute, wantOp: "execute", wantPath: "/bin/sh", wantOwner: true},
		{name: "its group may execute", setup: chmod("bin/busybox", 0o750), uid: other, gid: &myGroup, argv0: "sh"},
		{name: "not on PATH", uid: other, argv0: "nosuch", wantCode: ExitNotFound, wantOp: "find", wantPath: "nosuch"},
		{name: "no such path", uid: other, argv0: "/opt/nosuch", wantCode: ExitNotFound, wantOp: "find", wantPath: "/opt/nosuch"},
		{name: "working directory 0700", setup: chmod("work", 0o700), uid: other, argv0: "sh", cwd: "/work",
			wantCode: ExitCannotExecute, wantOp: "enter", wantPath: "/work", wantOwner: true},
		{name: "missing working directory is made by the runtime", uid: other, argv0: "sh", cwd: "/work/new"},
		// execvp goes on past a directory it may not enter.
		{name: "found further on PATH", setup: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o700)
			os.WriteFile(filepath.Join(root, "usr", "bin", "sh"), nil, 0o755)
		}, uid: other, argv0: "sh"},
		// An absolute link points into the root filesystem, not the host.
		{name: "absolute link stays inside", setup: func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, "bin", "sh"))
			os.Symlink("/bin/busybox", filepath.Join(root, "bin", "sh"))
			chmod("bin/busybox", 0o600)(t, root)
		}, uid: other, argv0: "sh", wantCode: ExitCannotExecute, wantOp: "execute", wantPath: "/bin/sh", wantOwner: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.Chmod(root, 0o755)
			for _, d := range []string{"bin", "work"} {
				os.MkdirAll(filepath.Join(root, d), 0o755)
			}
			os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("#!/bin/busybox\n"), 0o755)
			os.Symlink("busybox", filepath.Join(root, "bin", "sh"))
			os.WriteFile(filepath.Join(root, "work", "tool"), nil, 0o755)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			l, err := Dir(root)
			if err != nil {
				t.Fatal(err)
			}
			gid := tc.uid
			if tc.gid != nil {
				gid = *tc.gid
			}
			err = l.CheckCommand(tc.uid, gid, tc.cwd, tc.argv0, path)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("CheckCommand: %v, want nil", err)
				}
				return
			}
			var ae *AccessError
			if !errors.As(err, &ae) {
				t.Fatalf("CheckCommand: %v, want an *AccessError", err)
			}
			if ae.Code != tc.wantCode || ae.Op != tc.wantOp || ae.Path != tc.wantPath {
				t.Errorf("got code %d, %s %s; want %d, %s %s", ae.Code, ae.Op, ae.Path, tc.wantCode, tc.wantOp, tc.wantPath)
			}
			if tc.wantOwner && (ae.Source == "" || ae.Mode == 0 || ae.Owner != me) {
				t.Errorf("got source %q, mode %v, owner %d; want the host file's, owner %d", ae.Source, ae.Mode, ae.Owner, me)
			}
		})
	}
}

// TestCheckCommandHostLayout: in the host layout the check reads the
// host's directories through the layout's mounts, and passes what lies on
// a fresh tmpfs, which only the container will have.
func TestCheckCommandHostLayout(t *testing.T) {
	cwd := t.TempDir()
	os.Chmod(cwd, 0o755)
	l, err := Host(t.TempDir(), cwd, HostOptions{UID: 65534, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	const path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if err := l.CheckCommand(65534, 65534, cwd, "sh", path); err != nil {
		t.Errorf("sh: %v, want nil", err)
	}
	var ae *AccessError
	if err := l.CheckCommand(65534, 65534, cwd, "sbx-no-such-command", path); !errors.As(err, &ae) || ae.Code != ExitNotFound {
		t.Errorf("a command on no PATH directory: %v, want ExitNotFound", err)
	}
	for _, argv0 := range []string{"/tmp/made-inside", "/home/sbx/bin/tool", "/proc/self/exe"} {
		if err := l.CheckCommand(65534, 65534, cwd, argv0, path); err != nil {
			t.Errorf("%s: %v, want nil (only the container knows)", argv0, err)
		}
	}
}

// chmod returns a setup that sets the mode of rel below the root.
func chmod(rel string, mode os.FileMode) func(*testing.T, string) {
	return func(t *testing.T, root string) {
		if err := os.Chmod(filepath.Join(root, rel), mode); err != nil {
			t.Fatal(err)
		}
	}
}
