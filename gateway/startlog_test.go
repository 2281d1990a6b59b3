package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
	"github.com/sbx-dev/sbx/netpolicy"
)

// startLogLine is what TestStartLogLimits reads of a record.
type startLogLine struct {
	Seq   uint64 `json:"seq"`
	Event string `json:"event"`
	Count uint64 `json:"count"`
}

// readStartLog returns the records of the decision log at path.
func readStartLog(t testing.TB, path string) []startLogLine {
	t.Helper()
	var recs []startLogLine
	for i, line := range decisionlogtest.RawLines(t, path) {
		var r startLogLine
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestStartLogLimits checks that Start opens its log with
// Config.LogLimits, and refuses a log path it must not write.
func TestStartLogLimits(t *testing.T) {
	p, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Block})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	g, err := Start(context.Background(), Config{
		Listen: "127.0.0.1:0", Policy: p, LogFile: path,
		LogLimits: decisionlog.FileSinkOptions{RatePerSecond: 1e-9, Burst: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		g.Log.Emit(&decisionlog.Record{Event: decisionlog.EventDecision})
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range readStartLog(t, path) {
		got = append(got, fmt.Sprintf("%s %d %d", r.Event, r.Seq, r.Count))
	}
	want := []string{"policy 1 0", "decision 2 0", "dropped 5 2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}

	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	g, err = Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: p, LogFile: link})
	var ue *decisionlog.UnsafeLogFileError
	if !errors.As(err, &ue) || ue.Type != os.ModeSymlink {
		if err == nil {
			g.Close()
		}
		t.Errorf("Start with a symbolic link as its log: got %v, want an *decisionlog.UnsafeLogFileError for a symbolic link", err)
	}
}

// TestStartRefusesNonEmptyLog: Start refuses a log file that holds
// something, as OpenFileSink does, and leaves it as it was.
func TestStartRefusesNonEmptyLog(t *testing.T) {
	old := `{"old":true}` + "\n"
	full := filepath.Join(t.TempDir(), "full.jsonl")
	if err := os.WriteFile(full, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	var ne *decisionlog.NonEmptyLogFileError
	if g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: mustCompile(t, netpolicy.Spec{}), LogFile: full}); !errors.As(err, &ne) {
		if err == nil {
			g.Close()
		}
		t.Errorf("Start with a log of %d bytes: got %v, want a *NonEmptyLogFileError", len(old), err)
	}
	if data, _ := os.ReadFile(full); string(data) != old {
		t.Errorf("the refused file holds %q, want %q as before", data, old)
	}
}
