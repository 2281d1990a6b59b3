package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// answerOptions are the flags of sbx approve and sbx deny.
type answerOptions struct {
	target          targetFlags
	session, always bool
}

// answerLong is the help of sbx approve and sbx deny; %s is the verb.
const answerLong = `%[1]s answers a question the gateway holds requests on: a request whose
verdict is ask (action ask, --default ask) waits until someone answers,
or until --ask-timeout, which blocks it. Requests to one host and port
wait on one question, named by its id (a1, a2, ...; sbx run's stderr and
sbx decisions --follow show it) or by HOST[:PORT].

Without --session or --always the answer is for the requests held now:
the next request asks again. --session also adds a rule for the host and
port to the sandbox's running policy (sbx policy show shows it);
--always also writes that rule to the run's --approvals file (else its
YAML --policy file), so that later runs are not asked.

Without an argument it lists the pending questions.`

// kubeAnswerLong is the help of sbx kube approve and deny; %s is the verb.
const kubeAnswerLong = `%[1]s answers a question the gateway pod of a sandbox on a cluster holds
requests on: a request whose verdict is ask (action ask, --default ask)
waits until someone answers, or until --ask-timeout, which blocks it.
Requests to one host and port wait on one question, named by its id (a1,
a2, ...; sbx kube decisions --follow shows it)
or by HOST[:PORT].

Without --session the answer is for the requests held now: the next
request asks again. --session also adds a rule for the host and port to
the sandbox's running policy (sbx kube policy show shows it). There is no
--always: the gateway pod keeps no file of approved rules; put the rules
you keep in the policy.

Without an argument it lists the pending questions.`

func newApproveCmd() *cobra.Command { return newAnswerCmd(true, nil) }
func newDenyCmd() *cobra.Command    { return newAnswerCmd(false, nil) }

// newAnswerCmd makes sbx approve (allow) or sbx deny, or, with kf, sbx
// kube approve or deny, which have no --always: a cluster's gateway pod
// keeps no approvals file.
func newAnswerCmd(allow bool, kf *kubeFlags) *cobra.Command {
	var o answerOptions
	o.target.kube = kf
	verb, word := "deny", "Deny"
	if allow {
		verb, word = "approve", "Approve"
	}
	cmd := &cobra.Command{
		Use:   verb + " --sandbox ID [--session|--always] [APPROVAL_ID|HOST[:PORT]]",
		Short: word + " a request the gateway holds for an answer (action ask)",
		Long:  fmt.Sprintf(answerLong, word),
		Example: fmt.Sprintf(`  sudo sbx %[1]s --sandbox agent a1
  sudo sbx %[1]s --sandbox agent --session pypi.org:443
  sudo sbx %[1]s --sandbox agent --always pypi.org
  sudo sbx %[1]s --sandbox agent`, verb),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.session && o.always {
				return usageErrorf(cmd, "give --session or --always, not both")
			}
			scope := api.ScopeOnce
			switch {
			case o.session:
				scope = api.ScopeSession
			case o.always:
				scope = api.ScopeAlways
			}
			c, err := o.target.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if len(args) == 0 {
				return listApprovals(cmd.Context(), cmd.OutOrStdout(), c)
			}
			return answerApproval(cmd.Context(), cmd.OutOrStdout(), c, args[0], allow, scope)
		},
	}
	o.target.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.session, "session", false, "also add a rule for the question's host and port, and its method and path, to the sandbox's running policy")
	if kf != nil {
		cmd.Use = verb + " --sandbox ID [--session] [APPROVAL_ID|HOST[:PORT]]"
		cmd.Long = fmt.Sprintf(kubeAnswerLong, word)
		cmd.Example = fmt.Sprintf(`  sbx kube %[1]s --sandbox agent a1
  sbx kube %[1]s --sandbox agent --session pypi.org:443
  sbx kube %[1]s --sandbox agent`, verb)
		return cmd
	}
	cmd.Flags().BoolVar(&o.always, "always", false, "also write that rule to the run's --approvals file (else its YAML --policy file)")
	return cmd
}

// listApprovals prints the pending questions, one a line.
func listApprovals(ctx context.Context, w io.Writer, c *api.Client) error {
	list, err := c.Approvals(ctx)
	if err != nil {
		return err
	}
	if len(list.Approvals) == 0 {
		_, err := fmt.Fprintln(w, "no pending questions")
		return err
	}
	for _, q := range list.Approvals {
		left := time.Until(q.Deadline).Round(time.Second)
		fmt.Fprintf(w, "%-5s %-40s %-8s %d waiting, %s left  (%s)\n", printable(q.ID), printable(approvalTarget(q)), printable(q.Rule), q.Waiting, left, printable(q.Reason))
	}
	return nil
}

// approvalTarget is what a question is about, as a line shows it.
func approvalTarget(q api.Approval) string {
	t := net.JoinHostPort(q.Host, strconv.Itoa(int(q.Port)))
	if q.Method != "" {
		t = q.Method + " " + t + q.Path
	}
	return t
}

// errNoQuestion is wrapped by the error of an answer that names no pending
// question.
var errNoQuestion = errors.New("no pending question")

// answerApproval answers the question that arg names: an id, or HOST[:PORT].
func answerApproval(ctx context.Context, w io.Writer, c *api.Client, arg string, allow bool, scope string) error {
	id, err := findApproval(ctx, c, arg)
	if err != nil {
		return err
	}
	answer := api.AnswerDeny
	if allow {
		answer = api.AnswerAllow
	}
	got, err := c.AnswerApproval(ctx, id, api.ApprovalAnswer{Answer: answer, Scope: scope, By: api.ByCLI})
	var ae *api.Error
	switch {
	case errors.Is(err, api.ErrApprovalAnswered): // another answer came first; the API says whose
		return err
	case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		return fmt.Errorf("%s: its sbx run has no --approvals FILE and no YAML --policy file to write the rule to; answer with --session instead, or start the next run with --approvals FILE", ae.Message)
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return fmt.Errorf("question %s is no longer pending (answered, or timed out); sbx %s --sandbox ID without an argument lists the pending ones", id, map[bool]string{true: "approve", false: "deny"}[allow])
	case err != nil:
		return err
	}
	what := map[string]string{api.AnswerAllow: "allowed", api.AnswerDeny: "denied"}[answer]
	how := map[string]string{api.ScopeOnce: "once", api.ScopeSession: "for this session", api.ScopeAlways: "always"}[scope]
	_, err = fmt.Fprintf(w, "%s %s: %s %s (%d waiting)\n", what, how, got.Approval.ID, printable(approvalTarget(got.Approval)), got.Approval.Waiting)
	return err
}

// findApproval returns the id of the pending question arg names: its id,
// or HOST[:PORT] (without a port, the one question about HOST).
func findApproval(ctx context.Context, c *api.Client, arg string) (string, error) {
	list, err := c.Approvals(ctx)
	if err != nil {
		return "", err
	}
	for _, q := range list.Approvals {
		if q.ID == arg {
			return q.ID, nil
		}
	}
	host, port := arg, uint16(0)
	if h, p, err := net.SplitHostPort(arg); err == nil {
		n, err := netpolicy.ParsePort(p)
		if err != nil || n == netpolicy.AnyPort {
			return "", &exitError{code: exitUsage, err: fmt.Errorf("%q: want a question's id (a1) or HOST[:PORT], e.g. pypi.org:443", arg)}
		}
		host, port = h, uint16(n)
	}
	if h, err := netpolicy.NormalizeHost(host); err == nil {
		host = h
	}
	var found []api.Approval
	for _, q := range list.Approvals {
		if q.Host == host && (port == 0 || q.Port == port) {
			found = append(found, q)
		}
	}
	switch len(found) {
	case 1:
		return found[0].ID, nil
	case 0:
		return "", fmt.Errorf("%w for %q (answered, timed out, or never asked); sbx approve --sandbox ID without an argument lists them", errNoQuestion, arg)
	}
	var ids []string
	for _, q := range found {
		ids = append(ids, q.ID+" ("+approvalTarget(q)+")")
	}
	return "", &exitError{code: exitUsage, err: fmt.Errorf("%q names %d questions: %s; give its id or HOST:PORT", arg, len(found), strings.Join(ids, ", "))}
}

// liveApproval marks the line of an approval record, for the live lines.
var liveApproval = []byte(`"` + decisionlog.FieldEvent + `":"` + decisionlog.EventApproval + `"`)

// approvalLine is the line sbx run's stderr and sbx decisions show for an
// approval record: a question with the commands that answer it, or its
// answer, which says "N requests" when it reached N held requests (each
// with the record's method and path).
func approvalLine(r *decisionlog.Record) string {
	target := printable(liveTarget(r))
	if r.Answer == "" {
		sb := r.Sandbox
		if sb == "" {
			sb = "ID"
		}
		return fmt.Sprintf("%-9s %s%s  (question %s, %s; answer with: sbx approve --sandbox %s %s, or sbx deny; --session or --always to keep the answer)",
			"ask", target, printable(recordProcess(r)), printable(r.ApprovalID), printable(r.Reason), printable(sb), printable(r.ApprovalID))
	}
	if r.Count > 1 { // every request it reached has the question's method and path
		target += fmt.Sprintf(" (%d requests)", r.Count)
	}
	return fmt.Sprintf("%-9s %s  (question %s: %s)", "answer", target, printable(r.ApprovalID), printable(r.Reason))
}

// writeApprovalLine prints the live line of an approval record.
func writeApprovalLine(w io.Writer, line []byte) error {
	var r decisionlog.Record
	if err := decisionlog.Decode(line, &r); err != nil || r.Event != decisionlog.EventApproval {
		return nil
	}
	_, err := fmt.Fprintf(w, "sbx: %s\n", approvalLine(&r))
	return err
}
