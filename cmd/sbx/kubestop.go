package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/sandbox/kube"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// kubeStopOptions are sbx kube stop's flags.
type kubeStopOptions struct {
	// recordLLM are --record-llm's HOST=SCRIPT values: where to write
	// what the sandbox's gateway pod recorded of HOST before it goes.
	recordLLM []string
	// discard is --discard-recordings: remove a sandbox whose gateway
	// pod holds recordings no --record-llm keeps.
	discard bool
}

// runKubeStop removes the sandboxes args name, together (one listing
// finds them all, and one Delete removes them rather than one after
// another), each once what its gateway pod recorded is kept or may go.
// A sandbox that cannot be found or whose recording is not kept stays,
// and the others are removed.
func runKubeStop(cmd *cobra.Command, kf *kubeFlags, o *kubeStopOptions, args []string) error {
	if len(o.recordLLM) > 0 && len(args) > 1 {
		return usageErrorf(cmd, "--record-llm writes one sandbox's recordings: stop the sandbox that records with its --record-llm on its own")
	}
	recs, err := parseRecordLLM(o.recordLLM, nil)
	if err != nil {
		return usageError(cmd, err)
	}
	c, err := kf.connect()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	all, err := c.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	var ids []string
	for _, ref := range args {
		sb, err := kube.FindIn(all, c.Namespace, ref)
		if err == nil && !slices.Contains(ids, sb.ID) {
			err = o.keepRecordings(ctx, cmd.ErrOrStderr(), c, sb, recs)
			if err == nil {
				ids = append(ids, sb.ID)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Delete(ctx, ids...); err != nil {
		return combine(append(errs, err)...)
	}
	for _, id := range ids {
		fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s removed\n", id)
	}
	return combine(errs...)
}

// keepRecordings keeps what the gateway pod of sb recorded (sbx kube run
// -d --record-llm) before sbx kube stop removes it: once the agent pod is
// stopped, so that it records nothing more, each host of recs is read
// through the management API and written to its file. A host the pod
// recorded exchanges with that recs do not name is an error, and the
// sandbox stays (its agent running, unless it recorded them while being
// stopped), unless --discard-recordings; so is a recording that cannot
// be read or written. A gateway pod that is gone or going took its
// recordings with it: that is said on stderr, and the sandbox may go.
func (o *kubeStopOptions) keepRecordings(ctx context.Context, stderr io.Writer, c *kube.Cluster, sb kube.Sandbox, recs []run.Recording) error {
	// The pod's command is anyone's who may change pods in the
	// namespace: its hosts are printed as hostile text.
	hosts := printable(strings.Join(sb.Records, ", "))
	for _, r := range recs {
		if !slices.Contains(sb.Records, r.Host) {
			return fmt.Errorf("--record-llm %s=%s: sandbox %s does not record %s (it records %s); the sandbox was not removed", r.Host, r.Path, sb.ID, r.Host, orDash(hosts))
		}
	}
	if len(sb.Records) == 0 || o.discard && len(recs) == 0 {
		return nil
	}
	if sb.Gateway != string(corev1.PodRunning) || sb.GatewayDeleting {
		state := "gone"
		switch {
		case sb.GatewayDeleting:
			state = "being deleted"
		case sb.Gateway != "":
			state = strings.ToLower(printable(sb.Gateway))
		}
		fmt.Fprintf(stderr, "sbx kube: sandbox %s recorded %s, but its gateway pod is %s: the recordings went with it\n", sb.ID, hosts, state)
		return nil
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cl, err := recordingsClient(fctx, c, sb.ID)
	if err != nil {
		return fmt.Errorf("sandbox %s records %s, and its gateway pod cannot be reached to read the recordings: %w; the sandbox was not removed (--discard-recordings removes it without them)", sb.ID, hosts, err)
	}
	defer cl.Close()
	// Refused before the agent is stopped, when that can be seen.
	if err := o.checkKept(fctx, c.Namespace, cl, sb, recs, ""); err != nil {
		return err
	}
	if sb.Agent != "" {
		if err := c.StopAgent(fctx, sb.ID); err != nil {
			return fmt.Errorf("stopping sandbox %s's agent before reading its recordings: %w; the sandbox was not removed", sb.ID, err)
		}
	}
	if err := o.checkKept(fctx, c.Namespace, cl, sb, recs, "its agent pod was stopped, and "); err != nil {
		return err
	}
	if _, err := writeRecordings(fctx, stderr, cl, sb.Records, recs, true); err != nil {
		return fmt.Errorf("sandbox %s: %w; the sandbox was not removed", sb.ID, err)
	}
	return nil
}

// recordingsClient is a client of the management API of sandbox id's
// gateway pod, through a port-forward that lasts as long as ctx.
func recordingsClient(ctx context.Context, c *kube.Cluster, id string) (*api.Client, error) {
	tok, err := c.Token(ctx, id)
	if err != nil {
		return nil, err
	}
	addr, err := c.ForwardAPI(ctx, id)
	if err != nil {
		return nil, err
	}
	return api.NewClient(addr, tok)
}

// checkKept is an error when the gateway pod of sb, whose management API
// cl reaches, has recorded exchanges with a host that recs do not name,
// and --discard-recordings was not given: its sandbox stays, so that the
// recording does not go unsaid. stopped, if not empty, says what was done
// already.
func (o *kubeStopOptions) checkKept(ctx context.Context, ns string, cl *api.Client, sb kube.Sandbox, recs []run.Recording, stopped string) error {
	if o.discard {
		return nil
	}
	var unnamed []string
	for _, h := range sb.Records {
		if !slices.ContainsFunc(recs, func(r run.Recording) bool { return r.Host == h }) {
			unnamed = append(unnamed, h)
		}
	}
	unkept, err := writeRecordings(ctx, io.Discard, cl, unnamed, nil, false)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w; the sandbox was not removed", sb.ID, err)
	}
	if len(unkept) == 0 {
		return nil
	}
	keep := fmt.Sprintf("sbx kube stop -n %s --record-llm HOST=SCRIPT %s", ns, sb.ID)
	return fmt.Errorf("sandbox %s recorded exchanges with %s (sbx kube run --record-llm), and its gateway pod holds them alone: %skeep them with %s (one --record-llm for each host), or drop them with --discard-recordings; the sandbox was not removed", sb.ID, printable(strings.Join(unkept, ", ")), stopped, keep)
}

// writeRecordings reads what the gateway whose management API cl reaches
// recorded of each host of hosts and writes those recs name to their
// files, whole or not at all, as sbx run does when its sandbox ends,
// saying so on stderr; a failure leaves the other hosts' to be written.
// It returns the hosts with exchanges that recs do not name (none when
// discard: their recordings are not read).
func writeRecordings(ctx context.Context, stderr io.Writer, cl *api.Client, hosts []string, recs []run.Recording, discard bool) (unkept []string, err error) {
	var errs []error
	for _, host := range hosts {
		i := slices.IndexFunc(recs, func(r run.Recording) bool { return r.Host == host })
		if i < 0 && discard {
			continue
		}
		got, err := cl.MockRecording(ctx, host)
		switch {
		case i < 0 && err != nil:
			errs = append(errs, fmt.Errorf("reading the recording of %s: %w", printable(host), err))
		case i < 0:
			if got.Exchanges > 0 {
				unkept = append(unkept, host)
			}
		default:
			if err == nil {
				err = run.WriteFile(recs[i].Path, []byte(got.Script))
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("--record-llm %s=%s: %w", recs[i].Host, recs[i].Path, err))
				continue
			}
			fmt.Fprintf(stderr, "sbx kube: %s\n", recordedNote(run.Recorded{Host: host, Path: recs[i].Path, Exchanges: got.Exchanges}))
		}
	}
	return unkept, combine(errs...)
}

// recordingNote says, for a sandbox sbx kube leaves running (run -d,
// manifest), how to keep what its gateway pod records of each host of
// --record-llm: nothing writes SCRIPT until sbx kube stop is told to.
// ns is the sandbox's namespace ("" for the kubeconfig's).
func (o *kubeRunOptions) recordingNote(w io.Writer, ns, id string) {
	recs, err := parseRecordLLM(o.recordLLM, nil)
	if err != nil {
		return // check refused it before
	}
	if ns != "" {
		ns = " -n " + ns
	}
	for _, r := range recs {
		path := r.Path
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		fmt.Fprintf(w, "sbx kube: sandbox %s records %s in its gateway pod: sbx kube stop%s --record-llm %s=%s %s writes the recording there as it removes the sandbox (sbx kube mock recording%s --sandbox %s --host %s reads it before then)\n",
			id, r.Host, ns, r.Host, path, id, ns, id, r.Host)
	}
}
