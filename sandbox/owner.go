package sandbox

// Process is the sandboxed process that owned a socket.
type Process struct {
	PID  int    // in the host's PID namespace
	Comm string // its program's name: argv[0]'s base name when that names Exe's file, else Exe's base name; never a title the process gave itself
	Exe  string // its executable (/proc/<pid>/exe, as the kernel ran it), or "" when it cannot be read
}
