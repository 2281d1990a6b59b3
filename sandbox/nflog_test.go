package sandbox

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ipv4Packet returns an IPv4 header (no options) for proto from src to
// dst, followed by l4.
func ipv4Packet(proto byte, src, dst string, l4 ...byte) []byte {
	b := make([]byte, 20, 20+len(l4))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:4], uint16(20+len(l4)))
	b[8] = 64
	b[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	return append(b, l4...)
}

// ipv6Packet returns an IPv6 header whose Next Header is next, from src
// to dst, followed by rest.
func ipv6Packet(next byte, src, dst string, rest ...byte) []byte {
	b := make([]byte, 40, 40+len(rest))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:6], uint16(len(rest)))
	b[6] = next
	b[7] = 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return append(b, rest...)
}

func ports(src, dst uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, src), dst)
}

func TestParsePayload(t *testing.T) {
	ap := netip.MustParseAddrPort
	fragment := ipv4Packet(17, "10.0.0.2", "8.8.8.8", ports(1234, 53)...)
	binary.BigEndian.PutUint16(fragment[6:8], 0x0010) // offset 16 (x 8 bytes)
	firstFragment := ipv4Packet(17, "10.0.0.2", "8.8.8.8", ports(1234, 53)...)
	binary.BigEndian.PutUint16(firstFragment[6:8], 0x2000) // more fragments, offset 0
	withOptions := ipv4Packet(17, "10.0.0.2", "8.8.8.8")
	withOptions[0] = 0x46 // one word of options
	withOptions = append(withOptions, 1, 1, 1, 0)
	withOptions = append(withOptions, ports(1234, 53)...)

	tests := []struct {
		name string
		in   []byte
		want Packet
		ok   bool
	}{
		{"udp", ipv4Packet(17, "10.0.0.2", "8.8.8.8", append(ports(40000, 53), 0, 8, 0, 0)...),
			Packet{"udp", ap("10.0.0.2:40000"), ap("8.8.8.8:53"), -1}, true},
		{"tcp", ipv4Packet(6, "10.0.0.2", "1.1.1.1", ports(40001, 443)...),
			Packet{"tcp", ap("10.0.0.2:40001"), ap("1.1.1.1:443"), -1}, true},
		{"icmp echo", ipv4Packet(1, "10.0.0.2", "1.1.1.1", 8, 0, 0, 0),
			Packet{"icmp", ap("10.0.0.2:0"), ap("1.1.1.1:0"), 8}, true},
		{"sctp", ipv4Packet(132, "10.0.0.2", "1.1.1.1", ports(5, 6)...),
			Packet{"proto-132", ap("10.0.0.2:0"), ap("1.1.1.1:0"), -1}, true},
		{"ip options", withOptions, Packet{"udp", ap("10.0.0.2:1234"), ap("8.8.8.8:53"), -1}, true},
		{"first fragment", firstFragment, Packet{"udp", ap("10.0.0.2:1234"), ap("8.8.8.8:53"), -1}, true},
		{"later fragment: no ports", fragment, Packet{"udp", ap("10.0.0.2:0"), ap("8.8.8.8:0"), -1}, true},
		{"udp header cut", ipv4Packet(17, "10.0.0.2", "8.8.8.8", 1, 2),
			Packet{"udp", ap("10.0.0.2:0"), ap("8.8.8.8:0"), -1}, true},
		{"icmp header cut", ipv4Packet(1, "10.0.0.2", "1.1.1.1"),
			Packet{"icmp", ap("10.0.0.2:0"), ap("1.1.1.1:0"), -1}, true},
		{"udp6", ipv6Packet(17, "fd00::2", "2001:db8::1", ports(40000, 123)...),
			Packet{"udp", ap("[fd00::2]:40000"), ap("[2001:db8::1]:123"), -1}, true},
		{"icmpv6 echo", ipv6Packet(58, "fd00::2", "2001:db8::1", 128, 0, 0, 0),
			Packet{"icmpv6", ap("[fd00::2]:0"), ap("[2001:db8::1]:0"), 128}, true},
		{"udp6 after hop-by-hop and destination options",
			ipv6Packet(0, "fd00::2", "2001:db8::1", append([]byte{60, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0}, ports(1, 2)...)...),
			Packet{"udp", ap("[fd00::2]:1"), ap("[2001:db8::1]:2"), -1}, true},
		{"udp6 first fragment",
			ipv6Packet(44, "fd00::2", "2001:db8::1", append([]byte{17, 0, 0, 1, 0, 0, 0, 1}, ports(1, 2)...)...),
			Packet{"udp", ap("[fd00::2]:1"), ap("[2001:db8::1]:2"), -1}, true},
		{"udp6 later fragment",
			ipv6Packet(44, "fd00::2", "2001:db8::1", append([]byte{17, 0, 0, 0x10, 0, 0, 0, 1}, ports(1, 2)...)...),
			Packet{"udp", ap("[fd00::2]:0"), ap("[2001:db8::1]:0"), -1}, true},
		{"ipv6 no next header", ipv6Packet(59, "fd00::2", "2001:db8::1"),
			Packet{"proto-59", ap("[fd00::2]:0"), ap("[2001:db8::1]:0"), -1}, true},
		{"ipv6 extension header cut", ipv6Packet(0, "fd00::2", "2001:db8::1", 17, 3, 0, 0),
			Packet{"udp", ap("[fd00::2]:0"), ap("[2001:db8::1]:0"), -1}, true},
		{"empty", nil, Packet{}, false},
		{"not ip", []byte{0x20, 1, 2, 3}, Packet{}, false},
		{"ipv4 header cut", ipv4Packet(17, "10.0.0.2", "8.8.8.8")[:19], Packet{}, false},
		{"ipv4 header length too short", append([]byte{0x44}, ipv4Packet(17, "10.0.0.2", "8.8.8.8")[1:]...), Packet{}, false},
		{"ipv6 header cut", ipv6Packet(17, "fd00::2", "2001:db8::1")[:39], Packet{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parsePayload(tt.in)
			if ok != tt.ok {
				t.Fatalf("parsePayload ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("parsePayload (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParsePayloadAllocs holds parsing to no allocation: a flood of
// reports must not become a flood of garbage.
func TestParsePayloadAllocs(t *testing.T) {
	v4 := ipv4Packet(17, "10.0.0.2", "8.8.8.8", ports(40000, 53)...)
	v6 := ipv6Packet(58, "fd00::2", "2001:db8::1", 128, 0, 0, 0)
	odd := ipv4Packet(200, "10.0.0.2", "8.8.8.8")
	if n := testing.AllocsPerRun(100, func() {
		parsePayload(v4)
		parsePayload(v6)
		parsePayload(odd)
	}); n != 0 {
		t.Errorf("parsePayload allocates %v times, want 0", n)
	}
}

// FuzzParsePayload feeds parsePayload what a sandbox could send: any
// bytes at all. It must not panic, and what it reports must be in the
// packet.
func FuzzParsePayload(f *testing.F) {
	f.Add(ipv4Packet(17, "10.0.0.2", "8.8.8.8", ports(40000, 53)...))
	f.Add(ipv4Packet(1, "10.0.0.2", "8.8.8.8", 8))
	f.Add(ipv6Packet(0, "fd00::2", "2001:db8::1", 44, 0, 0, 0, 0, 0, 0, 1, 17))
	f.Add(ipv6Packet(51, "fd00::2", "2001:db8::1", 60, 255))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := parsePayload(b)
		if !ok {
			return
		}
		if p.Proto == "" || !p.Src.Addr().IsValid() || !p.Dst.Addr().IsValid() {
			t.Errorf("parsePayload(%x) = %+v: a field is missing", b, p)
		}
		if p.ICMPType >= 0 && p.Proto != "icmp" && p.Proto != "icmpv6" {
			t.Errorf("parsePayload(%x) = %+v: an ICMP type outside ICMP", b, p)
		}
	})
}
