package run

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
)

// fakePackets reports its packets, losing lostBefore[i] reports before
// the i-th, then fails with err.
type fakePackets struct {
	packets    []sandbox.Packet
	lostBefore []uint64
	err        error
	lost       uint64
}

func (f *fakePackets) Run(fn func(sandbox.Packet)) error {
	for i, p := range f.packets {
		f.lost += f.lostBefore[i]
		fn(p)
	}
	return f.err
}

func (f *fakePackets) Lost() uint64 { return f.lost }

type lostReport struct {
	count uint64
	err   error
}

type fakeSink struct {
	reported int
	lost     []lostReport
}

func (s *fakeSink) ReportPacket(gateway.Packet) { s.reported++ }
func (s *fakeSink) ReportPacketsLost(n uint64, _ time.Time, err error) {
	s.lost = append(s.lost, lostReport{n, err})
}

// TestFaultForwardPacketsSaysWhatIsLost: reports the kernel dropped are
// recorded as lost when the next report shows them, and a read error,
// after which bypass records stop, is said through the logger and recorded: it
// used to be dropped without a word.
func TestFaultForwardPacketsSaysWhatIsLost(t *testing.T) {
	p := sandbox.Packet{Proto: "udp"}
	readErr := errors.New("reading NFLOG group 7: bad file descriptor")
	src := &fakePackets{packets: []sandbox.Packet{p, p, p}, lostBefore: []uint64{0, 5, 0}, err: readErr}
	sink := &fakeSink{}
	var stderr strings.Builder
	forwardPackets(src, sink, slog.New(slog.NewTextHandler(&stderr, nil)))
	if sink.reported != 3 {
		t.Errorf("%d packets reported, want 3", sink.reported)
	}
	want := []lostReport{{5, nil}, {0, readErr}}
	if len(sink.lost) != len(want) || sink.lost[0] != want[0] || !errors.Is(sink.lost[1].err, readErr) || sink.lost[1].count != 0 {
		t.Errorf("lost reports %v, want %v", sink.lost, want)
	}
	if got := stderr.String(); !strings.Contains(got, "level=ERROR msg=\"refused packets are no longer reported") || !strings.Contains(got, "err=\"reading NFLOG group 7") || strings.Count(got, "\n") != 1 {
		t.Errorf("stderr %q: want one line that says bypass records stopped, with the error", got)
	}
}
