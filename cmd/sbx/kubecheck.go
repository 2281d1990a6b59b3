package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

func newKubeCheckCmd(kf *kubeFlags) *cobra.Command {
	var o kubeRunOptions
	cmd := &cobra.Command{
		Use:   "check [--gateway-image REF --image IMAGE]",
		Short: "Say what this cluster and your rights allow, before anything is made",
		Long: `Check tells you, before sbx kube run makes anything, what stands in the way
and what to ask your cluster's administrators for:

  rights          each right sbx kube needs in the namespace, asked of the
                  API server (SelfSubjectAccessReview); the missing ones
                  are printed as a Role to bind to you
  nodes           whether you may list the nodes (optional: the default
                  --memory and --cpus come from the smallest node)

With --gateway-image (sbx's own image, as the cluster pulls it) also:

  admission       a sandbox's objects sent to the API server as a dry run,
                  admission included: a namespace whose Pod Security level
                  refuses the rules container's NET_ADMIN says so here
  network policy  whether NetworkPolicies are enforced: two short-lived
                  pods of sbx's image, a connection between them before
                  and after a policy that denies it (removed after)

It exits 0 when sbx kube run can work here, 1 when something is missing.`,
		Example: `  sbx kube check -n agents
  sbx kube check -n agents --gateway-image registry.example/sbx@sha256:... --image node:22`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.gatewayImage == "" && (o.image != "" || o.pull != "") {
				return usageErrorf(cmd, "--image and --pull are for the admission and network policy checks, which need --gateway-image (sbx's own image, as the cluster pulls it)")
			}
			if o.image == "" {
				o.image = o.gatewayImage
			}
			o.user, o.tmpSize = kube.DefaultAgentUID, formatBytes(kube.DefaultTmpSize)
			c, err := kf.connect()
			if err != nil {
				return err
			}
			return kubeCheck(cmd.Context(), cmd.OutOrStdout(), c, &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.gatewayImage, "gateway-image", "", "sbx's own image `REF` as the cluster pulls it: also check admission and NetworkPolicy enforcement with pods of it")
	fs.StringVar(&o.image, "image", "", "the agent's `IMAGE` for the admission check (default the --gateway-image)")
	fs.StringVar(&o.pull, "pull", "", "the probe pods' image pull `POLICY`: Always, IfNotPresent or Never (default: Kubernetes')")
	return cmd
}

// errCheckFailed is kubeCheck's error when something sbx kube run needs
// is missing; what is missing was printed.
var errCheckFailed = errors.New("sbx kube run cannot work here as things stand: see above")

func kubeCheck(ctx context.Context, w io.Writer, c *kube.Cluster, o *kubeRunOptions) error {
	ok := true
	fmt.Fprintf(w, "rights in namespace %s:\n", c.Namespace)
	got, err := c.CheckRights(ctx, kube.Each(kube.Rights), true)
	if err != nil {
		return err
	}
	var missing []kube.Right
	// One line per resource: its verbs, the missing ones named.
	for i := 0; i < len(got); {
		j := i
		var has, lacks []string
		for ; j < len(got) && got[j].Group == got[i].Group && got[j].Resource == got[i].Resource; j++ {
			if got[j].Allowed {
				has = append(has, got[j].Verb)
			} else {
				lacks = append(lacks, got[j].Verb)
				missing = append(missing, got[j].Right)
			}
		}
		what := got[i].Resource
		if got[i].Group != "" {
			what += " (" + got[i].Group + ")"
		}
		if len(lacks) == 0 {
			fmt.Fprintf(w, "  ok       %s: %s\n", what, strings.Join(has, ", "))
		} else {
			ok = false
			fmt.Fprintf(w, "  MISSING  %s: %s\n", what, strings.Join(lacks, ", "))
		}
		i = j
	}
	nodes, err := c.CheckRights(ctx, kube.Each([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}), false)
	if err != nil {
		return err
	}
	if nodes[0].Allowed {
		fmt.Fprintln(w, "nodes: ok, listed for the default --memory and --cpus")
	} else {
		fmt.Fprintln(w, "nodes: not listed (optional): --memory and --cpus default to this machine's figures; give them, or ask for list on nodes in the cluster")
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\nask your cluster's administrators to bind this Role to you in namespace %s (docs/kubernetes.md):\n\n%s\n", c.Namespace, kube.RoleYAML("sbx-kube-user", missing))
	}
	if o.gatewayImage == "" {
		fmt.Fprintln(w, "admission and network policy: not checked; give --gateway-image to check them")
	} else if ok {
		if !kubeCheckPods(ctx, w, c, o) {
			ok = false
		}
	} else {
		fmt.Fprintln(w, "admission and network policy: not checked without the rights above")
	}
	if !ok {
		return &exitError{code: exitFailure, err: errCheckFailed}
	}
	fmt.Fprintln(w, "sbx kube run can work here")
	return nil
}

// kubeCheckPods checks admission with a dry run of a sandbox and
// NetworkPolicy enforcement with probe pods, and reports whether both
// hold.
func kubeCheckPods(ctx context.Context, w io.Writer, c *kube.Cluster, o *kubeRunOptions) bool {
	pull := corev1.PullPolicy(o.pull)
	switch pull {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		fmt.Fprintf(w, "admission: --pull %q: want Always, IfNotPresent or Never\n", o.pull)
		return false
	}
	ok := true
	spec, err := kubeCheckSpec(ctx, c, o, pull)
	if err == nil {
		_, err = c.Create(ctx, spec, nil, true)
	}
	if err != nil {
		fmt.Fprintf(w, "admission: refused: %v\n", err)
		ok = false
	} else {
		fmt.Fprintln(w, "admission: ok, a sandbox's objects pass the API server's checks (dry run)")
	}
	fmt.Fprintln(w, "network policy: probing with two pods (up to a minute)...")
	e, err := c.ProbeNetworkPolicy(ctx, o.gatewayImage, pull)
	switch {
	case err != nil:
		fmt.Fprintf(w, "network policy: the probe failed: %v\n", err)
		return false
	case e == kube.Enforced:
		fmt.Fprintln(w, "network policy: enforced (a connection a policy denies is refused)")
	case e == kube.NotEnforced:
		fmt.Fprintln(w, "network policy: NOT enforced: a connection a policy denies still opens; the cluster's network plugin does not enforce NetworkPolicy, so a sandbox keeps only its in-pod rules; ask your administrators for a plugin that does (Calico, Cilium, kube-router, ...)")
		return false
	default:
		fmt.Fprintln(w, "network policy: unknown: one pod could not reach another even without a policy (the pod network, or another policy of the namespace, stops it)")
		return false
	}
	return ok
}

// kubeCheckSpec is the sandbox the admission check sends as a dry run:
// sbx kube run's with a policy that blocks everything.
func kubeCheckSpec(ctx context.Context, c *kube.Cluster, o *kubeRunOptions, pull corev1.PullPolicy) (kube.Spec, error) {
	id, err := sandbox.NewID()
	if err != nil {
		return kube.Spec{}, err
	}
	ca, err := gateway.NewCA(id, caLifetime)
	if err != nil {
		return kube.Spec{}, err
	}
	caPEM, err := ca.MarshalPEM()
	if err != nil {
		return kube.Spec{}, err
	}
	roots, err := kube.HostRoots()
	if err != nil {
		return kube.Spec{}, fmt.Errorf("the agent's bundle of trusted roots: %w; install ca-certificates", err)
	}
	s := kube.Spec{ID: id, Image: o.image, Command: []string{"true"}, GatewayImage: o.gatewayImage, PullPolicy: pull,
		Policy: []byte(`{"default":"block"}`), CACert: ca.CertPEM(), CA: caPEM, Roots: roots, Token: "check"}
	if err := o.setLimits(ctx, c, &s, io.Discard); err != nil {
		return kube.Spec{}, err
	}
	return s, nil
}

// newKubeNPProbeCmd is the command of sbx kube check's probe pods.
func newKubeNPProbeCmd() *cobra.Command {
	var until string
	cmd := &cobra.Command{
		Use:    "np-probe listen | dial ADDR --until open|refused",
		Short:  "Serve or try a TCP connection (the probe pods of sbx kube check)",
		Hidden: true,
		Example: `  # In sbx kube check's probe pods.
  sbx kube np-probe listen
  sbx kube np-probe dial 10.244.0.9:15080 --until refused`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case args[0] == "listen" && len(args) == 1:
				return npListen(cmd.Context())
			case args[0] == "dial" && len(args) == 2 && (until == "open" || until == "refused"):
				if npDial(cmd.Context(), cmd.ErrOrStderr(), args[1], until == "open") {
					return nil
				}
				return &exitError{code: exitFailure, err: fmt.Errorf("%s: refused", args[1])}
			}
			return usageErrorf(cmd, "want listen, or dial ADDR --until open|refused")
		},
	}
	cmd.Flags().StringVar(&until, "until", "open", "dial until the connection is `open` or `refused`")
	return cmd
}

// npListen accepts connections on kube.ProbePort and closes them.
func npListen(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", fmt.Sprintf(":%d", kube.ProbePort))
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		c.Close()
	}
}

// npDial dials addr every half second for 30 seconds until a dial's
// outcome is what open wants, and reports whether the last dial opened.
func npDial(ctx context.Context, w io.Writer, addr string, open bool) bool {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		fmt.Fprintf(w, "%s dial %s: %v\n", time.Now().Format(time.TimeOnly), addr, err)
		if (err == nil) == open || time.Now().After(deadline) || ctx.Err() != nil {
			return err == nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}
