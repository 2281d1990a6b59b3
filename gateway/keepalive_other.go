//go:build !linux

package gateway

import "syscall"

// keepAliveInherited is Linux's alone: elsewhere Go sets the keep-alive of
// each connection the gateway accepts, with the same values.
const keepAliveInherited = false

// listenerKeepAlive is not called where keepAliveInherited is false.
func listenerKeepAlive(string, syscall.RawConn) error { return nil }
