package decisionlog

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNewerVersion is wrapped by the error Decode returns for a record of
// a schema version this package does not know (a newer sbx wrote it).
var ErrNewerVersion = errors.New("decision log record of a newer schema version")

// A Decoder turns lines of the decision log back into Records. It is the
// one decoder of the log: every reader of it (sbx decisions, the live
// lines of sbx run, sbx audit) decodes through it.
//
// A Decoder keeps the short strings it has decoded (kinds, actions, hosts,
// rules, reasons) and hands out the same string when it meets the same
// bytes again, so that decoding a long log allocates little; it keeps at
// most a few thousand, and forgets them all when it has that many. The
// zero Decoder is ready to use. A Decoder is not safe for concurrent use.
type Decoder struct {
	strs map[string]string
}

// Limits of a Decoder's interned strings.
const (
	internMaxLen     = 256  // longer strings are not kept
	internMaxEntries = 8192 // the table is emptied when it holds this many
)

// Decode parses line, one JSON object (surrounding white space and a
// trailing newline are allowed), into r, which it first resets to the zero
// Record. It accepts what AppendJSON writes and any other JSON object
// with the same fields: keys in any order, null (which leaves a field as
// it is, as encoding/json does), numbers
// in any JSON form that fits the field, unknown keys (skipped, whatever
// their value). A field of the wrong type, a number out of range, a time
// that is not RFC 3339, or anything that is not one JSON object is an
// error that names the field; so is a "v" above SchemaVersion (wrapping
// ErrNewerVersion). A record without "v" is taken as version 1.
//
// Where a key appears twice the last one counts, and strings are decoded
// as encoding/json decodes them (invalid UTF-8 becomes U+FFFD), so that
// Decode agrees with encoding/json on every line both accept.
func (d *Decoder) Decode(line []byte, r *Record) error {
	*r = Record{}
	p := parser{b: line, d: d}
	p.space()
	if !p.eat('{') {
		return p.errorf("a decision record is one JSON object")
	}
	p.space()
	if p.eat('}') {
		return p.end(r)
	}
	for {
		p.space()
		key, ok := p.rawString()
		if !ok {
			return p.errorf("expected a quoted key")
		}
		p.space()
		if !p.eat(':') {
			return p.errorf("expected ':' after key %q", key)
		}
		p.space()
		if err := p.field(key, r); err != nil {
			return err
		}
		p.space()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			return p.end(r)
		}
		return p.errorf("expected ',' or '}'")
	}
}

// Decode decodes one line with a Decoder of its own; see Decoder.Decode.
func Decode(line []byte, r *Record) error {
	var d Decoder
	return d.Decode(line, r)
}

// parser is one line being decoded.
type parser struct {
	b   []byte
	i   int
	d   *Decoder
	buf []byte // scratch for unescaping
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i+1, fmt.Sprintf(format, args...))
}

func (p *parser) end(r *Record) error {
	p.space()
	if p.i != len(p.b) {
		return p.errorf("more after the record's closing '}'")
	}
	if r.V > SchemaVersion {
		return fmt.Errorf("%w: v %d, and this sbx reads up to %d: read it with a newer sbx", ErrNewerVersion, r.V, SchemaVersion)
	}
	return nil
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// null consumes a JSON null.
func (p *parser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// field decodes the value of key into r. A null leaves the field as it
// is, as encoding/json does: {"host":"a","host":null} has host "a".
func (p *parser) field(key []byte, r *Record) error {
	if p.null() {
		return nil
	}
	var err error
	switch string(key) {
	case FieldV:
		var n int64
		n, err = p.int(key, 0, math.MaxInt32)
		r.V = int(n)
	case FieldSeq:
		r.Seq, err = p.uint(key)
	case FieldID:
		r.ID, err = p.str(key, false)
	case FieldEvent:
		r.Event, err = p.str(key, true)
	case FieldTime:
		r.Time, err = p.time(key)
	case FieldSandbox:
		r.Sandbox, err = p.str(key, true)
	case FieldClient:
		r.Client, err = p.str(key, false)
	case FieldKind:
		r.Kind, err = p.str(key, true)
	case FieldMethod:
		r.Method, err = p.str(key, true)
	case FieldHost:
		r.Host, err = p.str(key, true)
	case FieldPort:
		var n int64
		n, err = p.int(key, math.MinInt32, math.MaxInt32)
		r.Port = int(n)
	case FieldPath:
		r.Path, err = p.str(key, true)
	case FieldAction:
		r.Action, err = p.str(key, true)
	case FieldEnforced:
		r.Enforced, err = p.bool(key)
	case FieldRule:
		r.Rule, err = p.str(key, true)
	case FieldReason:
		r.Reason, err = p.str(key, true)
	case FieldPolicyVersion:
		r.PolicyVersion, err = p.uint(key)
	case FieldStatus:
		var n int64
		n, err = p.int(key, math.MinInt32, math.MaxInt32)
		r.Status = int(n)
	case FieldUpstream:
		r.Upstream, err = p.str(key, true)
	case FieldBytesOut:
		r.BytesOut, err = p.int(key, math.MinInt64, math.MaxInt64)
	case FieldBytesIn:
		r.BytesIn, err = p.int(key, math.MinInt64, math.MaxInt64)
	case FieldDurationMS:
		r.Duration, err = p.millis(key)
	case FieldError:
		r.Error, err = p.str(key, true)
	case FieldChange:
		r.Change, err = p.str(key, false)
	case FieldCount:
		r.Count, err = p.uint(key)
	case FieldCap:
		r.Cap, err = p.str(key, true)
	case FieldSince:
		r.Since, err = p.time(key)
	case FieldProto:
		r.Proto, err = p.str(key, true)
	case FieldPID:
		var n int64
		n, err = p.int(key, math.MinInt32, math.MaxInt32)
		r.PID = int(n)
	case FieldComm:
		r.Comm, err = p.str(key, true)
	case FieldExe:
		r.Exe, err = p.str(key, true)
	case FieldProcUnknown:
		r.ProcessUnknown, err = p.str(key, true)
	case FieldAddrs:
		r.Addrs, err = p.str(key, true)
	case FieldApprovalID:
		r.ApprovalID, err = p.str(key, true)
	case FieldAnswer:
		r.Answer, err = p.str(key, true)
	case FieldScope:
		r.Scope, err = p.str(key, true)
	case FieldBy:
		r.By, err = p.str(key, true)
	case FieldSecret:
		r.Secret, err = p.str(key, true)
	case FieldTargets:
		r.Targets, err = p.targets(key)
	default:
		return p.skip(0)
	}
	return err
}

// targets decodes a dropped record's array of targets.
func (p *parser) targets(key []byte) ([]DroppedTarget, error) {
	if !p.eat('[') {
		return nil, p.errorf("%s: want an array", key)
	}
	var ts []DroppedTarget
	p.space()
	if p.eat(']') {
		return ts, nil
	}
	for {
		p.space()
		if !p.eat('{') {
			return nil, p.errorf("%s: want an array of objects", key)
		}
		var t DroppedTarget
		p.space()
		if !p.eat('}') {
			for {
				p.space()
				k, ok := p.rawString()
				if !ok {
					return nil, p.errorf("expected a quoted key")
				}
				p.space()
				if !p.eat(':') {
					return nil, p.errorf("expected ':' after key %q", k)
				}
				p.space()
				if err := p.target(k, &t); err != nil {
					return nil, err
				}
				p.space()
				if p.eat(',') {
					continue
				}
				if p.eat('}') {
					break
				}
				return nil, p.errorf("expected ',' or '}'")
			}
		}
		ts = append(ts, t)
		p.space()
		if p.eat(',') {
			continue
		}
		if p.eat(']') {
			return ts, nil
		}
		return nil, p.errorf("expected ',' or ']'")
	}
}

// target decodes the value of key into t, one of a dropped record's
// targets; a null leaves the field as it is, and unknown keys are skipped.
func (p *parser) target(key []byte, t *DroppedTarget) error {
	if p.null() {
		return nil
	}
	var err error
	switch string(key) {
	case FieldEvent:
		t.Event, err = p.str(key, true)
	case FieldKind:
		t.Kind, err = p.str(key, true)
	case FieldMethod:
		t.Method, err = p.str(key, true)
	case FieldHost:
		t.Host, err = p.str(key, true)
	case FieldPort:
		var n int64
		n, err = p.int(key, math.MinInt32, math.MaxInt32)
		t.Port = int(n)
	case FieldPath:
		t.Path, err = p.str(key, true)
	case FieldAction:
		t.Action, err = p.str(key, true)
	case FieldCount:
		t.Count, err = p.uint(key)
	default:
		return p.skip(0)
	}
	return err
}

// str decodes a string value (or null); intern says it is worth keeping.
func (p *parser) str(key []byte, intern bool) (string, error) {
	if p.null() {
		return "", nil
	}
	raw, ok := p.rawString()
	if !ok {
		return "", p.errorf("%s: want a string", key)
	}
	if !intern || len(raw) > internMaxLen {
		return string(raw), nil
	}
	d := p.d
	if s, ok := d.strs[string(raw)]; ok { // no allocation for the lookup
		return s, nil
	}
	if d.strs == nil || len(d.strs) >= internMaxEntries {
		d.strs = make(map[string]string, 256)
	}
	s := string(raw)
	d.strs[s] = s
	return s, nil
}

// rawString decodes a JSON string at p.i and returns its contents,
// unescaped: a slice of the line when it has no escapes and is valid
// UTF-8, else of p.buf (valid until the next call).
func (p *parser) rawString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c == '\\' || c >= utf8.RuneSelf:
			return p.slowString(start)
		case c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// slowString finishes a string that has escapes or non-ASCII bytes,
// from its start, as encoding/json does.
func (p *parser) slowString(start int) ([]byte, bool) {
	out := append(p.buf[:0], p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			p.buf = out
			return out, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return nil, false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, false
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						var ok2 bool
						if r2, ok2 = p.hex4(); !ok2 {
							return nil, false
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
						p.i = save // not a pair: the second escape stands alone
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return nil, false
}

func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}

// number returns the bytes of a JSON number at p.i.
func (p *parser) number() ([]byte, bool) {
	start := p.i
	p.eat('-')
	digits := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - digits
	if n == 0 || (n > 1 && p.b[digits] == '0') {
		return nil, false
	}
	if p.eat('.') {
		f := p.i
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
		}
		if p.i == f {
			return nil, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if !p.eat('+') {
			p.eat('-')
		}
		e := p.i
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
		}
		if p.i == e {
			return nil, false
		}
	}
	return p.b[start:p.i], true
}

// int decodes an integer in [lo, hi]; like encoding/json, it refuses a
// fraction or an exponent for an integer field.
func (p *parser) int(key []byte, lo, hi int64) (int64, error) {
	if p.null() {
		return 0, nil
	}
	num, ok := p.number()
	if !ok {
		return 0, p.errorf("%s: want a number", key)
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, p.errorf("%s: %s is not an integer in range", key, num)
	}
	return n, nil
}

func (p *parser) uint(key []byte) (uint64, error) {
	if p.null() {
		return 0, nil
	}
	num, ok := p.number()
	if !ok {
		return 0, p.errorf("%s: want a number", key)
	}
	n, err := strconv.ParseUint(string(num), 10, 64)
	if err != nil {
		return 0, p.errorf("%s: %s is not an unsigned integer in range", key, num)
	}
	return n, nil
}

// millis decodes a number of milliseconds: exactly when it has at most
// six decimals and no exponent (as AppendJSON writes it), else rounded to
// the nearest nanosecond.
func (p *parser) millis(key []byte) (time.Duration, error) {
	if p.null() {
		return 0, nil
	}
	num, ok := p.number()
	if !ok {
		return 0, p.errorf("%s: want a number", key)
	}
	if d, ok := exactMillis(num); ok {
		return d, nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	ns := math.Round(f * 1e6)
	if err != nil || ns >= math.MaxInt64 || ns < math.MinInt64 {
		return 0, p.errorf("%s: %s milliseconds is out of range", key, num)
	}
	return time.Duration(ns), nil
}

// exactMillis parses [-]digits[.up to six digits] without floating point.
func exactMillis(num []byte) (time.Duration, bool) {
	neg := num[0] == '-'
	if neg {
		num = num[1:]
	}
	var whole, frac uint64
	i := 0
	for ; i < len(num) && num[i] != '.'; i++ {
		if num[i] < '0' || num[i] > '9' || whole > math.MaxInt64/1_000_000/10 {
			return 0, false
		}
		whole = whole*10 + uint64(num[i]-'0')
	}
	scale := uint64(1e6)
	if i < len(num) {
		f := num[i+1:]
		if len(f) > 6 {
			return 0, false
		}
		for _, c := range f {
			if c < '0' || c > '9' {
				return 0, false
			}
			frac = frac*10 + uint64(c-'0')
			scale /= 10
		}
	}
	ns := whole*1e6 + frac*scale
	if ns > math.MaxInt64 {
		return 0, false
	}
	if neg {
		return -time.Duration(ns), true
	}
	return time.Duration(ns), true
}

func (p *parser) bool(key []byte) (bool, error) {
	switch {
	case p.null():
		return false, nil
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true, nil
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return false, nil
	}
	return false, p.errorf("%s: want true or false", key)
}

// time decodes an RFC 3339 time, as encoding/json does for time.Time.
func (p *parser) time(key []byte) (time.Time, error) {
	if p.null() {
		return time.Time{}, nil
	}
	raw, ok := p.rawString()
	if !ok {
		return time.Time{}, p.errorf("%s: want an RFC 3339 time", key)
	}
	var t time.Time
	if err := t.UnmarshalText(raw); err != nil {
		return time.Time{}, p.errorf("%s: %q is not an RFC 3339 time", key, raw)
	}
	return t, nil
}

// maxDepth bounds the nesting of a skipped value.
const maxDepth = 64

// skip consumes any JSON value.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return p.errorf("value nested too deeply")
	}
	if p.i >= len(p.b) {
		return p.errorf("expected a value")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		if _, ok := p.rawString(); !ok {
			return p.errorf("bad string")
		}
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		p.i++
		p.space()
		if p.eat(closer) {
			return nil
		}
		for {
			p.space()
			if c == '{' {
				if _, ok := p.rawString(); !ok {
					return p.errorf("expected a quoted key")
				}
				p.space()
				if !p.eat(':') {
					return p.errorf("expected ':'")
				}
				p.space()
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			p.space()
			if p.eat(',') {
				continue
			}
			if p.eat(closer) {
				return nil
			}
			return p.errorf("expected ',' or '%c'", closer)
		}
	case c == 't' || c == 'f':
		if _, err := p.bool(nil); err != nil {
			return p.errorf("bad literal")
		}
	case c == 'n':
		if !p.null() {
			return p.errorf("bad literal")
		}
	default:
		if _, ok := p.number(); !ok {
			return p.errorf("bad value")
		}
	}
	return nil
}
