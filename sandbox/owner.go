package sandbox

// Process is the sandboxed process that owned a socket.
type Process struct {
	PID  int    // in the host's PID namespace
	Comm string // its command name (/proc/<pid>/comm): at most 15 bytes, set by the process itself
	Exe  string // its executable as the host sees the path, or "" when it cannot be read
}
