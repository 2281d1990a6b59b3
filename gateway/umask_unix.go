//go:build unix

package gateway

import "syscall"

// umask sets the process's file mode creation mask and returns the old
// one, so that a unix socket is never created readable by others.
func umask(mask int) int { return syscall.Umask(mask) }
