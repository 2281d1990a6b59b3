package sandbox

import (
	"io"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ContainerdNamespace is the containerd namespace sbx's containers live in.
const ContainerdNamespace = "sbx"

// DefaultContainerdSocket is where containerd listens unless told.
const DefaultContainerdSocket = "/run/containerd/containerd.sock"

// defaultPath is the PATH a command gets unless its env sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ContainerSpec is what runs in a sandbox.
type ContainerSpec struct {
	// ID names the container; the sandbox id.
	ID string
	// NetnsPath is the network namespace to join, /var/run/netns/sbx-<id>.
	NetnsPath string
	// RootFS is a directory used as / (read-only); ignored when Image is
	// set.
	RootFS string
	// Image, when set, is the reference of an image already in
	// containerd's sbx namespace whose filesystem (a read-only view) and
	// configuration the container starts from.
	Image string
	// Args is the command and its arguments.
	Args []string
	// Env is KEY=VALUE pairs.
	Env []string
	// Cwd is the working directory; "" means /.
	Cwd string
	// UID and GID run the command; both 0 means root.
	UID, GID uint32
	// TTY gives the command a terminal.
	TTY bool
	// Mounts are added to the defaults (proc, dev, sys, ...).
	Mounts []specs.Mount
	// Masked are paths hidden from the command: files read as empty,
	// directories as empty.
	Masked []string
	// Init, when set, is a statically linked init on the host (tini):
	// mounted read-only at InitPath, it runs as PID 1 and runs Args as
	// its child, so that the command is not PID 1 (which ignores SIGTERM
	// without a handler, and reaps no orphans). Signals go to the
	// command's process group.
	Init string
}

// InitPath is where Init is mounted in the container: on the tmpfs that
// runc makes for /dev, so no file is made in a root filesystem of the
// user's.
const InitPath = "/dev/.sbx-init"

// initCandidates are where Debian's tini package puts its static build.
var initCandidates = []string{"/usr/bin/tini-static", "/usr/local/bin/tini-static"}

// FindInit returns the path of a static tini on the host, or "" when
// there is none.
func FindInit() string {
	for _, p := range initCandidates {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Stdio are a container's standard streams; nil ones are /dev/null.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// Exit codes of Run for a command that could not be started, as a shell
// gives them (DESIGN.md §7).
const (
	ExitCannotExecute = 126
	ExitNotFound      = 127
)

// StartError says that the command cannot be run: Code is the shell's
// exit code for it (ExitNotFound, ExitCannotExecute).
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }
