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

// LoginProblem says why a login (RootFS.Login) cannot be kept outside
// the sandbox.
type LoginProblem int

// The problems of a LoginError.
const (
	// LoginUnknownAgent is an agent whose login sbx does not keep.
	LoginUnknownAgent LoginProblem = iota + 1
	// LoginNotHostLayout is a root filesystem other than the host
	// layout, which alone shows the user's home.
	LoginNotHostLayout
	// LoginHomeRW is a home shown read-write, the credential file itself
	// with it.
	LoginHomeRW
	// LoginOtherAgent is a home that shows another agent's files
	// (RootFS.Agent, named in Other).
	LoginOtherAgent
	// LoginHomeHidden is a home that is not shown, where the agent would
	// find no file.
	LoginHomeHidden
	// LoginUnreadable is a credential file that cannot be read, or holds
	// no login (Err says why).
	LoginUnreadable
)

// A LoginError is a login (RootFS.Login) of Agent that cannot be kept
// outside the sandbox, and why.
type LoginError struct {
	Agent   string
	Problem LoginProblem
	Other   string // LoginOtherAgent's agent
	Err     error  // LoginUnreadable's reason
}

func (e *LoginError) Error() string {
	why := map[LoginProblem]string{
		LoginUnknownAgent:  "sbx keeps the logins of claude and codex only",
		LoginNotHostLayout: "the root filesystem is not the host layout, which alone shows the home the login is in",
		LoginHomeRW:        "the home is shown read-write, the credential file itself with it",
		LoginOtherAgent:    "the home shows agent " + e.Other + "'s files, not this agent's",
		LoginHomeHidden:    "the home is not shown, so the agent would find no credential file",
	}[e.Problem]
	if e.Problem == LoginUnreadable {
		why = strings.TrimPrefix(fmt.Sprint(e.Err), "login "+e.Agent+": ")
	}
	return "login " + e.Agent + ": " + why
}

func (e *LoginError) Unwrap() error { return e.Err }

// CheckLogin returns a *LoginError for a Login the root filesystem f
// cannot keep outside the sandbox; nil when it can, or there is none.
func (f RootFS) CheckLogin() error {
	name := f.Login
	problem := LoginProblem(0)
	switch {
	case name == "":
		return nil
	case login.File(name) == "":
		problem = LoginUnknownAgent
	case f.Dir != "" || f.Image != "":
		problem = LoginNotHostLayout
	case f.Home == rootfs.HomeRW:
		problem = LoginHomeRW
	case f.Agent != "" && f.Agent != name:
		return &LoginError{Agent: name, Problem: LoginOtherAgent, Other: f.Agent}
	case f.Agent == "" && (f.Home == "" || f.Home == rootfs.HomeEmpty):
		problem = LoginHomeHidden
	default:
		return nil
	}
	return &LoginError{Agent: name, Problem: problem}
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
		return nil, &LoginError{Agent: name, Problem: LoginUnreadable, Err: err}
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
	err = unix.Fchown(fd, uid, gid)
	if err == nil {
		err = unix.Fchmod(fd, 0o600)
	}
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
