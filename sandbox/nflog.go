package sandbox

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// Packet is one packet the namespace's rules refused and reported.
//
// It is read from the first bytes of the packet as the sandbox sent it:
// nothing in it is vouched for by the kernel but that the sandbox sent a
// packet with these headers.
type Packet struct {
	Proto    string         // "udp", "icmp", "icmpv6", "tcp", or "proto-<n>"
	Src      netip.AddrPort // sandbox-side source (port 0 when the protocol has none)
	Dst      netip.AddrPort // destination (port 0 for ICMP and protocols without ports)
	ICMPType int            // -1 unless ICMP
}

// protoNames holds Packet.Proto for every IP protocol number, made once
// so that a report costs no allocation for its name.
var protoNames = func() (names [256]string) {
	for i := range names {
		names[i] = "proto-" + strconv.Itoa(i)
	}
	names[1] = "icmp"
	names[6] = "tcp"
	names[17] = "udp"
	names[58] = "icmpv6"
	return names
}()

// parsePayload reads a Packet from the start of an IPv4 or IPv6 packet
// as NFLOG copies it (network header first). It reports false when b does
// not begin with an IP header. A transport header cut short by the copy
// range, and every fragment but the first, leave the ports 0 and
// ICMPType -1: what is not in b is not made up.
func parsePayload(b []byte) (Packet, bool) {
	if len(b) < 1 {
		return Packet{}, false
	}
	var (
		p        = Packet{ICMPType: -1}
		src, dst netip.Addr
		proto    byte
		l4       []byte // the transport header, nil when there is none to read
	)
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return Packet{}, false
		}
		proto = b[9]
		src = netip.AddrFrom4([4]byte(b[12:16]))
		dst = netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:8])&0x1fff == 0 { // the first fragment or none
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return Packet{}, false
		}
		src = netip.AddrFrom16([16]byte(b[8:24]))
		dst = netip.AddrFrom16([16]byte(b[24:40]))
		proto, l4 = skipIPv6Extensions(b[6], b[40:])
	default:
		return Packet{}, false
	}
	p.Proto = protoNames[proto]
	var sport, dport uint16
	switch proto {
	case 6, 17: // TCP and UDP begin alike: source port, destination port
		if len(l4) >= 4 {
			sport = binary.BigEndian.Uint16(l4[0:2])
			dport = binary.BigEndian.Uint16(l4[2:4])
		}
	case 1, 58:
		if len(l4) >= 1 {
			p.ICMPType = int(l4[0])
		}
	}
	p.Src = netip.AddrPortFrom(src, sport)
	p.Dst = netip.AddrPortFrom(dst, dport)
	return p, true
}

// skipIPv6Extensions follows an IPv6 packet's extension headers from
// next, the fixed header's Next Header, over rest, the bytes after the
// fixed header. It returns the upper-layer protocol and its header, or a
// nil header when it is out of reach: cut off, behind a fragment header
// of a later fragment, or behind too many extension headers (a sandbox
// can chain them to no end; the protocol then is the last one read).
func skipIPv6Extensions(next byte, rest []byte) (byte, []byte) {
	for range 8 {
		var n int
		switch next {
		case 0, 43, 60: // hop-by-hop options, routing, destination options
			if len(rest) < 2 {
				return next, nil
			}
			n = (int(rest[1]) + 1) * 8
		case 44: // fragment
			if len(rest) < 8 {
				return next, nil
			}
			if binary.BigEndian.Uint16(rest[2:4])>>3 != 0 {
				return rest[0], nil // a later fragment: no upper-layer header
			}
			n = 8
		case 51: // authentication header
			if len(rest) < 2 {
				return next, nil
			}
			n = (int(rest[1]) + 2) * 4
		default:
			return next, rest
		}
		if len(rest) < n {
			return rest[0], nil
		}
		next, rest = rest[0], rest[n:]
	}
	return next, nil
}
