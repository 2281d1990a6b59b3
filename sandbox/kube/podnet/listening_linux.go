package podnet

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tcpListen is TCP_LISTEN, a socket's state in the kernel's socket
// diagnostics.
const tcpListen = 10

// listening says whether a TCP socket of the calling thread's network
// namespace listens on addr's port, bound to addr or to every address;
// it asks the kernel's socket diagnostics (sock_diag), which needs no
// privilege and opens no connection.
func listening(addr netip.AddrPort) (bool, error) {
	socks, err := netlink.SocketDiagTCP(unix.AF_INET)
	if err != nil {
		return false, err
	}
	for _, s := range socks {
		if s.State != tcpListen || s.ID.SourcePort != addr.Port() {
			continue
		}
		src, ok := netip.AddrFromSlice(s.ID.Source)
		if ok && (src.Unmap() == addr.Addr().Unmap() || src.Unmap().IsUnspecified()) {
			return true, nil
		}
	}
	return false, nil
}
