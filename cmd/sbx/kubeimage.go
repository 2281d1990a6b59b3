package main

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox/kube"
)

// kubeImageOptions are the flags of sbx kube image.
type kubeImageOptions struct {
	out     string
	tag     string
	exe     string
	caCerts string
}

func newKubeImageCmd() *cobra.Command {
	var o kubeImageOptions
	cmd := &cobra.Command{
		Use:   "image -o FILE [--tag REF]",
		Short: "Write an image archive of sbx itself, for the cluster's gateway pods",
		Long: `Image writes FILE, an image archive of sbx itself (the format of docker save,
which docker load and ctr images import read), for the pods sbx kube run makes:
the gateway pod and the agent pod's init container and capture shim run it.

The image holds one layer: this sbx at /sbx (its entrypoint) and the host's
CA certificates at /etc/ssl/certs/ca-certificates.crt, with which the gateway
verifies upstreams; no shell, no libraries. It runs as uid 65532 unless a pod
says otherwise. sbx must be a static Linux executable for that: one built
with CGO_ENABLED=0 (or name one with --binary). The same sbx, certificates
and tag make the same image.

Load FILE on the nodes or push it to a registry the cluster pulls from, and
give its name to sbx kube run --gateway-image.`,
		Example: `  sbx kube image -o sbx.tar
  docker load -i sbx.tar && docker tag sbx:v1.2.3 registry.example.com/sbx:v1.2.3
  ctr -n k8s.io images import sbx.tar

  # for an arm64 cluster, from any machine
  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -o sbx-arm64 ./cmd/sbx
  sbx kube image --binary sbx-arm64 --tag registry.example.com/sbx:v1.2.3-arm64 -o sbx-arm64.tar`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.out == "" {
				return usageErrorf(cmd, "name the archive to write with -o FILE")
			}
			if o.tag == "" {
				bi, ok := debug.ReadBuildInfo()
				if !ok {
					bi = nil
				}
				o.tag = kube.ImageDefaultRef(resolveVersion(version, bi))
			}
			err := kube.WriteImageFile(o.out, kube.ImageOptions{Ref: o.tag, Exe: o.exe, CACerts: o.caCerts})
			if errors.Is(err, kube.ErrImageNoCACerts) {
				return &cliWorded{msg: strings.Replace(err.Error(), "or name a bundle", "or name a bundle with --ca-certs FILE", 1), err: err}
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s to %s\n", o.tag, o.out)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.out, "output", "o", "", "write the archive to `FILE` (required): replaced whole, mode 0644")
	fs.StringVar(&o.tag, "tag", "", "name the image `REF` (default sbx:<sbx's version>)")
	fs.StringVar(&o.exe, "binary", "", "put the sbx executable `FILE` in the image instead of this one: a static Linux sbx, for the cluster's architecture")
	fs.StringVar(&o.caCerts, "ca-certs", "", "put the CA certificates of `FILE` (PEM) in the image (default the host's bundle)")
	return cmd
}
