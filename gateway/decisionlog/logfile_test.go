package decisionlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// lfStart is when the fake clocks of these tests start.
var lfStart = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// lfClock is a fake clock for a FileSink's budget.
type lfClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *lfClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lfClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// lfOpen opens a FileSink in a new directory with limits o and a fake
// clock, and returns it with its path and the clock.
func lfOpen(t testing.TB, o FileSinkOptions) (*FileSink, string, *lfClock) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	clock := &lfClock{t: lfStart}
	fs, err := openFileSink(path, o, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	return fs, path, clock
}

// lfLine is what these tests read of a line of the decision log.
type lfLine struct {
	Seq    uint64    `json:"seq"`
	Event  string    `json:"event"`
	Time   time.Time `json:"time"`
	Since  time.Time `json:"since"`
	Count  uint64    `json:"count"`
	Reason string    `json:"reason"`
}

// lfRead returns the records of the decision log at path.
func lfRead(t testing.TB, path string) []lfLine {
	t.Helper()
	var recs []lfLine
	for i, line := range decisionlogtest.RawLines(t, path) {
		var r lfLine
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// lfSeqSink keeps the seqs a Log writes to it.
type lfSeqSink struct {
	mu   sync.Mutex
	seqs []uint64
}

func (s *lfSeqSink) WriteRecord(seq uint64, _ []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqs = append(s.seqs, seq)
	return nil
}
func (s *lfSeqSink) Flush() error { return nil }
func (s *lfSeqSink) Close() error { return nil }

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
			if fs.rate != tt.rate || fs.burst != tt.burst || fs.tokens != tt.burst || fs.maxBytes != tt.maxBytes {
				t.Errorf("got rate %v, burst %v, tokens %v, max bytes %d; want %v, %v, %v, %d",
					fs.rate, fs.burst, fs.tokens, fs.maxBytes, tt.rate, tt.burst, tt.burst, tt.maxBytes)
			}
		})
	}
}

func TestUnsafeLogFileErrorMessage(t *testing.T) {
	const fix = ": remove it or choose another path for the log"
	tests := []struct {
		err  UnsafeLogFileError
		want string
	}{
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeSymlink},
			"decision log /x/y: is a symbolic link; sbx never follows one there (a sandbox could have planted it)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeNamedPipe},
			"decision log /x/y: is a named pipe, not a regular file; sbx writes its log only to a regular file " +
				"(a sandbox could have planted this one, and a pipe could hang sbx)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeSocket},
			"decision log /x/y: is a socket, not a regular file; sbx writes its log only to a regular file " +
				"(a sandbox could have planted this one, and a pipe could hang sbx)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeDevice | os.ModeCharDevice},
			"decision log /x/y: is a character device, not a regular file; sbx writes its log only to a regular file " +
				"(a sandbox could have planted this one, and a pipe could hang sbx)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeIrregular},
			"decision log /x/y: is a file of an unknown type, not a regular file; sbx writes its log only to a regular file " +
				"(a sandbox could have planted this one, and a pipe could hang sbx)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", Type: os.ModeDir},
			"decision log /x/y: is a directory: name a file in it, or choose another path for the log",
		},
		{
			UnsafeLogFileError{Path: "/x/y", UID: 65534, Links: 1, EUID: 0},
			"decision log /x/y: is owned by uid 65534, not by uid 0 that sbx runs as; sbx appends only to its own files " +
				"(a sandbox could have planted this one)" + fix,
		},
		{
			UnsafeLogFileError{Path: "/x/y", UID: 0, Links: 2, EUID: 0},
			"decision log /x/y: has 2 links; sbx appends only to a file with a single name " +
				"(a sandbox could have linked another file there)" + fix,
		},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%+v:\ngot  %s\nwant %s", tt.err, got, tt.want)
		}
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

// TestFileSinkBatches writes records over several batches, with Flush
// between some of them, and expects every record in the file in order:
// the batches the flusher writes and those Flush writes keep their order.
// A full batch reaches the file without a Flush.
func TestFileSinkBatches(t *testing.T) {
	fs, path := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	pad := strings.Repeat("x", 300)
	const n = 2000 // about 10 batches
	for seq := uint64(1); seq <= n; seq++ {
		if err := fs.WriteRecord(seq, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`,"pad":"`+pad+`"}`+"\n")); err != nil {
			t.Fatal(err)
		}
		if seq%777 == 0 {
			if err := fs.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if seq == 500 {
			// Past the first batch: the flusher writes it without a Flush.
			for deadline := time.Now().Add(30 * time.Second); len(decisionlogtest.RawLines(t, path)) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a full batch was not written")
				}
			}
		}
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decisionlogtest.RawLines(t, path)
	if len(lines) != n {
		t.Fatalf("got %d lines, want %d", len(lines), n)
	}
	for i, line := range lines {
		var r struct{ Seq int }
		if err := json.Unmarshal(line, &r); err != nil || r.Seq != i+1 {
			t.Fatalf("line %d: got seq %d (%v), want %d", i+1, r.Seq, err, i+1)
		}
	}
}

// TestFileSinkFlushAndCloseReportAFailingFile makes every write to the
// file fail while records go in, full batches included: Flush returns the
// write's error, and again at the next call while the file still fails,
// and Close returns an error.
func TestFileSinkFlushAndCloseReportAFailingFile(t *testing.T) {
	fs, _ := openTempSink(t, FileSinkOptions{RatePerSecond: NoLimit, MaxBytes: NoLimit})
	fs.f.Close() // every write to it fails
	line := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}` + "\n")
	var werr error
	for seq := uint64(1); seq <= 1000 && werr == nil; seq++ {
		werr = fs.WriteRecord(seq, line)
		if seq%100 == 0 {
			time.Sleep(time.Millisecond) // let the flusher take a batch
		}
	}
	if werr == nil {
		werr = fs.Flush()
	}
	if !errors.Is(werr, os.ErrClosed) {
		t.Errorf("writes to a failing file: got %v, want os.ErrClosed", werr)
	}
	if err := fs.Flush(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Flush after the error: got %v, want it again", err)
	}
	if err := fs.Close(); err == nil {
		t.Error("Close after the error: got nil, want it")
	}
}
