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

// DefaultPath is the PATH a command gets unless its env sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ContainerSpec is what runs in a sandbox.
type ContainerSpec struct {
	// ID names the container; the sandbox id.
	ID string
	// NetnsPath is the network namespace to join, /var/run/netns/sbx-<id>.
	NetnsPath string
	// WaitNetns, when set, is called by a Create that joins NetnsPath by
	// path (Containerd's) after the container's record is made and before
	// its process, which joins the namespace, is: the namespace is being
	// made meanwhile. An error stops Create.
	WaitNetns func() error
	// RootFS is a directory used as / (read-only); ignored when Image is
	// set.
	RootFS string
	// Image, when set, is the name of an image already in the runtime's
	// store, containerd's sbx namespace or Docker's (as
	// Containerd.EnsureImage or Docker.EnsureImage returns it), whose
	// filesystem (a read-only view) and configuration the container
	// starts from.
	Image string
	// Args is the command and its arguments.
	Args []string
	// Env is KEY=VALUE pairs.
	Env []string
	// Cwd is the working directory; "" means /.
	Cwd string
	// UID and GID run the command. Nothing defaults them to root: 0 is
	// root only because the caller chose it (sbx run picks a user that is
	// not root unless asked).
	UID, GID uint32
	// KeepImageUser, with Image, keeps the user the image names when that
	// user is not root; UID and GID apply otherwise.
	KeepImageUser bool
	// CapAdd gives back capabilities of DroppedCapabilities (names like
	// CAP_CHOWN). A command that is not root gets them as ambient
	// capabilities; it has none otherwise.
	CapAdd []string
	// Limits bound the container's memory, CPU and processes.
	Limits Limits
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

// Limits bound a container's resources; a zero field means no limit.
// DefaultLimits are what sbx run applies unless told.
type Limits struct {
	// Memory is the most memory, in bytes, the container may use (page
	// cache and tmpfs included); it gets no swap beyond it.
	Memory int64
	// CPUs is how many CPUs' worth of time it may use, e.g. 1.5.
	CPUs float64
	// Pids is the most processes and threads it may have at once.
	Pids int64
}

// DefaultPidsLimit is the default Limits.Pids: a fork bomb inside stays
// inside (docs/runtimes.md).
const DefaultPidsLimit = 4096

// BaseCapabilities are the capabilities a sandbox's root keeps: none of
// them reaches beyond the container (signals to its own processes, ports
// below 1024 in its own namespace, chroot, dropping capabilities, audit
// messages).
var BaseCapabilities = []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETPCAP", "CAP_SYS_CHROOT"}

// DroppedCapabilities are the capabilities of a container runtime's
// default set that a sandbox does not get unless ContainerSpec.CapAdd
// names them: with them, a process that is root on the host could plant
// set-user-ID or file-capability binaries, make device nodes, or read and
// write any file it can see. CAP_NET_ADMIN is never given (docs/network.md).
var DroppedCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETUID",
}

// NobodyID is the user and group a command runs as when nothing better
// is known: not root, and owning nothing on the host.
const NobodyID = 65534

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
// gives them (docs/cli.md).
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
