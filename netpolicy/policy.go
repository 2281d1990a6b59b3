package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"
)

// Action is what a rule, or the default, does with a matching request.
type Action string

// The actions of docs/policy.md.
const (
	Allow     Action = "allow"
	Block     Action = "block"
	Intercept Action = "intercept"
	// Ask holds a request until a person answers allow or deny, or the
	// ask timeout passes, which blocks it (docs/policy.md). Only a rule
	// or the default decides ask: the address guard and invalid targets
	// block, whatever the policy.
	Ask Action = "ask"
)

// Mode says whether block verdicts are enforced or only logged.
type Mode string

// The modes of docs/policy.md.
const (
	// Enforce blocks what the policy blocks. It is the zero Mode's meaning.
	Enforce Mode = "enforce"
	// Audit logs every verdict but lets traffic that rules or the default
	// block through. Verdicts of the address guard (RuleGuard) and of
	// invalid targets (RuleInvalid) are enforced in every mode: an invalid
	// target is never dialed.
	Audit Mode = "audit"
)

// Rule identifiers that a Decision can carry besides the id of a rule.
const (
	RuleDefault = "default" // no rule matched; the policy's default decided
	RuleInvalid = "invalid" // the target could not be parsed; never matched
	RuleGuard   = "guard"   // the address guard refused the resolved address
)

// FormatVersion is the only policy file version this package reads.
const FormatVersion = 1

// Errors that callers act on. Every error this package returns for a bad
// policy, rule or target wraps one of them.
var (
	// ErrInvalidPolicy marks a policy document that cannot be used.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrInvalidRule marks a rule that cannot be used.
	ErrInvalidRule = errors.New("invalid rule")
	// ErrInvalidTarget marks a request target that can never match a rule.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrRuleNotFound is returned by Store.RemoveRule for an unknown id.
	ErrRuleNotFound = errors.New("rule not found")
	// ErrVersionMismatch is returned by a Store update whose expected
	// version is not the current one.
	ErrVersionMismatch = errors.New("policy version mismatch")
)

// sentinelError is a message that matches one of the sentinel errors above
// with errors.Is without repeating the sentinel's text.
type sentinelError struct {
	msg      string
	sentinel error
}

func (e *sentinelError) Error() string { return e.msg }
func (e *sentinelError) Unwrap() error { return e.sentinel }

// errorf returns a formatted error that wraps sentinel.
func errorf(sentinel error, format string, args ...any) error {
	return &sentinelError{fmt.Sprintf(format, args...), sentinel}
}

// Port is a TCP port in a rule's port list. AnyPort, written "*", matches
// every port.
type Port uint16

// AnyPort matches every port. It must be the only entry of a port list.
const AnyPort Port = 0

// DefaultPorts are the ports of a rule that lists none.
var DefaultPorts = []Port{80, 443}

// String returns the port number, or "*" for AnyPort.
func (p Port) String() string {
	if p == AnyPort {
		return "*"
	}
	return strconv.Itoa(int(p))
}

// MarshalJSON writes a port as a number, and AnyPort as "*".
func (p Port) MarshalJSON() ([]byte, error) {
	if p == AnyPort {
		return []byte(`"*"`), nil
	}
	return strconv.AppendUint(nil, uint64(p), 10), nil
}

// UnmarshalJSON reads a port number from 1 to 65535, or the string "*".
// A quoted number is refused, as Decode refuses it.
func (p *Port) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "*" {
			return errorf(ErrInvalidRule, "port %s: want a number from 1 to 65535 or \"*\"", b)
		}
		*p = AnyPort
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errorf(ErrInvalidRule, "port %s: want a number from 1 to 65535 or \"*\"", b)
	}
	v, err := ParsePort(n.String())
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePort parses "1" to "65535", or "*" for AnyPort.
func ParsePort(s string) (Port, error) {
	if s == "*" {
		return AnyPort, nil
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || (len(s) > 1 && s[0] == '0') {
		return 0, errorf(ErrInvalidRule, "port %q: want a number from 1 to 65535 or \"*\"", s)
	}
	return Port(n), nil
}

// Response is the answer of an intercept rule: a canned one (Status,
// Headers, Body), or a scripted LLM's (LLM).
type Response struct {
	// Status is the HTTP status code, 200 to 599; zero means 200. It is
	// zero on an LLM response, whose script chooses each status.
	Status int `json:"status,omitempty"`
	// Headers are sent as given, after the gateway's own X-Sbx-* headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is sent as given.
	Body string `json:"body,omitempty"`
	// LLM, when set, names the scripted LLM (docs/mock-llm.md) that answers
	// the requests the rule intercepts, in place of Status, Headers and
	// Body, which an LLM response leaves empty. netpolicy never reads
	// the script: the gateway running the policy maps each name to a
	// script it loaded when it started (sbx reads the scripts a policy
	// file names, as paths relative to that file, when the sandbox
	// starts), and refuses a policy naming one it does not have. Names
	// are compared as text once Compile has cleaned them (path.Clean):
	// ./a.yaml is a.yaml, and a later policy's a.yaml is the script read
	// at start, wherever that policy's file is. See Policy.LLMScripts.
	LLM string `json:"llm,omitempty"`
}

// Rule is one entry of a policy's rule list (docs/policy.md).
type Rule struct {
	// ID names the rule in decisions and in the management API. Compile
	// assigns r1, r2, ... to rules that have none.
	ID string `json:"id,omitempty"`
	// Host is a host pattern: a name, "*.domain", "*", an IP or a CIDR.
	Host string `json:"host"`
	// Ports is nil for DefaultPorts, or a list of ports, or [AnyPort].
	Ports []Port `json:"ports,omitempty"`
	// Methods, when set, limits the rule to HTTP requests with one of
	// these methods: plain HTTP requests, and HTTPS requests inside a
	// tunnel the gateway inspects. A rule with methods implies inspection
	// of its hosts on its ports (see Policy.Inspects). It never matches
	// a CONNECT itself (see Policy.Decide).
	Methods []string `json:"methods,omitempty"`
	// Path, when set, limits the rule to HTTP requests whose path starts
	// with it, as Methods does. Both are compared in the form
	// CanonicalPath gives.
	Path string `json:"path,omitempty"`
	// Action is what the rule does. It is empty only on an inspect-only
	// rule: Inspect set and no action, a rule that decides nothing.
	Action Action `json:"action,omitempty"`
	// Inspect asks the gateway to terminate TLS for the hosts this rule
	// matches on its ports and to decide each HTTPS request inside
	// (docs/inspection.md). With an action the rule decides as any other and
	// marks its hosts too. Without one it is an inspect-only rule, as
	// --inspect makes: it only marks hosts, and every decision is made as
	// if it were absent. An inspect-only rule has no methods, path or
	// response, and its ports default to DefaultPorts like any rule's;
	// inspection matters only on ports where clients speak TLS, so a
	// mark on port 80 changes nothing for plain HTTP, which the gateway
	// sees anyway.
	Inspect bool `json:"inspect,omitempty"`
	// Response is the intercept rule's answer; it is set on intercept
	// rules and only on them.
	Response *Response `json:"response,omitempty"`
}

// Spec is a policy document as written in a file or sent to the management
// API. It is plain data: Compile checks it and makes a Policy from it.
// Read documents with Decode, DecodeFile or Parse, which reject unknown
// fields, duplicate keys and loose types; encoding/json does none of that.
type Spec struct {
	// Version is the file format version; zero means FormatVersion.
	Version int `json:"version"`
	// Default is the action when no rule matches; empty means Block.
	Default Action `json:"default"`
	// Mode is Enforce or Audit; empty means Enforce.
	Mode Mode `json:"mode"`
	// AllowPrivate lists networks exempt from the address guard.
	AllowPrivate []netip.Prefix `json:"allow_private"`
	// Rules are evaluated in order; the first match wins. Inspect-only
	// rules decide nothing and are skipped.
	Rules []Rule `json:"rules"`
	// AskTimeout is how long a request whose verdict is Ask is held for
	// an answer before it is blocked, from MinAskTimeout to
	// MaxAskTimeout; zero leaves it to the gateway (DefaultAskTimeout
	// unless a flag says otherwise).
	AskTimeout Duration `json:"ask_timeout,omitempty"`
	// Secrets are the values kept out of the sandbox and put in the
	// request headers of requests to their hosts (docs/secrets.md).
	Secrets []Secret `json:"secrets,omitempty"`
}

// Bounds of a policy's ask_timeout, and the timeout when neither the
// policy nor the gateway's caller names one.
const (
	MinAskTimeout     = time.Second
	MaxAskTimeout     = time.Hour
	DefaultAskTimeout = 60 * time.Second
)

// Duration is a time.Duration written as Go writes durations ("60s",
// "1m30s") in policy documents and JSON.
type Duration time.Duration

// String returns the duration as time.Duration writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "1m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "60s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errorf(ErrInvalidPolicy, "ask_timeout %s: want a duration such as \"60s\"", b)
	}
	v, err := ParseAskTimeout(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseAskTimeout parses an ask timeout such as "60s" or "2m" and checks
// it lies from MinAskTimeout to MaxAskTimeout; the error wraps
// ErrInvalidPolicy and says what to write.
func ParseAskTimeout(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, errorf(ErrInvalidPolicy, "ask_timeout %q is not a duration; write e.g. 60s or 2m", s)
	}
	if msg := checkAskTimeout(v); msg != "" {
		return 0, errorf(ErrInvalidPolicy, "ask_timeout %s", msg)
	}
	return v, nil
}

// checkAskTimeout returns why v cannot be an ask timeout, or "".
func checkAskTimeout(v time.Duration) string {
	if v < MinAskTimeout || v > MaxAskTimeout {
		return fmt.Sprintf("%s is outside %s..%s; write e.g. 60s", v, MinAskTimeout, MaxAskTimeout)
	}
	return ""
}

// Target is what a request asks to reach.
type Target struct {
	// Host is a host name or IP literal, as the client sent it; Decide
	// normalizes it.
	Host string
	// Port is the TCP port, 1 to 65535.
	Port uint16
	// Method is the HTTP method; "CONNECT" for tunnels. A request inside
	// a tunnel the gateway inspects is a target of its own, with its
	// method and path and the tunnel's host and port. Rules compare the
	// method without regard to case.
	Method string
	// Path is the request path as sent (still percent-encoded), without
	// the query, for plain HTTP and for requests inside an inspected
	// tunnel; empty for tunnels. Rules compare it in the form
	// CanonicalPath gives.
	Path string
}

// IsConnect reports whether the target is a CONNECT tunnel, which rules with
// methods or a path never match.
func (t Target) IsConnect() bool { return asciiEqualFold(t.Method, "CONNECT") }

// Decision is a policy verdict. It is a value, not an error: a blocked
// request is a normal outcome.
type Decision struct {
	Action Action `json:"action"`
	// Rule is the id of the deciding rule, or RuleDefault, RuleInvalid or
	// RuleGuard.
	Rule string `json:"rule"`
	// Reason is one readable sentence.
	Reason string `json:"reason"`
	// Response is the deciding intercept rule's response; nil otherwise.
	// Callers must not modify it.
	Response *Response `json:"-"`
}
