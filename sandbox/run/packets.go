package run

import (
	"log/slog"
	"time"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox"
)

// packetSource is where the reports of refused packets are read: the
// sandbox's *sandbox.PacketLog.
type packetSource interface {
	Run(fn func(sandbox.Packet)) error
	Lost() uint64
}

// packetSink is where they go: the gateway's *gateway.BypassLog.
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
