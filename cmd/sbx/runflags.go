package main

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/sandbox"
)

// check checks the values of sbx run's flags, reading no policy file or
// script and making nothing, before sbx run asks for root: a bad value is
// a usage error (exit 2) that names the flag and the fix, where sbx's own
// failures exit 125. What only the run can find out (a --log path inside
// the sandbox's mounts, an image that is not there) stays a failure.
func (o *runOptions) check(cmd *cobra.Command) error {
	if err := o.policy.Check(); err != nil {
		return err // a usage error already
	}
	if err := o.checkValues(cmd); err != nil {
		return usageError(cmd, err)
	}
	return nil
}

// checkValues returns the first bad flag value's error.
func (o *runOptions) checkValues(cmd *cobra.Command) error {
	if o.name != "" && !validName(o.name) {
		return fmt.Errorf("--name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", o.name)
	}
	if err := checkRuntimeFlag(o.runtime); err != nil {
		return err
	}
	if o.runtime == runtimeDocker {
		if err := dockerNeedsImage(cmd, *o); err != nil {
			return err
		}
	}
	if show, err := parseShow(o.show); err != nil {
		return err
	} else if o.quiet && cmd.Flags().Changed("show") && show != showNone {
		return fmt.Errorf("--quiet is --show none, and --show says %s; give one of them", o.show)
	}
	if o.image != "" && cmd.Flags().Changed("rootfs") {
		return errors.New("--image and --rootfs both say what / is; give one of them")
	}
	if _, err := sandbox.ParsePullPolicy(o.pull); err != nil {
		return fmt.Errorf("--pull %q: want never, missing or always", o.pull)
	}
	if _, _, err := o.limits(); err != nil {
		return err
	}
	if _, err := parseCaps(o.capAdd); err != nil {
		return err
	}
	if o.user != "" {
		if _, _, err := parseUser(o.user); err != nil {
			return err
		}
	}
	if o.workdir != "" && !path.IsAbs(o.workdir) {
		return fmt.Errorf("-w %q: want an absolute path inside the sandbox, e.g. -w /work", o.workdir)
	}
	for _, e := range o.env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("-e %q: want KEY=VAL, e.g. -e DEBUG=1", e)
		}
	}
	for _, v := range o.volumes {
		if _, err := parseVolume(v); err != nil {
			return err
		}
	}
	if _, err := netip.ParsePrefix(o.subnetPool); err != nil {
		return fmt.Errorf("--subnet-pool %q is not a CIDR; write e.g. 10.213.0.0/16", o.subnetPool)
	}
	return o.gatewayFlags.checkValues()
}

// checkRuntimeFlag checks a --runtime value: empty (the default), or one
// of the runtimes sbx knows.
func checkRuntimeFlag(name string) error {
	if name != "" && name != runtimeContainerd && name != runtimeDocker {
		return fmt.Errorf("--runtime %q: want %s or %s", name, runtimeContainerd, runtimeDocker)
	}
	return nil
}

// runError is the error sbx run returns for err, an error of runSandbox:
// a usage error keeps its exit code 2; any other is sbx's own failure,
// exit 125, which the command's exit codes cannot be mistaken for.
func runError(err error) error {
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitUsage {
		return err
	}
	return &exitError{code: exitSbxFailed, err: err}
}
