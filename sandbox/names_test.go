package sandbox

import (
	"errors"
	"net/netip"
	"testing"
)

func TestIDsAndNames(t *testing.T) {
	id, err := NewID()
	if err != nil || CheckID(id) != nil {
		t.Fatalf("NewID = %q, %v", id, err)
	}
	for _, bad := range []string{"", "1a2b3c4", "1a2b3c4d5", "1A2B3C4D", "1a2b3c4g", "../../x1"} {
		if err := CheckID(bad); !errors.Is(err, ErrInvalidID) {
			t.Errorf("CheckID(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
	n, err := NamesFor("1a2b3c4d")
	if err != nil {
		t.Fatal(err)
	}
	if n.Netns != "sbx-1a2b3c4d" || n.HostVeth != "sbxh1a2b3c4d" || n.InnerVeth != "sbxc1a2b3c4d" || n.Comment != "sbx:1a2b3c4d" {
		t.Errorf("NamesFor = %+v", n)
	}
	for _, ifname := range []string{n.HostVeth, n.InnerVeth} {
		if len(ifname) > 15 {
			t.Errorf("interface name %q is longer than 15 bytes", ifname)
		}
	}
	for _, chain := range []string{n.ChainIn, n.ChainGW, n.ChainFwd} {
		if len(chain) > 28 {
			t.Errorf("chain name %q is longer than iptables' 28 characters", chain)
		}
	}
}

func TestUnusedSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/28") // four /30s
	used := []netip.Prefix{netip.MustParsePrefix("10.213.0.0/30"), netip.MustParsePrefix("10.213.0.8/30")}
	s, err := UnusedSubnet(pool, used)
	if err != nil {
		t.Fatal(err)
	}
	if s.Prefix.String() != "10.213.0.4/30" || s.Host.String() != "10.213.0.5" || s.Sandbox.String() != "10.213.0.6" {
		t.Errorf("UnusedSubnet = %+v, want 10.213.0.4/30 with .5 and .6", s)
	}
	// A used network larger than a /30 blocks every /30 inside it.
	if _, err := UnusedSubnet(pool, []netip.Prefix{netip.MustParsePrefix("10.213.0.0/28")}); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("full pool: %v, want ErrPoolExhausted", err)
	}
	for _, bad := range []string{"10.213.0.0/31", "fd00::/64", "10.213.0.1/16"} {
		if _, err := UnusedSubnet(netip.MustParsePrefix(bad), nil); err == nil {
			t.Errorf("pool %s accepted", bad)
		}
	}
}
