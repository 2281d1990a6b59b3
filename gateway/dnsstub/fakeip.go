package dnsstub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// fakeIPBase is 198.18.0.0, the first address of FakeIPRange, as a number.
const fakeIPBase = 198<<24 | 18<<16

// MaxFakeIPs is how many names a FakeIPs can hold: every address
// of 198.18.0.0/15 but its first and its last, 198.18.0.0 and
// 198.19.255.255, which some software takes for a network and a broadcast
// address.
const MaxFakeIPs = 1<<17 - 2

// FakeIPRange returns 198.18.0.0/15, the range the DNS stub's fake
// addresses come from (docs/capture.md). The gateway's address guard
// refuses the range (docs/gateway.md, the address guard): benchmarking
// addresses that no real host should have.
func FakeIPRange() netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, 0}), 15) }

// ErrFakeIPsExhausted is returned when every fake address is taken.
var ErrFakeIPsExhausted = errors.New("no fake address left")

// FakeIPs maps the names the DNS stub answered to fake addresses of
// FakeIPRange and back. A name gets the next free address, 198.18.0.1
// first, the first time it is answered, and keeps it for the life of the
// table (the gateway's); an address is never given to another name. The
// table is bounded: once MaxFakeIPs names hold an address, a new name gets
// none (ErrFakeIPsExhausted; the stub answers SERVFAIL) while the names
// already mapped keep theirs, so a sandbox that asks for ever new names
// cannot make the gateway forget or reuse an address. A full table takes
// about 40 MiB when every name has the longest length, 253 bytes, and
// 11 MiB with names of 20 bytes.
//
// A FakeIPs is safe for concurrent use. The stub writes it (Config.Names);
// the gateway reads a captured connection's name back from it (Name), and
// gets its stub's with Server.FakeIPs.
type FakeIPs struct {
	mu     sync.RWMutex
	byName map[string]uint32 // name -> offset from fakeIPBase
	names  []string          // names[i] has offset i+1
	limit  int
}

// NewFakeIPs returns an empty table of at most limit names (at most
// MaxFakeIPs).
func NewFakeIPs(limit int) *FakeIPs {
	return &FakeIPs{byName: map[string]uint32{}, limit: min(limit, MaxFakeIPs)}
}

// Name returns the normalized name whose fake address ip is, and whether
// it is one. IPv4-mapped IPv6 addresses are unmapped first.
func (f *FakeIPs) Name(ip netip.Addr) (string, bool) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return "", false
	}
	a := ip.As4()
	off := binary.BigEndian.Uint32(a[:]) - fakeIPBase // wraps for addresses below the range
	f.mu.RLock()
	defer f.mu.RUnlock()
	if off == 0 || off > uint32(len(f.names)) {
		return "", false
	}
	return f.names[off-1], true
}

// Addr returns the fake address of a normalized name, if it has one. It
// never assigns one.
func (f *FakeIPs) Addr(name string) (netip.Addr, bool) {
	f.mu.RLock()
	off, ok := f.byName[name]
	f.mu.RUnlock()
	if !ok {
		return netip.Addr{}, false
	}
	return fakeAddr(off), true
}

// Len returns how many names hold a fake address.
func (f *FakeIPs) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.names)
}

// Assign returns the fake address of a normalized name, giving it the next
// free one when it has none. It fails with ErrFakeIPsExhausted when none
// is free.
func (f *FakeIPs) Assign(name string) (netip.Addr, error) {
	if ip, ok := f.Addr(name); ok {
		return ip, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if off, ok := f.byName[name]; ok { // assigned meanwhile
		return fakeAddr(off), nil
	}
	if len(f.names) >= f.limit {
		return netip.Addr{}, fmt.Errorf("%w: all %d addresses of %s hold other names", ErrFakeIPsExhausted, f.limit, FakeIPRange())
	}
	f.names = append(f.names, name)
	off := uint32(len(f.names))
	f.byName[name] = off
	return fakeAddr(off), nil
}

// fakeAddr is the address at offset off of FakeIPRange.
func fakeAddr(off uint32) netip.Addr {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], fakeIPBase+off)
	return netip.AddrFrom4(a)
}
