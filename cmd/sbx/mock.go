package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// mockFlags are the flags of the sbx mock commands: the sandbox or
// gateway, and the mocked host.
type mockFlags struct {
	target targetFlags
	host   string
	script string
}

func (f *mockFlags) add(cmd *cobra.Command) {
	f.target.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&f.host, "host", "", "the mocked `HOST` (--mock-llm HOST=...); needed when there are several mocks")
	cmd.Flags().StringVar(&f.script, "script", "", "the policy's LLM script `NAME` (response: {llm: NAME}), as the policy writes it; needed when there are several mocks")
	cmd.MarkFlagsMutuallyExclusive("host", "script")
}

// mock is the mock the flags name: the zero api.Mock for the only one
// (or every one, for a reset).
func (f *mockFlags) mock() api.Mock {
	return api.Mock{Host: f.host, Script: f.script}
}

func newMockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mock",
		Short: "Drive the scripted LLM of a running sandbox or gateway (--mock-llm, or a policy's llm responses)",
		Long: `Mock talks to the mock LLMs of a sandbox or gateway: one per host of
--mock-llm HOST=SCRIPT, and one per script its policy's intercept rules
answer with (response: {llm: SCRIPT}). expect queues more turns after the
script's, requests shows what the agent sent (request bodies included: the
journal is the only place they are kept), and reset starts the script
over. With several mocks, name one with --host or --script.` + mockScriptHelp(),
		Example: `  sbx mock expect --sandbox 1a2b3c4d turns.yaml
  sbx mock requests --sandbox 1a2b3c4d --json
  sbx mock reset --sandbox 1a2b3c4d`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(newMockExpectCmd(nil), newMockRequestsCmd(), newMockResetCmd(nil), newMockRecordingCmd(nil), newMockInitCmd())
	cmd.AddCommand(newMockValidateCmd())
	return cmd
}

// newKubeMockCmd is sbx kube mock: expect, requests and reset of a
// cluster sandbox's mock LLMs, through its API.
func newKubeMockCmd(kf *kubeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mock",
		Short: "Drive the scripted LLM of a sandbox on a cluster (sbx kube run --mock-llm, or a policy's llm responses)",
		Long: `Mock talks to the mock LLMs of a sandbox's gateway pod, one per host of
sbx kube run --mock-llm HOST=SCRIPT and one per script its policy's
intercept rules answer with (response: {llm: SCRIPT}): expect queues more
turns after the script's, requests shows what the agent sent (request
bodies included), and reset starts the script over. With several mocks,
name one with --host or --script. The journal lives in the gateway pod:
read it before the sandbox is stopped. recording writes what the gateway
pod has recorded of a host of sbx kube run --record-llm so far.`,
		Example: `  sbx kube mock requests --sandbox 1a2b3c4d
  sbx kube mock expect --sandbox 1a2b3c4d turns.yaml`,
		Args: subcommandArgs,
		RunE: showHelp,
	}
	requests := &cobra.Command{
		Use:     "requests",
		Short:   "Show what the agent sent the mock, and what each request got",
		Example: `  sbx kube mock requests --sandbox 1a2b3c4d --json`,
		Args:    usageArgs(cobra.NoArgs),
	}
	var f mockFlags
	var asJSON bool
	f.target.kube = kf
	requests.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := f.target.client(cmd.Context())
		if err != nil {
			return err
		}
		defer c.Close()
		ans, err := c.MockRequests(cmd.Context(), f.mock())
		if err != nil {
			return err
		}
		return printMockRequests(cmd.OutOrStdout(), ans, asJSON)
	}
	f.add(requests)
	requests.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer, request bodies included")
	cmd.AddCommand(newMockExpectCmd(kf), requests, newMockResetCmd(kf), newMockRecordingCmd(kf))
	for _, c := range cmd.Commands() {
		c.Example = strings.ReplaceAll(c.Example, "sbx mock", "sbx kube mock")
	}
	return cmd
}

func newMockExpectCmd(kf *kubeFlags) *cobra.Command {
	var f mockFlags
	f.target.kube = kf
	cmd := &cobra.Command{
		Use:   "expect [flags] FILE|-",
		Short: "Queue turns (YAML or JSON: a script, a list of turns or one turn) after the mock's",
		Example: `  sbx mock expect --sandbox 1a2b3c4d turns.yaml
  echo '{reply: {text: "done"}}' | sbx mock expect --sandbox 1a2b3c4d -`,
		Args: exactArgs("FILE|-"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), mockllm.MaxScriptSize+1))
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("reading the turns: %w", err)
			}
			// Checked here first, so that problems name the file.
			name := args[0]
			if name == "-" {
				name = "stdin"
			}
			if _, err := mockllm.DecodeTurns(name, data); err != nil {
				return err
			}
			c, err := f.target.client(cmd.Context())
			if err != nil {
				return err
			}
			ans, err := c.MockExpect(cmd.Context(), f.mock(), name, data)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queued %s for %s\n", plural(ans.Queued, "turn"), ans.Mock)
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newMockRequestsCmd() *cobra.Command {
	var f mockFlags
	var asJSON bool
	var journal, logDir string
	cmd := &cobra.Command{
		Use:   "requests",
		Short: "Show what the agent sent the mock, and what each request got (of a running sandbox, an ended one, or a journal file)",
		Long: `Requests prints the mock's journal: what the agent sent and what each
request got. --sandbox ID asks a running sandbox's gateway; for a sandbox
that ended it reads its journal (by its id, a unique prefix or its name),
kept beside its decision log in
/var/lib/sbx/sandboxes/<id>/mock-requests.jsonl, or where --mock-journal
or --log put it, as the sandbox's record there says, and says so on
stderr. A journal file is read with --journal FILE.`,
		Example: `  sbx mock requests --sandbox 1a2b3c4d
  sbx mock requests --sandbox 1a2b3c4d --host api.openai.com --json | jq '.requests[].body.messages'
  sbx mock requests --journal run.mock-requests.jsonl`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if journal != "" {
				if f.target.sandbox != "" || f.target.api != "" {
					return usageErrorf(cmd, "--journal reads a journal file; it does not go with --sandbox or --api")
				}
				ans, err := f.readJournal(journal)
				if err != nil {
					return err
				}
				return printMockRequests(out, ans, asJSON)
			}
			// A sandbox that ended left its journal.
			path, ended, err := endedSandboxJournal(f.target, logDir)
			if err != nil {
				return err
			}
			var c *api.Client
			if !ended {
				if c, err = f.target.client(cmd.Context()); err != nil {
					// It may have ended since it was looked up.
					if path, ended, _ = endedSandboxJournal(f.target, logDir); !ended {
						return err
					}
				}
			}
			if ended {
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx: sandbox %s ended; reading its mock journal %s\n", filepath.Base(filepath.Dir(path)), path)
				ans, err := f.readJournal(path)
				if err != nil {
					return err
				}
				return printMockRequests(out, ans, asJSON)
			}
			defer c.Close()
			ans, err := c.MockRequests(cmd.Context(), f.mock())
			if err != nil {
				return err
			}
			if f.target.sandbox != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "sbx: sandbox %s runs; asking its gateway for the mock's journal\n", f.target.sandbox)
			}
			return printMockRequests(out, ans, asJSON)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer, request bodies included")
	cmd.Flags().StringVar(&journal, "journal", "", "read the mock journal `FILE` (--mock-journal's, or one beside a --log file) instead")
	cmd.Flags().StringVar(&logDir, "log-dir", logRoot, "where sandboxes' decision logs and mock journals are kept")
	cmd.Flags().MarkHidden("log-dir")
	return cmd
}

// printMockRequests prints a mock's journal: a table, or the API's JSON.
func printMockRequests(out io.Writer, ans *api.MockRequests, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		return enc.Encode(ans)
	}
	if len(ans.Requests) == 0 {
		fmt.Fprintf(out, "no requests to %s yet\n", printable(ans.Mock))
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tPATH\tMODEL\tSTREAM\tSTATUS\tOUTCOME")
	for _, j := range ans.Requests {
		// Method, path and model are the sandbox's; the outcome
		// may quote them.
		fmt.Fprintf(tw, "%d\t%s\t%s %s\t%s\t%t\t%d\t%s\n", j.Seq, j.Time.Local().Format("15:04:05.000"), printable(j.Method), printable(j.Path), printable(j.Model), j.Stream, j.Status, printable(j.Outcome))
	}
	return tw.Flush()
}

// endedSandboxJournal finds the mock journal the sandbox t.sandbox names
// kept, when no running sandbox has that id, name or id prefix, as
// endedSandboxLog finds its decision log: ended is false when one runs,
// or when t names no sandbox (--api).
func endedSandboxJournal(t targetFlags, logDir string) (path string, ended bool, err error) {
	if t.sandbox == "" || t.api != "" {
		return "", false, nil
	}
	if _, err := sandbox.Find(t.stateDir, t.sandbox); !errors.Is(err, sandbox.ErrNotFound) {
		return "", false, nil
	}
	path, err = run.FindJournal(t.stateDir, logDir, t.sandbox)
	var le *run.LogLookupError
	switch {
	case errors.As(err, &le) && len(le.Matches) == 0:
		return "", false, fmt.Errorf("--sandbox %w (a sandbox that mocked no LLM keeps no journal; one whose record was removed, or kept by an older sbx with --mock-journal or beside --log, is read with --journal FILE); sbx ps -a lists the sandboxes", err)
	case err != nil:
		return "", false, fmt.Errorf("--sandbox %w", orNeedsRoot(err, "--sandbox"))
	}
	return path, true, nil
}

// readJournal reads the journal file at path and returns the journal of
// the mock the flags name (the only one when they name none), as the API
// answers it.
func (f *mockFlags) readJournal(path string) (*api.MockRequests, error) {
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w; sandboxes' journals are root's: run sbx mock requests with sudo", err)
	} else if err != nil {
		return nil, err
	}
	defer file.Close()
	mocks, err := mockllm.ReadJournal(file)
	if err != nil {
		return nil, fmt.Errorf("mock journal %s: %w", path, err)
	}
	host := f.host
	if host != "" {
		if host, err = netpolicy.NormalizeHost(host); err != nil {
			return nil, fmt.Errorf("--host %s: %w", f.host, err)
		}
	}
	labels := make([]string, len(mocks))
	var m *mockllm.JournalMock
	for i, jm := range mocks {
		labels[i] = jm.Mock
		if host != "" && jm.Host == host || f.script != "" && jm.Script == f.script {
			m = jm
		}
	}
	switch {
	case len(mocks) == 0:
		return nil, fmt.Errorf("mock journal %s names no mock", path)
	case m == nil && host != "":
		return nil, fmt.Errorf("mock journal %s: %s is not mocked; the mocks are %s", path, host, strings.Join(labels, ", "))
	case m == nil && f.script != "":
		return nil, fmt.Errorf("mock journal %s: it holds no LLM script %q; the mocks are %s", path, f.script, strings.Join(labels, ", "))
	case m == nil && len(mocks) > 1:
		return nil, fmt.Errorf("mock journal %s: there are several mocks (%s); name one with --host or --script", path, strings.Join(labels, ", "))
	case m == nil:
		m = mocks[0]
	}
	ans := &api.MockRequests{Host: m.Host, Mock: m.Mock, Script: m.Script, Requests: make([]api.MockRequest, len(m.Requests))}
	for i, j := range m.Requests {
		ans.Requests[i] = api.Journaled(j)
	}
	return ans, nil
}

func newMockResetCmd(kf *kubeFlags) *cobra.Command {
	var f mockFlags
	f.target.kube = kf
	cmd := &cobra.Command{
		Use:     "reset",
		Short:   "Start the mock's script over, dropping queued turns and the journal (every mock's, without --host or --script)",
		Example: `  sbx mock reset --sandbox 1a2b3c4d --host api.anthropic.com`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.target.client(cmd.Context())
			if err != nil {
				return err
			}
			ans, err := c.MockReset(cmd.Context(), f.mock())
			if err != nil {
				return err
			}
			for _, h := range ans.Reset {
				fmt.Fprintf(cmd.OutOrStdout(), "reset the mock of %s\n", printable(h))
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

// recordingLong is the help of sbx mock recording.
const recordingLong = `Recording asks a running gateway for what it has recorded of an LLM's API
so far (--record-llm HOST=SCRIPT, or sbx gateway --record-llm-api HOST), as
the script --mock-llm replays, and prints it or, with -o FILE, writes it to
FILE, whole or not at all. With several recorded hosts, name one with
--host. A sandbox writes its recordings itself when it ends; this reads
one while it runs. On a cluster a sandbox left running (sbx kube run -d,
sbx kube manifest) holds its recording in its gateway pod alone: read it
with sbx kube mock recording, or have sbx kube stop --record-llm
HOST=SCRIPT write it as it removes the sandbox.`

// newMockRecordingCmd is sbx mock recording, and sbx kube mock recording
// when kf is set: what a gateway has recorded of a host, read through its
// API (GET /v1/mock/recording).
func newMockRecordingCmd(kf *kubeFlags) *cobra.Command {
	t := targetFlags{kube: kf}
	var host, out string
	cmd := &cobra.Command{
		Use:   "recording [flags]",
		Short: "Print or write what the gateway has recorded of an LLM so far (--record-llm), as the script --mock-llm replays",
		Long:  recordingLong,
		Example: `  sbx mock recording --sandbox 1a2b3c4d -o recorded.yaml
  sbx mock recording --sandbox 1a2b3c4d --host api.anthropic.com > recorded.yaml`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := t.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			got, err := c.MockRecording(cmd.Context(), host)
			if err != nil {
				return err
			}
			if out == "" {
				_, err := io.WriteString(cmd.OutOrStdout(), got.Script)
				return err
			}
			if err := run.WriteFile(out, []byte(got.Script)); err != nil {
				return fmt.Errorf("-o %s: %w", out, err)
			}
			// The host is the gateway's answer, which names it normalized.
			fmt.Fprintf(cmd.ErrOrStderr(), "sbx: %s\n", recordedNote(run.Recorded{Host: printable(got.Host), Path: out, Exchanges: got.Exchanges}))
			return nil
		},
	}
	t.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&host, "host", "", "the recorded `HOST` (--record-llm HOST=...); needed when several hosts are recorded")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the script to `FILE` instead of standard output: replaced whole, its permissions kept; a named pipe or device is written directly, a symbolic link refused")
	return cmd
}
