package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// mockLLMUsage is the help of --mock-llm.
const mockLLMUsage = "mock an LLM: for `HOST=SCRIPT`, answer the API at HOST (Anthropic Messages, OpenAI Chat Completions and Responses) from the script SCRIPT (YAML) instead of the network; repeatable"

// parseMockLLM turns --mock-llm HOST=SCRIPT values into the gateway's
// mocks, keyed by normalized host, reading each script. Errors name the
// flag, the script's file and line, and what to do.
func parseMockLLM(values []string) (map[string]*mockllm.Responder, error) {
	if len(values) == 0 {
		return nil, nil
	}
	mocks := make(map[string]*mockllm.Responder, len(values))
	for _, v := range values {
		rawHost, path, ok := strings.Cut(v, "=")
		if !ok || rawHost == "" || path == "" {
			return nil, fmt.Errorf("--mock-llm %q: want HOST=SCRIPT, such as api.anthropic.com=script.yaml", v)
		}
		host, err := netpolicy.NormalizeHost(rawHost)
		if err != nil {
			return nil, fmt.Errorf("--mock-llm %s: %w; give a host name such as api.anthropic.com, without scheme, port or path", v, err)
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
	return mocks, nil
}
