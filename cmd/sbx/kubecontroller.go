package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox/kube"
)

func newKubeControllerCmd(kf *kubeFlags) *cobra.Command {
	c := &kube.Controller{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Watch the namespace's sandboxes: end those whose gateway is gone, renew CAs, remove leftovers",
		Long: `Controller watches the sandboxes of one namespace, for detached sandboxes
(sbx kube run -d) that no sbx process watches. It runs in the cluster as a
Deployment (docs/kubernetes.md gives the manifest and the Role it needs);
of several replicas one leads, elected with a Lease named
sbx-kube-controller, and only the leader acts. It:

- ends a sandbox whose gateway pod is gone (deleted, evicted, failed): it
  removes the agent pod, which is cut off and whose rules name an address
  the cluster may give another pod, and the sandbox's other objects;
- renews a sandbox's CA --renew-before its end: a new certificate of the
  same name and key, valid 7 days, in the sandbox's Secret (the gateway
  reads its CA file again within seconds of the kubelet updating it) and
  in its ConfigMap (the agent pod's trust bundle). A --renew-before of
  168h (the CA's 7 days) or more makes every CA due at once: each
  sandbox's CA is renewed once, when this controller first sees it
  running, and not again (a drill of renewal, to see it work);
- removes the objects of a sandbox that has no agent pod --grace after
  it was made: what an interrupted sbx kube run left, or a sandbox whose
  agent pod was removed by hand.

Each action is a line on standard output. Without a kubeconfig it uses the
pod's ServiceAccount and namespace.`,
		Example: `  sbx kube controller -n agents
  sbx kube controller --grace 15m --renew-before 24h
  sbx kube controller --renew-before 169h   # renew each sandbox's CA now, once`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.Grace <= 0 {
				return usageErrorf(cmd, "--grace %v: want a duration above 0, such as 10m", c.Grace)
			}
			if c.RenewBefore <= 0 {
				return usageErrorf(cmd, "--renew-before %v: want a duration above 0 and below the CA's 7 days, such as 48h (168h or more renews each CA once, at once)", c.RenewBefore)
			}
			cl, err := kf.connect()
			if err != nil {
				return err
			}
			c.Cluster, c.Out = cl, cmd.OutOrStdout()
			if c.Identity == "" {
				if c.Identity, err = os.Hostname(); err != nil {
					return fmt.Errorf("naming this controller in the Lease: %w; give --identity", err)
				}
			}
			c.RenewCA = renewCA
			err = c.Run(cmd.Context())
			if errors.Is(err, kube.ErrLeaseLost) {
				return fmt.Errorf("sbx kube controller: %w; exiting, so that the Deployment starts it again", err)
			}
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&c.Grace, "grace", kube.DefaultControllerGrace, "remove the objects of a sandbox that has no agent pod this `DURATION` after it was made")
	fs.DurationVar(&c.RenewBefore, "renew-before", kube.DefaultRenewBefore, "renew a sandbox's CA this `DURATION` before it expires (168h or more: once, at once)")
	fs.DurationVar(&c.Resync, "resync", kube.DefaultControllerResync, "judge every sandbox again this often (`DURATION`), besides at each change")
	fs.StringVar(&c.Identity, "identity", "", "this controller's `NAME` in the Lease, unique among its replicas (default the host name: the pod's name)")
	return cmd
}

// renewCA is the controller's renewal of a sandbox's CA: the gateway's
// CA.Renew, valid for MaxCAValidity.
func renewCA(caPEM []byte) (certPEM, newCAPEM []byte, err error) {
	ca, err := gateway.ParseCA(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("the Secret's CA: %w", err)
	}
	renewed, err := ca.Renew(gateway.MaxCAValidity)
	if err != nil {
		return nil, nil, err
	}
	newCAPEM, err = renewed.MarshalPEM()
	if err != nil {
		return nil, nil, err
	}
	return renewed.CertPEM(), newCAPEM, nil
}
