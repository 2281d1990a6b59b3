package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
)

// What goes wrong in sbx run's background work is said: on stderr at
// once, and in the decision log where it changes what the log holds.

// packetSource is where sbx run reads the reports of refused packets:
// the sandbox's *sandbox.PacketLog.
type packetSource interface {
	Run(fn func(sandbox.Packet)) error
	Lost() uint64
}

// packetSink is where they go: the gateway's *gateway.Server.
type packetSink interface {
	ReportPacket(gateway.Packet)
	ReportPacketsLost(count uint64, since time.Time, err error)
}

// forwardPackets hands src's reports to dst until src's Run returns (when
// the sandbox closes it, or on a read error). Reports the kernel dropped
// are recorded as lost as soon as the next report shows them, and a read
// error is said through logger and recorded, since bypass records stop
// with it.
func forwardPackets(src packetSource, dst packetSink, logger *slog.Logger) {
	var reported uint64
	since := time.Now()
	err := src.Run(func(p sandbox.Packet) {
		if lost := src.Lost(); lost > reported {
			dst.ReportPacketsLost(lost-reported, since, nil)
			reported = lost
		}
		since = time.Now()
		dst.ReportPacket(gateway.Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst})
	})
	if lost := src.Lost(); lost > reported {
		dst.ReportPacketsLost(lost-reported, since, nil)
	}
	if err != nil {
		logger.Error("refused packets are no longer reported (no more bypass records in the log)", "err", err)
		dst.ReportPacketsLost(0, time.Now(), err)
	}
}

// lineHandler is a slog.Handler that writes each record at or above its
// level as one line, "sbx: <prefix><message>: key=value ...", for
// operational messages among the command's own output.
type lineHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	level  slog.Level
	prefix string
	attrs  []slog.Attr
}

// newLineLogger returns a logger that writes warnings and errors to w,
// each message prefixed with prefix (such as "gateway: ").
func newLineLogger(w io.Writer, prefix string) *slog.Logger {
	return slog.New(&lineHandler{mu: &sync.Mutex{}, w: w, level: slog.LevelWarn, prefix: prefix})
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("sbx: " + h.prefix + r.Message)
	sep := ": "
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s%s=%v", sep, a.Key, a.Value)
		sep = " "
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, printable(b.String()[:b.Len()-1])+"\n")
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(c.attrs[:len(c.attrs):len(c.attrs)], as...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }
