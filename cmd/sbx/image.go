package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
)

func newImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage the images sandboxes run from (containerd's sbx namespace)",
		Example: `  sudo sbx image import busybox.tar
  docker save alpine:3.20 | sudo sbx image import -`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(newImageImportCmd())
	return cmd
}

// imageImportOptions are the flags of sbx image import.
type imageImportOptions struct {
	socket string
}

func newImageImportCmd() *cobra.Command {
	var o imageImportOptions
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Load a docker save or OCI image archive for sbx run --image",
		Long: `Import loads the images of FILE, a tar archive written by docker save (or
podman save) or an OCI image layout, into containerd's sbx namespace, where
sbx run --image finds them, unpacked for this machine's platform. FILE - reads
standard input. An image of the same name is replaced.

It prints the name of each image it imported, one a line: give one of them
to sbx run --image. An image the archive names only by a tag (as some OCI
layouts do) is named import-<date>:<tag>; one without a name at all
import-<date>@<digest>. Needs root (containerd).`,
		Example: `  docker save busybox:latest > busybox.tar
  sudo sbx image import busybox.tar
  sudo sbx run --pull never --image docker.io/library/busybox:latest -- sh

  # Straight from docker, through standard input.
  docker save alpine:3.20 | sudo sbx image import -`,
		Args: exactArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := importImage(cmd.Context(), o, args[0], cmd.InOrStdin())
			for _, n := range names {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&o.socket, "containerd", sandbox.DefaultContainerdSocket, "containerd's `SOCKET`")
	return cmd
}

// importImage imports the archive file ("-": stdin) and returns the
// names of the images it made.
func importImage(ctx context.Context, o imageImportOptions, file string, stdin io.Reader) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, needsRoot("sbx image import", "containerd")
	}
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	cd, err := sandbox.ConnectContainerd(ctx, o.socket)
	if err != nil {
		return nil, err
	}
	defer cd.Close()
	names, err := cd.ImportImage(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", displayName(file), err)
	}
	return names, nil
}

// displayName names file in messages.
func displayName(file string) string {
	if file == "-" {
		return "standard input"
	}
	return file
}

// imageEnsurer is a container runtime that makes sure an image is in its
// store, pulling it by policy: sandbox.Containerd and sandbox.Docker.
type imageEnsurer interface {
	EnsureImage(ctx context.Context, ref string, policy sandbox.PullPolicy, progress io.Writer) (string, error)
}

// imageProblem words err, the error of the runtime named rtName that
// could not make sbx run's --image ready, with what to do next, with that
// runtime's tools.
func imageProblem(err error, rtName string) error {
	// How to put an image there without sbx pulling it, and where the
	// proxy for pulls is set.
	load, proxy := "sbx image import FILE", "HTTPS_PROXY"
	if rtName == runtimeDocker {
		load, proxy = "docker load -i FILE", "the Docker daemon's proxy settings"
	}
	switch {
	case errors.Is(err, sandbox.ErrImageNotPresent):
		return fmt.Errorf("%w; --pull never does not fetch it: load it with %s (an archive of docker save), or let sbx pull it with --pull missing", err, load)
	case errors.Is(err, sandbox.ErrImageNotFound):
		return fmt.Errorf("%w\ncheck the name and tag (e.g. --image docker.io/library/alpine:3.20); an image of a private registry can be loaded with %s", err, load)
	case errors.Is(err, sandbox.ErrRegistryUnreachable):
		return fmt.Errorf("%w\ncheck the network, the registry's name and %s; or load the image with %s and run with --pull never", err, proxy, load)
	}
	return err
}
