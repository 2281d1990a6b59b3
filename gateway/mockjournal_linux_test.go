package gateway

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestMockJournalFile: with Config.MockJournal the mocks' journals reach
// that file (mode 0600) as requests arrive, bodies included, while the
// decision log holds none; the file outlives the gateway; a file that
// holds something is refused as the log is, unless appended to.
func TestMockJournalFile(t *testing.T) {
	dir := t.TempDir()
	journal := filepath.Join(dir, "sub", "mock-requests.jsonl")
	logFile := filepath.Join(dir, "decisions.jsonl")
	p, _ := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
	start := func(o decisionlog.FileSinkOptions) (*Gateway, error) {
		return Start(t.Context(), Config{Listen: "127.0.0.1:0", Policy: p, LogFile: logFile, LogLimits: o, MockJournal: journal,
			MockLLM: map[string]*mockllm.Responder{"api.anthropic.com": mockllm.New(nil)}})
	}
	g, err := start(decisionlog.FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proxy, _ := url.Parse("http://" + g.ProxyAddr.String())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := client.Post("http://api.anthropic.com/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"the secret word"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Written before the answer was sent: there before Close.
	f, err := os.Open(journal)
	if err != nil {
		t.Fatal(err)
	}
	mocks, err := mockllm.ReadJournal(f)
	f.Close()
	if err != nil || len(mocks) != 1 || len(mocks[0].Requests) != 1 || !strings.Contains(string(mocks[0].Requests[0].Body), "the secret word") {
		t.Fatalf("got %+v, %v; want the request with its body", mocks, err)
	}
	if g.Close() != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(journal); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("got %v %v, want mode 0600", fi.Mode().Perm(), err)
	}
	if log, _ := os.ReadFile(logFile); strings.Contains(string(log), "the secret word") {
		t.Errorf("the decision log holds the body:\n%s", log)
	}

	os.Remove(logFile)
	_, err = start(decisionlog.FileSinkOptions{})
	var ne *decisionlog.NonEmptyLogFileError
	if !errors.As(err, &ne) || ne.Path != journal || ne.File != MockJournalName || !strings.HasPrefix(err.Error(), "mock journal "+journal+": holds ") {
		t.Fatalf("a second start on the journal: got %v, want a *NonEmptyLogFileError of the mock journal", err)
	}
	os.Remove(logFile)
	g, err = start(decisionlog.FileSinkOptions{Append: true})
	if err != nil {
		t.Fatalf("appending: %v", err)
	}
	g.Close()
}
