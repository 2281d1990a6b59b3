package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// mockLLMUsage is the help of --mock-llm.
const mockLLMUsage = "mock an LLM: for `HOST=SCRIPT`, answer the API at HOST (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini) from the script SCRIPT (YAML) instead of the network; repeatable"

// parseMockLLM turns --mock-llm HOST=SCRIPT values into the gateway's
// mocks, keyed by normalized host, reading each script. Errors name the
// flag, the script's file and line, and what to do.
func parseMockLLM(values []string) (map[string]*mockllm.Responder, error) {
	if len(values) == 0 {
		return nil, nil
	}
	mocks := make(map[string]*mockllm.Responder, len(values))
	for _, v := range values {
		host, path, err := splitLLMFlag("mock-llm", v)
		if err != nil {
			return nil, err
		}
		if _, dup := mocks[host]; dup {
			return nil, fmt.Errorf("--mock-llm %s: %s is mocked twice; give one script per host", v, host)
		}
		script, err := mockllm.ParseScriptFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("--mock-llm %s: %w; give the path of a script (YAML or JSON)", v, err)
			}
			return nil, fmt.Errorf("--mock-llm %s: the script is invalid:\n%w", v, err)
		}
		mocks[host] = mockllm.New(script)
	}
	setQueueHints(expectCommand, mocks, nil)
	return mocks, nil
}

// expectCommand is the command a mock's answer to a request that no turn
// fits names to queue one (mockllm.Responder.QueueHint), the mock's --host
// or --script following it. sbx gateway --mock-command gives another: sbx
// kube's gateway pod names sbx kube mock expect with its sandbox.
const expectCommand = "sbx mock expect"

// setQueueHints has each mock's answer to a request no turn fits name
// command, with the --host (hosts, by host) or --script (scripts, by
// name) that picks the mock.
func setQueueHints(command string, hosts, scripts map[string]*mockllm.Responder) {
	for host, m := range hosts {
		m.QueueHint = command + " --host " + host
	}
	for name, m := range scripts {
		m.QueueHint = command + " --script " + name
	}
}

// splitLLMFlag splits a --mock-llm or --record-llm (flag) value
// HOST=SCRIPT into the normalized host and the script's path, reading
// nothing.
func splitLLMFlag(flag, v string) (host, path string, err error) {
	rawHost, path, ok := strings.Cut(v, "=")
	if !ok || rawHost == "" || path == "" {
		return "", "", fmt.Errorf("--%s %q: want HOST=SCRIPT, such as --%s api.anthropic.com=script.yaml", flag, v, flag)
	}
	host, err = netpolicy.NormalizeHost(rawHost)
	if err != nil {
		return "", "", fmt.Errorf("--%s %s: %w; give a host name such as api.anthropic.com, without scheme, port or path", flag, v, err)
	}
	return host, path, nil
}

// policyScripts reads the LLM scripts p's intercept rules answer with
// (response: {llm: SCRIPT}), keyed by the name as the policy writes it.
// A name is a script's path: relative to the directory of the policy file
// policyFile ("" for the working directory), or absolute. The scripts are
// read here, once, when a sandbox or gateway starts; a policy changed
// later can name only these. A script that cannot be read or is invalid
// is an exit-1 error naming the script, its rules and the policy file.
func policyScripts(policyFile string, p *netpolicy.Policy) (map[string]*mockllm.Responder, error) {
	return policyScriptsFrom(policyFile, p, nil)
}

// policyScriptsFrom is policyScripts with the files of some scripts
// given by their names (sbx gateway's --llm-script) in place of the
// paths the names give.
func policyScriptsFrom(policyFile string, p *netpolicy.Policy, files map[string]string) (map[string]*mockllm.Responder, error) {
	names := p.LLMScripts()
	for name := range files {
		if !slices.Contains(names, name) {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("--llm-script %s: the policy names no LLM script %q (its llm responses name %s); give the name as the policy's rules write it", name, name, orNone(names))}
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	out := make(map[string]*mockllm.Responder, len(names))
	var errs []error
	for _, name := range names {
		path := scriptPath(policyFile, name)
		if f, ok := files[name]; ok {
			path = f
		}
		var rules []string
		for _, r := range p.Rules() {
			if r.Response != nil && r.Response.LLM == name {
				rules = append(rules, r.ID)
			}
		}
		where := fmt.Sprintf("policy %s: rule %s: response: llm: %s", policyFile, strings.Join(rules, ", "), name)
		if policyFile == "" {
			where = fmt.Sprintf("rule %s: response: llm: %s", strings.Join(rules, ", "), name)
		}
		script, err := mockllm.ParseScriptFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				errs = append(errs, fmt.Errorf("%s: %w; give the path of a script (YAML or JSON), relative to the policy file", where, err))
			} else {
				errs = append(errs, fmt.Errorf("%s: the script is invalid:\n%w", where, err))
			}
			continue
		}
		out[name] = mockllm.New(script)
	}
	if len(errs) > 0 {
		return nil, &exitError{code: exitFailure, err: combine(errs...)}
	}
	setQueueHints(expectCommand, nil, out)
	return out, nil
}

// scriptPath is the file of the LLM script a policy's llm response names
// name: relative to the directory of the policy file policyFile ("" for
// the working directory), or absolute.
func scriptPath(policyFile, name string) string {
	if !filepath.IsAbs(name) && policyFile != "" {
		return filepath.Join(filepath.Dir(policyFile), name)
	}
	return name
}

// orNone is names quoted and joined with ", ", or "none".
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// recordLLMUsage is the help of --record-llm.
const recordLLMUsage = "record an LLM: for `HOST=SCRIPT`, let requests to HOST's API through (inspected, under the policy, which must allow HOST) and write what it answered to SCRIPT when the sandbox ends, for --mock-llm to replay offline; repeatable"

// parseRecordLLM turns --record-llm values into the run library's
// recordings. A script's directory must exist now, so that a recording is
// not lost at the end.
func parseRecordLLM(values []string, mocks map[string]*mockllm.Responder) ([]run.Recording, error) {
	var out []run.Recording
	seen := map[string]bool{}
	for _, v := range values {
		host, path, err := splitLLMFlag("record-llm", v)
		if err != nil {
			return nil, err
		}
		if seen[host] || mocks[host] != nil {
			return nil, fmt.Errorf("--record-llm %s: %s is already recorded or mocked; give one --record-llm or --mock-llm per host", v, host)
		}
		seen[host] = true
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--record-llm %s: the directory of %s does not exist; create it, or give another path", v, path)
		}
		out = append(out, run.Recording{Host: host, Path: path})
	}
	return out, nil
}

// recordedNote is what sbx run says of a recording it wrote.
func recordedNote(n run.Recorded) string {
	return fmt.Sprintf("recorded %d exchanges with %s in %s (replay with --mock-llm %s=%s)", n.Exchanges, n.Host, n.Path, n.Host, n.Path)
}

// recordingErrors words the *run.RecordingError values among the errors
// of run's Close with the flag: they come last, as one error.
func recordingErrors(err error) error {
	var merr *multierror.Error
	if !errors.As(err, &merr) {
		return err
	}
	var out *multierror.Error
	var recs []error
	for _, e := range merr.Errors {
		var re *run.RecordingError
		if errors.As(e, &re) {
			recs = append(recs, fmt.Errorf("--record-llm %s: %w", re.Host, re.Err))
			continue
		}
		out = multierror.Append(out, e)
	}
	if len(recs) == 0 {
		return out.ErrorOrNil()
	}
	// One error, added as it is: Append would spread its errors out.
	out = multierror.Append(out)
	out.Errors = append(out.Errors, combine(recs...))
	return out
}
