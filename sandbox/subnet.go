package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
)

// DefaultPool is the address pool sandboxes' /30 subnets come from.
var DefaultPool = netip.MustParsePrefix("10.213.0.0/16")

// ErrPoolExhausted is returned when every /30 of a pool is in use.
var ErrPoolExhausted = errors.New("subnet pool exhausted")

// Subnet is a sandbox's /30: the network, the host side (.1, where the
// gateway listens) and the sandbox side (.2).
type Subnet struct {
	Prefix  netip.Prefix
	Host    netip.Addr
	Sandbox netip.Addr
}

// SubnetAt returns the /30 that starts at network address a.
func SubnetAt(a netip.Addr) (Subnet, error) {
	p := netip.PrefixFrom(a, 30)
	if !a.Is4() || p.Masked().Addr() != a {
		return Subnet{}, fmt.Errorf("%s does not start an IPv4 /30", a)
	}
	return Subnet{Prefix: p, Host: a.Next(), Sandbox: a.Next().Next()}, nil
}

// FreeSubnet returns the first /30 of pool that overlaps none of used. The
// pool must be IPv4 and at most a /30.
func FreeSubnet(pool netip.Prefix, used []netip.Prefix) (Subnet, error) {
	if !pool.Addr().Is4() || pool.Bits() > 30 || pool.Masked() != pool {
		return Subnet{}, fmt.Errorf("subnet pool %s: want an IPv4 network of /30 or larger, such as 10.213.0.0/16", pool)
	}
	for a := pool.Addr(); pool.Contains(a); {
		cand := netip.PrefixFrom(a, 30)
		taken := false
		for _, u := range used {
			if u.Overlaps(cand) {
				taken = true
				break
			}
		}
		if !taken {
			return SubnetAt(a)
		}
		for range 4 {
			a = a.Next()
		}
	}
	return Subnet{}, fmt.Errorf("every /30 of %s is in use (run sbx gc to free leftovers of crashed runs, or give --subnet-pool a larger network): %w", pool, ErrPoolExhausted)
}
