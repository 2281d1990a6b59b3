package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/rootfs"
)

// A LoginError is a login (RootFS.Login) that cannot be kept outside
// the sandbox as asked: Reason names the fix.
type LoginError struct {
	Agent  string
	Reason string
}

func (e *LoginError) Error() string {
	return fmt.Sprintf("--login %s: %s", e.Agent, e.Reason)
}

// CheckLogin returns a *LoginError for a Login the root filesystem f
// cannot keep outside the sandbox, naming the flags that can; nil when
// it can, or there is none.
func (f RootFS) CheckLogin() error {
	fsys, hostLayout := f, f.Dir == "" && f.Image == ""
	name := fsys.Login
	switch {
	case name == "":
		return nil
	case login.File(name) == "":
		return &LoginError{Agent: name, Reason: "want claude or codex"}
	case !hostLayout:
		return &LoginError{Agent: name, Reason: "the login is read from your home, which --rootfs host shows; use --rootfs host with --agent " + name}
	case fsys.Home == rootfs.HomeRW:
		return &LoginError{Agent: name, Reason: "--home rw shows the credential file itself to the command; use --agent " + name + " (or --home overlay)"}
	case fsys.Agent != "" && fsys.Agent != name:
		return &LoginError{Agent: name, Reason: "--agent " + fsys.Agent + " shows another agent's files; use --agent " + name}
	case fsys.Agent == "" && (fsys.Home == "" || fsys.Home == rootfs.HomeEmpty):
		return &LoginError{Agent: name, Reason: "the agent finds its login in your home, which --home empty hides; add --agent " + name}
	}
	return nil
}

// keepLogin reads the login RootFS.Login of the user's home shown by
// home, for the gateway (spec.Gateway.Logins), and shows the command its
// copy with placeholders at the credential file's path, in place of the
// store the layout masks: written into the home's overlay when it has one
// (so that the agent can replace it, as Claude Code does through a
// rename), else a file of the user's below dir (sbx's, root's only) bound
// there. It returns what removes the copy.
func keepLogin(spec *Spec, p *prepared, home rootfs.HomeView, dir string) (func(), error) {
	name := spec.RootFS.Login
	l, err := login.Read(name, home.Dir, int(p.user.UID))
	if err != nil {
		return nil, &LoginError{Agent: name, Reason: strings.TrimPrefix(err.Error(), "login "+name+": ")}
	}
	dest := filepath.Join(home.Dir, l.File())
	if home.Source != home.Dir && home.Source != "" {
		if err := writeInOverlay(home.Source, l.File(), l.Copy(), int(p.user.UID), int(p.user.GID)); err != nil {
			return nil, fmt.Errorf("writing the sandbox's copy of the %s login: %w", name, err)
		}
		p.layout.Masked = slices.DeleteFunc(p.layout.Masked, func(m string) bool { return m == dest })
		spec.Gateway.Logins = append(spec.Gateway.Logins, l)
		return func() {}, nil // the overlay goes with the sandbox
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, name+"-*.json")
	if err != nil {
		return nil, err
	}
	remove := func() { os.Remove(f.Name()) }
	_, err = f.Write(l.Copy())
	if err == nil {
		err = f.Chown(int(p.user.UID), int(p.user.GID))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		remove()
		return nil, fmt.Errorf("writing the sandbox's copy of the %s login: %w", name, err)
	}
	p.layout.Masked = slices.DeleteFunc(p.layout.Masked, func(m string) bool { return m == dest })
	p.layout.Mounts = append(p.layout.Mounts, rootfs.Mount{Destination: dest, Source: f.Name(), Type: "bind", Options: rootfs.ReadWriteBind})
	spec.Gateway.Logins = append(spec.Gateway.Logins, l)
	return remove, nil
}

// writeInOverlay writes b, a file of uid:gid, mode 0600, at rel (with
// slashes) below merged, the home's overlay: what was there (the host's
// file, seen through the overlay) is replaced in the overlay's upper
// layer only. No link below merged is followed.
func writeInOverlay(merged, rel string, b []byte, uid, gid int) error {
	dir, err := unix.Open(merged, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	parts := strings.Split(rel, "/")
	for _, part := range parts[:len(parts)-1] {
		next, err := unix.Openat(dir, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("%s in the home's overlay: %w", part, err)
		}
		dir = next
	}
	defer unix.Close(dir)
	name := parts[len(parts)-1]
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	err = errors.Join(unix.Fchown(fd, uid, gid), unix.Fchmod(fd, 0o600))
	if err == nil {
		_, err = f.Write(b)
	}
	return errors.Join(err, f.Close())
}
