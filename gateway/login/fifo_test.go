package login

import "golang.org/x/sys/unix"

// mkfifo makes a FIFO at path.
func mkfifo(path string) { unix.Mkfifo(path, 0o600) }
