package approval

import (
	"errors"
	"slices"
	"time"
)

// Scope says how far an answer to a question reaches (docs/gateway.md).
type Scope string

// The scopes of an answer (Scopes).
const (
	// ScopeOnce answers the requests held now, and nothing later.
	ScopeOnce Scope = "once"
	// ScopeSession also adds a rule for the question's host and port, and
	// its method and path when it has them, to the running policy, for
	// the rest of the sandbox's life.
	ScopeSession Scope = "session"
	// ScopeAlways also writes that rule to the run's approvals file
	// (Config.File), so that later runs are not asked.
	ScopeAlways Scope = "always"
)

// Who answered a question: the by field of the decision log's approval
// records. The answerers are Answerers; the registry's own words, for a
// question no one answered, are ByTimeout and ByClosed, which are not
// answers.
const (
	ByTTY     = "tty"     // the prompt on sbx run's terminal
	ByCLI     = "cli"     // sbx approve, sbx deny
	ByAPI     = "api"     // POST /v1/approvals/{id}
	ByUI      = "ui"      // sbx ui
	ByTimeout = "timeout" // no answer came in time: a deny
	ByClosed  = "closed"  // the gateway closed before an answer came: a deny
)

// The words of an answer: the answer field of the decision log's
// approval records and of the management API's answers.
const (
	AnswerAllow = "allow"
	AnswerDeny  = "deny"
)

// The sets of words of an answer, each in the order messages list them.
var (
	scopeWords = []string{string(ScopeOnce), string(ScopeSession), string(ScopeAlways)}
	answerers  = []string{ByCLI, ByAPI, ByUI, ByTTY}
)

// Scopes returns the scopes of an answer: once, session, always.
func Scopes() []string { return slices.Clone(scopeWords) }

// Answerers returns who may answer: cli, api, ui, tty.
func Answerers() []string { return slices.Clone(answerers) }

// IsScope reports whether s is one of Scopes.
func IsScope(s string) bool { return slices.Contains(scopeWords, s) }

// IsAnswerer reports whether s is one of Answerers.
func IsAnswerer(s string) bool { return slices.Contains(answerers, s) }

// Answer is a person's answer to a question: allow or deny, how far it
// reaches, and who gave it (ByCLI, ...).
type Answer struct {
	Allow bool
	Scope Scope
	By    string
}

// Approval is a pending question, about a request whose verdict is ask
// (docs/gateway.md): every request to Host and Port with its Method and
// Path (the query left out; a tunnel's has none) waits on it, Waiting of
// them, and an answer releases those and no other. Kind and Client are
// the first held request's; Rule (a rule id, or netpolicy.RuleDefault)
// and Reason the ask verdict's. Path is cut at 1 KiB, as the decision log
// cuts it. It is also the management API's wire type of a question
// (GET /v1/approvals): its JSON does not change.
type Approval struct {
	Asked    time.Time `json:"asked"`
	Client   string    `json:"client"`
	Deadline time.Time `json:"deadline"`
	Host     string    `json:"host"`
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Port     uint16    `json:"port"`
	Reason   string    `json:"reason"`
	Rule     string    `json:"rule"`
	// Waiting counts the requests held on it now, each with Method and
	// Path.
	Waiting int `json:"waiting"`
}

// Errors of asking and answering a question, for errors.Is.
var (
	// ErrNotFound: no pending question has the id (answered already,
	// timed out, or never asked). The API answers 404.
	ErrNotFound = errors.New("no such pending approval")
	// ErrTooMany: the registry holds its bound of requests already
	// (MaxPending); a new one is not asked, and its request is blocked.
	ErrTooMany = errors.New("too many pending approvals")
	// ErrNoFile: an always answer, but the registry has no file to
	// write rules to (Config.File). The API answers 409.
	ErrNoFile = errors.New("no approvals file")
	// ErrInvalidAnswer: an answer with an unknown scope or answerer. The
	// API answers 400.
	ErrInvalidAnswer = errors.New("invalid answer")
	// ErrAnswered: another answer to the question came first, and is
	// being carried out or was; the error says by whom. The API answers
	// 409.
	ErrAnswered = errors.New("already answered")
)

// MaxPending bounds the requests a registry holds at once for an answer,
// and so the questions (each is a few hundred bytes and a timer) and the
// memory they take: every held request counts, a proxied request, a
// tunnel, a captured connection and each HTTP/2 stream of an inspected
// connection alike (one connection carries many streams, which the
// per-client connection limit does not bound).
const MaxPending = 4096

// ReasonNoAnswer ends the reason of a request blocked because its question
// timed out: "...; no answer came within 60s".
const ReasonNoAnswer = "no answer came within "

// ReasonClosed ends the reason of a request blocked because the registry
// closed (the gateway closing) while it was held, and is the reason of
// its question's answer.
const ReasonClosed = "the gateway closed before an answer came"
