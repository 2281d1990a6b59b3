package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// What goes wrong in sbx run's background work is said on stderr at
// once, one line each, through the logger the run library is given.

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
