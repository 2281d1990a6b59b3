package decisionlog

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lfOpenWithin runs OpenFileSink in a goroutine and fails the test when it
// has not returned in 5 seconds, so that an open that blocks (on a named
// pipe) fails the test instead of hanging it. It opens with Append: what
// is at path is checked, not whether it is empty.
func lfOpenWithin(t *testing.T, path string) (*FileSink, error) {
	t.Helper()
	type result struct {
		fs  *FileSink
		err error
	}
	done := make(chan result, 1)
	go func() { // ends when OpenFileSink returns
		fs, err := OpenFileSink(path, FileSinkOptions{Append: true})
		done <- result{fs, err}
	}()
	select {
	case r := <-done:
		return r.fs, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("OpenFileSink(%s) did not return in 5 seconds", path)
		return nil, nil
	}
}

// TestOpenFileSinkRefuses puts what a sandbox that can write the log's
// directory could put at the log's path, and checks that OpenFileSink
// refuses it quickly, saying what it found, and writes nothing anywhere.
func TestOpenFileSinkRefuses(t *testing.T) {
	const secret = "root:x:0:0:root:/root:/bin/sh\n"
	tests := []struct {
		name string
		// setup makes what is at path; outside is a directory the
		// sandbox cannot write, holding the host's files.
		setup    func(t *testing.T, path, outside string)
		root     bool        // setup needs root
		wantType os.FileMode // UnsafeLogFileError.Type
		wantUID  int
		wantLink uint64
	}{
		{
			name: "symbolic link to a host file",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, os.Symlink(filepath.Join(outside, "passwd"), path))
			},
			wantType: os.ModeSymlink,
		},
		{
			name: "dangling symbolic link",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, os.Symlink(filepath.Join(outside, "new"), path))
			},
			wantType: os.ModeSymlink,
		},
		{
			name: "named pipe",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, syscall.Mkfifo(path, 0o600))
			},
			wantType: os.ModeNamedPipe,
		},
		{
			name: "named pipe with a reader",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, syscall.Mkfifo(path, 0o600))
				r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
				lfMust(t, err)
				t.Cleanup(func() { r.Close() })
			},
			wantType: os.ModeNamedPipe,
		},
		{
			name: "socket",
			setup: func(t *testing.T, path, outside string) {
				ln, err := net.Listen("unix", path)
				lfMust(t, err)
				t.Cleanup(func() { ln.Close() })
			},
			wantType: os.ModeSocket,
		},
		{
			name: "directory",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, os.Mkdir(path, 0o700))
			},
			wantType: os.ModeDir,
		},
		{
			name: "hard link to a host file",
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, os.Link(filepath.Join(outside, "passwd"), path))
			},
			wantUID:  os.Geteuid(),
			wantLink: 2,
		},
		{
			name: "file of another user",
			root: true,
			setup: func(t *testing.T, path, outside string) {
				lfMust(t, os.WriteFile(path, nil, 0o600))
				lfMust(t, os.Chown(path, 65534, 65534))
			},
			wantUID:  65534,
			wantLink: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("needs root to give a file to another user")
			}
			outside := t.TempDir()
			host := filepath.Join(outside, "passwd")
			lfMust(t, os.WriteFile(host, []byte(secret), 0o644))
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			tt.setup(t, path, outside)

			fs, err := lfOpenWithin(t, path)
			var ue *UnsafeLogFileError
			switch {
			case err == nil:
				// Write, so that the checks below see what the
				// sandbox would have got.
				fs.WriteRecord(1, []byte(`{"planted":"line"}`+"\n"))
				fs.Close()
				t.Errorf("got nil error, want an *UnsafeLogFileError")
			case !errors.As(err, &ue):
				t.Errorf("got %v, want an *UnsafeLogFileError", err)
			case ue.Path != path || ue.Type != tt.wantType || ue.UID != tt.wantUID || ue.Links != tt.wantLink:
				t.Errorf("got path %s, type %v, uid %d, links %d; want %s, %v, %d, %d",
					ue.Path, ue.Type, ue.UID, ue.Links, path, tt.wantType, tt.wantUID, tt.wantLink)
			}
			if data, err := os.ReadFile(host); err != nil || string(data) != secret {
				t.Errorf("host file: got %q, %v, want it untouched", data, err)
			}
			if _, err := os.Lstat(filepath.Join(outside, "new")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("target of the dangling link: got %v, want it not created", err)
			}
		})
	}
}

// TestOpenFileSinkDevice checks that a device is refused, with /dev/null,
// which every Linux has and nobody minds being opened.
func TestOpenFileSinkDevice(t *testing.T) {
	fs, err := lfOpenWithin(t, "/dev/null")
	var ue *UnsafeLogFileError
	if !errors.As(err, &ue) || ue.Type != os.ModeDevice|os.ModeCharDevice {
		if err == nil {
			fs.Close()
		}
		t.Errorf("got %v, want an *UnsafeLogFileError for a character device", err)
	}
}

// TestFileSinkAppendsToExisting checks that a regular file of the
// process's own uid is appended to, keeping its content and its mode, and
// that the file is open in blocking mode, for appending, and closed on
// exec.
func TestFileSinkAppendsToExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	old := `{"old":true}` + "\n"
	lfMust(t, os.WriteFile(path, []byte(old), 0o640))
	lfMust(t, os.Chmod(path, 0o640))
	fs, err := lfOpenWithin(t, path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := fs.writer.f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl, fdFlags int
	var flErr, fdErr error
	// Control, unlike Fd, leaves the descriptor's mode alone.
	lfMust(t, rc.Control(func(fd uintptr) {
		fl, flErr = unix.FcntlInt(fd, unix.F_GETFL, 0)
		fdFlags, fdErr = unix.FcntlInt(fd, unix.F_GETFD, 0)
	}))
	lfMust(t, errors.Join(flErr, fdErr))
	if fl&unix.O_NONBLOCK != 0 || fl&unix.O_APPEND == 0 || fdFlags&unix.FD_CLOEXEC == 0 {
		t.Errorf("got file status flags %#o and descriptor flags %#x, want O_APPEND, FD_CLOEXEC and no O_NONBLOCK", fl, fdFlags)
	}
	lfMust(t, fs.WriteRecord(1, []byte(`{"seq":1}`+"\n")))
	lfMust(t, fs.Close())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), old+`{"seq":1}`+"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode(); got != 0o640 {
		t.Errorf("got mode %v, want %v", got, os.FileMode(0o640))
	}
}

func lfMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenFileSinkRefusesNonEmpty: a log file that holds something is
// refused, and left as it was, unless Append is set; an empty one, made
// beforehand, is written. (gateway.Start refuses it the same way:
// TestStartRefusesNonEmptyLog.)
func TestOpenFileSinkRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	old := `{"old":true}` + "\n"
	full, empty := filepath.Join(dir, "full.jsonl"), filepath.Join(dir, "empty.jsonl")
	lfMust(t, os.WriteFile(full, []byte(old), 0o600))
	lfMust(t, os.WriteFile(empty, nil, 0o600))

	fs, err := OpenFileSink(full, FileSinkOptions{})
	var ne *NonEmptyLogFileError
	if !errors.As(err, &ne) || ne.Path != full || ne.Size != int64(len(old)) {
		if err == nil {
			fs.Close()
		}
		t.Fatalf("OpenFileSink of a file of %d bytes: got %v, want a *NonEmptyLogFileError for %s, %d bytes", len(old), err, full, len(old))
	}
	for _, want := range []string{full, "another path for the log", "ask for this run's records to be added to it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if data, _ := os.ReadFile(full); string(data) != old {
		t.Errorf("the refused file holds %q, want %q as before", data, old)
	}

	for _, tc := range []struct {
		path string
		o    FileSinkOptions
		want string
	}{
		{empty, FileSinkOptions{}, ""},
		{full, FileSinkOptions{Append: true}, old},
	} {
		fs, err := OpenFileSink(tc.path, tc.o)
		if err != nil {
			t.Fatalf("OpenFileSink(%s, %+v): %v", tc.path, tc.o, err)
		}
		lfMust(t, fs.WriteRecord(1, []byte(`{"seq":1}`+"\n")))
		lfMust(t, fs.Close())
		if data, _ := os.ReadFile(tc.path); string(data) != tc.want+`{"seq":1}`+"\n" {
			t.Errorf("%s with %+v holds %q, want %q", tc.path, tc.o, data, tc.want+`{"seq":1}`+"\n")
		}
	}
}
