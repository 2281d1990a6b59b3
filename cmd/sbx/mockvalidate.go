package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// mockScriptHelp is the part of sbx mock --help that documents the
// script format: every field, from mockllm.Fields, so that the help and
// docs/mock-llm.md say the same.
func mockScriptHelp() string {
	return `

A script (YAML or JSON, docs/mock-llm.md; sbx mock validate checks one) is
turns: a list of turns, each with a reply or a fault. Its fields:

` + strings.TrimSuffix(mockllm.FieldReference(), "\n")
}

func newMockValidateCmd() *cobra.Command {
	var api string
	cmd := &cobra.Command{
		Use:   "validate [--api API] SCRIPT...",
		Short: "Check mock LLM scripts as --mock-llm reads them, and warn of turns that can never answer",
		Long: `Validate reads each script (YAML or JSON, - for stdin) with the strict
decoder sbx run --mock-llm and the gateway use, without a sandbox.

A valid script prints "SCRIPT: ok (N turns)". Each problem is printed to
stderr as "SCRIPT:LINE: message" with what to do, and the exit code is 1.
A turn that can never answer (it comes after a turn of times: unlimited
that fits every request it fits) is a warning, "SCRIPT:LINE: warning: ...",
which does not change the exit code.

With --api, the script is also checked against the API it will answer: a
custom tool call (custom:) answers only openai-responses. Without it, such
a call is refused when a request of another API comes.

Every field of a script is listed by sbx mock --help.`,
		Example: `  sbx mock validate script.yaml
  sbx mock validate --api openai-responses codex-script.yaml
  sbx mock validate testdata/*.yaml && echo all ok`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "%s takes SCRIPT..., the scripts to check; got none", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var dialect mockllm.Dialect
			if api != "" {
				d, err := mockllm.ParseDialect(api)
				if err != nil {
					return usageErrorf(cmd, "--api %w", err)
				}
				dialect = d
			}
			failed := false
			for _, path := range args {
				if !validateScript(cmd, path, dialect) {
					failed = true
				}
			}
			if failed {
				return &exitError{code: exitFailure, err: errSilent}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&api, "api", "", "also check the script answers `API`: anthropic, openai-chat, openai-responses or gemini")
	return cmd
}

// validateScript checks the script at path (- for stdin) and, when
// dialect is not empty, that it can answer that API. It prints "PATH: ok
// (N turns)" to stdout or the problems to stderr, warnings to stderr, and
// reports whether the script is valid.
func validateScript(cmd *cobra.Command, path string, dialect mockllm.Dialect) bool {
	stderr := cmd.ErrOrStderr()
	var s *mockllm.Script
	var err error
	name := path
	if path == "-" {
		name = "stdin"
		var data []byte
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), mockllm.MaxScriptSize+1))
		if err == nil {
			s, err = mockllm.ParseScript(name, data)
		}
	} else {
		s, err = mockllm.ParseScriptFile(path)
	}
	if err == nil && dialect != "" {
		err = mockllm.CheckAPI(s.Turns, dialect)
	}
	if err != nil {
		var list mockllm.ErrorList
		var pe *fs.PathError
		switch {
		case errors.As(err, &list):
			fmt.Fprintln(stderr, list)
		case errors.As(err, &pe):
			fmt.Fprintf(stderr, "sbx: mock LLM script %s: %v; give the path of a script (YAML or JSON)\n", pe.Path, pe.Err)
		default:
			fmt.Fprintf(stderr, "sbx: mock LLM script %s: %v\n", name, err)
		}
		return false
	}
	for _, w := range mockllm.Warnings(s.Turns) {
		where := name
		if w.Origin != "" {
			where = w.Origin
		}
		fmt.Fprintf(stderr, "%s: warning: turn %d %s\n", where, w.Turn, w.Msg)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%s)\n", name, plural(len(s.Turns), "turn"))
	return true
}
