package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the version of the decision log format, written as the
// "v" field of every record (DESIGN.md §5).
const SchemaVersion = 1

// Field names of the decision log (DESIGN.md §5). They are a contract that
// scripts and other tools rely on; AppendJSON writes exactly these.
const (
	FieldV             = "v"
	FieldSeq           = "seq"
	FieldID            = "id"
	FieldEvent         = "event"
	FieldTime          = "time"
	FieldSandbox       = "sandbox"
	FieldClient        = "client"
	FieldKind          = "kind"
	FieldMethod        = "method"
	FieldHost          = "host"
	FieldPort          = "port"
	FieldPath          = "path"
	FieldAction        = "action"
	FieldEnforced      = "enforced"
	FieldRule          = "rule"
	FieldReason        = "reason"
	FieldPolicyVersion = "policy_version"
	FieldStatus        = "status"
	FieldUpstream      = "upstream"
	FieldBytesOut      = "bytes_out"
	FieldBytesIn       = "bytes_in"
	FieldDurationMS    = "duration_ms"
	FieldError         = "error"
	FieldChange        = "change"
	FieldCount         = "count"
	FieldSince         = "since"
	FieldProto         = "proto"
	FieldPID           = "pid"
	FieldComm          = "comm"
	FieldExe           = "exe"
)

// Values of the "event" field.
const (
	EventDecision = "decision" // a request or tunnel was decided
	EventClose    = "close"    // an allowed request or tunnel ended
	EventPolicy   = "policy"   // the policy changed
	EventDropped  = "dropped"  // a FileSink left records out to stay within its budget
)

// Values of the "kind" field.
const (
	KindHTTP    = "http"    // a plain HTTP request through the forward proxy
	KindConnect = "connect" // a CONNECT tunnel
	KindDNS     = "dns"     // a query to the DNS stub (see ServeDNSUDP)
	// KindTransparent is a TCP connection the sandbox made without the
	// proxy, which its rules redirected to the gateway (see
	// ServeTransparent): one record per connection, or per request when it
	// speaks plain HTTP.
	KindTransparent = "transparent"
	// KindBypass is a packet the sandbox sent that is neither TCP nor DNS
	// (UDP, ICMP, another protocol), which its rules refused and reported
	// (see Server.ReportPacket): at most one record per protocol,
	// destination and port a second, with a count.
	KindBypass = "bypass"
)

// Record is one line of the decision log. Which fields are written depends
// on Event; see AppendJSON. The zero value of a field is written as such
// (an empty string, 0, false), except Error, which is left out when empty.
type Record struct {
	// V is the schema version. Log.Emit sets it to SchemaVersion, and
	// AppendJSON writes SchemaVersion when it is 0.
	V int
	// Seq numbers the records of one gateway 1, 2, 3, ... in the order they
	// are written. Log.Emit assigns it, also to the dropped records that
	// only a FileSink writes, so other sinks can see a seq skipped.
	Seq uint64
	// ID is the connection id, shared by a decision and its close record.
	ID string
	// Event is EventDecision, EventClose, EventPolicy or EventDropped.
	Event string
	// Time is when the record was made; it is written in UTC with
	// nanoseconds. Log.Emit sets it to the current time when it is zero.
	Time time.Time
	// Sandbox is the sandbox id, empty for a standalone gateway. Log.Emit
	// sets it to the id the Log was made with.
	Sandbox string
	// Client is the client's address as ip:port.
	Client string
	// Kind is KindHTTP, KindConnect, KindDNS, KindConn, KindTransparent or
	// KindBypass.
	Kind string
	// Method is the HTTP method, CONNECT for tunnels; for KindDNS the
	// query type, such as A, AAAA or TXT (TYPE<n> for a type without a
	// name here), empty when the query has no readable question.
	Method string
	// Host is the normalized target host, an IP literal for IP targets.
	Host string
	// Port is the target port.
	Port int
	// Path is the HTTP path without the query, empty for tunnels. Query
	// strings and header values are never logged.
	Path string
	// Action is the verdict: allow, block or intercept.
	Action string
	// Enforced is false only when a block verdict was let through in audit
	// mode.
	Enforced bool
	// Rule is the id of the rule that decided, or default, guard, or
	// invalid for targets that could not be parsed (and, in a close
	// record, for a tunnel the TLS server-name check closed; for KindDNS,
	// for a query that is malformed or of an opcode, class or type the
	// stub does not decide).
	Rule string
	// Reason is one readable sentence saying why; in a dropped record,
	// which budget was exceeded.
	Reason string
	// PolicyVersion is the version of the policy that decided; in a policy
	// record, the version the change produced.
	PolicyVersion uint64
	// Status is the status sent to the client: in the decision record of
	// a request the gateway answers itself (block, intercept, invalid),
	// that answer; in that of an allowed request 0, since nothing was
	// sent yet. A close record has the final status: the upstream's for
	// HTTP, 200 for an opened tunnel, or 429, 502, 504 when the gateway
	// could not go on. A KindDNS record has the DNS response code sent
	// (0 NOERROR, 1 FORMERR, 2 SERVFAIL, 3 NXDOMAIN, 4 NOTIMP, 5 REFUSED,
	// 16 BADVERS), and 0 with Error set for a packet left unanswered.
	Status int
	// Upstream is the dialed ip:port (close records only).
	Upstream string
	// BytesOut counts bytes from the client to the upstream (close only).
	BytesOut int64
	// BytesIn counts bytes from the upstream to the client (close only).
	BytesIn int64
	// Duration is how long the request or tunnel lasted (close only),
	// written as duration_ms, a number of milliseconds.
	Duration time.Duration
	// Error says what failed, if anything; it is left out when empty.
	Error string
	// Change describes a policy change in one sentence, such as
	// "rule gh added" (policy records only).
	Change string
	// Count is how many records a FileSink left out since its previous
	// dropped record (dropped records), or how many packets a bypass
	// record stands for (KindBypass).
	Count uint64
	// Since is when the first of those Count records was left out
	// (dropped records only).
	Since time.Time

	// Proto is the packet's protocol: "udp", "icmp", "icmpv6" or
	// "proto-<n>" (KindBypass only, where Count is how many packets the
	// record stands for).
	Proto string
	// PID, Comm and Exe name the sandboxed process that owned the
	// client's socket (its process id in the host's PID namespace, its
	// command name, and its executable's path as the sandbox sees it),
	// when it could be told for certain; PID is 0 otherwise, and the three
	// fields are left out.
	PID  int
	Comm string
	Exe  string
}

// AppendJSON appends r to b as one JSON object, without a trailing newline,
// and returns the extended buffer. It allocates nothing when b has room.
//
// The fields follow DESIGN.md §5 and depend on r.Event:
//   - EventPolicy: v, seq, event, time, policy_version, change.
//   - EventDropped: v, seq, event, time, since, count, reason.
//   - EventClose: the decision fields and, before error, upstream,
//     bytes_out, bytes_in and duration_ms.
//   - anything else (EventDecision): v, seq, id, event, time, sandbox,
//     client, kind, method, host, port, path, action, enforced, rule,
//     reason, policy_version, status; for KindBypass proto and count; pid,
//     comm and exe (exe only when known) when r.PID is not 0; and error
//     when r.Error is not empty.
//
// Strings are escaped as encoding/json escapes them with HTML escaping off:
// quotes, backslashes, control characters, U+2028 and U+2029 are escaped and
// each byte of invalid UTF-8 becomes U+FFFD, so the output is always one
// line of valid UTF-8.
func (r *Record) AppendJSON(b []byte) []byte {
	v := r.V
	if v == 0 {
		v = SchemaVersion
	}
	b = append(b, `{"`+FieldV+`":`...)
	b = strconv.AppendInt(b, int64(v), 10)
	b = appendLogKey(b, FieldSeq)
	b = strconv.AppendUint(b, r.Seq, 10)
	if r.Event == EventPolicy {
		b = appendLogKey(b, FieldEvent)
		b = appendJSONString(b, r.Event)
		b = appendLogKey(b, FieldTime)
		b = appendLogTime(b, r.Time)
		b = appendLogKey(b, FieldPolicyVersion)
		b = strconv.AppendUint(b, r.PolicyVersion, 10)
		b = appendLogKey(b, FieldChange)
		b = appendJSONString(b, r.Change)
		return append(b, '}')
	}
	if r.Event == EventDropped {
		b = appendLogKey(b, FieldEvent)
		b = appendJSONString(b, r.Event)
		b = appendLogKey(b, FieldTime)
		b = appendLogTime(b, r.Time)
		b = appendLogKey(b, FieldSince)
		b = appendLogTime(b, r.Since)
		b = appendLogKey(b, FieldCount)
		b = strconv.AppendUint(b, r.Count, 10)
		b = appendLogKey(b, FieldReason)
		b = appendJSONString(b, r.Reason)
		return append(b, '}')
	}
	b = appendLogKey(b, FieldID)
	b = appendJSONString(b, r.ID)
	b = appendLogKey(b, FieldEvent)
	b = appendJSONString(b, r.Event)
	b = appendLogKey(b, FieldTime)
	b = appendLogTime(b, r.Time)
	b = appendLogKey(b, FieldSandbox)
	b = appendJSONString(b, r.Sandbox)
	b = appendLogKey(b, FieldClient)
	b = appendJSONString(b, r.Client)
	b = appendLogKey(b, FieldKind)
	b = appendJSONString(b, r.Kind)
	b = appendLogKey(b, FieldMethod)
	b = appendJSONString(b, r.Method)
	b = appendLogKey(b, FieldHost)
	b = appendJSONString(b, r.Host)
	b = appendLogKey(b, FieldPort)
	b = strconv.AppendInt(b, int64(r.Port), 10)
	b = appendLogKey(b, FieldPath)
	b = appendJSONString(b, r.Path)
	b = appendLogKey(b, FieldAction)
	b = appendJSONString(b, r.Action)
	b = appendLogKey(b, FieldEnforced)
	b = strconv.AppendBool(b, r.Enforced)
	b = appendLogKey(b, FieldRule)
	b = appendJSONString(b, r.Rule)
	b = appendLogKey(b, FieldReason)
	b = appendJSONString(b, r.Reason)
	b = appendLogKey(b, FieldPolicyVersion)
	b = strconv.AppendUint(b, r.PolicyVersion, 10)
	b = appendLogKey(b, FieldStatus)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.Kind == KindBypass {
		b = appendLogKey(b, FieldProto)
		b = appendJSONString(b, r.Proto)
		b = appendLogKey(b, FieldCount)
		b = strconv.AppendUint(b, r.Count, 10)
	}
	if r.PID != 0 {
		b = appendLogKey(b, FieldPID)
		b = strconv.AppendInt(b, int64(r.PID), 10)
		b = appendLogKey(b, FieldComm)
		b = appendJSONString(b, r.Comm)
		if r.Exe != "" {
			b = appendLogKey(b, FieldExe)
			b = appendJSONString(b, r.Exe)
		}
	}
	if r.Event == EventClose {
		b = appendLogKey(b, FieldUpstream)
		b = appendJSONString(b, r.Upstream)
		b = appendLogKey(b, FieldBytesOut)
		b = strconv.AppendInt(b, r.BytesOut, 10)
		b = appendLogKey(b, FieldBytesIn)
		b = strconv.AppendInt(b, r.BytesIn, 10)
		b = appendLogKey(b, FieldDurationMS)
		b = appendMillis(b, r.Duration)
	}
	if r.Error != "" {
		b = appendLogKey(b, FieldError)
		b = appendJSONString(b, r.Error)
	}
	return append(b, '}')
}

// appendLogKey appends a comma and the quoted key with its colon. Keys are
// the Field constants, which need no escaping.
func appendLogKey(b []byte, key string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendLogTime appends t in UTC as a quoted RFC 3339 time with
// nanoseconds (time.RFC3339Nano: trailing zeros of the fraction dropped).
func appendLogTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendMillis appends d as an exact JSON number of milliseconds: the
// fraction has at most six digits, no trailing zeros, and is left out
// when d is a whole number of milliseconds (12.345, 0.001, 12).
func appendMillis(b []byte, d time.Duration) []byte {
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // the magnitude, also for math.MinInt64
	}
	b = strconv.AppendUint(b, u/1e6, 10)
	frac := u % 1e6
	if frac == 0 {
		return b
	}
	var digits [7]byte
	digits[0] = '.'
	for i := 6; i > 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := len(digits)
	for digits[n-1] == '0' {
		n--
	}
	return append(b, digits[:n]...)
}

const logHexDigits = "0123456789abcdef"

// appendJSONString appends s as a quoted JSON string, escaping exactly as
// encoding/json does with HTML escaping off.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', logHexDigits[c>>4], logHexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', logHexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// A Sink receives the encoded records of a Log.
//
// Log calls WriteRecord with one record at a time, in increasing seq order,
// never concurrently with another call of the same Log; line is one JSON
// object followed by '\n' and is valid only during the call (the Log reuses
// its memory), so a sink that keeps it must copy it. A sink shared with
// other goroutines (a FileSink's flusher, a Ring's readers) does its own
// locking.
type Sink interface {
	// WriteRecord writes the record numbered seq, encoded as line.
	WriteRecord(seq uint64, line []byte) error
	// Flush pushes what the sink buffers to where it goes.
	Flush() error
	// Close flushes the sink and releases what it holds. Writes after
	// Close fail with an error wrapping ErrSinkClosed.
	Close() error
}

// ErrSinkClosed is returned by a sink's writes after it was closed, and by
// Subscription.Err when the Ring it follows was closed.
var ErrSinkClosed = errors.New("decision log sink closed")

// Log numbers decision records, encodes them and writes them to its sinks
// (DESIGN.md §5). Make one with NewLog. A Log is safe for concurrent use:
// Emit from many goroutines writes every record to every sink in seq
// order. The caller that made the Log must Close it.
type Log struct {
	sandbox string
	sinks   []Sink
	budgets []budgetedSink // budgets[i] is sinks[i] when that leaves records out over a budget, else nil
	nerrs   atomic.Uint64

	mu     sync.Mutex // held while a record is numbered, encoded and written
	seq    uint64     // last assigned
	buf    []byte     // the line being written, reused
	closed bool

	errMu    sync.Mutex // separate from mu, so Err does not wait for a slow sink
	firstErr error
}

// NewLog returns a Log for the sandbox with the given id (empty for a
// standalone gateway) that writes to sinks, skipping nil ones. Closing the
// Log closes the sinks.
func NewLog(sandbox string, sinks ...Sink) *Log {
	l := &Log{sandbox: sandbox, buf: make([]byte, 0, 1024)}
	for _, s := range sinks {
		if s != nil {
			l.sinks = append(l.sinks, s)
			b, _ := s.(budgetedSink)
			l.budgets = append(l.budgets, b)
		}
	}
	return l
}

// A budgetedSink is a Sink that leaves out the records over its budget
// and later writes a dropped record saying how many (FileSink). The Log
// numbers those dropped records as it numbers its own, so that a seq names
// one record wherever it appears; the other sinks see a gap in the seqs
// instead.
type budgetedSink interface {
	Sink
	// reserveDropped is called, with the Log's lock held, before the Log
	// numbers a record (at is dropBeforeRecord or dropBeforePolicy) or
	// closes the sink (dropAtClose). It reports whether the sink took seq
	// for a dropped record that it writes before that record, or when it
	// is closed; the Log then numbers its record seq+1. now is the
	// current time, or zero when the sink is to read its clock.
	reserveDropped(seq uint64, at dropPoint, now time.Time) bool
	// writeBudgeted is WriteRecord for r, encoded as line, which the sink
	// may leave out when it is over budget (never a policy record). now
	// is as for reserveDropped.
	writeBudgeted(seq uint64, line []byte, r *Record, now time.Time) error
}

// dropPoint says when a budgetedSink is asked to write a dropped record.
type dropPoint uint8

const (
	dropBeforeRecord dropPoint = iota // before a record the budget applies to
	dropBeforePolicy                  // before a policy record, which is never left out
	dropAtClose                       // when the Log closes
)

// Emit assigns r the next seq (1 for the first record), sets r.V, sets
// r.Sandbox to the Log's sandbox and r.Time to the current time when it is
// zero, writes r to every sink and returns the seq. Emit does not keep r.
//
// A FileSink over its budget leaves r out (unless it is a policy record),
// and before the next record it writes, it may write a dropped record
// saying how many it left out. That record takes a seq of its own, before
// r's: seqs always increase, and the sinks that did not get it skip it.
//
// A sink's error does not stop the other sinks or later records; it is
// counted by Errors and the first one is kept for Err. After Close, Emit
// writes nothing and returns 0.
func (l *Log) Emit(r *Record) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0
	}
	// now is the time stamped on r, which budgeted sinks take for the
	// current time rather than read the clock again; zero when r came
	// with a time of its own.
	var now time.Time
	if r.Time.IsZero() {
		now = time.Now()
		r.Time = now
	}
	policy := r.Event == EventPolicy
	for _, b := range l.budgets {
		if b != nil && b.reserveDropped(l.seq+1, dropPointFor(policy), now) {
			l.seq++
		}
	}
	l.seq++
	r.Seq = l.seq
	r.V = SchemaVersion
	r.Sandbox = l.sandbox
	if len(l.sinks) == 0 {
		return r.Seq
	}
	l.buf = append(r.AppendJSON(l.buf[:0]), '\n')
	for i, s := range l.sinks {
		var err error
		if b := l.budgets[i]; b != nil {
			err = b.writeBudgeted(r.Seq, l.buf, r, now)
		} else {
			err = s.WriteRecord(r.Seq, l.buf)
		}
		if err != nil {
			l.sinkFailed(i, err)
		}
	}
	return r.Seq
}

// dropPointFor returns where a budgetedSink is asked for a dropped record
// before a record that is a policy record or not.
func dropPointFor(policy bool) dropPoint {
	if policy {
		return dropBeforePolicy
	}
	return dropBeforeRecord
}

// sinkFailed counts a failed write and keeps the first error.
func (l *Log) sinkFailed(i int, err error) {
	if l.nerrs.Add(1) == 1 {
		l.errMu.Lock()
		l.firstErr = fmt.Errorf("decision log sink %d: %w", i, err)
		l.errMu.Unlock()
	}
}

// Errors returns how many sink writes have failed.
func (l *Log) Errors() uint64 { return l.nerrs.Load() }

// Err returns the first sink write error, or nil when every write worked.
func (l *Log) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.firstErr
}

// Flush flushes every sink and returns their errors joined. It does
// nothing after Close.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var errs []error
	for i, s := range l.sinks {
		if err := s.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("flushing decision log sink %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes every sink (which flushes it, and makes a FileSink write
// a last dropped record when it left out records it has not counted yet)
// and returns their errors joined. Later calls of Emit do nothing;
// closing again returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for _, b := range l.budgets {
		if b != nil && b.reserveDropped(l.seq+1, dropAtClose, time.Time{}) {
			l.seq++
		}
	}
	var errs []error
	for i, s := range l.sinks {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing decision log sink %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
