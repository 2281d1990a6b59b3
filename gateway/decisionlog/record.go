package decisionlog

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the version of the decision log format, written as the
// "v" field of every record (docs/decision-log.md).
const SchemaVersion = 1

// Field names of the decision log (docs/decision-log.md). They are a contract that
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
	FieldProcUnknown   = "process_unknown"
	FieldAddrs         = "addrs"
	FieldApprovalID    = "approval_id"
	FieldAnswer        = "answer"
	FieldScope         = "scope"
	FieldBy            = "by"
	FieldSecret        = "secret"
	FieldTargets       = "targets"
)

// ReasonMockLLM starts the reason of every record of a request a scripted
// LLM answered (an intercept; docs/mock-llm.md), whichever rule mocked it.
const ReasonMockLLM = "mock LLM: "

// ReasonMockUnmatched starts the reason of the record of a request a
// scripted LLM answered with an error because no turn was for it: no turn
// fitted, the script was used up, the body was not the API's, or it was
// for a model at an endpoint the mock does not know (docs/mock-llm.md).
const ReasonMockUnmatched = ReasonMockLLM + "unmatched: "

// ReasonMockDefault starts the reason of the record of a request a
// scripted LLM answered by its fixed rule rather than from the script:
// the models list, a token count, or a request that is not for a model,
// such as an agent's settings or telemetry (docs/mock-llm.md). sbx run
// prints no live line for these.
const ReasonMockDefault = ReasonMockLLM + "default: "

// ReasonGuard starts the reason of every decision the address guard
// refused because of where the target's host resolved to (or of an IP
// target): "address guard: <ip> is <class>" (docs/gateway.md). Other
// refusals by rule guard (packets around the gateway, a client over its
// tunnel limit) have other reasons.
const ReasonGuard = "address guard: "

// ReasonLogFault starts the reason of every decision the gateway refused
// because the decision log could not record it (docs/faults.md): the
// message of a *LogFileError or a *LogFullError, which names the file,
// the cause and the fix.
const ReasonLogFault = "decision log "

// ErrorCARejected starts the error of the close record of an inspected
// tunnel whose client refused the sandbox's CA in the TLS handshake
// (docs/inspection.md): it does not trust the CA, or it pins its server's
// certificate.
const ErrorCARejected = "client rejected the sbx CA"

// MaxAddrs is the most addresses a record's Addrs lists.
const MaxAddrs = 16

// Values of the "event" field.
const (
	EventDecision = "decision" // a request or tunnel was decided
	EventClose    = "close"    // an allowed request or tunnel ended
	EventPolicy   = "policy"   // the policy changed
	EventDropped  = "dropped"  // a FileSink left records out to stay within its budget
	// EventApproval is a question the gateway asked about a request whose
	// verdict was ask (action ask, Answer empty), or its answer (Answer
	// set, with Scope and By; action allow or block): both carry the
	// question's ApprovalID and target fields.
	EventApproval = "approval"
)

// Values of the "kind" field.
const (
	KindHTTP    = "http"    // a plain HTTP request through the forward proxy
	KindConnect = "connect" // a CONNECT tunnel
	KindDNS     = "dns"     // a query to the DNS stub (see gateway/dnsstub)
	// KindHTTPS is a request inside a tunnel the gateway inspects
	// (docs/inspection.md): TLS terminated with the sandbox's CA, each request
	// decided with its method and path.
	KindHTTPS = "https"
	// KindConn is a client connection the gateway refused before reading
	// a request from it: a client outside the gateway's allowed clients,
	// or one over its per-client connection limit. Such a record has no
	// method, host, port or path. These records are rate-bounded: one
	// stands for count refusals of the same cause (the last of them its
	// client's), and the counts of a log add up to every refusal.
	KindConn = "conn"
	// KindTransparent is a TCP connection the sandbox made without the
	// proxy, which its rules redirected to the gateway (see
	// ServeTransparent): one record per connection, or per request when it
	// speaks plain HTTP.
	KindTransparent = "transparent"
	// KindBypass is a packet the sandbox sent that is neither TCP nor DNS
	// (UDP, ICMP, another protocol), which its rules refused and reported
	// (see gateway.BypassLog): at most one record per protocol,
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
	// Event is EventDecision, EventClose, EventPolicy, EventDropped or
	// EventApproval.
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
	// dropped record (dropped records), how many packets a bypass
	// record stands for (KindBypass), how many refused connections
	// or packets a conn record stands for (KindConn), or how many held
	// requests an answer reached (approval records with an Answer): the
	// record's method and path are the first's.
	Count uint64
	// Since is when the first of those Count records was left out
	// (dropped records only).
	Since time.Time
	// Targets names, in a dropped record, each target whose repeats over
	// the rate limit were left out, with how many (a part of Count); it
	// is left out when empty.
	Targets []DroppedTarget

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
	// ProcessUnknown, when PID is 0, says why no process is named: why
	// the lookup of the client's socket named none (sbx run), or why none
	// can be named for any of the gateway's clients (sbx kube's gateway
	// pod: the agent's processes are in another pod); left out when
	// empty, and when PID is set.
	ProcessUnknown string

	// Addrs is set in a decision by rule RuleGuard whose reason starts
	// with ReasonGuard: the addresses the address guard refused that a
	// policy can exempt (allow_private, or an IP or CIDR allow rule), IP
	// addresses separated by commas, at most MaxAddrs, in the resolver's
	// order. The gateway refuses a name when it refuses every address the
	// name resolved to, so a policy that exempts one of these lets such a
	// request through. It is empty when the guard refused only addresses
	// no policy reaches (the gateway's own, the sandbox pool's, this
	// host's), and left out then and in every other record.
	Addrs string

	// ApprovalID names the question of an EventApproval record; Answer is
	// "allow" or "deny" in the record of its answer ("" in the question's),
	// Scope "once", "session" or "always", and By who answered: "tty",
	// "cli", "api", "ui", or "timeout" when no answer came, "closed" when
	// the gateway closed before one did. They are
	// written in approval records only.
	ApprovalID string
	Answer     string
	Scope      string
	By         string
	// Secret names the secret whose placeholder a request carried where
	// the secret is not sent (docs/secrets.md), in the decision that
	// blocked it; in a close record, the secrets (names joined with ",")
	// whose values the answer held and the gateway replaced. Names only,
	// never a value or placeholder. It is left out when empty.
	Secret string
	// Cap names the per-client cap that refused a decision (CapConns,
	// CapTunnels; see FieldCap): when set, the record also has count.
	// Left out when empty.
	Cap string
}

// A DroppedTarget is a target whose records a FileSink left out over its
// rate limit, all of them repeats of one it wrote in full
// (docs/decision-log.md), and how many it left out: in a dropped
// record's "targets", an object with these fields, named as a
// decision's are, and "count".
type DroppedTarget struct {
	Event  string
	Kind   string
	Method string
	Host   string
	Port   int
	Path   string
	Action string
	Count  uint64
}

// AppendJSON appends r to b as one JSON object, without a trailing newline,
// and returns the extended buffer. It allocates nothing when b has room.
//
// The fields follow docs/decision-log.md and depend on r.Event:
//   - EventPolicy: v, seq, event, time, policy_version, change.
//   - EventDropped: v, seq, event, time, since, count, reason, and
//     targets when r.Targets is not empty.
//   - EventClose: the decision fields and, before error, upstream,
//     bytes_out, bytes_in and duration_ms.
//   - EventApproval: the decision fields and approval_id, then answer,
//     scope and by when r.Answer is set.
//   - anything else (EventDecision): v, seq, id, event, time, sandbox,
//     client, kind, method, host, port, path, action, enforced, rule,
//     reason, policy_version, status; for KindBypass proto and count; for
//     KindConn, and when r.Cap is set, count; cap when r.Cap is set; pid, comm and exe (exe only when known) when r.PID
//     is not 0; addrs when r.Addrs is not empty; secret when r.Secret is
//     not empty; and error when r.Error is not empty.
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
		if len(r.Targets) > 0 {
			b = appendLogKey(b, FieldTargets)
			b = appendDroppedTargets(b, r.Targets)
		}
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
	if r.Kind == KindConn || r.Cap != "" && r.Kind != KindBypass {
		b = appendLogKey(b, FieldCount)
		b = strconv.AppendUint(b, r.Count, 10)
	}
	if r.Cap != "" {
		b = appendLogKey(b, FieldCap)
		b = appendJSONString(b, r.Cap)
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
	} else if r.ProcessUnknown != "" {
		b = appendLogKey(b, FieldProcUnknown)
		b = appendJSONString(b, r.ProcessUnknown)
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
	if r.Event == EventApproval {
		b = appendLogKey(b, FieldApprovalID)
		b = appendJSONString(b, r.ApprovalID)
		if r.Answer != "" {
			b = appendLogKey(b, FieldAnswer)
			b = appendJSONString(b, r.Answer)
			b = appendLogKey(b, FieldScope)
			b = appendJSONString(b, r.Scope)
			b = appendLogKey(b, FieldBy)
			b = appendJSONString(b, r.By)
			b = appendLogKey(b, FieldCount)
			b = strconv.AppendUint(b, r.Count, 10)
		}
	}
	if r.Addrs != "" {
		b = appendLogKey(b, FieldAddrs)
		b = appendJSONString(b, r.Addrs)
	}
	if r.Secret != "" {
		b = appendLogKey(b, FieldSecret)
		b = appendJSONString(b, r.Secret)
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

// appendDroppedTargets appends ts as a JSON array of objects.
func appendDroppedTargets(b []byte, ts []DroppedTarget) []byte {
	b = append(b, '[')
	for i, t := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"`+FieldEvent+`":`...)
		b = appendJSONString(b, t.Event)
		b = appendLogKey(b, FieldKind)
		b = appendJSONString(b, t.Kind)
		b = appendLogKey(b, FieldMethod)
		b = appendJSONString(b, t.Method)
		b = appendLogKey(b, FieldHost)
		b = appendJSONString(b, t.Host)
		b = appendLogKey(b, FieldPort)
		b = strconv.AppendInt(b, int64(t.Port), 10)
		b = appendLogKey(b, FieldPath)
		b = appendJSONString(b, t.Path)
		b = appendLogKey(b, FieldAction)
		b = appendJSONString(b, t.Action)
		b = appendLogKey(b, FieldCount)
		b = strconv.AppendUint(b, t.Count, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}
