package mockllm

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// standInText is the text of the reply that a fault with status 200 cuts
// short or stalls.
const standInText = "sbx mock LLM: this reply is cut short by a scripted fault, so the client sees a broken answer."

// faultAnswer returns what a fault sends, before any cut.
func faultAnswer(req *request, f *Fault) *answer {
	status := f.Status
	if status == 0 {
		status = http.StatusOK
	}
	var a *answer
	switch {
	case f.Body != "":
		a = newAnswer(status, contentJSON, false)
		a.pieces = [][]byte{[]byte(f.Body)}
	case status == http.StatusOK:
		reply := Reply{Text: standInText}
		a = renderReply(req, &reply)
	default:
		a = errorAnswer(req.dialect, status, fmt.Sprintf("sbx mock LLM: scripted fault: %d %s", status, statusText(status)))
	}
	for name, v := range f.Headers {
		a.header.Set(name, v)
	}
	return a
}

// statusText is http.StatusText, knowing Anthropic's 529.
func statusText(status int) string {
	if status == 529 {
		return "Overloaded"
	}
	return http.StatusText(status)
}

// describeFault says what a fault does, for the journal: "fault 429",
// "fault 200: delay 100 ms, disconnect after 3 events".
func describeFault(f *Fault, status int) string {
	var parts []string
	if f.DelayMS > 0 {
		parts = append(parts, fmt.Sprintf("delay %d ms", f.DelayMS))
	}
	what := "disconnect"
	if f.Stall {
		what = "stall"
	}
	switch {
	case f.DisconnectAfterBytes != nil:
		parts = append(parts, fmt.Sprintf("%s after %d bytes", what, *f.DisconnectAfterBytes))
	case f.DisconnectAfterEvents != nil:
		parts = append(parts, fmt.Sprintf("%s after %d events", what, *f.DisconnectAfterEvents))
	case f.Stall:
		parts = append(parts, "stall")
	}
	s := "fault " + strconv.Itoa(status)
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// send writes an answer, shaped by fault f if not nil: a delay before it,
// then a cut (a stall, or a closed connection) part-way. Waits end early
// when the client goes away or reset is closed; a cut or an early end
// aborts the response (see ServeHTTP).
func send(w http.ResponseWriter, hr *http.Request, a *answer, f *Fault, reset <-chan struct{}) {
	ctx := hr.Context()
	rc := http.NewResponseController(w)
	cutBytes, cutEvents, stall := -1, -1, false
	if f != nil {
		if !wait(ctx, reset, time.Duration(f.DelayMS)*time.Millisecond) {
			panic(http.ErrAbortHandler)
		}
		stall = f.Stall
		switch {
		case f.DisconnectAfterBytes != nil:
			cutBytes = *f.DisconnectAfterBytes
		case f.DisconnectAfterEvents != nil:
			cutEvents = *f.DisconnectAfterEvents
		case f.Stall && a.stream:
			cutEvents = 1
		case f.Stall:
			cutBytes = 0
		}
	}
	cut := cutBytes >= 0 || cutEvents >= 0
	for name, v := range a.header {
		w.Header()[name] = v
	}
	if !cut && !a.stream {
		n := 0
		for _, p := range a.pieces {
			n += len(p)
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(a.status)
	remaining := cutBytes
	for i, p := range a.pieces {
		if i == cutEvents || remaining == 0 {
			break
		}
		if remaining > 0 && len(p) > remaining {
			p = p[:remaining]
		}
		if remaining > 0 {
			remaining -= len(p)
		}
		if i > 0 && !wait(ctx, reset, a.gap) {
			panic(http.ErrAbortHandler)
		}
		if _, err := w.Write(p); err != nil {
			return // the client went away
		}
		if a.stream {
			_ = rc.Flush() // a writer that cannot flush sends at the end
		}
	}
	if !cut {
		return
	}
	// A cut: what was written goes out, then the connection is held or
	// closed, never ended properly (a cut past the end of the answer falls
	// at its end).
	_ = rc.Flush()
	if stall {
		wait(ctx, reset, -1)
	}
	panic(http.ErrAbortHandler)
}

// wait waits for d (forever when d < 0) and reports whether it did: false
// when ctx is done or reset is closed first.
func wait(ctx context.Context, reset <-chan struct{}, d time.Duration) bool {
	if d == 0 {
		return ctx.Err() == nil
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true
	case <-ctx.Done():
	case <-reset:
	}
	return false
}
