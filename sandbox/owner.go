package sandbox

import "errors"

// Process is the sandboxed process that owned a socket.
type Process struct {
	PID  int    // in the host's PID namespace
	Comm string // its program's name: argv[0]'s base name when that names Exe's file, else Exe's base name; never a title the process gave itself
	Exe  string // its executable (/proc/<pid>/exe, as the kernel ran it), or "" when it cannot be read
}

// Why Owners.Lookup names no process. Their messages are what a decision
// record of sbx run says in process_unknown (docs/decision-log.md), so
// they are short sentences, and stay as they are.
var (
	// ErrNoSocket: no socket in the namespace has the addresses, most
	// often because its process closed it or ended before the lookup (a
	// process that sends one datagram and exits).
	ErrNoSocket = errors.New("no socket has these addresses any more: its process closed it or ended")
	// ErrNoHolder: the socket is there, but no process in the namespace
	// holds it: its process has closed its descriptors as it ends, and
	// the kernel has not yet freed the socket (seen for a process that
	// sent one datagram and exited), or only a process outside the
	// namespace holds it.
	ErrNoHolder = errors.New("no process in the sandbox holds the socket: its process is ending, or one outside the sandbox holds it")
	// ErrSharedSocket: several processes in the namespace hold the socket
	// (a child forked with its parent's socket, or a socket passed), so
	// which of them sent on it cannot be told.
	ErrSharedSocket = errors.New("several processes in the sandbox hold the socket")
	// ErrProcessEnded: the one process holding the socket ended while it
	// was looked up.
	ErrProcessEnded = errors.New("the process that held the socket ended as it was looked up")
)
