package ui

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// peerUID returns the uid of the process that owns the other end of a
// TCP connection to this host over loopback, whose ends are local (the
// view's) and remote: the kernel's table of TCP sockets
// (/proc/net/tcp, /proc/net/tcp6) holds the other end too, with its
// owner.
func peerUID(local, remote net.Addr) (uint32, error) {
	l, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return 0, fmt.Errorf("finding the user of the connection from %s: %w", remote, err)
	}
	r, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return 0, fmt.Errorf("finding the user of the connection from %s: %w", remote, err)
	}
	for _, table := range []struct {
		file string
		v6   bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}} {
		if !table.v6 && !(l.Addr().Unmap().Is4() && r.Addr().Unmap().Is4()) {
			continue
		}
		data, err := os.ReadFile(table.file)
		if errors.Is(err, fs.ErrNotExist) && table.v6 {
			continue // no IPv6
		}
		if err != nil {
			return 0, fmt.Errorf("finding the user of the connection from %s: %w", remote, err)
		}
		// The other end's socket: its local address is remote, its
		// remote address local.
		near, far := procAddr(r, table.v6), procAddr(l, table.v6)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 10 || f[1] != near || f[2] != far {
				continue
			}
			if f[9] == "0" {
				// No process holds that end (closed: TIME_WAIT, or
				// orphaned), and the kernel shows its uid as 0: whose
				// it was cannot be told.
				return 0, fmt.Errorf("finding the user of the connection from %s: its end is closed already", remote)
			}
			uid, err := strconv.ParseUint(f[7], 10, 32)
			if err != nil {
				return 0, fmt.Errorf("finding the user of the connection from %s: %s: uid %q: %w", remote, table.file, f[7], err)
			}
			return uint32(uid), nil
		}
	}
	return 0, fmt.Errorf("finding the user of the connection from %s: no socket of it on this host", remote)
}

// procAddr writes a as /proc/net/tcp (v6 false, an IPv4 address) or
// /proc/net/tcp6 does: the address's 32-bit words in the host's byte
// order, in hex, a colon and the port in hex.
func procAddr(a netip.AddrPort, v6 bool) string {
	var b []byte
	if v6 {
		a16 := a.Addr().As16()
		b = a16[:]
	} else {
		a4 := a.Addr().Unmap().As4()
		b = a4[:]
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.NativeEndian.Uint32(b[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", a.Port())
	return sb.String()
}
