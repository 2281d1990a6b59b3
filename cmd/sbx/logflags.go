package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway"
)

// logLimitFlags bound the decision log file's growth: --log-rate and
// --log-max-size, shared by sbx run and sbx gateway.
type logLimitFlags struct {
	rate    float64
	maxSize string
}

func (l *logLimitFlags) AddFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&l.rate, "log-rate", gateway.DefaultLogRate, fmt.Sprintf("write at most `N` records a second to the log file (bursts of %d); the rest are counted in a dropped record; 0 for no limit", gateway.DefaultLogBurst))
	fs.StringVar(&l.maxSize, "log-max-size", formatBytes(gateway.DefaultLogMaxBytes), "stop writing records to the log file at `BYTES` (a dropped record counts the rest); 0 for no limit")
}

// Options turns the flags into the gateway's file sink options.
func (l *logLimitFlags) Options() (gateway.FileSinkOptions, error) {
	var o gateway.FileSinkOptions
	switch {
	case l.rate < 0 || l.rate != l.rate:
		return o, fmt.Errorf("--log-rate %v: want a number of records a second, or 0 for no limit", l.rate)
	case l.rate == 0:
		o.RatePerSecond = gateway.NoLimit
	default:
		o.RatePerSecond = l.rate
	}
	n, err := parseBytes(l.maxSize)
	if err != nil {
		return o, fmt.Errorf("--log-max-size %q: %w", l.maxSize, err)
	}
	o.MaxBytes = n
	if n == 0 {
		o.MaxBytes = gateway.NoLimit
	}
	return o, nil
}
