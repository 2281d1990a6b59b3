package login

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrChanged is a credential file that changed on the host while the
// gateway refreshed (the host's agent refreshed, or its user logged in
// again): the gateway does not write over it.
var ErrChanged = errors.New("the file changed on the host during the refresh; it is kept as it is")

// hostFile is where a login read from is: a home and the uid and gid
// that own it.
type hostFile struct {
	home     string
	uid, gid int
}

// Read reads the login of agent (one of Agents) in home, the home
// directory of the user uid, as Parse does, and writes its refreshed
// tokens back there. Nothing below home is followed if it is a link: a
// link planted at the file or in its path is refused, as is a file or
// directory the user does not own, or a file that is not regular or
// is over 64 KiB.
func Read(name, home string, uid int) (*Login, error) {
	a := agents[name]
	if a == nil {
		return nil, fmt.Errorf("login %q: want claude or codex", name)
	}
	hf := &hostFile{home: home, uid: uid}
	f, _, err := hf.open(a)
	if err != nil {
		return nil, fmt.Errorf("login %s: reading ~/%s: %w", name, a.file, err)
	}
	defer f.close()
	l, err := Parse(name, f.data)
	if err != nil {
		return nil, err
	}
	hf.gid = f.gid
	l.host = hf
	return l, nil
}

// openFile is a credential file opened under its directory's lock
// (flock, exclusive: another sbx gateway refreshing the same login
// waits, then opens the file the first one wrote), its directory and its
// bytes.
type openFile struct {
	dir, fd  int
	name     string
	data     []byte
	mode     uint32
	uid, gid int
}

func (f *openFile) close() {
	unix.Close(f.fd)
	unix.Close(f.dir)
}

// open opens the agent's file below the home, locked, and parses it.
func (h *hostFile) open(a *agent) (*openFile, tokens, error) {
	dir, err := unix.Open(h.home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, tokens{}, &os.PathError{Op: "open", Path: h.home, Err: err}
	}
	parts := strings.Split(a.file, "/")
	path := h.home
	for i, p := range parts {
		if err := h.owned(dir, path); err != nil {
			unix.Close(dir)
			return nil, tokens{}, err
		}
		if i == len(parts)-1 {
			break
		}
		next, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil && isLink(dir, p) {
			err = unix.ELOOP // Linux says ENOTDIR for a link opened O_DIRECTORY|O_NOFOLLOW
		}
		unix.Close(dir)
		path = filepath.Join(path, p)
		if err != nil {
			return nil, tokens{}, &os.PathError{Op: "open", Path: path, Err: linkErr(err)}
		}
		dir = next
	}
	name := parts[len(parts)-1]
	path = filepath.Join(path, name)
	// The lock is the directory's, taken before the file is opened: a
	// write-back renames a new file over the old one, so a lock on the
	// file would let a second gateway, which opened the old file while
	// it waited, read the tokens the first one just spent.
	if err := unix.Flock(dir, unix.LOCK_EX); err != nil {
		unix.Close(dir)
		return nil, tokens{}, &os.PathError{Op: "lock", Path: filepath.Dir(path), Err: err}
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(dir)
		return nil, tokens{}, &os.PathError{Op: "open", Path: path, Err: linkErr(err)}
	}
	f := &openFile{dir: dir, fd: fd, name: name}
	t, err := f.load(h, path, a)
	if err != nil {
		f.close()
		return nil, tokens{}, err
	}
	return f, t, nil
}

// load checks, reads and parses the open file.
func (f *openFile) load(h *hostFile, path string, a *agent) (tokens, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return tokens{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return tokens{}, fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != h.uid:
		return tokens{}, fmt.Errorf("%s belongs to uid %d, not to the home's user %d", path, st.Uid, h.uid)
	case st.Size > maxFile:
		return tokens{}, fmt.Errorf("%s is over 64 KiB", path)
	}
	f.mode, f.uid, f.gid = uint32(st.Mode)&0o777, int(st.Uid), int(st.Gid)
	b, err := readFD(f.fd)
	if err != nil {
		return tokens{}, &os.PathError{Op: "read", Path: path, Err: err}
	}
	f.data = b
	t, err := a.parse(b)
	return t, err
}

// readFD reads fd, an open file, to its end, at most maxFile+1 bytes.
func readFD(fd int) ([]byte, error) {
	var b []byte
	buf := make([]byte, 8<<10)
	for len(b) <= maxFile {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			b = append(b, buf[:n]...)
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case n <= 0:
			return b, nil
		}
	}
	return b, nil
}

// owned checks that the directory dir (at path) belongs to the home's
// user.
func (h *hostFile) owned(dir int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if int(st.Uid) != h.uid {
		return fmt.Errorf("%s belongs to uid %d, not to the home's user %d", path, st.Uid, h.uid)
	}
	return nil
}

// isLink reports whether name in dir is a symbolic link.
func isLink(dir int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// linkErr names ELOOP, what O_NOFOLLOW gives for a link, as one.
func linkErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return errors.New("is a symbolic link, which sbx does not follow below the home")
	}
	return err
}

// writeBack writes fresh, the tokens of the refresh that used used, and
// the endpoint's answer ans into the file, as the agent would: the
// file's other fields as they are now, through a new file of the same
// mode and owner renamed over it. A file whose refresh token is no
// longer used's is ErrChanged, and kept.
func (f *openFile) writeBack(a *agent, used, fresh tokens, ans map[string]any, now time.Time) error {
	fd, err := unix.Openat(f.dir, f.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return linkErr(err)
	}
	b, err := readFD(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if cur, err := a.parse(b); err != nil || cur.refresh != used.refresh {
		return ErrChanged
	}
	out, err := a.updated(b, fresh, ans, now)
	if err != nil {
		return err
	}
	return f.replace(out)
}

// updated is the file b with fresh's tokens in it, and what the agent
// writes with them: Claude Code's expiresAt and scopes, Codex's
// last_refresh.
func (a *agent) updated(b []byte, fresh tokens, ans map[string]any, now time.Time) ([]byte, error) {
	var f map[string]any
	if err := unmarshalNumbers(b, &f); err != nil {
		return nil, err
	}
	switch a.name {
	case "claude":
		o, _ := f["claudeAiOauth"].(map[string]any)
		o["accessToken"], o["refreshToken"] = fresh.access, fresh.refresh
		if n, ok := ans["expires_in"].(json.Number); ok {
			if s, err := n.Int64(); err == nil {
				o["expiresAt"] = now.Add(time.Duration(s) * time.Second).UnixMilli()
			}
		}
		if s, ok := ans["scope"].(string); ok {
			o["scopes"] = strings.Fields(s)
		}
	case "codex":
		t, _ := f["tokens"].(map[string]any)
		t["access_token"], t["refresh_token"], t["id_token"] = fresh.access, fresh.refresh, fresh.id
		f["last_refresh"] = now.UTC().Format(time.RFC3339Nano)
	}
	return json.MarshalIndent(f, "", "  ")
}

// replace puts b in place of the file: a new file beside it, of its mode
// and owner, synced, renamed over it.
func (f *openFile) replace(b []byte) error {
	tmp := "." + f.name + ".sbx-" + fmt.Sprint(time.Now().UnixNano())
	fd, err := unix.Openat(f.dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, f.mode)
	if err != nil {
		return err
	}
	w := os.NewFile(uintptr(fd), tmp)
	err = unix.Fchown(fd, f.uid, f.gid)
	if err == nil {
		err = unix.Fchmod(fd, f.mode)
	}
	if err == nil {
		_, err = w.Write(b)
	}
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(f.dir, tmp, f.dir, f.name)
	}
	if err != nil {
		unix.Unlinkat(f.dir, tmp, 0)
	}
	return err
}
