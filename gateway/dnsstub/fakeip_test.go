package dnsstub

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

func TestFakeIPsFillTheRangeAndStop(t *testing.T) {
	f := NewFakeIPs(MaxFakeIPs)
	var last netip.Addr
	for i := range MaxFakeIPs {
		ip, err := f.Assign(fmt.Sprintf("n%d.test", i))
		if err != nil {
			t.Fatalf("name %d: %v", i, err)
		}
		if i == 0 && ip != netip.MustParseAddr("198.18.0.1") {
			t.Fatalf("first address %s, want 198.18.0.1", ip)
		}
		if i > 0 && ip != last.Next() {
			t.Fatalf("name %d got %s after %s, want the next address", i, ip, last)
		}
		last = ip
	}
	if last != netip.MustParseAddr("198.19.255.254") {
		t.Errorf("last address %s, want 198.19.255.254", last)
	}
	if ip, err := f.Assign("one-more.test"); !errors.Is(err, ErrFakeIPsExhausted) {
		t.Errorf("a name past the range got %s, %v; want ErrFakeIPsExhausted", ip, err)
	}
	if ip, err := f.Assign("n7.test"); err != nil || ip != netip.MustParseAddr("198.18.0.8") {
		t.Errorf("a mapped name once the range is full: %s, %v; want 198.18.0.8", ip, err)
	}
	if n := f.Len(); n != MaxFakeIPs {
		t.Errorf("Len = %d, want %d", n, MaxFakeIPs)
	}
	tests := []struct {
		ip   string
		name string
	}{
		{"198.18.0.1", "n0.test"},
		{"::ffff:198.18.0.1", "n0.test"},
		{"198.19.255.254", fmt.Sprintf("n%d.test", MaxFakeIPs-1)},
		{"198.18.0.0", ""},
		{"198.19.255.255", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"0.0.0.0", ""},
		{"255.255.255.255", ""},
		{"2001:db8::1", ""},
	}
	for _, tt := range tests {
		name, ok := f.Name(netip.MustParseAddr(tt.ip))
		if name != tt.name || ok != (tt.name != "") {
			t.Errorf("Name(%s) = %q, %v; want %q", tt.ip, name, ok, tt.name)
		}
	}
	if _, ok := f.Name(netip.Addr{}); ok {
		t.Errorf("Name of the zero Addr found a name")
	}
}

func TestFakeIPsConcurrent(t *testing.T) {
	f := NewFakeIPs(MaxFakeIPs)
	const names, workers = 200, 8
	got := make([][]netip.Addr, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				n := (i + w*31) % names // every worker asks every name, in its own order
				ip, err := f.Assign(fmt.Sprintf("n%d.test", n))
				if err != nil {
					t.Error(err)
					return
				}
				if got[w] == nil {
					got[w] = make([]netip.Addr, names)
				}
				got[w][n] = ip
				if name, ok := f.Name(ip); !ok || name != fmt.Sprintf("n%d.test", n) {
					t.Errorf("Name(%s) = %q, %v right after it was given to n%d.test", ip, name, ok, n)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for n := range names {
		for w := range workers {
			if got[w][n] != got[0][n] {
				t.Fatalf("n%d.test got %s and %s", n, got[0][n], got[w][n])
			}
		}
		if other, dup := seen[got[0][n]]; dup {
			t.Fatalf("n%d.test and n%d.test both got %s", n, other, got[0][n])
		}
		seen[got[0][n]] = n
	}
	if f.Len() != names {
		t.Errorf("Len = %d, want %d", f.Len(), names)
	}
}
