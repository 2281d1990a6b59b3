package decisionlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// TestBudgetAlone drives a budget without a file: the rate limit leaves
// out a record without a target past the burst, the size limit makes it
// full (signalled once) and fails commits with a *LogFullError naming the
// flag, a new file gives the room back (signalled), and the dropped
// record it stages counts what it left out, with its reasons, and is
// counted off once written.
func TestBudgetAlone(t *testing.T) {
	clock := &lfClock{t: lfStart}
	signals := 0
	b := newBudget("/logs/d.jsonl", FileSinkOptions{RatePerSecond: 1, Burst: 2, MaxBytes: 100, MaxBytesFlag: "--log-max-size"},
		0, clock.Now, func() { signals++ })

	for i, want := range []bool{true, true, false} {
		if got := b.admit(10, nil, time.Time{}); got != want {
			t.Errorf("record %d within the rate: got %v, want %v", i+1, got, want)
		}
	}
	b.grow(20)
	clock.Advance(time.Second)
	if got := b.admit(81, nil, time.Time{}); got {
		t.Errorf("a record past the size: got admitted, want left out")
	}
	var full *LogFullError
	if err := b.commitFits(1, false); !errors.As(err, &full) || full.Flag != "--log-max-size" || full.MaxBytes != 100 {
		t.Errorf("commitFits once full: got %v, want a *LogFullError of --log-max-size 100", err)
	}
	if err := b.commitFits(1, true); err != nil {
		t.Errorf("commitFits for a file to be made anew: got %v, want nil", err)
	}
	if signals != 1 {
		t.Errorf("signals once full: got %d, want 1", signals)
	}
	b.restart(20)
	if err := b.commitFits(80, false); err != nil || signals != 2 {
		t.Errorf("after a new file: got %v and %d signals, want nil and 2", err, signals)
	}

	if got := b.uncounted.Load(); got != 2 {
		t.Fatalf("left out: got %d, want 2", got)
	}
	if !b.reserve(7, dropAtClose, time.Time{}, false, nil) {
		t.Fatal("reserve: got false, want a dropped record staged")
	}
	line, n, ok := b.takeStaged()
	if !ok || n != 2 || !strings.Contains(string(line), `"seq":7`) ||
		!strings.Contains(string(line), "rate limit of 1 records a second") || !strings.Contains(string(line), "size limit of 100 bytes") {
		t.Errorf("staged: got %q counting %d (%v), want seq 7 counting 2 for the rate and the size", line, n, ok)
	}
	if v := b.counted(n); v != nil || b.uncounted.Load() != 0 || b.overRate || b.overSize {
		t.Errorf("after counted: got vanished %v, %d uncounted, over rate %v, over size %v; want none", v, b.uncounted.Load(), b.overRate, b.overSize)
	}
	if got := b.total.Load(); got != 2 {
		t.Errorf("total left out: got %d, want 2", got)
	}
}

// TestBudgetTellsAVanishedFile stages a dropped record for a file that
// vanished, with nothing left out: it says so, counts nothing, and hands
// the vanished fault back once written.
func TestBudgetTellsAVanishedFile(t *testing.T) {
	b := newBudget("/logs/d.jsonl", FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit}, 0, nil, func() {})
	v := &LogFileError{Path: "/logs/d.jsonl", Err: ErrLogFileRemoved}
	if b.reserve(1, dropBeforeRecord, time.Time{}, false, nil) {
		t.Error("reserve with nothing to tell: got true, want false")
	}
	if !b.reserve(1, dropBeforeCommit, time.Time{}, true, v) {
		t.Fatal("reserve before a commit for a vanished file: got false, want true")
	}
	line, n, _ := b.takeStaged()
	if n != 0 || !strings.Contains(string(line), "removed or replaced while sbx wrote it") {
		t.Errorf("staged: got %q counting %d, want the vanished file told, counting 0", line, n)
	}
	if got := b.counted(n); got != v {
		t.Errorf("counted: got %v, want the vanished fault back", got)
	}
}

// TestFileSinkBudget runs a Log with a FileSink through short scenarios
// and compares the file with the records it should hold, written as
// "event seq", plus "count=N since=D" (D after the clock's start) for a
// dropped record.
func TestFileSinkBudget(t *testing.T) {
	// A step emits Decisions decision records, then a policy record when
	// Policy is set, then advances the clock by Wait.
	type step struct {
		decisions int
		policy    bool
		wait      time.Duration
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		steps []step
		want  []string
	}{
		{
			name: "within the burst", rate: 1, burst: 3,
			steps: []step{{decisions: 3}},
			want:  []string{"decision 1", "decision 2", "decision 3"},
		},
		{
			name: "dropped record when writing resumes", rate: 1, burst: 2,
			steps: []step{{decisions: 5, wait: 2 * time.Second}, {decisions: 1}},
			want: []string{
				"decision 1", "decision 2", "dropped 6 count=3 since=0s", "decision 7",
			},
		},
		{
			name: "dropped record at close", rate: 1, burst: 1,
			steps: []step{{decisions: 3}},
			want:  []string{"decision 1", "dropped 4 count=2 since=0s"},
		},
		{
			name: "a quiet close adds nothing", rate: 1, burst: 1,
			steps: []step{{decisions: 2, wait: time.Second}, {decisions: 1, wait: time.Second}},
			want:  []string{"decision 1", "dropped 3 count=1 since=0s", "decision 4"},
		},
		{
			name: "policy records are never left out", rate: 1, burst: 1,
			steps: []step{{decisions: 1, policy: true}, {decisions: 1, policy: true}, {policy: true}},
			want: []string{
				"decision 1", "policy 2", "dropped 4 count=1 since=0s", "policy 5", "policy 6",
			},
		},
		{
			name: "one dropped record a second", rate: 10, burst: 1,
			steps: []step{
				{decisions: 2, wait: 100 * time.Millisecond}, // 1 written, 2 left out
				{decisions: 2, wait: 100 * time.Millisecond}, // dropped 3, 4 written, 5 left out
				{decisions: 1, wait: time.Second},            // 6 written: too soon for a dropped record
				{decisions: 1},                               // dropped 7, 8 written
			},
			want: []string{
				"decision 1", "dropped 3 count=1 since=0s", "decision 4", "decision 6",
				"dropped 7 count=1 since=100ms", "decision 8",
			},
		},
		{
			name: "no rate limit", rate: NoLimit, burst: 1,
			steps: []step{{decisions: 3}},
			want:  []string{"decision 1", "decision 2", "decision 3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, path, clock := lfOpen(t, FileSinkOptions{RatePerSecond: tt.rate, Burst: tt.burst, MaxBytes: NoLimit})
			l := NewLog("sb", fs)
			for _, st := range tt.steps {
				for range st.decisions {
					l.Emit(&Record{Event: EventDecision, Action: "allow"})
				}
				if st.policy {
					l.Emit(&Record{Event: EventPolicy})
				}
				clock.Advance(st.wait)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range lfRead(t, path) {
				s := fmt.Sprintf("%s %d", r.Event, r.Seq)
				if r.Event == EventDropped {
					s += fmt.Sprintf(" count=%d since=%v", r.Count, r.Since.Sub(lfStart))
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFileSinkFlood floods a Log with records faster than its FileSink's
// rate and checks that the file stays small, keeps every policy record,
// and accounts for every record with its seq.
func TestFileSinkFlood(t *testing.T) {
	const (
		total    = 100_000
		rate     = 100
		burst    = 1000
		interval = 100 * time.Microsecond // 10 000 records a second
	)
	fs, path, clock := lfOpen(t, FileSinkOptions{RatePerSecond: rate, Burst: burst})
	other := &lfSeqSink{}
	l := NewLog("sb", fs, other)
	policies := 0
	for i := range total {
		if i%10_000 == 5000 {
			l.Emit(&Record{Event: EventPolicy})
			policies++
		} else {
			l.Emit(&Record{Event: EventDecision})
		}
		clock.Advance(interval)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Duration(total) * interval
	recs := lfRead(t, path)

	// Every seq of the Log is in the file or in the other sink, and in
	// both exactly for the records the file kept: the file's other
	// records are its dropped records, and the seqs in the file increase.
	inOther := map[uint64]bool{}
	for _, seq := range other.seqs {
		inOther[seq] = true
	}
	var decisions, gotPolicies, dropped int
	var counted uint64
	var lastSeq uint64
	var lastDrop time.Time
	for i, r := range recs {
		if r.Seq <= lastSeq {
			t.Fatalf("line %d: got seq %d after seq %d, want an increasing seq", i+1, r.Seq, lastSeq)
		}
		lastSeq = r.Seq
		switch r.Event {
		case EventDecision:
			decisions++
		case EventPolicy:
			gotPolicies++
		case EventDropped:
			dropped++
			counted += r.Count
			if r.Count == 0 || r.Since.After(r.Time) || r.Reason == "" {
				t.Errorf("line %d: got count %d, since %v, time %v, reason %q; want a count, since before time, a reason",
					i+1, r.Count, r.Since, r.Time, r.Reason)
			}
			if i < len(recs)-1 && !lastDrop.IsZero() && r.Time.Sub(lastDrop) < fileSinkDroppedInterval {
				t.Errorf("line %d: dropped record %v after the last one, want at least %v", i+1, r.Time.Sub(lastDrop), fileSinkDroppedInterval)
			}
			lastDrop = r.Time
		}
		if got, want := inOther[r.Seq], r.Event != EventDropped; got != want {
			t.Errorf("line %d: %s record with seq %d: got it in the other sink %v, want %v", i+1, r.Event, r.Seq, got, want)
		}
		inOther[r.Seq] = true
	}
	for seq := uint64(1); seq <= lastSeq; seq++ {
		if !inOther[seq] {
			t.Fatalf("seq %d is in neither sink", seq)
		}
	}
	if gotPolicies != policies {
		t.Errorf("got %d policy records, want all %d", gotPolicies, policies)
	}
	if got, want := uint64(decisions)+counted, uint64(total-policies); got != want {
		t.Errorf("got %d decision records written and %d counted as dropped, %d in all, want %d",
			decisions, counted, got, want)
	}
	if got, want := fs.Dropped(), counted; got != want {
		t.Errorf("Dropped: got %d, want %d", got, want)
	}
	if maxDecisions := burst + int(rate*elapsed.Seconds()) + 1; decisions > maxDecisions {
		t.Errorf("got %d decision records in %v, want at most %d", decisions, elapsed, maxDecisions)
	}
	if maxDropped := int(elapsed/fileSinkDroppedInterval) + 2; dropped > maxDropped {
		t.Errorf("got %d dropped records in %v, want at most %d", dropped, elapsed, maxDropped)
	}
	if recs[len(recs)-1].Event != EventDropped {
		t.Errorf("last record: got event %q, want %q", recs[len(recs)-1].Event, EventDropped)
	}
}

// TestFileSinkMaxBytes fills a log that already holds some bytes to its
// size limit, and checks that the limit holds but for policy records and
// the dropped record written at Close.
func TestFileSinkMaxBytes(t *testing.T) {
	const maxBytes = 64 << 10
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	old := []byte(`{"old":true}` + "\n")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	fs, err := OpenFileSink(path, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: maxBytes, Append: true})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog("sb", fs)
	const total = 1000
	for range total {
		l.Emit(dlBenchRecord())
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxBytes || fi.Size() < maxBytes-1024 {
		t.Errorf("size when full: got %d, want at most %d and no less than a record below it", fi.Size(), maxBytes)
	}
	l.Emit(&Record{Event: EventPolicy, Change: "rule x added"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data[:len(old)]) != string(old) {
		t.Errorf("the file's old content was changed: got %q", data[:len(old)])
	}
	lines := decisionlogtest.RawLines(t, path)[1:]
	recs := lfRead(t, path)[1:]
	last := len(recs) - 1
	if recs[last].Event != EventDropped {
		t.Fatalf("last record: got event %q, want %q", recs[last].Event, EventDropped)
	}
	var decisions, policies int
	var counted uint64
	for i, r := range recs {
		switch r.Event {
		case EventDecision:
			decisions++
		case EventPolicy:
			policies++
			if got, want := int64(len(data)-len(lines[i])-1-len(lines[last])-1), int64(maxBytes); got > want {
				t.Errorf("size without the policy and the last dropped record: got %d, want at most %d", got, want)
			}
		case EventDropped:
			counted += r.Count
		}
	}
	if policies != 1 {
		t.Errorf("got %d policy records, want 1", policies)
	}
	if got, want := uint64(decisions)+counted, uint64(total); got != want {
		t.Errorf("got %d written and %d counted as dropped, %d in all, want %d", decisions, counted, got, want)
	}
}

// TestFileSinkWriteRecordBudget writes to a FileSink without a Log: the
// budget applies, and the dropped record comes at Close, numbered after
// the last seq.
func TestFileSinkWriteRecordBudget(t *testing.T) {
	fs, path, _ := lfOpen(t, FileSinkOptions{RatePerSecond: 1, Burst: 2})
	for seq := uint64(1); seq <= 5; seq++ {
		line := (&Record{Seq: seq, Event: EventDecision}).AppendJSON(nil)
		if err := fs.WriteRecord(seq, append(line, '\n')); err != nil {
			t.Fatalf("WriteRecord %d: %v", seq, err)
		}
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range lfRead(t, path) {
		got = append(got, fmt.Sprintf("%s %d %d", r.Event, r.Seq, r.Count))
	}
	want := []string{"decision 1 0", "decision 2 0", "dropped 6 3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
}

// TestFileSinkLogClock checks the budget with the clock it has in
// production, the times a Log stamps on its records: at 10 records a
// second, a record right after another is left out, and one 150 ms later
// is written.
func TestFileSinkLogClock(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: 10, Burst: 1})
	l := NewLog("sb", fs)
	l.Emit(&Record{Event: EventDecision})
	l.Emit(&Record{Event: EventDecision})
	time.Sleep(150 * time.Millisecond)
	l.Emit(&Record{Event: EventDecision})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	recs := lfRead(t, path)
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s %d %d", r.Event, r.Seq, r.Count))
	}
	want := []string{"decision 1 0", "dropped 3 1", "decision 4 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("file (-want +got):\n%s", diff)
	}
	if !recs[1].Time.Equal(recs[2].Time) {
		t.Errorf("dropped record: got time %v, want %v, that of the record it came with", recs[1].Time, recs[2].Time)
	}
}

func TestFileSinkOptions(t *testing.T) {
	tests := []struct {
		name         string
		o            FileSinkOptions
		rate, burst  float64
		maxBytes     int64
		wantErr      bool
		wantNoBudget bool
	}{
		{name: "defaults", rate: DefaultLogRate, burst: DefaultLogBurst, maxBytes: DefaultLogMaxBytes},
		{name: "set", o: FileSinkOptions{RatePerSecond: 2.5, Burst: 7, MaxBytes: 99}, rate: 2.5, burst: 7, maxBytes: 99},
		{name: "no limits", o: FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit}, maxBytes: math.MaxInt64},
		{name: "no burst limit", o: FileSinkOptions{Burst: NoLimit}, maxBytes: DefaultLogMaxBytes},
		{name: "infinite rate", o: FileSinkOptions{RatePerSecond: math.Inf(1)}, maxBytes: DefaultLogMaxBytes},
		{name: "NaN rate", o: FileSinkOptions{RatePerSecond: math.NaN()}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := OpenFileSink(filepath.Join(t.TempDir(), "decisions.jsonl"), tt.o)
			if tt.wantErr {
				if err == nil {
					fs.Close()
					t.Fatalf("got nil error, want one")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			if b := fs.budget; b.rate != tt.rate || b.burst != tt.burst || b.tokens != tt.burst || b.maxBytes != tt.maxBytes {
				t.Errorf("got rate %v, burst %v, tokens %v, max bytes %d; want %v, %v, %v, %d",
					fs.budget.rate, fs.budget.burst, fs.budget.tokens, fs.budget.maxBytes, tt.rate, tt.burst, tt.burst, tt.maxBytes)
			}
		})
	}
}

// TestFileSinkFloodCannotHideANewTarget: a sandbox floods the log with
// blocked requests to one host, then contacts another once: the file
// holds that request's decision and close, so an audit sees it, while
// the flood itself stays within the budget (one record per target over
// the rate until the bucket is full again); and every one of many new
// targets is written, however many there are.
func TestFileSinkFloodCannotHideANewTarget(t *testing.T) {
	fs, path, clock := lfOpen(t, FileSinkOptions{RatePerSecond: 10, Burst: 100})
	l := NewLog("sb", fs)
	flood := func(n int) {
		for range n {
			l.Emit(&Record{Event: EventDecision, Kind: KindHTTP, Host: "noise.test", Port: 80, Action: "block"})
			clock.Advance(time.Millisecond)
		}
	}
	flood(10_000)
	l.Emit(&Record{Event: EventDecision, Kind: KindConnect, Host: "exfil.test", Port: 443, Action: "allow"})
	l.Emit(&Record{Event: EventClose, Kind: KindConnect, Host: "exfil.test", Port: 443, Action: "allow"})
	l.Emit(&Record{Event: EventDecision, Kind: KindConnect, Host: "exfil.test", Port: 443, Action: "allow"}) // again: counted
	flood(10_000)
	// Many targets: each is written, past what the flood remembers.
	for i := range 2 * maxFloodTargets {
		l.Emit(&Record{Event: EventDecision, Kind: KindHTTP, Host: fmt.Sprintf("h%d.test", i), Port: 80, Action: "block"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range decisionlogtest.RawLines(t, path) {
		lines = append(lines, string(line))
	}
	var exfil, noise, many int
	var noiseCounted, exfilCounted uint64
	for _, line := range lines {
		if strings.Contains(line, `"event":"dropped"`) {
			var r Record
			if err := Decode([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			for _, tg := range r.Targets {
				switch tg.Host {
				case "noise.test":
					noiseCounted += tg.Count
				case "exfil.test":
					exfilCounted += tg.Count
				}
			}
			continue
		}
		switch {
		case strings.Contains(line, `"host":"exfil.test"`):
			exfil++
		case strings.Contains(line, `"host":"noise.test"`):
			noise++
		case strings.Contains(line, `"host":"h`):
			many++
		}
	}
	if uint64(noise)+noiseCounted != 20_000 || exfilCounted != 1 {
		t.Errorf("noise.test: %d written and %d counted by the dropped records' targets, exfil.test %d counted; want 20000 in all, and 1",
			noise, noiseCounted, exfilCounted)
	}
	if exfil != 2 {
		t.Errorf("got %d records of exfil.test, want its decision and close (the repeat counted)", exfil)
	}
	// 100 burst + 10/s over 20 s of flood, and one over the rate.
	if noise > 100+10*20+2 {
		t.Errorf("got %d records of the flooded host, want the budget's", noise)
	}
	if many != 2*maxFloodTargets {
		t.Errorf("got %d records of distinct hosts over the rate, want each of the %d", many, 2*maxFloodTargets)
	}
}

// TestFileSinkFullFailsCommits fills a log to its size limit: every
// Commit then fails with a *LogFullError naming the file, the limit and
// the flag, while the file stays within its limit; the reporter is told
// once; records emitted meanwhile are counted in the last dropped record.
func TestFileSinkFullFailsCommits(t *testing.T) {
	fs, path, _ := lfOpen(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: 4 << 10, MaxBytesFlag: "--log-max-size"})
	l := NewLog("sb", fs)
	reports := newFaultReports(l)
	committed := 0
	var err error
	for i := 0; err == nil; i++ {
		if i > 100 {
			t.Fatal("100 commits did not fill a 4 KiB log")
		}
		if _, err = l.Commit(allowRecord("a.test", fmt.Sprintf("/%d", i))); err == nil {
			committed++
		}
	}
	var full *LogFullError
	if !errors.As(err, &full) {
		t.Fatalf("Commit past the limit: got %v, want a *LogFullError", err)
	}
	want := "decision log " + path + " is full (--log-max-size 4k), so every request is blocked until there is room: " +
		"move the file away and sbx starts a new log at its path within a second, or run again with a larger --log-max-size"
	if err.Error() != want {
		t.Errorf("the error:\ngot  %s\nwant %s", err, want)
	}
	if got := reports.next(t); got == nil || got.Error() != want {
		t.Errorf("reported: got %v, want the error", got)
	}
	for i := range 5 {
		l.Emit(&Record{Event: EventDecision, Kind: KindHTTP, Host: "a.test", Port: 80, Path: "/blocked", Action: "block", Reason: err.Error()})
		if _, err := l.Commit(allowRecord("b.test", fmt.Sprintf("/%d", i))); !errors.As(err, &full) {
			t.Errorf("Commit %d while full: got %v, want a *LogFullError", i, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 4<<10 {
		t.Errorf("the file: got %v (%v), want at most 4 KiB", fi.Size(), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, path)
	allowed := 0
	for _, r := range recs {
		if r.Event == EventDecision && r.Action == "allow" {
			allowed++
		}
	}
	last := recs[len(recs)-1]
	if allowed != committed || last.Event != EventDropped || last.Count < 5 || !strings.Contains(last.Reason, "size limit") {
		t.Errorf("got %d allowed decisions and last record %+v, want %d and a dropped record counting the 5 blocks", allowed, last, committed)
	}
	select {
	case e := <-reports.ch:
		t.Errorf("reported again: %v, want the fault told once", e)
	default:
	}
}

// TestFileSinkRateNamesTargets floods past the rate with repeats: each
// request to a new path is written in full (also once the sink remembers
// as many targets as it can), repeats are counted on their target, and
// written and counted add up.
func TestFileSinkRateNamesTargets(t *testing.T) {
	fs, path, clock := lfOpen(t, FileSinkOptions{RatePerSecond: 10, Burst: 10, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	for range 500 {
		if _, err := l.Commit(allowRecord("a.test", "/junk")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
	}
	for i := range 2 * maxFloodTargets {
		if _, err := l.Commit(allowRecord("a.test", fmt.Sprintf("/many/%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		l.Commit(allowRecord("a.test", "/junk"))
	}
	if _, err := l.Commit(allowRecord("a.test", "/exfil")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var junk, counted uint64
	paths := map[string]int{}
	for _, r := range readAll(t, path) {
		switch r.Event {
		case EventDecision:
			paths[r.Path]++
		case EventDropped:
			for _, tg := range r.Targets {
				if diff := cmp.Diff(DroppedTarget{Event: EventDecision, Kind: KindHTTP, Method: "GET", Host: "a.test", Port: 80, Path: "/junk", Action: "allow"},
					DroppedTarget{Event: tg.Event, Kind: tg.Kind, Method: tg.Method, Host: tg.Host, Port: tg.Port, Path: tg.Path, Action: tg.Action}); diff != "" {
					t.Errorf("a dropped record names another target (-want +got):\n%s", diff)
				}
				counted += tg.Count
			}
		}
	}
	junk = uint64(paths["/junk"])
	if junk+counted != 600 || counted == 0 {
		t.Errorf("/junk: %d written and %d counted, want 600 in all, some counted", junk, counted)
	}
	for i := range 2 * maxFloodTargets {
		if p := fmt.Sprintf("/many/%d", i); paths[p] != 1 {
			t.Fatalf("%s: got %d decisions, want 1", p, paths[p])
		}
	}
	if paths["/exfil"] != 1 {
		t.Errorf("/exfil, a new target after %d others: got %d decisions, want 1", 2*maxFloodTargets, paths["/exfil"])
	}
}

// TestFileSinkDroppedTargetsFitALine makes a dropped record name as many
// targets as a sink counts, with long paths whose every byte is escaped:
// the record stays a line a Reader takes.
func TestFileSinkDroppedTargetsFitALine(t *testing.T) {
	fs, path, _ := lfOpen(t, FileSinkOptions{RatePerSecond: 1, Burst: 1, MaxBytes: NoLimit})
	l := NewLog("sb", fs)
	long := strings.Repeat("\x01", 1024)
	for i := range 2 * maxFloodTargets {
		r := allowRecord("a.test", fmt.Sprintf("/%d/%s", i, long))
		l.Commit(r)
		l.Commit(allowRecord("a.test", r.Path))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rd := NewReader(bytes.NewReader(data), path)
	var r Record
	targets := 0
	for {
		err := rd.Next(&r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("reading the log: %v", err)
		}
		targets += len(r.Targets)
	}
	if targets == 0 {
		t.Error("no dropped record names a target")
	}
}

// TestDroppedTargetsRoundTrip encodes a dropped record with targets and
// decodes it with Decode and with encoding/json: both give it back.
func TestDroppedTargetsRoundTrip(t *testing.T) {
	in := Record{V: 1, Seq: 7, Event: EventDropped, Time: lfStart, Since: lfStart, Count: 3, Reason: "r",
		Targets: []DroppedTarget{
			{Event: EventDecision, Kind: KindHTTPS, Method: "GET", Host: "a.test", Port: 443, Path: "/x\"\n", Action: "allow", Count: 2},
			{Event: EventClose, Kind: KindConnect, Method: "CONNECT", Host: "b.test", Port: 443, Action: "allow", Count: 1},
		}}
	line := in.AppendJSON(nil)
	var got Record
	if err := Decode(line, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("Decode (-want +got):\n%s", diff)
	}
	var js struct {
		Targets []struct {
			Event, Kind, Method, Host, Path, Action string
			Port                                    int
			Count                                   uint64
		} `json:"targets"`
	}
	if err := json.Unmarshal(line, &js); err != nil || len(js.Targets) != 2 || js.Targets[0].Path != "/x\"\n" || js.Targets[1].Count != 1 {
		t.Errorf("encoding/json: got %+v (%v), want the targets", js, err)
	}
}
