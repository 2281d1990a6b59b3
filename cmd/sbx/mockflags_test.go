package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

func TestParseMockLLM(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("turns:\n  - reply: {text: hi}\n"), 0o644)
	os.WriteFile(bad, []byte("turns:\n  - reply: {text: hi}\n  - reply: {txet: hi}\n"), 0o644)

	mocks, err := parseMockLLM([]string{"API.Anthropic.com=" + good, "localhost=" + good})
	if err != nil || len(mocks) != 2 || mocks["api.anthropic.com"] == nil || mocks["localhost"] == nil {
		t.Fatalf("got %v, %v; want two mocks by normalized host", mocks, err)
	}
	for _, tc := range []struct {
		values []string
		want   []string
	}{
		{[]string{"api.test"}, []string{"--mock-llm", "want HOST=SCRIPT"}},
		{[]string{"https://api.test/=" + good}, []string{"--mock-llm", "host name"}},
		{[]string{"api.test=" + filepath.Join(dir, "missing.yaml")}, []string{"--mock-llm", "missing.yaml", "no such file", "give the path"}},
		{[]string{"api.test=" + bad}, []string{"--mock-llm", bad + ":3:", "txet"}},
		{[]string{"api.test=" + good, "API.test.=" + good}, []string{"mocked twice"}},
	} {
		_, err := parseMockLLM(tc.values)
		if err == nil {
			t.Errorf("%v: got no error, want one", tc.values)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: got %q, want it to contain %q", tc.values, err, w)
			}
		}
	}
}

func TestParseRecordLLM(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{[]string{"api.anthropic.com"}, "want HOST=SCRIPT"},
		{[]string{"https://api.anthropic.com=" + dir + "/a.yaml"}, "give a host name"},
		{[]string{"api.anthropic.com=" + dir + "/nodir/a.yaml"}, "does not exist"},
		{[]string{"api.anthropic.com=" + dir + "/a.yaml", "API.anthropic.com=" + dir + "/b.yaml"}, "already recorded or mocked"},
	} {
		if _, err := parseRecordLLM(tt.values, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseRecordLLM(%q): got %v, want an error containing %q", tt.values, err, tt.want)
		}
	}
	rs, err := parseRecordLLM([]string{"api.anthropic.com=" + dir + "/a.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if err := writeRecordings(rs, &stderr); err != nil {
		t.Fatal(err)
	}
	if _, err := mockllm.ParseScriptFile(filepath.Join(dir, "a.yaml")); err != nil || !strings.Contains(stderr.String(), "replay with --mock-llm api.anthropic.com=") {
		t.Errorf("the recording: %v; stderr %q", err, stderr.String())
	}
}
