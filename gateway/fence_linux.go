package gateway

import (
	"fmt"
	"syscall"
)

// bindToDevice returns a listener's Control function that binds its
// socket to the network interface iface (SO_BINDTODEVICE): the kernel then
// delivers to it only connections (or, for the DNS stub's UDP socket,
// datagrams) that arrive through iface, and answers any other connection
// with a reset. It needs CAP_NET_RAW on kernels before 5.7.
func bindToDevice(iface string) (func(network, address string, c syscall.RawConn) error, error) {
	if len(iface) >= syscall.IFNAMSIZ {
		return nil, fmt.Errorf("interface name %q is longer than %d bytes", iface, syscall.IFNAMSIZ-1)
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, iface)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("binding a listener to interface %s: %w", iface, serr)
		}
		return nil
	}, nil
}
