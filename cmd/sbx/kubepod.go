package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox/kube/podnet"
)

// newKubePodRulesCmd is sbx kube pod-rules, which sbx kube's agent pods
// run as their init container: it installs the pod's network rules.
func newKubePodRulesCmd() *cobra.Command {
	var gateway string
	var skip bool
	var wait, waitShim time.Duration
	cmd := &cobra.Command{
		Use:    "pod-rules --gateway IP",
		Short:  "Install an agent pod's network rules (the init container of sbx kube's agent pods)",
		Hidden: true,
		Long: `Pod-rules installs the network rules of an sbx kube agent pod, in its own
network namespace, and exits. It runs as the pod's init container, as root
with NET_ADMIN alone, before the agent starts.

The rules (nftables, tables "sbx-pod") send DNS to any address to the
gateway pod's DNS port and every other TCP connection to the capture shim on
127.0.0.1:15001, which hands it to the gateway with its destination; they
let the agent reach the gateway's proxy and DNS ports directly, let only the
shim's uid (15001) reach the gateway's capture port, and reject everything
else at once (a TCP reset, an ICMP error), IPv6 but loopback too. Nothing
comes in but loopback and the replies to the pod's own connections.
Installing again replaces them.

With --wait-shim it then waits, at most that long, until the capture shim
listens on 127.0.0.1:15001 in the pod, and fails if it does not. The shim
is a native sidecar that starts before this container, but the kubelet
counts it as started once its process runs, not once it listens: the
agent, which starts after this container, then finds it taking the
connections the rules redirect to it.

With --wait-gateway it then waits, at most that long, until the gateway's
proxy port takes a TCP connection through the rules, and fails if it does
not: the agent, which starts after this container, then finds its gateway
serving. sbx kube makes the agent pod as soon as the gateway pod has its
address, before the gateway is ready, and this wait keeps the agent from
starting before it.

--skip-for-test installs nothing: it is for sbx's own tests, which show that
the pod's NetworkPolicy alone confines it.`,
		Example: `  # In the agent pod's init container.
  sbx kube pod-rules --gateway 10.244.0.7 --wait-shim 2m --wait-gateway 2m`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules, err := installPodRules(cmd, gateway, skip, waitShim, wait)
			if err != nil {
				return err
			}
			if err := waitForShim(cmd.Context(), rules, waitShim); err != nil {
				return err
			}
			return waitForGateway(cmd.Context(), rules, wait)
		},
	}
	cmd.Flags().StringVar(&gateway, "gateway", "", "the gateway pod's `IP` address")
	cmd.Flags().DurationVar(&waitShim, "wait-shim", 0, "then wait at most `DURATION` until the capture shim listens in the pod, and fail if it does not (0: no wait)")
	cmd.Flags().DurationVar(&wait, "wait-gateway", 0, "then wait at most `DURATION` until the gateway's proxy port takes a connection, and fail if it does not (0: no wait)")
	cmd.Flags().BoolVar(&skip, "skip-for-test", false, "for sbx's own tests: install NO rules, leaving the pod to its NetworkPolicy alone")
	cmd.Flags().MarkHidden("skip-for-test")
	return cmd
}

// installPodRules checks pod-rules' flags and installs the rules for the
// gateway pod at gateway, unless skip (for sbx's own tests) says not to.
func installPodRules(cmd *cobra.Command, gateway string, skip bool, waitShim, wait time.Duration) (podnet.Rules, error) {
	if gateway == "" {
		return podnet.Rules{}, usageErrorf(cmd, "--gateway is missing; give the gateway pod's IP address, e.g. --gateway 10.244.0.7")
	}
	gw, err := netip.ParseAddr(gateway)
	if err != nil {
		return podnet.Rules{}, usageErrorf(cmd, "--gateway %q is not an IP address; give the gateway pod's IP address, e.g. --gateway 10.244.0.7", gateway)
	}
	for _, w := range []struct {
		flag string
		d    time.Duration
	}{{"wait-shim", waitShim}, {"wait-gateway", wait}} {
		if w.d < 0 {
			return podnet.Rules{}, usageErrorf(cmd, "--%s %v: want a duration of 0 (no wait) or more, e.g. --%s 2m", w.flag, w.d, w.flag)
		}
	}
	rules := podnet.DefaultRules(gw)
	if skip {
		fmt.Fprintf(cmd.ErrOrStderr(), "sbx kube pod-rules: WARNING: --skip-for-test: NO RULES INSTALLED in this pod; "+
			"it is confined by its NetworkPolicy alone. This switch is for sbx's own tests; never use it otherwise.\n")
		return rules, nil
	}
	if err := podnet.Install(rules); err != nil {
		if errors.Is(err, podnet.ErrInvalidRules) {
			return podnet.Rules{}, usageError(cmd, err)
		}
		return podnet.Rules{}, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sbx kube pod-rules: installed: %v\n", rules)
	return rules, nil
}

// waitForGateway waits at most wait (none when 0) until the gateway's
// proxy takes a connection, through the rules.
func waitForGateway(ctx context.Context, rules podnet.Rules, wait time.Duration) error {
	if wait == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := podnet.WaitGateway(ctx, netip.AddrPortFrom(rules.Gateway, rules.ProxyPort)); err != nil {
		return fmt.Errorf("waited %v: %w; the agent does not start without its gateway: the gateway pod's events and log say why it does not serve (kubectl describe pod, kubectl logs)", wait, err)
	}
	return nil
}

// waitForShim waits at most wait (none when 0) until the capture shim
// listens where rules redirect TCP, in this pod.
func waitForShim(ctx context.Context, rules podnet.Rules, wait time.Duration) error {
	if wait == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	shim := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), rules.ShimPort)
	if err := podnet.WaitShim(ctx, shim); err != nil {
		return fmt.Errorf("waited %v: %w; the agent does not start before its capture shim listens: the shim container's log and the pod's events say why (kubectl logs -c shim, kubectl describe pod)", wait, err)
	}
	return nil
}

// newKubeShimCmd is sbx kube shim, the capture shim of sbx kube's agent
// pods: a sidecar that hands the connections the pod's rules redirect to
// the gateway.
func newKubeShimCmd() *cobra.Command {
	var gateway, listen string
	cmd := &cobra.Command{
		Use:    "shim --gateway IP:PORT",
		Short:  "Hand an agent pod's captured connections to its gateway (a sidecar of sbx kube's agent pods)",
		Hidden: true,
		Long: `Shim is the capture shim of an sbx kube agent pod, run as a sidecar under
uid 15001 without capabilities. It accepts the TCP connections the pod's
rules (sbx kube pod-rules) redirect to it, reads where each was going,
connects to the gateway pod's capture port, says the destination there in
a PROXY protocol v1 header and relays the connection both ways. A
connection that was not redirected to it is closed.

It runs until stopped (SIGTERM), writing nothing but errors, to standard
error.`,
		Example: `  # In the agent pod's shim sidecar.
  sbx kube shim --gateway 10.244.0.7:15002`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if gateway == "" {
				return usageErrorf(cmd, "--gateway is missing; give the gateway pod's capture address, e.g. --gateway 10.244.0.7:%d", podnet.DefaultCapturePort)
			}
			gw, err := netip.ParseAddrPort(gateway)
			if err != nil || gw.Port() == 0 {
				return usageErrorf(cmd, "--gateway %q is not IP:PORT; give the gateway pod's capture address, e.g. --gateway 10.244.0.7:%d", gateway, podnet.DefaultCapturePort)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("capture shim: %w; is another shim running in this pod, or --listen wrong?", err)
			}
			return podnet.Shim(cmd.Context(), ln, gw)
		},
	}
	cmd.Flags().StringVar(&gateway, "gateway", "", "the gateway pod's capture `IP:PORT`")
	cmd.Flags().StringVar(&listen, "listen", fmt.Sprintf("127.0.0.1:%d", podnet.DefaultShimPort), "listen on `ADDR` (host:port), where the pod's rules redirect TCP")
	return cmd
}
