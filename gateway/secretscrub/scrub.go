// Package secretscrub replaces secret values with their placeholders in
// what a host that was sent the values answers, so that a host that
// echoes a request header (an error quoting it, a debugging endpoint, a
// value stored and shown later) cannot hand a value to the sandbox.
//
// A Scrubber holds the values and placeholders. Its String rewrites a
// header field or an error text; its Writer rewrites a stream as it is
// written, holding back no more than the bytes at the end of a write
// that could be the start of a value (fewer than the longest value's
// length), so a stream (server-sent events, a WebSocket message) still
// goes out as it comes. Its Frames rewrites the server-to-client frames
// of a WebSocket connection, a value split across frames or fragments
// included.
//
// Values are matched as sent, byte for byte: a host that answers a value
// transformed (percent-encoded, base64, another letter case) is not
// scrubbed.
package secretscrub

import (
	"bytes"
	"io"
	"strings"
)

// Secret is one value and what the sandbox holds in its place.
type Secret struct {
	// Name names the secret in logs; it is never the value.
	Name string
	// Value is what is replaced; it must not be empty.
	Value string
	// Placeholder is what it is replaced with.
	Placeholder string
}

// Scrubber replaces the values of its secrets with their placeholders.
// It is safe for concurrent use; its Writers and Frames are not.
type Scrubber struct {
	secrets []Secret
	values  [][]byte
	maxLen  int       // the longest value's length
	first   [256]bool // the first bytes of the values
	single  bool      // one value: bytes.Index finds it, no search of the others
}

// New returns a Scrubber of secrets, nil when there are none (a nil
// Scrubber replaces nothing) or when a value is empty, which would match
// everywhere: such a secret is left out.
func New(secrets []Secret) *Scrubber {
	s := &Scrubber{}
	for _, sec := range secrets {
		if sec.Value == "" {
			continue
		}
		s.secrets = append(s.secrets, sec)
		s.values = append(s.values, []byte(sec.Value))
		s.maxLen = max(s.maxLen, len(sec.Value))
		s.first[sec.Value[0]] = true
	}
	if len(s.secrets) == 0 {
		return nil
	}
	s.single = len(s.secrets) == 1
	return s
}

// next returns the earliest match of a value in b: where it starts and
// which secret it is (the longest value at that place when several
// match), or -1.
func (s *Scrubber) next(b []byte) (at, which int) {
	if s.single {
		return bytes.Index(b, s.values[0]), 0
	}
	at, which = -1, -1
	for i, v := range s.values {
		lim := b
		if at >= 0 {
			lim = b[:min(len(b), at+len(v))] // a match must start no later than at
		}
		j := bytes.Index(lim, v)
		if j < 0 {
			continue
		}
		if at < 0 || j < at || j == at && len(v) > len(s.values[which]) {
			at, which = j, i
		}
	}
	return at, which
}

// String returns v with every value replaced with its placeholder, and
// calls found (when not nil) with the name of each secret replaced, once
// per replacement.
func (s *Scrubber) String(v string, found func(name string)) string {
	if s == nil {
		return v
	}
	if !s.hasFirst(v) {
		return v // no byte a value starts with: nothing to convert, nothing to look for
	}
	var b strings.Builder
	rest := v
	for {
		at, which := s.next([]byte(rest))
		if at < 0 {
			break
		}
		if b.Cap() == 0 {
			b.Grow(len(v))
		}
		b.WriteString(rest[:at])
		b.WriteString(s.secrets[which].Placeholder)
		if found != nil {
			found(s.secrets[which].Name)
		}
		rest = rest[at+len(s.values[which]):]
	}
	if b.Cap() == 0 {
		return v
	}
	b.WriteString(rest)
	return b.String()
}

// hasFirst reports whether v holds a byte some value starts with.
func (s *Scrubber) hasFirst(v string) bool {
	for i := 0; i < len(v); i++ {
		if s.first[v[i]] {
			return true
		}
	}
	return false
}

// partial returns where the bytes at the end of b that could be the
// start of a value begin (len(b) when none could): the earliest i, at or
// after from, whose b[i:] is a value's proper prefix.
func (s *Scrubber) partial(b []byte, from int) int {
	for i := max(from, len(b)-(s.maxLen-1)); i < len(b); i++ {
		if !s.first[b[i]] {
			continue
		}
		tail := b[i:]
		for _, v := range s.values {
			if len(v) > len(tail) && bytes.HasPrefix(v, tail) {
				return i
			}
		}
	}
	return len(b)
}

// Writer writes to another writer what is written to it, every value
// replaced with its placeholder. The bytes at the end of a write that
// could be the start of a value are held until the next write shows
// whether they are one, or Flush writes them: a value split across
// writes is still replaced.
type Writer struct {
	s     *Scrubber
	w     io.Writer
	found func(name string)
	held  []byte // a proper prefix of a value, at most maxLen-1 bytes
	buf   []byte // held and the write after it, when held is not empty
}

// NewWriter returns a Writer that writes to w, calling found (when not
// nil) with the name of each secret it replaces. A nil Scrubber's Writer
// writes what it is given as it is.
func (s *Scrubber) NewWriter(w io.Writer, found func(name string)) *Writer {
	return &Writer{s: s, w: w, found: found}
}

// Reset makes w write to dst, holding nothing.
func (w *Writer) Reset(dst io.Writer) {
	w.w, w.held = dst, w.held[:0]
}

// Write writes p, every value replaced, but for the bytes at its end
// that could be the start of a value. It returns len(p) unless the
// underlying writer failed.
func (w *Writer) Write(p []byte) (int, error) {
	if w.s == nil {
		return w.w.Write(p)
	}
	b := p
	if len(w.held) > 0 {
		w.buf = append(append(w.buf[:0], w.held...), p...)
		b = w.buf
		w.held = w.held[:0]
	}
	for {
		at, which := w.s.next(b)
		if at < 0 {
			break
		}
		if at > 0 {
			if _, err := w.w.Write(b[:at]); err != nil {
				return 0, err
			}
		}
		if _, err := io.WriteString(w.w, w.s.secrets[which].Placeholder); err != nil {
			return 0, err
		}
		if w.found != nil {
			w.found(w.s.secrets[which].Name)
		}
		b = b[at+len(w.s.values[which]):]
	}
	cut := w.s.partial(b, 0)
	if cut > 0 {
		if _, err := w.w.Write(b[:cut]); err != nil {
			return 0, err
		}
	}
	w.held = append(w.held, b[cut:]...)
	return len(p), nil
}

// Held is the number of bytes w holds back.
func (w *Writer) Held() int { return len(w.held) }

// Flush writes the bytes w holds back: the stream (or the message) ended,
// and they are not a value.
func (w *Writer) Flush() error {
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.w.Write(w.held)
	w.held = w.held[:0]
	return err
}
