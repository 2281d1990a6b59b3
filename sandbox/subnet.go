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

// A PoolExhaustedError is the error of a pool whose every /30 is in use;
// it wraps ErrPoolExhausted.
type PoolExhaustedError struct {
	// Pool is the pool that is full.
	Pool netip.Prefix
}

func (e *PoolExhaustedError) Error() string {
	return e.Say("free the leftovers of crashed runs", "choose a larger pool")
}

// Say words the error with its two fixes: collect, how to free the
// leftovers of crashed runs, and larger, how to choose a larger pool.
func (e *PoolExhaustedError) Say(collect, larger string) string {
	return fmt.Sprintf("every /30 of %s is in use (%s, or %s): %v", e.Pool, collect, larger, ErrPoolExhausted)
}

func (e *PoolExhaustedError) Unwrap() error { return ErrPoolExhausted }

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

// UnusedSubnet returns the first /30 of pool that overlaps none of used. The
// pool must be IPv4 and at most a /30. When every /30 is in use the error
// is a *PoolExhaustedError.
func UnusedSubnet(pool netip.Prefix, used []netip.Prefix) (Subnet, error) {
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
	return Subnet{}, &PoolExhaustedError{Pool: pool}
}
