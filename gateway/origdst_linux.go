package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST of linux/netfilter_ipv6/
// ip6_tables.h, which x/sys/unix does not name: the same number as
// SO_ORIGINAL_DST, at level SOL_IPV6.
const ip6tSOOriginalDst = 80

// OriginalDst returns where a redirected TCP connection was going before
// the netfilter rules of its network namespace redirected it (the
// SO_ORIGINAL_DST socket option, IPv4; IP6T_SO_ORIGINAL_DST for IPv6). The
// accepting socket must be in the namespace whose rules redirected it: the
// answer comes from that namespace's connection tracking. A connection that
// was not redirected has its own local address as the answer, or an error.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("original destination: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		var sa unix.RawSockaddrInet6 // large enough for either family
		size := uint32(unsafe.Sizeof(sa))
		level, opt := unix.SOL_IP, unix.SO_ORIGINAL_DST
		if la, ok := c.LocalAddr().(*net.TCPAddr); ok && la.IP.To4() == nil {
			level, opt = unix.SOL_IPV6, ip6tSOOriginalDst
		}
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt),
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
			return
		}
		switch sa.Family {
		case unix.AF_INET:
			sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
			port := uint16(sa4.Port>>8 | sa4.Port<<8)
			ap = netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
		case unix.AF_INET6:
			port := uint16(sa.Port>>8 | sa.Port<<8)
			ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
		default:
			serr = fmt.Errorf("address family %d", sa.Family)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return unmapAddrPort(ap), nil
}
