package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// seqRec is a record of seqLog: a dropped record counting dropped
// records when that is not 0, a decision otherwise.
type seqRec struct {
	seq     uint64
	dropped uint64 // >0: a dropped record counting this many
}

// seqLog is a log of records with the given seqs.
func seqLog(seqs ...seqRec) []decisionlog.Record {
	var recs []decisionlog.Record
	for i, s := range seqs {
		r := rec(i, "connect", "CONNECT", "a.example", 443, "", "allow", "default")
		if s.dropped > 0 {
			r = decisionlog.Record{V: 1, Event: decisionlog.EventDropped, Time: t0, Since: t0, Count: s.dropped, Reason: "over budget"}
		}
		r.Seq = s.seq
		recs = append(recs, r)
	}
	return recs
}

// seqs are decisions numbered ns.
func seqs(ns ...uint64) []seqRec {
	out := make([]seqRec, len(ns))
	for i, n := range ns {
		out[i] = seqRec{seq: n}
	}
	return out
}

func TestScanFindsSeqGaps(t *testing.T) {
	tests := []struct {
		name     string
		log      []seqRec
		missing  uint64
		firstGap [2]uint64
	}{
		{"whole", seqs(1, 2, 3, 4), 0, [2]uint64{}},
		{"a gap", seqs(1, 2, 5, 6), 2, [2]uint64{3, 4}},
		{"a gap of one", seqs(1, 2, 4), 1, [2]uint64{3, 3}},
		{"a dropped record counts the gap", []seqRec{{1, 0}, {2, 0}, {5, 2}, {6, 0}}, 0, [2]uint64{}},
		{"a dropped record counts two gaps", []seqRec{{1, 0}, {3, 0}, {5, 2}, {6, 0}}, 0, [2]uint64{}},
		{"a dropped record counts less than the gap", []seqRec{{1, 0}, {2, 0}, {6, 2}, {7, 0}}, 1, [2]uint64{3, 5}},
		{"a gap after the last dropped record", []seqRec{{1, 0}, {3, 1}, {4, 0}, {6, 0}}, 1, [2]uint64{5, 5}},
		{"a gateway appended to the log", seqs(1, 2, 3, 1, 2), 0, [2]uint64{}},
		{"a gap before another gateway's records", seqs(1, 3, 1, 2), 1, [2]uint64{2, 2}},
		{"the second gateway's first records missing", seqs(1, 2, 1, 4), 2, [2]uint64{2, 3}},
		{"the first records missing", seqs(5, 6), 4, [2]uint64{1, 4}},
		{"records without seq are not checked", seqs(0, 0, 1, 0, 2), 0, [2]uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads, err := Scan(context.Background(), logSource(seqLog(tt.log...)), func(*decisionlog.Record) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if got := reads[0]; got.Missing != tt.missing || got.FirstGap != tt.firstGap {
				t.Errorf("got %d missing, the first at %v; want %d at %v", got.Missing, got.FirstGap, tt.missing, tt.firstGap)
			}
			if got, want := reads[0].Gaps() != "", tt.missing > 0; got != want {
				t.Errorf("Gaps() = %q, want text %v", reads[0].Gaps(), want)
			}
		})
	}
}

// TestSeqGapsFailExpectAndDiff: a log that lacks records by its seqs, and
// has no dropped record for them, cannot show that a policy allows all it
// did, nor that it reaches nothing new; one whose gaps a dropped record
// counts fails for its dropped records, and says nothing of gaps.
func TestSeqGapsFailExpectAndDiff(t *testing.T) {
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	whole := seqLog(seqs(1, 2, 3)...)
	gap := seqLog(seqs(1, 2, 5)...)
	counted := seqLog([]seqRec{{1, 0}, {2, 0}, {5, 2}, {6, 0}}...)
	tests := []struct {
		name    string
		log     []decisionlog.Record
		gaps    bool
		dropped uint64
	}{
		{"whole", whole, false, 0},
		{"a gap", gap, true, 0},
		{"a gap a dropped record counts", counted, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Expect(context.Background(), open, "open", logSource(tt.log), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if e.Holds() != (!tt.gaps && tt.dropped == 0) || (len(e.Gaps) > 0) != tt.gaps || e.Dropped != tt.dropped {
				t.Errorf("--expect: got holds %v, gaps %q, dropped %d; want gaps %v, dropped %d", e.Holds(), e.Gaps, e.Dropped, tt.gaps, tt.dropped)
			}
			var b strings.Builder
			if err := WriteExpectation(&b, e, FormatText); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(b.String(), "no dropped record accounts for"); got != tt.gaps {
				t.Errorf("--expect says of gaps %v, want %v:\n%s", got, tt.gaps, b.String())
			}

			old, err := Summarize(context.Background(), logSource(whole), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			cur, err := Summarize(context.Background(), logSource(tt.log), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			d := DiffReports(old.Report(), cur.Report(), 0)
			if d.ReachesNew() != (tt.gaps || tt.dropped > 0) {
				t.Errorf("--diff: got reaches new %v, incomplete %q; want %v", d.ReachesNew(), d.Incomplete, tt.gaps || tt.dropped > 0)
			}
			if got := strings.Contains(strings.Join(d.Incomplete, "\n"), "no dropped record accounts for"); got != tt.gaps {
				t.Errorf("--diff says of gaps %v, want %v: %q", got, tt.gaps, d.Incomplete)
			}
		})
	}
}

// TestDroppedOfUnknownCountFailsExpect: a dropped record whose count is 0
// says records stopped and their number is not known (reports of refused
// packets that could no longer be read): the logs are incomplete, so
// --expect does not hold and --diff answers that the new logs may reach
// more. Counted as 0, it passed both.
func TestDroppedOfUnknownCountFailsExpect(t *testing.T) {
	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	log := seqLog(seqs(1, 2)...)
	log = append(log, decisionlog.Record{V: 1, Seq: 3, Event: decisionlog.EventDropped, Time: t0, Since: t0,
		Reason: "refused packets are no longer reported, so bypass records stop here: reading NFLOG: bad file descriptor"})
	e, err := Expect(context.Background(), open, "open", logSource(log), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Holds() || e.Dropped != 1 {
		t.Errorf("--expect: holds %v, dropped %d; want it not to hold, dropped 1", e.Holds(), e.Dropped)
	}
	old, err := Summarize(context.Background(), logSource(seqLog(seqs(1, 2)...)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := Summarize(context.Background(), logSource(log), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffReports(old.Report(), cur.Report(), 0); !d.ReachesNew() {
		t.Errorf("--diff of a log whose records stopped: reaches new false, incomplete %q; want true", d.Incomplete)
	}
}
