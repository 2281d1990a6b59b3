package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/ui"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

func newUICmd() *cobra.Command {
	var port int
	var open bool
	var h hostSandboxes
	var kubeconfig string
	var namespaces []string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a local web view of every sandbox: live decisions, approvals, rules, audit reports",
		Long:  uiLong,
		Example: `  sudo sbx ui --open
  sudo sbx ui --port 8765
  sudo sbx ui --open --kubeconfig ~/.kube/config -n agents`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return usageErrorf(cmd, "--port %d: want a TCP port, 1 to 65535, or 0 for any free one", port)
			}
			all := uiSandboxes{host: h}
			if kubeconfig != "" || len(namespaces) > 0 {
				if len(namespaces) == 0 {
					namespaces = []string{""} // the kubeconfig context's
				}
				for _, ns := range namespaces {
					c, err := (&kubeFlags{kubeconfig: kubeconfig, namespace: ns}).connect()
					if err != nil {
						return err
					}
					all.kube = append(all.kube, kubeSandboxes{c: c})
				}
			}
			// With a cluster, what cannot be listed (this host's
			// sandboxes without root, a cluster that does not answer now
			// but may later) is said here and on the view's first page.
			if _, err := all.List(cmd.Context()); err != nil {
				if len(all.kube) == 0 {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx ui: %s\n", printable(err.Error()))
			}
			s, err := ui.Start(cmd.Context(), ui.Config{Sandboxes: all, Port: port})
			if err != nil {
				return fmt.Errorf("--port %d: %w", port, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sbx ui: open %s\n", s.URL())
			fmt.Fprintln(cmd.OutOrStdout(), "(the URL's token opens the view once, and until then lets whoever has it change your sandboxes' policies; Ctrl-C stops the view)")
			if open {
				defer openUI(cmd, s)()
			}
			<-cmd.Context().Done()
			return s.Close()
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "listen on 127.0.0.1:`N` (default: any free port)")
	cmd.Flags().BoolVar(&open, "open", false, "open the view in your browser ($BROWSER, else xdg-open) through a file only you can read, never with the token in a command line")
	cmd.Flags().StringVar(&h.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	cmd.Flags().MarkHidden("state-dir")
	cmd.Flags().StringVar(&h.logDir, "log-dir", logRoot, "where sandboxes' decision logs are kept")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "list a Kubernetes cluster's sandboxes too, with the kubeconfig `FILE` (with -n alone: $KUBECONFIG, else ~/.kube/config)")
	cmd.Flags().StringArrayVarP(&namespaces, "namespace", "n", nil, "the cluster's `NAMESPACE` whose sandboxes to list; repeatable (default the kubeconfig context's)")
	return cmd
}

// openUI opens the view's URL in the user's browser through a file only
// they can read (sbx ui --open), removed once the token is used or the
// view stops; it returns what removes it then.
func openUI(cmd *cobra.Command, s *ui.Server) (remove func()) {
	path, remove, err := openInBrowser(s.URL())
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "sbx ui: --open: %v; open the URL above yourself\n", err)
		return func() {}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sbx ui: opening it in your browser through %s (removed once used)\n", path)
	// Ends when the token is used or the view stops.
	go func() {
		select {
		case <-s.LoggedIn():
			remove()
		case <-cmd.Context().Done():
		}
	}()
	return remove
}

// uiLong is the help of sbx ui.
const uiLong = `Ui serves one web view of every sandbox of this host on 127.0.0.1 and prints
its URL, which holds a random token: open it in a browser on this machine,
or give --open to have sbx ui open it. The token is good once: the browser
that opens the URL gets a session (which ends after 12 hours without a
request), and the URL is refused after that.
The view lists the running and the ended sandboxes, shows a sandbox's
decisions as they happen and its rules, answers its pending approvals (as
sbx approve and deny do), adds and removes rules (as sbx policy allow,
block and remove do), and shows the audit report of an ended sandbox's
log (as sbx audit --sandbox does). It runs until interrupted.

With --kubeconfig (or -n) it lists the sandboxes of a Kubernetes cluster
too, marked as on the cluster with their health as sbx kube ps shows it: of
the kubeconfig context's namespace, or of each -n NAMESPACE. It reaches
their gateways as sbx kube policy, approve and decisions do (a
port-forward through the API server, with the sandbox's token), so the
kubeconfig's user needs the rights docs/kubernetes.md lists; a cluster
sandbox's gateway keeps no file of approved rules, so its questions are
answered once or for the session, never always.

Until it is used, whoever has the URL can change the sandboxes' policies
and answer their questions: keep it to yourself. --open keeps it out of
every command line (which other users can read): the browser opens a file
only you can read that redirects to it. The view answers only requests
that name it as 127.0.0.1:PORT (not localhost), and changes only what its
own pages ask (docs/ui.md).`

// hostSandboxes are the sandboxes of this host for sbx ui: the running
// ones as sbx ps finds them, the ended ones by their logs in logDir as sbx
// audit --sandbox finds them.
type hostSandboxes struct {
	stateDir, logDir string
}

func (h hostSandboxes) List(ctx context.Context) ([]ui.Sandbox, error) {
	states, err := sandbox.List(h.stateDir)
	if err != nil {
		return nil, orNeedsRoot(err, "sbx ui")
	}
	var out []ui.Sandbox
	running := map[string]bool{}
	for _, st := range states {
		if !sandbox.OwnerAlive(st) {
			continue // a leftover: sbx gc removes it
		}
		status := string(st.Status)
		if status == "" {
			status = string(sandbox.StatusRunning)
		}
		_, err := os.Stat(filepath.Join(h.logDir, st.ID, run.LogName))
		out = append(out, ui.Sandbox{ID: st.ID, Name: st.Name, Status: status, Command: st.Command, Time: st.Created, HasLog: err == nil})
		running[st.ID] = true
	}
	// What sbx ps -a lists: by the record kept when each ended, with its
	// name and where its log went.
	kept, err := run.ListEnded(h.stateDir, h.logDir)
	if err != nil {
		return nil, orNeedsRoot(err, "sbx ui")
	}
	var ended []ui.Sandbox
	for _, e := range kept {
		if running[e.ID] {
			continue
		}
		fi, err := os.Stat(e.Log)
		if e.Log == "" || err != nil || !fi.Mode().IsRegular() {
			continue
		}
		ended = append(ended, ui.Sandbox{ID: e.ID, Name: e.Name, Status: ui.StatusEnded, Command: e.Command, Time: e.Ended, HasLog: true})
	}
	slices.SortFunc(ended, func(a, b ui.Sandbox) int { return b.Time.Compare(a.Time) }) // newest first
	return append(out, ended...), nil
}

func (h hostSandboxes) Client(ctx context.Context, id string) (*api.Client, error) {
	t := targetFlags{sandbox: id, stateDir: h.stateDir}
	return t.client(ctx)
}

func (h hostSandboxes) OpenLog(_ context.Context, id string) (io.ReadCloser, error) {
	path, err := run.FindLog(h.stateDir, h.logDir, id)
	if err != nil {
		return nil, err
	}
	if err := checkLogFile(path); err != nil {
		return nil, err
	}
	return os.Open(path)
}
