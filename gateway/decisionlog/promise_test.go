package decisionlog

import (
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// These tests hold the log's promise (docs/decision-log.md): no record
// that lets a request go on is left out of the file, whatever the
// budget, and none is written into a file that is not at the path.

// allowRecord is the decision of an allowed GET of path on host.
func allowRecord(host, path string) *Record {
	return &Record{Event: EventDecision, Kind: KindHTTP, Method: "GET", Host: host, Port: 80, Path: path, Action: "allow"}
}

// readAll decodes every record of the file at path.
func readAll(t *testing.T, path string) []Record {
	t.Helper()
	var out []Record
	for _, line := range decisionlogtest.RawLines(t, path) {
		var r Record
		if err := Decode(line, &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		out = append(out, r)
	}
	return out
}
