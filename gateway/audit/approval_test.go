package audit

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The approval records of a log are read, not counted as unknown: the
// report lists who answered what, and Replay leaves them out.
func TestReportShowsApprovals(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	recs := []decisionlog.Record{
		{Seq: 1, Event: decisionlog.EventApproval, Time: at, Kind: "connect", Method: "CONNECT", Host: "pypi.org", Port: 443,
			Action: "ask", Rule: "default", ApprovalID: "a1"},
		{Seq: 2, Event: decisionlog.EventApproval, Time: at, Kind: "connect", Host: "pypi.org", Port: 443,
			Action: "allow", Rule: "default", ApprovalID: "a1", Answer: "allow", Scope: "session", By: "cli"},
		{Seq: 3, Event: decisionlog.EventApproval, Time: at, Kind: "http", Host: "evil.example", Port: 80,
			Action: "block", Rule: "default", ApprovalID: "a2", Answer: "deny", Scope: "once", By: "timeout"},
	}
	r := summarize(t, recs)
	if len(r.Unknown) != 0 {
		t.Errorf("Unknown: got %v, want none", r.Unknown)
	}
	if len(r.Approvals) != 2 || r.Approvals[0].By != "cli" || r.Approvals[0].Answer != "allow" || r.Approvals[1].By != "timeout" {
		t.Fatalf("Approvals: got %+v, want the two answers", r.Approvals)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, r, "text"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Approvals (who answered what)", "a1  allow session by cli  pypi.org:443", "a2  deny once by timeout  evil.example:80"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
	p, err := netpolicy.Compile(netpolicy.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if d, ok := Replay(p, &recs[i]); ok {
			t.Errorf("Replay of approval record %d: got %+v, want none", i, d)
		}
	}
}
