package decisionlog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
