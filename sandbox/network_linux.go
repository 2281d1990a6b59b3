package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
	"github.com/hashicorp/go-multierror"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// SetupNetwork makes the sandbox's network as p describes: the namespace,
// the veth pair with its addresses, the namespace's rules loaded before
// any link is up, the host's rules, and only then the links up. Without
// p.Capture the sandbox side gets no default route: every address but the
// gateway's is unreachable; with it, the default route is the host end,
// where nothing is forwarded. A failure undoes what was made.
func SetupNetwork(ctx context.Context, p NetPlan) (retErr error) {
	n := p.Names
	defer func() {
		if retErr != nil {
			if err := TeardownNetwork(context.WithoutCancel(ctx), n); err != nil {
				retErr = multierror.Append(retErr, fmt.Errorf("undoing the network: %w", err))
			}
		}
	}()
	ns, err := netns.GetFromName(n.Netns)
	if errors.Is(err, os.ErrNotExist) {
		ns, err = NewNamedNetns(n.Netns)
	}
	if err != nil {
		return fmt.Errorf("creating network namespace %s: %w", n.Netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", n.Netns, err)
	}
	defer h.Close()

	// The rules load while the links are made: they name the links, which
	// need not exist yet, and the links come up only after them.
	rules := make(chan error, 1)
	go func() {
		nsV4, nsV6 := p.NamespaceRules()
		hostV4, hostV6 := p.HostRules()
		rules <- all(
			func() error { return restoreIn(ctx, ns, n.Netns, "iptables-restore", nsV4) },
			func() error { return restoreIn(ctx, ns, n.Netns, "ip6tables-restore", nsV6) },
			func() error { return restore(ctx, "", "iptables-restore", hostV4) },
			func() error { return restore(ctx, "", "ip6tables-restore", hostV6) },
		)
	}()
	defer func() {
		if retErr != nil {
			<-rules // the undo must not race the loading
		}
	}()

	// The sandbox's end is made inside the namespace: moving a link there
	// would cost a network-wide synchronization (10-20 ms).
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.HostVeth}, PeerName: n.InnerVeth, PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s: %w", n.HostVeth, err)
	}
	// No IPv6 on the host end: no link-local address for the sandbox to
	// reach (the rules refuse IPv6 as well).
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.HostVeth+"/disable_ipv6", []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disabling IPv6 on %s: %w", n.HostVeth, err)
	}
	// Nor on the sandbox's end: the kernel would send neighbour and
	// multicast listener messages of its own there, which no process
	// sent (with capture, they would be reported as the sandbox's).
	if err := inNetns(ns, func() error {
		err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.InnerVeth+"/disable_ipv6", []byte("1"), 0o644)
		if errors.Is(err, os.ErrNotExist) {
			return nil // no IPv6 in this kernel
		}
		return err
	}); err != nil {
		return fmt.Errorf("disabling IPv6 on %s: %w", n.InnerVeth, err)
	}
	host, err := netlink.LinkByName(n.HostVeth)
	if err != nil {
		return fmt.Errorf("finding veth %s: %w", n.HostVeth, err)
	}
	bits := p.Subnet.Prefix.Bits()
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(p.Subnet.Host.AsSlice(), bits)}); err != nil {
		return fmt.Errorf("addressing %s: %w", n.HostVeth, err)
	}
	inner, err := h.LinkByName(n.InnerVeth)
	if err != nil {
		return fmt.Errorf("finding veth %s in %s: %w", n.InnerVeth, n.Netns, err)
	}
	if err := h.AddrAdd(inner, &netlink.Addr{IPNet: ipNet(p.Subnet.Sandbox.AsSlice(), bits)}); err != nil {
		return fmt.Errorf("addressing %s: %w", n.InnerVeth, err)
	}

	// Rules first, links after: the sandbox is never up without them.
	err = <-rules
	rules <- err // for the deferred wait
	if err != nil {
		return err
	}

	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo in %s: %w", n.Netns, err)
	}
	for _, up := range []func() error{
		func() error { return h.LinkSetUp(lo) },
		func() error { return h.LinkSetUp(inner) },
		func() error { return netlink.LinkSetUp(host) },
	} {
		if err := up(); err != nil {
			return fmt.Errorf("bringing up the sandbox's links: %w", err)
		}
	}
	// With capture, every address routes to the host end, so that a
	// connection anywhere becomes a packet the rules redirect or refuse
	// and report, instead of failing unseen with "network unreachable".
	// The host forwards none of them.
	if p.Capture != nil {
		route := &netlink.Route{LinkIndex: inner.Attrs().Index, Gw: p.Subnet.Host.AsSlice()}
		if err := h.RouteAdd(route); err != nil {
			return fmt.Errorf("routing the sandbox's traffic to %s: %w", n.HostVeth, err)
		}
	}
	return nil
}

// CreateNamespace creates the sandbox's network namespace, empty: no
// link but a down loopback, so nothing in it reaches anything. SetupNetwork
// fills it in; creating it first lets a container be created in it
// meanwhile (its command must not start before SetupNetwork returns).
func CreateNamespace(n Names) error {
	ns, err := NewNamedNetns(n.Netns)
	if err != nil {
		return fmt.Errorf("creating network namespace %s: %w", n.Netns, err)
	}
	return ns.Close()
}

// all runs fns at once and returns their errors joined.
func all(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return multierror.Append(nil, errs...).ErrorOrNil()
}

// NewNamedNetns creates /var/run/netns/name without leaving the calling
// thread in it: netns.NewNamed switches the thread, so the thread is locked
// before and switched back after. The caller closes the handle.
func NewNamedNetns(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		// The thread is in the wrong namespace: do not let it run
		// anything else (it dies with the lock held).
		panic(fmt.Sprintf("sandbox: cannot return to the host network namespace: %v", serr))
	}
	return ns, err
}

func ipNet(ip net.IP, bits int) *net.IPNet {
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, 32)}
}

// restore loads a rule set with tool (iptables-restore or
// ip6tables-restore), in network namespace netns, or on the host with
// --noflush when netns is "".
func restore(ctx context.Context, ns, tool, doc string) error {
	// -w: iptables-legacy serializes on a lock file, which rule sets
	// loading at once would otherwise fail on.
	args := []string{tool, "-w", "--noflush"}
	if ns != "" {
		args = []string{"ip", "netns", "exec", ns, tool, "-w"}
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(doc)
	if out, err := cmd.CombinedOutput(); err != nil {
		where := "on the host"
		if ns != "" {
			where = "in " + ns
		}
		return fmt.Errorf("loading rules %s with %s: %w: %s", where, tool, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// restoreIn runs tool in network namespace ns (called name in errors)
// with doc on its standard input. This saves an `ip netns exec` per rule
// set.
func restoreIn(ctx context.Context, ns netns.NsHandle, name, tool, doc string) error {
	return inNetns(ns, func() error {
		cmd := exec.CommandContext(ctx, tool, "-w")
		cmd.Stdin = strings.NewReader(doc)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("loading rules in %s with %s: %w: %s", name, tool, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// inNetns runs fn on a thread switched into network namespace ns: what
// fn opens under /proc/sys/net, and the children it starts, are that
// namespace's. The thread is locked first and switched back after; if it
// cannot switch back, it is left locked and dies with its goroutine
// rather than run anything else in the wrong namespace.
func inNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// TeardownNetwork removes what SetupNetwork made for the sandbox named n:
// the host's rules and chains (IPv4 and IPv6), the veth pair and the
// namespace. It runs every step even when one fails, treats what is
// already gone as done, and returns every failure. It is safe after a
// partial setup and safe to repeat.
func TeardownNetwork(ctx context.Context, n Names) error {
	var errs *multierror.Error
	// The host end of the veth goes down first: from then on nothing in the
	// namespace reaches the host (a veth drops what it would hand to a
	// down peer), so the veth and the host's rules can go at once. Should
	// it not go down, the veth is deleted before the rules.
	deleteVeth := func() error { return nil }
	link, err := netlink.LinkByName(n.HostVeth)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		// It may be there and up: its rules stay, for sbx gc.
		return fmt.Errorf("finding veth %s: %w; its host rules are kept until it is gone", n.HostVeth, err)
	default:
		deleteVeth = func() error {
			if err := netlink.LinkDel(link); err != nil {
				return fmt.Errorf("deleting veth %s: %w", n.HostVeth, err)
			}
			return nil
		}
		if err := netlink.LinkSetDown(link); err != nil {
			if err := deleteVeth(); err != nil {
				return fmt.Errorf("%w; its host rules are kept until it is gone", err)
			}
			deleteVeth = func() error { return nil }
		}
	}
	// One iptables-restore per protocol when the whole set is there; rule
	// by rule (slow: an iptables run each) when it is not.
	v4, v6 := HostTeardownRules(n)
	remove := func(proto iptables.Protocol, tool, doc string) func() error {
		return func() error {
			if restore(ctx, "", tool, doc) == nil {
				return nil
			}
			return removeHostRules(proto, n)
		}
	}
	if err := all(deleteVeth, remove(iptables.ProtocolIPv4, "iptables-restore", v4), remove(iptables.ProtocolIPv6, "ip6tables-restore", v6)); err != nil {
		errs = multierror.Append(errs, err)
	}
	if err := netns.DeleteNamed(n.Netns); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = multierror.Append(errs, fmt.Errorf("deleting network namespace %s: %w", n.Netns, err))
	}
	return errs.ErrorOrNil()
}

// removeHostRules deletes the host's rules that carry n's comment from
// INPUT and FORWARD and then n's chains.
func removeHostRules(proto iptables.Protocol, n Names) error {
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	var errs *multierror.Error
	for _, chain := range []string{"INPUT", "FORWARD"} {
		rules, err := ipt.List("filter", chain)
		if err != nil {
			errs = multierror.Append(errs, fmt.Errorf("listing %s: %w", chain, err))
			continue
		}
		for _, r := range rules {
			fields := strings.Fields(r)
			if len(fields) < 3 || fields[0] != "-A" || !hasComment(fields, n.Comment) {
				continue
			}
			for i, f := range fields {
				fields[i] = strings.Trim(f, `"`) // iptables -S quotes comments
			}
			if err := ipt.Delete("filter", chain, fields[2:]...); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("deleting %q: %w", r, err))
			}
		}
	}
	for _, chain := range []string{n.ChainIn, n.ChainGW, n.ChainFwd} {
		exists, err := ipt.ChainExists("filter", chain)
		if err != nil {
			errs = multierror.Append(errs, err)
			continue
		}
		if !exists {
			continue
		}
		if err := ipt.ClearAndDeleteChain("filter", chain); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("deleting chain %s: %w", chain, err))
		}
	}
	return errs.ErrorOrNil()
}

// hasComment reports whether an iptables -S rule carries the comment c.
func hasComment(fields []string, c string) bool {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "--comment" && strings.Trim(fields[i+1], `"`) == c {
			return true
		}
	}
	return false
}

// listenInNetns opens a TCP listener on addr inside the network namespace
// at nsPath: the socket belongs to that namespace for its life, while the
// process that accepts on it stays in the host's. Its connections have no
// TCP keep-alive (Go would set it with four system calls on each): both
// ends of each are in the namespace, over its loopback, so the kernel
// ends the connection whenever the process at the other end ends, and a
// probe could never find a peer gone; one that idles is the gateway's
// idle timeouts' to end.
func listenInNetns(nsPath, addr string) (net.Listener, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	var ln net.Listener
	err = inNetns(ns, func() error {
		var err error
		lc := net.ListenConfig{KeepAlive: -1}
		ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", addr, nsPath, err)
	}
	return ln, nil
}
